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
        self.0.load(snapshot, sequence, superseded, &mut events);
        events.len()
    }

    /// Applies a KVPUB.
    pub fn apply(&mut self, msg: KvMsg, subtree: &Subtree, check_gaps: bool) -> Applied {
        match self.0.apply(msg, subtree, check_gaps) {
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
