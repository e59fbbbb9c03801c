//! Internals exposed to the fuzz targets (feature `fuzzing`): not a public API.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;

use crate::client::replica::{Outcome, Replica as Inner};
use crate::command::Subtree;
use crate::kvmsg::KvMsg;

/// The client's replica (the pure part of the client agent).
#[derive(Debug, Default)]
pub struct Replica(Inner);

/// What applying a KVPUB did, flattened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Applied.
    Applied,
    /// At or below the last sequence: discarded.
    Stale,
    /// Outside the subtree.
    OutsideSubtree,
    /// A skipped sequence: not applied.
    Gap,
    /// A sequence going back after newer updates: not applied.
    Regression,
}

impl Replica {
    /// Loads a snapshot; returns how many change events it produced.
    pub fn load(&mut self, snapshot: BTreeMap<Bytes, Bytes>, sequence: u64, superseded: &HashSet<Bytes>) -> usize {
        let mut events = Vec::new();
        self.0.load(snapshot, sequence, superseded, Some(&mut events));
        events.len()
    }

    /// Applies a KVPUB.
    pub fn apply(&mut self, msg: KvMsg, subtree: &Subtree, check_gaps: bool) -> Applied {
        match self.0.apply(msg, subtree, check_gaps, true) {
            Outcome::Applied(_) => Applied::Applied,
            Outcome::Stale => Applied::Stale,
            Outcome::OutsideSubtree => Applied::OutsideSubtree,
            Outcome::Gap { .. } => Applied::Gap,
            Outcome::Regression { .. } => Applied::Regression,
        }
    }

    /// The map.
    pub fn map(&self) -> &BTreeMap<Bytes, Bytes> {
        &self.0.map
    }

    /// The last sequence applied.
    pub fn sequence(&self) -> u64 {
        self.0.sequence
    }
}

/// One key of a journal's map: key, value, deadline (Unix ms).
pub type JournalEntry = (Vec<u8>, Vec<u8>, Option<u64>);

/// What recovery makes of a journal's log.
#[derive(Debug, PartialEq, Eq)]
pub struct ReplayedLog {
    /// The last sequence applied (`after` if none).
    pub last_sequence: u64,
    /// Updates applied.
    pub updates: u64,
    /// Bytes of valid records: where recovery cuts the file.
    pub good_len: u64,
    /// The map after them, in key order.
    pub entries: Vec<JournalEntry>,
}

fn journal_entries(store: &crate::store::Store) -> Vec<JournalEntry> {
    store.iter().map(|e| (e.key.to_vec(), e.value.to_vec(), e.deadline)).collect()
}

/// Replays a journal log's bytes onto an empty map, after sequence `after`, as recovery does.
pub fn replay_journal_log(bytes: &[u8], after: u64) -> ReplayedLog {
    let mut store = crate::store::Store::new();
    let replayed = crate::durable::log::replay(bytes, bytes.len() as u64, after, &mut store).expect("reading a slice");
    ReplayedLog {
        last_sequence: replayed.last_sequence,
        updates: replayed.updates,
        good_len: replayed.good_len,
        entries: journal_entries(&store),
    }
}

/// Reads a journal snapshot's bytes: its sequence and map, or `None` if recovery would refuse it.
pub fn read_journal_snapshot(bytes: &[u8]) -> Option<(u64, Vec<JournalEntry>)> {
    let loaded = crate::durable::snapshot::read(bytes, bytes.len() as u64).ok()?;
    Some((loaded.sequence, journal_entries(&loaded.store)))
}

/// Writes a journal snapshot of `entries` at `sequence`.
pub fn write_journal_snapshot(sequence: u64, entries: &[JournalEntry]) -> Vec<u8> {
    let entries = entries.iter().map(|(key, value, deadline)| crate::store::Entry { key, value, deadline: *deadline });
    let mut out = Vec::new();
    if crate::durable::snapshot::write(&mut out, sequence, crate::durable::snapshot::Entries(entries)).is_err() {
        panic!("entries read from a snapshot are writable");
    }
    out
}

/// Frames `payload` as a journal record (length, CRC-32), so a fuzzer reaches the payload decoders.
pub fn journal_record(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = crate::durable::record::push_record(&mut out, |p| p.extend_from_slice(payload));
    out
}
