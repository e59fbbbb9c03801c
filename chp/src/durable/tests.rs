//! The journal against a model map, on real files: round trips, compaction, torn and damaged logs,
//! crashes between compaction steps, deadlines, sequences, and the fsync policies.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::journal::CompactStep;
use super::*;
use crate::kvmsg::KvMsg;
use crate::store::{Entry, Store};
use crate::uuid::Uuid;

/// A directory under the system's temp dir, unique to the test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("chp-durable-{test}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn file_names(&self) -> Vec<String> {
        let mut names: Vec<_> =
            fs::read_dir(&self.0).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.retain(|n| n != super::LOCK_FILE && n != "epoch");
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Key → (value, deadline): what the journal should give back.
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

fn update(sequence: u64, key: &str, value: &str, deadline: Option<u64>) -> Update {
    let mut msg = KvMsg::new(key.to_owned(), value.to_owned());
    msg.sequence = sequence;
    if sequence.is_multiple_of(3) {
        msg.uuid = Some(Uuid::new_v4());
        msg.properties.insert("ttl", "30").unwrap();
    }
    Update { msg, deadline }
}

fn apply(model: &mut Model, update: &Update) {
    let msg = &update.msg;
    if msg.is_delete() {
        model.remove(&msg.key[..]);
    } else {
        model.insert(msg.key.to_vec(), (msg.body.to_vec(), update.deadline));
    }
}

fn as_model(store: &Store) -> Model {
    store.iter().map(|e| (e.key.to_vec(), (e.value.to_vec(), e.deadline))).collect()
}

fn entries(model: &Model) -> impl Iterator<Item = Entry<'_>> {
    model.iter().map(|(k, (v, d))| Entry { key: k, value: v, deadline: *d })
}

/// Updates 1..=n over a few keys, every fourth a delete, some with deadlines.
fn workload(from: u64, to: u64) -> Vec<Update> {
    (from..=to)
        .map(|s| {
            let key = format!("/k/{}", s % 7);
            let value = if s % 4 == 0 { String::new() } else { format!("value-{s}") };
            update(s, &key, &value, (s % 5 == 0).then_some(1_700_000_000_000 + s))
        })
        .collect()
}

fn open(dir: &TempDir) -> (Journal, Recovered) {
    Journal::open(dir.path(), Durability::Always).unwrap()
}

/// Appends and commits `updates` in groups of three; returns the model after them.
fn write(journal: &mut Journal, model: &mut Model, updates: &[Update]) {
    for group in updates.chunks(3) {
        for u in group {
            journal.append(u).unwrap();
            apply(model, u);
        }
        journal.commit().unwrap();
    }
}

#[test]
fn updates_and_deletes_round_trip() {
    let dir = TempDir::new("round-trip");
    let (mut journal, recovered) = open(&dir);
    assert_eq!((recovered.sequence, recovered.entries.len(), recovered.truncated_bytes), (0, 0, 0));
    let mut model = Model::new();
    let updates = workload(1, 40);
    write(&mut journal, &mut model, &updates);
    assert!(journal.log_bytes() > 0);
    drop(journal);

    let (journal, recovered) = open(&dir);
    assert_eq!(as_model(&recovered.entries), model);
    assert_eq!((recovered.sequence, recovered.updates_replayed, recovered.truncated_bytes), (40, 40, 0));
    assert_eq!(journal.sequence(), 40);
    assert_eq!(dir.file_names(), ["log-00000000000000000000.chp"]);
}

#[test]
fn recovery_after_compaction_equals_the_map_before() {
    let dir = TempDir::new("compaction");
    let (mut journal, _) = open(&dir);
    let mut model = Model::new();
    write(&mut journal, &mut model, &workload(1, 30));
    journal.compact(30, entries(&model)).unwrap();
    assert_eq!(journal.log_bytes(), 0);
    assert_eq!(dir.file_names(), ["log-00000000000000000030.chp", "snapshot-00000000000000000030.chp"]);
    drop(journal);

    let (mut journal, recovered) = open(&dir);
    assert_eq!(as_model(&recovered.entries), model);
    assert_eq!((recovered.sequence, recovered.updates_replayed), (30, 0));
    // And again, with updates after the snapshot; the older files go.
    write(&mut journal, &mut model, &workload(31, 50));
    journal.compact(50, entries(&model)).unwrap();
    write(&mut journal, &mut model, &workload(51, 55));
    drop(journal);
    let (_, recovered) = open(&dir);
    assert_eq!(as_model(&recovered.entries), model);
    assert_eq!((recovered.sequence, recovered.updates_replayed), (55, 5));
    assert_eq!(dir.file_names(), ["log-00000000000000000050.chp", "snapshot-00000000000000000050.chp"]);
}

