//! What the application reads of a running server, single or one of a pair: where clients
//! connect, the map and its sequence, the counters. Both kinds of server keep their map in one
//! [`Shared`] written by their task; [`ServerView`] holds it and reads it, once for both, so the
//! two handles cannot drift apart in what they report or how they lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::ServerState;
use crate::address::ServerAddress;

/// Counters since the server started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// KVSETs applied and published.
    pub updates: u64,
    /// Keys deleted by their ttl.
    pub expired: u64,
    /// Messages dropped as malformed (collector or snapshot socket).
    pub rejected: u64,
    /// Snapshots sent in full.
    pub snapshots: u64,
    /// Snapshots abandoned (client gone or stalled).
    pub snapshots_aborted: u64,
    /// HUGZ sent.
    pub hugz: u64,
    /// fsyncs of the journal (with a data directory).
    pub journal_syncs: u64,
    /// Bytes in the journal's log now (with a data directory; a compaction resets it).
    pub journal_bytes: u64,
}

/// A counter the server's tasks bump and the view reads, without a lock.
#[derive(Default)]
pub(super) struct Counter(AtomicU64);

impl Counter {
    pub(super) fn inc(&self) {
        self.add(1);
    }
    pub(super) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// For a gauge: the value now (the journal's counters: unused without `durable`).
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub(super) fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The live counters behind [`ServerStats`].
#[derive(Default)]
pub(super) struct Stats {
    pub(super) updates: Counter,
    pub(super) expired: Counter,
    pub(super) rejected: Counter,
    pub(super) snapshots: Counter,
    pub(super) snapshots_aborted: Counter,
    pub(super) hugz: Counter,
    pub(super) journal_syncs: Counter,
    pub(super) journal_bytes: Counter,
}

/// The state and counters a server's task (and its snapshot streams) write, and its view reads.
pub(super) struct Shared {
    state: Mutex<ServerState>,
    pub(super) stats: Stats,
}

impl Shared {
    /// The state, locked (a panic while it was held leaves it as it was: every change to it is
    /// complete or not made).
    pub(super) fn lock(&self) -> MutexGuard<'_, ServerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether someone holds the state's lock now (the tests of code that must not hold it long).
    #[cfg(all(test, feature = "durable"))]
    pub(super) fn is_locked(&self) -> bool {
        matches!(self.state.try_lock(), Err(std::sync::TryLockError::WouldBlock))
    }
}

/// What a running server lets the application read: its address, its map, its counters.
///
/// [`Server`](super::Server) and [`HaServer`](super::ha::HaServer) both dereference to it, so
/// `server.sequence()` or `server.get(key)` reads the same on either: the view is the part of a
/// running server that is only read, the handles add what controls it (`close`, `wait`, and the
/// pair's status and events). A clone reads the same server (for a task of its own, say).
#[derive(Clone)]
pub struct ServerView {
    address: ServerAddress,
    shared: Arc<Shared>,
}

impl ServerView {
    /// A view of `state` (a map recovered from disk, say), served at `port` on `bind`.
    pub(super) fn serving(bind: &str, port: u16, state: ServerState) -> ServerView {
        // A wildcard bind is reached at the loopback address.
        let host = match bind {
            "*" | "0.0.0.0" => "127.0.0.1",
            "::" | "[::]" => "[::1]",
            other => other,
        };
        let address = ServerAddress::new(host, port).expect("bound port checked");
        let shared = Arc::new(Shared { state: Mutex::new(state), stats: Stats::default() });
        ServerView { address, shared }
    }

    /// What the server's task writes.
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Where clients connect: `tcp://host:P` (a wildcard bind is reported as the loopback address).
    pub fn address(&self) -> &ServerAddress {
        &self.address
    }

    /// P, the SNAPSHOT port.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// The sequence of the last update stored: published by a single or active server, followed
    /// from the active by a passive one.
    pub fn sequence(&self) -> u64 {
        self.shared.lock().sequence()
    }

    /// The current value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.shared.lock().get(key).map(Bytes::copy_from_slice)
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.shared.lock().len()
    }

    /// True when no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the whole map and its sequence (for tests and tools; copies every entry).
    pub fn map(&self) -> (u64, BTreeMap<Bytes, Bytes>) {
        let state = self.shared.lock();
        let map = state.entries().map(|e| (Bytes::copy_from_slice(e.key), Bytes::copy_from_slice(e.value))).collect();
        (state.sequence(), map)
    }

    /// Runs `f` on the state (held locked: keep it short).
    pub fn with_state<R>(&self, f: impl FnOnce(&ServerState) -> R) -> R {
        f(&self.shared.lock())
    }

    /// The CHP counters since start (updates, expiries, snapshots, HUGZ …).
    pub fn stats(&self) -> ServerStats {
        let s = &self.shared.stats;
        ServerStats {
            updates: s.updates.get(),
            expired: s.expired.get(),
            rejected: s.rejected.get(),
            snapshots: s.snapshots.get(),
            snapshots_aborted: s.snapshots_aborted.get(),
            hugz: s.hugz.get(),
            journal_syncs: s.journal_syncs.get(),
            journal_bytes: s.journal_bytes.get(),
        }
    }
}
