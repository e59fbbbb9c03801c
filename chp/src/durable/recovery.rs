//! Opening a data directory: the newest snapshot, the log after it (its torn tail cut), and the
//! leftovers of an interrupted compaction cleaned away.
//!
//! Which files count follows from the order compaction works in: a snapshot is renamed into place
//! only once whole and fsynced. [`compact`](super::Journal::compact) creates its log after that;
//! a [background compaction](super::Journal::begin_compaction) creates its log first (fsyncing the
//! one before), and writes its snapshot while updates go on into that log. So the newest
//! `snapshot-S` is the map at `S` — or, from a background compaction, each key at `S` or later,
//! which replaying the logs after `S` in order makes exact (the redo argument of fuzzy
//! checkpoints) — `log-S` and the logs after it (each named by the sequence its predecessor ends
//! at) hold the updates after it, anything older is superseded, and a log newer than every
//! snapshot with no `log-S` before it means a snapshot was lost.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;

use super::files::{self, Listing};
use super::log::replay;
use super::record::ReadError;
use super::snapshot;
use super::{Corruption, JournalError};
use crate::store::Store;
use crate::uuid::Uuid;

/// What [`Journal::open`](super::Journal::open) found.
#[derive(Debug)]
#[non_exhaustive]
pub struct Recovered {
    /// The last sequence: the last update replayed, or the snapshot's (0 for a new directory).
    /// The next update must be above it.
    pub sequence: u64,
    /// The map, in key order, each deadline in Unix milliseconds. Keys whose deadline has already
    /// passed are **kept** with it: the server expires them as it would have had it kept running,
    /// publishing (and journaling) a delete with a new sequence, so clients hear of it.
    pub entries: Store,
    /// Log records applied on top of the snapshot.
    pub updates_replayed: u64,
    /// Bytes cut from the end of the log: a write torn by a crash, or damage. Nonzero is worth a
    /// warning; [`tail_corruption`](Self::tail_corruption) says what was found there.
    pub truncated_bytes: u64,
    /// What was wrong at the start of the cut tail.
    pub tail_corruption: Option<Corruption>,
    /// The UUIDs of the last updates replayed from the log (up to 65,536), oldest first. A pair
    /// server remembers them as published, so that a client retransmitting a write confirmed just
    /// before a crash does not have it applied twice. Updates already compacted into the snapshot
    /// carry none.
    pub recent_uuids: Vec<Uuid>,
}

/// The directory's state, ready for appending.
pub(crate) struct Opened {
    pub(crate) log: File,
    pub(crate) log_len: u64,
    /// The sequence that names the log to append to (the snapshot's, or a later compaction's).
    pub(crate) base: u64,
    pub(crate) recovered: Recovered,
}