#[test]
fn a_torn_tail_at_every_byte_of_the_last_record_is_cut() {
    let dir = TempDir::new("torn");
    let (mut journal, _) = open(&dir);
    let mut before_last = Model::new();
    let updates = workload(1, 6);
    write(&mut journal, &mut before_last, &updates[..5]);
    let good_len = journal.log_bytes();
    journal.append(&updates[5]).unwrap();
    journal.commit().unwrap();
    drop(journal);
    let log = files::log_path(dir.path(), 0);
    let whole = fs::read(&log).unwrap();

    for cut in good_len as usize..whole.len() {
        fs::write(&log, &whole[..cut]).unwrap();
        let (mut journal, recovered) = open(&dir);
        assert_eq!(as_model(&recovered.entries), before_last, "cut at {cut}");
        assert_eq!((recovered.sequence, recovered.truncated_bytes), (5, cut as u64 - good_len), "cut at {cut}");
        assert_eq!(recovered.tail_corruption.is_some(), cut as u64 > good_len);
        assert_eq!(fs::metadata(&log).unwrap().len(), good_len);
        // The cut is final: appending continues from it, and reads back.
        journal.append(&updates[5]).unwrap();
        journal.commit().unwrap();
        drop(journal);
        let (_, recovered) = open(&dir);
        assert_eq!((recovered.sequence, recovered.truncated_bytes), (6, 0));
    }
}

#[test]
fn a_flipped_bit_anywhere_in_the_log_is_detected() {
    let dir = TempDir::new("bit-flip");
    let (mut journal, _) = open(&dir);
    let updates = workload(1, 4);
    let mut starts = Vec::new();
    let mut models = vec![Model::new()];
    for u in &updates {
        starts.push(journal.log_bytes());
        let mut model = models.last().unwrap().clone();
        write(&mut journal, &mut model, std::slice::from_ref(u));
        models.push(model);
    }
    drop(journal);
    let log = files::log_path(dir.path(), 0);
    let whole = fs::read(&log).unwrap();

    for bit in 0..whole.len() * 8 {
        let mut flipped = whole.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        fs::write(&log, &flipped).unwrap();
        let (_, recovered) = open(&dir);
        // Everything before the damaged record, nothing from it on.
        let damaged = starts.iter().rposition(|&start| start <= (bit / 8) as u64).unwrap();
        assert_eq!(recovered.updates_replayed, damaged as u64, "bit {bit}");
        assert_eq!(as_model(&recovered.entries), models[damaged], "bit {bit}");
        assert_eq!(recovered.truncated_bytes, whole.len() as u64 - starts[damaged], "bit {bit}");
        assert!(recovered.tail_corruption.is_some(), "bit {bit}");
    }
}

/// Cuts the unfinished snapshot at `sequence` in half: a crash in the middle of writing it.
fn tear_temp_snapshot(dir: &TempDir, sequence: u64) {
    let temp = files::temp_path(dir.path(), sequence);
    let len = fs::metadata(&temp).unwrap().len();
    fs::OpenOptions::new().write(true).open(&temp).unwrap().set_len(len / 2).unwrap();
}

