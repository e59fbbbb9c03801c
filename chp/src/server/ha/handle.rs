//! What the application holds of a running pair server: the [`HaServer`] handle. It reads what
//! the [`driver`] publishes (the [`reports`](super::reports)) and can stop it; it never touches a
//! socket or the map, so reading a status never waits for the driver.

use std::ops::Deref;
use std::sync::Arc;

use bstar::{Liveness, State};
use tokio::sync::{broadcast, watch};
use zmtp::task::{Background, Events};

use super::driver::{self, Sockets};
use super::reports::{EVENTS_KEPT, HaEvent, HaShared, HaStats, HaStatus};
use super::{HaConfig, HaError};
use crate::server::{ServerView, open_state, port_of};

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
    /// Subscribed before the driver started, for the first [`HaServer::events`] call.
    first_events: std::sync::Mutex<Option<Events<HaEvent>>>,
}

impl HaServer {
    /// Binds the CHP sockets (the SNAPSHOT socket being the Binary Star voter) and the Binary
    /// Star sockets, and starts.
    pub async fn bind(config: HaConfig) -> Result<HaServer, HaError> {
        config.validate()?;
        // With a data directory, the map, sequence and epoch stored there, before any socket.
        let (state, persist) = open_state(&config.server).await?;
        let sockets = Sockets::bind(&config).await?;
        let star = sockets.star.handle();
        let server = &config.server;
        let port = port_of(star.voter_endpoint()).unwrap_or(server.port);
        let (sequence, keys) = (state.sequence(), state.len());
        let view = ServerView::serving(&server.bind, port, state);
        let status = HaStatus {
            side: config.side,
            state: config.side.start_state(),
            peer: Liveness::Unknown,
            peer_state: None,
            peer_synced: false,
            sequence,
            keys,
            pending: 0,
            stats: HaStats::default(),
            running: true,
            fatal: None,
        };
        let ha = Arc::new(HaShared { status: watch::Sender::new(status), events: broadcast::channel(EVENTS_KEPT).0 });
        // Before the driver runs: it can turn active (and say so) before `bind` returns.
        let first_events = std::sync::Mutex::new(Some(Events::subscribe(&ha.events)));
        let task = driver::spawn(config, sockets, view.shared().clone(), ha.clone(), persist);
        tracing::info!(address = %view.address(), side = %star.status().side, "CHP pair server listening");
        Ok(HaServer { view, ha, star, task, first_events })
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

    /// Events: the first call gets every event since `bind` started the server (a
    /// `BecameActive` that came before the call is not missed); later calls get events from then
    /// on. A reader that falls more than 1024 events behind skips the oldest.
    pub fn events(&self) -> Events<HaEvent> {
        let first = self.first_events.lock().unwrap_or_else(|e| e.into_inner()).take();
        first.unwrap_or_else(|| Events::subscribe(&self.ha.events))
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
