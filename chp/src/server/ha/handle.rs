//! What the application holds of a running pair server: the [`HaServer`] handle, and the
//! [`HaStatus`], [`HaStats`] and [`HaEvent`] it reports. The handle reads what the
//! [`driver`] publishes and can stop it; it never touches a socket or the map, so
//! reading a status never waits for the driver.

use std::ops::Deref;
use std::sync::Arc;

use bstar::{Liveness, Side, State};
use tokio::sync::{broadcast, watch};
use zmtp::task::{Background, Events};

use super::driver::{self, Sockets};
use super::{HaConfig, HaError};
use crate::server::pending::PendingStats;
use crate::server::{ServerView, port_of};

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
const EVENTS_KEPT: usize = 1024;

/// What the driver publishes and the handle reads.
pub(super) struct HaShared {
    /// The status now (the driver updates it after each event it handles).
    pub(super) status: watch::Sender<HaStatus>,
    /// Events as they happen.
    pub(super) events: broadcast::Sender<HaEvent>,
}

/// One running server of a high-availability pair (see the [module docs](super)). Dropping it stops
/// it (its sockets close, its heartbeats stop: to the peer it is dead).
///
/// It dereferences to its [`ServerView`], like a single [`Server`](crate::server::Server):
/// `server.sequence()`, `server.get(key)`, `server.address()` … read the map it holds (published
/// when active, followed when passive) and its CHP counters.
pub struct HaServer {
    view: ServerView,
    ha: Arc<HaShared>,
    star: bstar::Handle,
    task: Background<Result<(), HaError>>,
}

impl HaServer {
    /// Binds the CHP sockets (the SNAPSHOT socket being the Binary Star voter) and the Binary
    /// Star sockets, and starts.
    pub async fn bind(config: HaConfig) -> Result<HaServer, HaError> {
        let sockets = Sockets::bind(&config).await?;
        let star = sockets.star.handle();
        let server = &config.server;
        let port = port_of(star.voter_endpoint()).unwrap_or(server.port);
        let view = ServerView::new(&server.bind, port, server.max_value_len);
        let status = HaStatus {
            side: config.side,
            state: config.side.start_state(),
            peer: Liveness::Unknown,
            peer_state: None,
            peer_synced: false,
            sequence: 0,
            keys: 0,
            pending: 0,
            stats: HaStats::default(),
            running: true,
            fatal: None,
        };
        let ha = Arc::new(HaShared { status: watch::Sender::new(status), events: broadcast::channel(EVENTS_KEPT).0 });
        let task = driver::spawn(config, sockets, view.shared().clone(), ha.clone());
        tracing::info!(address = %view.address(), side = %star.status().side, "CHP pair server listening");
        Ok(HaServer { view, ha, star, task })
    }

    /// The state and counters now.
    pub fn status(&self) -> HaStatus {
        self.ha.status.borrow().clone()
    }

    /// PRIMARY/BACKUP while starting, then ACTIVE or PASSIVE.
    pub fn state(&self) -> State {
        self.ha.status.borrow().state
    }

    /// A watch on the [`HaStatus`] (woken when anything in it changes).
    pub fn watch(&self) -> watch::Receiver<HaStatus> {
        self.ha.status.subscribe()
    }

    /// Waits until `pred` holds (returns that status) or the server stops (`None`). Not bounded.
    pub async fn wait_for(&self, mut pred: impl FnMut(&HaStatus) -> bool) -> Option<HaStatus> {
        let mut watch = self.watch();
        let status = watch.wait_for(|s| pred(s) || !s.running).await.ok()?.clone();
        pred(&status).then_some(status)
    }

    /// Events from now on (a reader that falls more than 1024 events behind skips the oldest).
    pub fn events(&self) -> Events<HaEvent> {
        Events::subscribe(&self.ha.events)
    }

    /// The Binary Star handle (state, peer liveness, vote counters).
    pub fn star(&self) -> &bstar::Handle {
        &self.star
    }

    /// Stops the server (heartbeats stop, sockets close) and waits for it.
    pub async fn close(self) {
        self.task.close().await;
    }

    /// Waits until the server stops: `Err(HaError::Fatal(..))` on dual actives / dual passives.
    pub async fn wait(self) -> Result<(), HaError> {
        self.task.wait().await.unwrap_or(Ok(()))
    }
}

impl Deref for HaServer {
    type Target = ServerView;

    fn deref(&self) -> &ServerView {
        &self.view
    }
}