#[test]
fn a_crash_between_any_two_compaction_steps_recovers_the_same_map() {
    let steps = [
        (CompactStep::WriteTemp, true),
        (CompactStep::WriteTemp, false),
        (CompactStep::Rename, false),
        (CompactStep::NewLog, false),
        (CompactStep::RemoveOldSnapshot, false),
        (CompactStep::RemoveOldLog, false),
    ];
    for (last, half_written) in steps {
        let dir = TempDir::new("crash");
        let (mut journal, _) = open(&dir);
        let mut model = Model::new();
        write(&mut journal, &mut model, &workload(1, 10));
        journal.compact(10, entries(&model)).unwrap();
        write(&mut journal, &mut model, &workload(11, 20));
        journal.compact_through(20, super::snapshot::Entries(entries(&model)), last).unwrap();
        drop(journal); // the crash
        if half_written {
            tear_temp_snapshot(&dir, 20);
        }

        let (mut journal, recovered) = open(&dir);
        assert_eq!(as_model(&recovered.entries), model, "{last:?}");
        assert_eq!((recovered.sequence, recovered.truncated_bytes), (20, 0), "{last:?}");
        // Recovery finished or undid the compaction: one snapshot and its log, nothing else.
        let base = if last >= CompactStep::Rename { 20 } else { 10 };
        assert_eq!(dir.file_names(), [format!("log-{base:020}.chp"), format!("snapshot-{base:020}.chp")]);
        write(&mut journal, &mut model, &workload(21, 22));
        drop(journal);
        let (_, recovered) = open(&dir);
        assert_eq!((as_model(&recovered.entries), recovered.sequence), (model, 22), "{last:?}");
    }
}

/// The model's entries in chunks of `per`, owned, as a background compaction reads them.
fn chunks(model: &Model, per: usize) -> Vec<Vec<OwnedEntry>> {
    let owned: Vec<OwnedEntry> = model
        .iter()
        .map(|(k, (v, d))| OwnedEntry { key: k.clone().into(), value: v.clone().into(), deadline: *d })
        .collect();
    owned.chunks(per).map(<[OwnedEntry]>::to_vec).collect()
}

#[test]
fn a_background_compaction_of_a_map_read_while_updates_go_on_recovers_exactly() {
    // The snapshot at 20 is fuzzy: read after updates 21..=30 were appended to the new log, so
    // it holds their values; replaying the log on it must still give the map at 30.
    for (last, half_written) in [
        (CompactStep::WriteTemp, true),
        (CompactStep::WriteTemp, false),
        (CompactStep::Rename, false),
        (CompactStep::RemoveOldSnapshot, false),
        (CompactStep::RemoveOldLog, false),
    ] {
        let dir = TempDir::new("background");
        let (mut journal, _) = open(&dir);
        let mut model = Model::new();
        write(&mut journal, &mut model, &workload(1, 10));
        journal.compact(10, entries(&model)).unwrap();
        write(&mut journal, &mut model, &workload(11, 20));
        let compaction = journal.begin_compaction().unwrap().expect("updates since the last");
        assert_eq!((compaction.sequence(), journal.log_bytes()), (20, 0));
        write(&mut journal, &mut model, &workload(21, 30));
        compaction.finish_through(chunks(&model, 2), last).unwrap();
        write(&mut journal, &mut model, &workload(31, 33));
        drop(journal); // the crash
        if half_written {
            tear_temp_snapshot(&dir, 20);
        }

        let (mut journal, recovered) = open(&dir);
        assert_eq!(as_model(&recovered.entries), model, "{last:?}");
        assert_eq!((recovered.sequence, recovered.truncated_bytes), (33, 0), "{last:?}");
        let expected = if last >= CompactStep::Rename {
            vec![format!("log-{:020}.chp", 20), format!("snapshot-{:020}.chp", 20)]
        } else {
            vec![format!("log-{:020}.chp", 10), format!("log-{:020}.chp", 20), format!("snapshot-{:020}.chp", 10)]
        };
        assert_eq!(dir.file_names(), expected, "{last:?}");
        write(&mut journal, &mut model, &workload(34, 35));
        drop(journal);
        let (_, recovered) = open(&dir);
        assert_eq!((as_model(&recovered.entries), recovered.sequence), (model, 35), "{last:?}");
    }
}