pub(crate) fn recover(dir: &Path) -> Result<Opened, JournalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| JournalError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let listing = files::list(dir).map_err(io(dir))?;
    let base = listing.snapshots.iter().copied().max().unwrap_or(0);
    // The logs from the snapshot on: its own, then any a compaction started after it (each named
    // by the sequence the one before it ends at).
    let mut chain: Vec<u64> = listing.logs.iter().copied().filter(|&log| log >= base).collect();
    // A handful of names: an insertion sort (a sort routine of its own would cost the
    // size-limited build more than this whole loop).
    for i in 1..chain.len() {
        let mut j = i;
        while j > 0 && chain[j - 1] > chain[j] {
            chain.swap(j - 1, j);
            j -= 1;
        }
    }
    if let Some(&first) = chain.first().filter(|&&first| first != base) {
        return Err(JournalError::MissingSnapshot { log: files::log_path(dir, first) });
    }
    let log_existed = !chain.is_empty();
    if chain.is_empty() {
        chain.push(base);
    }
    let mut entries = if listing.snapshots.is_empty() {
        Store::new()
    } else {
        load_snapshot(&files::snapshot_path(dir, base), base)?
    };

    let mut recovered = Recovered {
        sequence: base,
        entries: Store::new(),
        updates_replayed: 0,
        truncated_bytes: 0,
        tail_corruption: None,
        recent_uuids: Vec::new(),
    };
    let mut recent = std::collections::VecDeque::new();
    let mut appending = None;
    for (at, &name) in chain.iter().enumerate() {
        let log_path = files::log_path(dir, name);
        let mut log = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&log_path)
            .map_err(io(&log_path))?;
        let len = log.metadata().map_err(io(&log_path))?.len();
        let replayed = replay(BufReader::new(&log), len, recovered.sequence, &mut entries).map_err(io(&log_path))?;
        if replayed.good_len < len {
            // Cut before appending: new records after a torn one would never be read back.
            log.set_len(replayed.good_len).map_err(io(&log_path))?;
            log.sync_all().map_err(io(&log_path))?;
        }
        log.seek(SeekFrom::Start(replayed.good_len)).map_err(io(&log_path))?;
        recovered.sequence = replayed.last_sequence;
        recovered.updates_replayed += replayed.updates;
        recovered.truncated_bytes += len - replayed.good_len;
        recovered.tail_corruption = replayed.stopped;
        recent.extend(replayed.recent_uuids);
        let excess = recent.len().saturating_sub(super::log::RECENT_UUIDS);
        recent.drain(..excess);
        appending = Some((log, replayed.good_len, name));
        // A later log continues this one only if this one ended where the later one starts
        // (compaction fsyncs a log before starting the next): after a cut, what follows cannot
        // be applied, and is dropped as a cut tail is.
        if let Some(&next) = chain.get(at + 1)
            && (recovered.tail_corruption.is_some() || next != recovered.sequence)
        {
            for &later in &chain[at + 1..] {
                let path = files::log_path(dir, later);
                recovered.truncated_bytes += std::fs::metadata(&path).map_err(io(&path))?.len();
                files::remove(&path).map_err(io(&path))?;
            }
            recovered.tail_corruption.get_or_insert(Corruption::Gap { expected: recovered.sequence, log: next });
            files::sync_dir(dir).map_err(io(dir))?;
            break;
        }
    }
    let (log, log_len, log_base) = appending.expect("the chain has a log");

    if remove_superseded(dir, base, &listing)? || !log_existed {
        files::sync_dir(dir).map_err(io(dir))?;
    }
    recovered.entries = entries;
    recovered.recent_uuids = recent.into();
    Ok(Opened { log, log_len, base: log_base, recovered })
}

fn load_snapshot(path: &Path, named: u64) -> Result<Store, JournalError> {
    let io = |source| JournalError::Io { path: path.to_path_buf(), source };
    let corrupt = |offset, why| JournalError::CorruptSnapshot { path: path.to_path_buf(), offset, why };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let loaded = snapshot::read(BufReader::new(file), len).map_err(|(offset, e)| match e {
        ReadError::Corrupt(why) => corrupt(offset, why),
        ReadError::Io(e) => io(e),
    })?;
    if loaded.sequence != named {
        return Err(corrupt(0, Corruption::SequenceMismatch { named, recorded: loaded.sequence }));
    }
    Ok(loaded.store)
}

/// Removes older snapshots and logs, and unfinished snapshots: what an interrupted compaction
/// left. Returns whether anything was removed.
fn remove_superseded(dir: &Path, base: u64, listing: &Listing) -> Result<bool, JournalError> {
    let older = |sequences: &[u64]| sequences.iter().copied().filter(|&s| s < base).collect::<Vec<_>>();
    let paths = (older(&listing.snapshots).into_iter().map(|s| files::snapshot_path(dir, s)))
        .chain(older(&listing.logs).into_iter().map(|s| files::log_path(dir, s)))
        .chain(listing.temps.iter().cloned())
        .collect::<Vec<_>>();
    for path in &paths {
        files::remove(path).map_err(|source| JournalError::Io { path: path.clone(), source })?;
    }
    Ok(!paths.is_empty())
}
