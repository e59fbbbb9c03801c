//! The operator's and application's view of a running server: state, peer liveness, counters,
//! the voter socket for replies, and a way to stop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use zmtp::Socket;

use crate::fsm::{FsmError, Side, State};
use crate::liveness::Liveness;

/// A snapshot of a server. Watchers ([`Handle::watch`]) are woken when `state`, `peer`,
/// `peer_state`, the counters, `running` or `fatal` change — not on every heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Primary or backup.
    pub side: Side,
    /// The FSM state.
    pub state: State,
    /// The peer's liveness as last established by the runner.
    pub peer: Liveness,
    /// The state the peer last announced.
    pub peer_state: Option<State>,
    /// When the last valid state message arrived.
    pub last_heard: Option<Instant>,
    /// When the peer expires unless heard from (the expiry guard's deadline).
    pub peer_expiry: Instant,
    /// Client requests accepted (handed to the application).
    pub accepted: u64,
    /// Client requests rejected (read and discarded).
    pub rejected: u64,
    /// Malformed state messages dropped.
    pub malformed: u64,
    /// Security handshakes that failed, on any of the three sockets.
    pub handshake_failures: u64,
    /// False once [`BinaryStar::run`](crate::BinaryStar::run) has returned or been dropped.
    pub running: bool,
    /// Set when the run ended on a fatal pair failure.
    pub fatal: Option<FsmError>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) status: watch::Sender<Status>,
    pub(crate) stop: Notify,
    pub(crate) voter: Socket,
    pub(crate) state_endpoint: String,
    pub(crate) voter_endpoint: String,
    pub(crate) heartbeat: Duration,
    /// See [`Handle::set_eligible`].
    pub(crate) eligible: AtomicBool,
    /// See [`Handle::set_may_start_alone`].
    pub(crate) may_start_alone: AtomicBool,
    /// See [`Handle::set_confirms_with_restarted_peer`].
    pub(crate) confirms_with_restarted_peer: AtomicBool,
    /// See [`Handle::fall_silent`].
    pub(crate) silent: AtomicBool,
}

impl Shared {
    /// Applies `change`; watchers are woken only when it returns true.
    pub(crate) fn update(&self, change: impl FnOnce(&mut Status) -> bool) {
        self.status.send_if_modified(change);
    }
}

/// A cheap, cloneable handle on a [`BinaryStar`](crate::BinaryStar).
///
/// ```no_run
/// # async fn show(handle: bstar::Handle) {
/// if handle.state() == bstar::State::Passive && !handle.peer_alive() {
///     eprintln!("W: passive, and the active peer has been silent since {:?}", handle.last_heard());
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
}

impl Handle {
    /// A snapshot of everything.
    pub fn status(&self) -> Status {
        self.shared.status.borrow().clone()
    }

    /// The FSM state.
    pub fn state(&self) -> State {
        self.shared.status.borrow().state
    }

    /// True in [`State::Active`].
    pub fn is_active(&self) -> bool {
        self.state() == State::Active
    }

    /// True when the peer was heard within the last 2 × heartbeat (exact, computed now).
    pub fn peer_alive(&self) -> bool {
        let status = self.shared.status.borrow();
        status.last_heard.is_some() && Instant::now() < status.peer_expiry
    }

    /// When the last valid state message from the peer arrived.
    pub fn last_heard(&self) -> Option<Instant> {
        self.shared.status.borrow().last_heard
    }

    /// The state the peer last announced.
    pub fn peer_state(&self) -> Option<State> {
        self.shared.status.borrow().peer_state
    }

    /// A watch on the [`Status`] (see there for when it wakes).
    pub fn watch(&self) -> watch::Receiver<Status> {
        self.shared.status.subscribe()
    }

    /// Waits until `pred` holds for the status and returns that status; `None` when the runner stops
    /// (or has stopped) without the predicate holding. Not bounded: wrap it in a timeout.
    pub async fn wait_for(&self, mut pred: impl FnMut(&Status) -> bool) -> Option<Status> {
        let mut watch = self.watch();
        let status = watch.wait_for(|s| pred(s) || !s.running).await.ok()?.clone();
        pred(&status).then_some(status)
    }

    /// The voter socket: send replies to accepted requests here (and set options before clients
    /// connect, if needed). It is closed when the runner stops.
    pub fn voter(&self) -> &Socket {
        &self.shared.voter
    }

    /// The state PUB's endpoint as bound (wildcards resolved).
    pub fn state_endpoint(&self) -> &str {
        &self.shared.state_endpoint
    }

    /// The voter's endpoint as bound (wildcards resolved).
    pub fn voter_endpoint(&self) -> &str {
        &self.shared.voter_endpoint
    }

    /// The heartbeat interval.
    pub fn heartbeat(&self) -> Duration {
        self.shared.heartbeat
    }

    /// Asks the runner to stop; [`BinaryStar::run`](crate::BinaryStar::run) then returns `Ok(())`.
    pub fn close(&self) {
        self.shared.stop.notify_one();
    }

    /// Whether this server may take over from PASSIVE (default true). The application clears it
    /// while it cannot serve as the truth — say, a passive whose copy of the active's state is not
    /// complete yet: until it is set again, a client's vote is rejected and a restarted peer does
    /// not make this server active, unless [`set_confirms_with_restarted_peer`](Self::set_confirms_with_restarted_peer)
    /// (see [`Fsm::set_eligible`](crate::fsm::Fsm::set_eligible)).
    pub fn set_eligible(&self, eligible: bool) {
        self.shared.eligible.store(eligible, Ordering::Relaxed);
    }

    /// See [`set_eligible`](Self::set_eligible).
    pub fn eligible(&self) -> bool {
        self.shared.eligible.load(Ordering::Relaxed)
    }

    /// Stops publishing this server's state until its state next changes. For an ACTIVE server
    /// that learns its peer holds newer state than its own (say, both restarted from disk, the
    /// peer having taken over before): the peer then finds it silent after the peer expiry and
    /// takes over on a client's vote; on hearing the peer ACTIVE, this server — which did not
    /// take over — yields ([`crate::split`], with healing on) and becomes PASSIVE, and publishes
    /// again. Nothing stops meanwhile: unlike stopping the process, a restart loop cannot bring it
    /// back ACTIVE before the peer has taken over. If the peer restarts meanwhile (it is heard as
    /// PRIMARY or BACKUP), this server publishes again: the restarted peer no longer knows why it
    /// fell silent, and hearing nothing it would wait for good; the application decides anew.
    pub fn fall_silent(&self) {
        self.shared.silent.store(true, Ordering::Relaxed);
    }

    /// Whether this server has fallen silent (see [`fall_silent`](Self::fall_silent)).
    pub fn is_silent(&self) -> bool {
        self.shared.silent.load(Ordering::Relaxed)
    }

    /// Whether a PRIMARY that has not met its peer may take over on a client's vote (default
    /// true; see [`Fsm::set_may_start_alone`](crate::fsm::Fsm::set_may_start_alone)).
    pub fn set_may_start_alone(&self, may: bool) {
        self.shared.may_start_alone.store(may, Ordering::Relaxed);
    }

    /// Whether a restarted peer makes this server ACTIVE even while it is not
    /// [eligible](Self::set_eligible) (default false), for an application that compares its state
    /// with the peer's before it serves (see
    /// [`Fsm::set_confirms_with_restarted_peer`](crate::fsm::Fsm::set_confirms_with_restarted_peer)).
    pub fn set_confirms_with_restarted_peer(&self, confirms: bool) {
        self.shared.confirms_with_restarted_peer.store(confirms, Ordering::Relaxed);
    }
}