#[test]
fn a_compaction_with_nothing_new_is_none_and_chains_recover_in_order() {
    let dir = TempDir::new("chain");
    let (mut journal, _) = open(&dir);
    assert!(journal.begin_compaction().unwrap().is_none(), "empty");
    let mut model = Model::new();
    // Three compactions begun and never finished: logs 0, 5, 9, 14, no snapshot.
    for (from, to) in [(1, 5), (6, 9), (10, 14)] {
        write(&mut journal, &mut model, &workload(from, to));
        let compaction = journal.begin_compaction().unwrap().expect("new updates");
        assert!(journal.begin_compaction().unwrap().is_none(), "nothing since");
        drop(compaction);
    }
    write(&mut journal, &mut model, &workload(15, 16));
    drop(journal);
    let (journal, recovered) = open(&dir);
    assert_eq!((as_model(&recovered.entries), recovered.sequence, recovered.updates_replayed), (model.clone(), 16, 16));
    assert_eq!(dir.file_names().len(), 4, "every log kept: no snapshot covers them");
    drop(journal);

    // A damaged record in the middle log: what follows it cannot be applied; the later logs go.
    let middle = files::log_path(dir.path(), 5);
    let mut bytes = fs::read(&middle).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0xff;
    fs::write(&middle, &bytes).unwrap();
    let (_, recovered) = open(&dir);
    assert_eq!(recovered.sequence, 8, "the log after 5 ends at its last whole record");
    assert!(recovered.truncated_bytes > 0 && recovered.tail_corruption.is_some());
    assert_eq!(dir.file_names(), [format!("log-{:020}.chp", 0), format!("log-{:020}.chp", 5)]);
}

#[test]
fn deadlines_survive_replay_and_compaction_and_past_ones_are_kept() {
    let dir = TempDir::new("deadlines");
    let (mut journal, _) = open(&dir);
    let past = 1_000;
    let future = unix_millis(std::time::SystemTime::now()) + 3_600_000;
    let mut model = Model::new();
    let updates = [
        update(1, "/past", "p", Some(past)),
        update(2, "/future", "f", Some(future)),
        update(3, "/cleared", "c", Some(future)),
        update(4, "/cleared", "c2", None),
    ];
    write(&mut journal, &mut model, &updates);
    drop(journal);
    let (mut journal, recovered) = open(&dir);
    let deadline = |store: &Store, key: &[u8]| store.get(key).unwrap().deadline;
    assert_eq!(deadline(&recovered.entries, b"/past"), Some(past));
    assert_eq!(deadline(&recovered.entries, b"/future"), Some(future));
    assert_eq!(deadline(&recovered.entries, b"/cleared"), None);

    journal.compact(4, entries(&model)).unwrap();
    drop(journal);
    let (_, recovered) = open(&dir);
    assert_eq!(as_model(&recovered.entries), model);
    assert_eq!(deadline(&recovered.entries, b"/past"), Some(past));
}

#[test]
fn the_sequence_continues_from_the_recovered_one() {
    let dir = TempDir::new("sequence");
    let (mut journal, _) = open(&dir);
    let mut model = Model::new();
    write(&mut journal, &mut model, &workload(1, 5));
    drop(journal);
    let (mut journal, recovered) = open(&dir);
    assert_eq!((recovered.sequence, journal.sequence()), (5, 5));
    assert!(matches!(
        journal.append(&update(5, "/a", "x", None)),
        Err(JournalError::SequenceNotIncreasing { last: 5, got: 5 })
    ));
    journal.append(&update(6, "/a", "x", None)).unwrap();
    // A snapshot may be ahead of the log (updates that were not journaled): the next must follow it.
    assert!(matches!(
        journal.compact(5, entries(&model)),
        Err(JournalError::CompactBehind { snapshot: 5, appended: 6 })
    ));
    apply(&mut model, &update(6, "/a", "x", None));
    journal.compact(9, entries(&model)).unwrap();
    drop(journal);
    let (mut journal, recovered) = open(&dir);
    assert_eq!((recovered.sequence, as_model(&recovered.entries)), (9, model));
    assert!(journal.append(&update(9, "/a", "y", None)).is_err());
    journal.append(&update(10, "/a", "y", None)).unwrap();
}

