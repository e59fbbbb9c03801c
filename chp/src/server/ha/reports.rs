//! What a running pair server reports: its [`HaStatus`] (with [`HaStats`]) and its [`HaEvent`]s,
//! and the channels they travel on from the driver, which writes them, to the handle, which reads
//! them. They sit below both, so neither depends on the other for them.

use bstar::{Liveness, Side, State};
use tokio::sync::{broadcast, watch};

use crate::server::pending::PendingStats;

/// Counters of the pair logic since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HaStats {
    /// The pending list's counters.
    pub pending: PendingStats,
    /// KVSETs dropped by this server, active, because it or its predecessor already published
    /// their UUID (retransmits after a failover).
    pub duplicates: u64,
    /// Complete snapshots of the active received while passive.
    pub peer_syncs: u64,
    /// Snapshots of the active abandoned (no progress for the timeout) and asked for again.
    pub peer_sync_timeouts: u64,
    /// Sequence gaps in the active's updates (each one causes a fresh snapshot).
    pub gaps: u64,
    /// Times this server became active.
    pub promotions: u64,
}

/// A view of one pair server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaStatus {
    /// Primary or backup.
    pub side: Side,
    /// PRIMARY/BACKUP while starting, then ACTIVE or PASSIVE. ACTIVE is reported once the
    /// promotion's replay is done.
    pub state: State,
    /// The peer's liveness, as Binary Star sees it.
    pub peer: Liveness,
    /// The state the peer last announced.
    pub peer_state: Option<State>,
    /// Passive: holds a complete copy of the active's map (and follows it).
    pub peer_synced: bool,
    /// The sequence of the last update stored (published when active, followed when passive).
    pub sequence: u64,
    /// Keys stored.
    pub keys: usize,
    /// Client updates on the pending list.
    pub pending: usize,
    /// Counters.
    pub stats: HaStats,
    /// False once the server has stopped.
    pub running: bool,
    /// Why it stopped, if it was a fatal pair failure.
    pub fatal: Option<String>,
}

/// What a pair server reports as it happens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HaEvent {
    /// Became ACTIVE: replayed `replayed` pending updates; the map is at `sequence` with `keys` keys.
    BecameActive {
        /// Pending updates replayed (published with new sequences).
        replayed: usize,
        /// The sequence after the replay.
        sequence: u64,
        /// Keys after the replay.
        keys: usize,
        /// False when promoted before holding a complete copy of the peer's map.
        complete: bool,
    },
    /// Became PASSIVE (starts following the active).
    BecamePassive,
    /// Passive: a complete copy of the active's map arrived.
    PeerSynced {
        /// The snapshot's sequence.
        sequence: u64,
        /// Keys in it.
        keys: usize,
    },
    /// The peer is heard (again); its state.
    PeerAlive(State),
    /// The peer has been silent for 2 × heartbeat.
    PeerSilent,
    /// The server stopped; the reason when it was a fatal pair failure.
    Stopped(Option<String>),
}

/// Events kept for a reader that falls behind (it then skips the oldest).
pub(super) const EVENTS_KEPT: usize = 1024;

/// What the driver publishes and the handle reads.
pub(super) struct HaShared {
    /// The status now (the driver updates it after each event it handles).
    pub(super) status: watch::Sender<HaStatus>,
    /// Events as they happen.
    pub(super) events: broadcast::Sender<HaEvent>,
}