#[test]
fn a_damaged_or_missing_snapshot_is_an_error() {
    let dir = TempDir::new("bad-snapshot");
    let (mut journal, _) = open(&dir);
    let mut model = Model::new();
    write(&mut journal, &mut model, &workload(1, 10));
    journal.compact(10, entries(&model)).unwrap();
    drop(journal);
    let snapshot = files::snapshot_path(dir.path(), 10);
    let whole = fs::read(&snapshot).unwrap();
    let mut flipped = whole.clone();
    flipped[whole.len() / 2] ^= 0x10;
    fs::write(&snapshot, &flipped).unwrap();
    assert!(matches!(
        Journal::open(dir.path(), Durability::Always),
        Err(JournalError::CorruptSnapshot { why: Corruption::Checksum, .. })
    ));
    fs::write(&snapshot, &whole[..whole.len() - 1]).unwrap();
    assert!(matches!(Journal::open(dir.path(), Durability::Always), Err(JournalError::CorruptSnapshot { .. })));
    // Renamed to another sequence: its own first record gives it away.
    fs::write(&snapshot, &whole).unwrap();
    fs::rename(&snapshot, files::snapshot_path(dir.path(), 11)).unwrap();
    assert!(matches!(
        Journal::open(dir.path(), Durability::Always),
        Err(JournalError::CorruptSnapshot { why: Corruption::SequenceMismatch { named: 11, recorded: 10 }, .. })
    ));
    fs::remove_file(files::snapshot_path(dir.path(), 11)).unwrap();
    assert!(matches!(Journal::open(dir.path(), Durability::Always), Err(JournalError::MissingSnapshot { .. })));
}

#[test]
fn unwritable_updates_are_refused_and_the_journal_goes_on() {
    let dir = TempDir::new("unwritable");
    let (mut journal, _) = open(&dir);
    assert!(matches!(journal.append(&update(1, "", "v", None)), Err(JournalError::Unwritable(_))));
    assert_eq!((journal.sequence(), journal.log_bytes()), (0, 0));
    journal.append(&update(1, "/a", "v", None)).unwrap();
    journal.commit().unwrap();
    let empty_value = [Entry { key: b"/a", value: b"", deadline: None }];
    assert!(matches!(journal.compact(1, empty_value), Err(JournalError::Unwritable(Corruption::EmptyValue))));
    assert_eq!(dir.file_names(), ["log-00000000000000000000.chp"]);
    journal.append(&update(2, "/b", "v", None)).unwrap();
    journal.commit().unwrap();
    drop(journal);
    assert_eq!(open(&dir).1.sequence, 2);
}

#[test]
fn each_durability_fsyncs_when_it_says() {
    let dir = TempDir::new("durability");
    let (mut always, _) = Journal::open(dir.path(), Durability::Always).unwrap();
    for s in 1..=64 {
        always.append(&update(s, "/a", "v", None)).unwrap();
    }
    always.commit().unwrap();
    always.commit().unwrap(); // nothing new: no fsync
    assert_eq!(always.sync_count(), 1);
    drop(always);

    let second = Duration::from_secs(1);
    let (mut interval, _) = Journal::open(dir.path(), Durability::Interval(second)).unwrap();
    let t0 = Instant::now();
    assert!(!interval.needs_sync(t0));
    interval.append(&update(65, "/a", "v", None)).unwrap();
    assert!(!interval.needs_sync(t0), "appended is not written yet");
    interval.commit().unwrap();
    assert_eq!((interval.sync_count(), interval.tick(t0).unwrap()), (0, true));
    interval.append(&update(66, "/a", "v", None)).unwrap();
    interval.commit().unwrap();
    assert!(!interval.tick(t0 + second / 2).unwrap());
    assert!(interval.tick(t0 + second).unwrap());
    assert!(!interval.tick(t0 + 3 * second).unwrap(), "nothing new to sync");
    assert_eq!(interval.sync_count(), 2);
    drop(interval);

    let (mut never, recovered) = Journal::open(dir.path(), Durability::Never).unwrap();
    assert_eq!(recovered.sequence, 66);
    never.append(&update(67, "/a", "v", None)).unwrap();
    never.commit().unwrap();
    assert!(!never.tick(t0 + 10 * second).unwrap());
    assert_eq!(never.sync_count(), 0);
    never.sync().unwrap();
    assert_eq!(never.sync_count(), 1);
}

#[test]
fn files_of_other_names_are_left_alone() {
    let dir = TempDir::new("other-files");
    drop(open(&dir));
    for name in ["notes.txt", "log-7.chp", "snapshot-+0000000000000000009.chp"] {
        fs::write(dir.path().join(name), b"not ours").unwrap();
    }
    let (_, recovered) = open(&dir);
    assert_eq!(recovered.sequence, 0);
    assert_eq!(dir.file_names().len(), 4);
}

#[test]
fn a_directory_is_open_in_one_journal_at_a_time() {
    let dir = TempDir::new("locked");
    let (first, _) = open(&dir);
    match Journal::open(dir.path(), Durability::Never) {
        Err(JournalError::Locked { dir: locked }) => assert_eq!(locked, dir.path()),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(first);
    // Released with the journal (and by the OS with the process, which a test cannot show here:
    // the durable integration tests SIGKILL a server and restart it on the same directory).
    drop(open(&dir));
}

#[test]
fn a_closed_journal_unlocks_even_while_a_forked_child_shares_its_lock_file() {
    let dir = TempDir::new("locked-shared");
    let (first, _) = open(&dir);
    // What a child forked by another thread holds until its exec: a second descriptor for the
    // same open file, which carries the lock.
    let childs_copy = first.lock_file_copy();
    drop(first);
    drop(open(&dir));
    drop(childs_copy);
}

#[test]
fn the_epoch_is_kept_beside_the_map() {
    let dir = TempDir::new("epoch");
    let (mut journal, _) = open(&dir);
    assert_eq!(journal.epoch(), 0, "none stored: 0");
    journal.set_epoch(7).unwrap();
    drop(journal);
    let (journal, _) = open(&dir);
    assert_eq!(journal.epoch(), 7);
    drop(journal);
    let path = dir.path().join("epoch");
    let mut bytes = fs::read(&path).unwrap();
    bytes[3] ^= 1;
    fs::write(&path, &bytes).unwrap();
    assert!(matches!(Journal::open(dir.path(), Durability::Always), Err(JournalError::CorruptEpoch { .. })));
}

#[test]
fn reset_replaces_the_map_even_with_an_older_sequence() {
    let dir = TempDir::new("reset");
    let (mut journal, _) = open(&dir);
    for (i, key) in ["a", "b", "c"].iter().enumerate() {
        journal.append(&update(i as u64 + 1, key, "ours", None)).unwrap();
    }
    journal.commit().unwrap();
    journal.compact(3, [Entry { key: b"a", value: b"ours", deadline: None }]).unwrap();
    journal.append(&update(4, "d", "ours", None)).unwrap();
    journal.commit().unwrap();
    // The peer's map, at an older sequence than ours.
    journal.reset(2, [Entry { key: b"p", value: b"theirs", deadline: Some(9) }]).unwrap();
    journal.append(&update(3, "q", "next", None)).unwrap();
    journal.commit().unwrap();
    drop(journal);
    let (_, recovered) = open(&dir);
    assert_eq!(recovered.sequence, 3);
    let keys: Vec<_> = recovered.entries.iter().map(|e| (e.key.to_vec(), e.value.to_vec())).collect();
    assert_eq!(keys, [(b"p".to_vec(), b"theirs".to_vec()), (b"q".to_vec(), b"next".to_vec())]);
    assert_eq!(dir.file_names(), ["log-00000000000000000002.chp", "snapshot-00000000000000000002.chp"]);
}

#[test]
fn reset_from_chunks_is_the_reset_of_their_entries() {
    let owned = |key: &str, value: &str, deadline| crate::store::OwnedEntry {
        key: bytes::Bytes::copy_from_slice(key.as_bytes()),
        value: bytes::Bytes::copy_from_slice(value.as_bytes()),
        deadline,
    };
    let dir = TempDir::new("reset-chunks");
    let (mut journal, _) = open(&dir);
    for (i, key) in ["a", "b", "c", "d"].iter().enumerate() {
        journal.append(&update(i as u64 + 1, key, "ours", None)).unwrap();
    }
    journal.commit().unwrap();
    // The peer's map at an older sequence, in three chunks (one of them empty).
    let chunks = vec![vec![owned("p", "1", None), owned("q", "2", Some(7))], vec![], vec![owned("r", "3", None)]];
    journal.reset_chunks(2, chunks).unwrap();
    drop(journal);
    let (_, recovered) = open(&dir);
    assert_eq!(recovered.sequence, 2);
    let map: Vec<_> = recovered.entries.iter().map(|e| (e.key.to_vec(), e.value.to_vec(), e.deadline)).collect();
    assert_eq!(
        map,
        [
            (b"p".to_vec(), b"1".to_vec(), None),
            (b"q".to_vec(), b"2".to_vec(), Some(7)),
            (b"r".to_vec(), b"3".to_vec(), None)
        ]
    );
    assert_eq!(dir.file_names(), ["log-00000000000000000002.chp", "snapshot-00000000000000000002.chp"]);
}
