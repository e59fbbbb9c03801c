//! The Paranoid Pirate queue: a broker between Lazy Pirate clients (frontend ROUTER) and PPP workers
//! (backend ROUTER), in the role the spec calls "client" towards its workers.
//!
//! What it does, and how it differs from the Guide's `ppqueue`:
//!
//! - **Registration.** A worker exists for the queue only after its READY. HEARTBEATs and replies
//!   from a worker the queue does not know are logged and dropped (the spec: "the first message in
//!   any conversation MUST be W:READY"); such a worker notices the silence and reconnects with READY.
//! - **Wire format: the Guide's.** A worker gets exactly `[client address…, "", body…]` as the
//!   client sent it — nothing added — so the Guide's `ppworker`, which takes only three-frame
//!   requests, works behind this queue. Bookkeeping stays here: a worker's reply is matched to its
//!   request by the client address stack it echoes.
//! - **LRU.** Idle workers wait in least-recently-used order; a request goes to the longest-idle one.
//!   A worker becomes idle on READY and on a reply, not on a HEARTBEAT while it holds a request
//!   (the reference re-queues a worker on any message, so a busy worker's heartbeat can earn it a
//!   second request) — except after a request timeout, below.
//! - **Request timeout.** A request dispatched to a worker that neither replies nor dies within
//!   `request_timeout` goes back to the *front* of the pending queue for another worker (checked
//!   every interval). The worker is kept, not purged: a worker that silently dropped a request but
//!   still heartbeats is alive and can serve, so it rejoins the idle list on its next HEARTBEAT
//!   (or reply); one that is really gone is purged by expiry as usual. Nothing stays stranded, and
//!   a late reply to a re-queued request is dropped (the client gets one reply).
//! - **Heartbeats to every worker**, idle or busy, every `interval` (the spec: both peers heartbeat).
//! - **Expiry.** A worker silent for `liveness × interval` is purged. A worker whose connection
//!   drops (a crashed process) is purged at once: the backend's connection monitor reports the
//!   disconnect, and a probe HEARTBEAT to each worker finds the one that can no longer be routed to
//!   (the spec: stop sending to a worker once it is known to be gone).
//! - **Re-dispatch.** A request whose worker is purged, or which restarts its conversation with
//!   READY, goes back to the *front* of the pending queue and on to the next idle worker. A reply
//!   is forwarded only if it answers that worker's current request (same client address stack):
//!   a late reply from an expired, restarted or timed-out worker is dropped, so a client never
//!   sees two replies.
//! - **Bounded pending queue.** Requests that arrive while no worker is idle wait in a queue of at
//!   most `max_pending`. When it is full, [`Overflow::Backpressure`] (default) stops reading the
//!   frontend, so nothing is dropped: further requests wait in the socket's per-client buffers
//!   (RCVHWM) and then in TCP; [`Overflow::DropOldest`] keeps reading and drops the oldest pending
//!   request (its client's Lazy Pirate retry recovers it).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use zmtp::{Message, MonitorEvent, Socket, SocketType};

use crate::protocol::{Command, Envelope, ProtocolError};
use crate::security::Security;
use crate::{EVENT_CAPACITY, display_id};

/// What to do with a new request when `max_pending` requests are already waiting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overflow {
    /// Stop reading the frontend until a request leaves the queue (nothing is dropped; senders are
    /// slowed by the sockets' HWMs and TCP flow control).
    #[default]
    Backpressure,
    /// Keep reading and drop the oldest pending request (logged; the client's retry recovers it).
    DropOldest,
}

/// Configuration of a queue; every constant defaults to the Guide's value.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ppp::QueueError> {
/// use std::time::Duration;
/// let queue = ppp::Queue {
///     interval: Duration::from_millis(500),
///     ..ppp::Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
/// }
/// .spawn()
/// .await?;
/// println!("clients connect to {}, workers to {}", queue.frontend(), queue.backend());
/// queue.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Queue {
    /// Endpoint clients connect to (ROUTER). Default `tcp://*:5555`.
    pub frontend: String,
    /// Endpoint workers connect to (ROUTER). Default `tcp://*:5556`.
    pub backend: String,
    /// Missed heartbeat intervals after which a silent worker is purged. Default 3.
    pub liveness: u32,
    /// Heartbeat interval. Default 1000 ms.
    pub interval: Duration,
    /// Most requests waiting for an idle worker. Default 1000.
    pub max_pending: usize,
    /// A request a worker holds this long without replying goes to another worker (see the module
    /// docs). Default `liveness × interval` (3 s).
    pub request_timeout: Duration,
    /// What happens when `max_pending` is reached. Default [`Overflow::Backpressure`].
    pub overflow: Overflow,
    /// Security of the frontend (clients connect here): NULL, or a server role
    /// ([`Security::CurveServer`], [`Security::PlainServer`]). Default NULL.
    pub frontend_security: Security,
    /// Security of the backend (workers connect here). Default NULL. With CURVE, an allow list of
    /// worker keys here keeps a client that knows the server key from registering as a worker.
    pub backend_security: Security,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            frontend: "tcp://*:5555".into(),
            backend: "tcp://*:5556".into(),
            liveness: 3,
            interval: Duration::from_millis(1000),
            max_pending: 1000,
            request_timeout: Duration::from_millis(3000),
            overflow: Overflow::Backpressure,
            frontend_security: Security::Null,
            backend_security: Security::Null,
        }
    }
}

/// Why a queue could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// Binding an endpoint failed (bad syntax, address in use, …).
    #[error("cannot bind the {side} endpoint {endpoint:?}: {source}")]
    Bind {
        /// "frontend" or "backend".
        side: &'static str,
        /// The endpoint as given.
        endpoint: String,
        /// The socket error.
        source: zmtp::Error,
    },
    /// A configuration value is out of range, or a security setting is a client role.
    #[error("invalid queue configuration: {0}")]
    Config(&'static str),
}

/// Something noteworthy the queue did (also logged with `tracing`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueEvent {
    /// A worker sent READY and joined the idle list.
    WorkerReady {
        /// Its routing id.
        worker: Bytes,
    },
    /// A worker was silent for `liveness × interval` and was purged.
    WorkerExpired {
        /// Its routing id.
        worker: Bytes,
        /// How long it had been silent.
        silent_for: Duration,
    },
    /// A message to a worker could not be routed (its connection is gone); it was purged.
    WorkerDisconnected {
        /// Its routing id.
        worker: Bytes,
    },
    /// A request whose worker was lost (expired, disconnected, or restarted with READY) was put
    /// back at the front of the pending queue.
    Redispatched {
        /// The worker that lost it.
        worker: Bytes,
    },
    /// A request its worker held for `request_timeout` without a reply was put back at the front
    /// of the pending queue; the worker rejoins the idle list on its next heartbeat.
    RequestTimedOut {
        /// The worker that held it.
        worker: Bytes,
    },
    /// A reply was dropped instead of forwarded (unknown worker, stale tag, malformed).
    ReplyDropped {
        /// The worker that sent it.
        worker: Bytes,
        /// Why.
        reason: String,
    },
    /// A malformed message (unknown command, missing envelope) was dropped.
    Malformed {
        /// "frontend" or "backend".
        side: &'static str,
        /// What was wrong.
        error: ProtocolError,
    },
    /// With [`Overflow::DropOldest`]: the oldest pending request was dropped.
    RequestDropped,
    /// A peer's security handshake failed (a CURVE client with the wrong server key or a key not
    /// on the allow list, a wrong PLAIN password, a mechanism mismatch …); it was disconnected and
    /// never reached the queue's logic.
    HandshakeFailed {
        /// "frontend" or "backend".
        side: &'static str,
        /// The peer's address (empty for ipc).
        peer: String,
        /// Why, as the connection reported it.
        reason: String,
    },
}

/// Counters and gauges of a running queue, from [`QueueHandle::stats`] (refreshed after every
/// batch of messages the queue handles).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Registered workers.
    pub workers: usize,
    /// Registered workers without a request.
    pub idle: usize,
    /// Requests waiting for a worker.
    pub pending: usize,
    /// Valid requests received from clients.
    pub requests: u64,
    /// Replies forwarded to clients.
    pub replies: u64,
    /// Requests put back in the queue because their worker was lost.
    pub redispatched: u64,
    /// Replies dropped (late, unknown worker, malformed).
    pub replies_dropped: u64,
    /// Requests dropped because the pending queue was full ([`Overflow::DropOldest`]).
    pub requests_dropped: u64,
}

impl Queue {
    /// The reference configuration on the given endpoints.
    pub fn new(frontend: impl Into<String>, backend: impl Into<String>) -> Self {
        Queue { frontend: frontend.into(), backend: backend.into(), ..Queue::default() }
    }

    /// The same security for the frontend and the backend (a server role, or NULL).
    pub fn security(mut self, security: Security) -> Self {
        self.frontend_security = security.clone();
        self.backend_security = security;
        self
    }

    /// Binds both endpoints and runs the queue in a background task until the handle is stopped or
    /// dropped.
    pub async fn spawn(self) -> Result<QueueHandle, QueueError> {
        if self.liveness == 0 {
            return Err(QueueError::Config("liveness must be at least 1"));
        }
        if self.interval.is_zero() {
            return Err(QueueError::Config("interval must be positive"));
        }
        if self.max_pending == 0 {
            return Err(QueueError::Config("max_pending must be at least 1"));
        }
        if self.request_timeout.is_zero() {
            return Err(QueueError::Config("request_timeout must be positive"));
        }
        self.frontend_security.check_role(true).map_err(QueueError::Config)?;
        self.backend_security.check_role(true).map_err(QueueError::Config)?;
        let frontend = Socket::new(SocketType::Router);
        let backend = Socket::new(SocketType::Router);
        self.frontend_security.apply(&frontend);
        self.backend_security.apply(&backend);
        let frontend_events = frontend.monitor();
        let backend_events = backend.monitor();
        // Routing to a vanished worker must fail loudly, so its request is not silently lost.
        backend.set_router_mandatory(true);
        // A worker that reconnects under the same identity replaces its stale connection.
        backend.set_router_handover(true);
        for s in [&frontend, &backend] {
            s.set_linger(Some(self.interval));
        }
        let frontend_ep = frontend.bind(&self.frontend).await.map_err(|source| QueueError::Bind {
            side: "frontend",
            endpoint: self.frontend.clone(),
            source,
        })?;
        let backend_ep = backend.bind(&self.backend).await.map_err(|source| QueueError::Bind {
            side: "backend",
            endpoint: self.backend.clone(),
            source,
        })?;
        tracing::info!(frontend = %frontend_ep, backend = %backend_ep, "queue listening");
        let (events_tx, events) = broadcast::channel(EVENT_CAPACITY);
        let (stop_tx, stop_rx) = oneshot::channel();
        let broker = Broker {
            frontend,
            backend,
            backend_events,
            frontend_events,
            refusal_logged: None,
            liveness_span: self.interval * self.liveness,
            interval: self.interval,
            max_pending: self.max_pending,
            request_timeout: self.request_timeout,
            overflow: self.overflow,
            workers: HashMap::new(),
            idle: VecDeque::new(),
            pending: VecDeque::new(),
            next_expiry_check: None,
            events: events_tx.clone(),
            stats: QueueStats::default(),
            published: Arc::default(),
        };
        let stats = broker.published.clone();
        let task = tokio::spawn(broker.run(stop_rx));
        Ok(QueueHandle {
            frontend: frontend_ep,
            backend: backend_ep,
            stop: Some(stop_tx),
            task,
            events,
            events_tx,
            stats,
        })
    }
}

/// A running queue. Dropping the handle stops the queue too.
#[derive(Debug)]
pub struct QueueHandle {
    frontend: String,
    backend: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    events: broadcast::Receiver<QueueEvent>,
    events_tx: broadcast::Sender<QueueEvent>,
    stats: Arc<Mutex<QueueStats>>,
}

impl QueueHandle {
    /// A snapshot of the queue's counters.
    pub fn stats(&self) -> QueueStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The frontend endpoint as bound (wildcards resolved).
    pub fn frontend(&self) -> &str {
        &self.frontend
    }

    /// The backend endpoint as bound (wildcards resolved).
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// The next event since the queue started (events older than the last 1024 are skipped);
    /// `None` once the queue has stopped.
    pub async fn next_event(&mut self) -> Option<QueueEvent> {
        loop {
            match self.events.recv().await {
                Ok(ev) => return Some(ev),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// An independent receiver of the events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<QueueEvent> {
        self.events_tx.subscribe()
    }

    /// True once the queue task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the queue, closes its sockets (flushing for up to one interval) and waits for it.
    pub async fn close(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// A request waiting for, or held by, a worker: `[client address…, "", content…]`.
type Request = Message;

#[derive(Debug)]
struct WorkerState {
    /// Last time the worker was heard from.
    seen: Instant,
    /// The request it is working on, and when it was dispatched.
    job: Option<(Instant, Request)>,
    /// Its request timed out and went to another worker: it rejoins the idle list on its next
    /// sign of life (HEARTBEAT or a reply).
    timed_out: bool,
}

/// Messages handled per wake-up before timers get a look in.
const BATCH: usize = 128;

struct Broker {
    frontend: Socket,
    backend: Socket,
    /// Connection events of the backend: a dropped connection triggers a probe of the workers.
    backend_events: zmtp::Monitor,
    /// Connection events of the frontend (for handshake failures).
    frontend_events: zmtp::Monitor,
    /// When a refused handshake was last logged at `warn` (at most one per interval; the rest at
    /// `debug`: a misconfigured peer retries every 100 ms).
    refusal_logged: Option<Instant>,
    liveness_span: Duration,
    interval: Duration,
    max_pending: usize,
    request_timeout: Duration,
    overflow: Overflow,
    workers: HashMap<Bytes, WorkerState>,
    /// Invariant: a known worker is in `idle` exactly when it has no job and has not timed out.
    /// Front = longest idle.
    idle: VecDeque<Bytes>,
    pending: VecDeque<Request>,
    /// No worker expires before this (a lower bound: refreshing a worker only moves it later).
    next_expiry_check: Option<Instant>,
    events: broadcast::Sender<QueueEvent>,
    /// Counters (the gauges are filled in when published).
    stats: QueueStats,
    published: Arc<Mutex<QueueStats>>,
}

impl Broker {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let mut next_heartbeat = Instant::now() + self.interval;
        let timer = sleep_until(next_heartbeat);
        tokio::pin!(timer);
        loop {
            let wake = self.next_expiry_check.map_or(next_heartbeat, |e| e.min(next_heartbeat));
            if timer.deadline() != wake {
                timer.as_mut().reset(wake);
            }
            let read_frontend = self.overflow == Overflow::DropOldest || self.pending.len() < self.max_pending;
            let outcome = tokio::select! {
                _ = &mut stop => break,
                r = self.backend.recv() => r.map(|m| self.on_backend(m)).and_then(|()| self.drain()),
                r = self.frontend.recv(), if read_frontend => r.map(|m| self.on_frontend(m)).and_then(|()| self.drain()),
                Some(ev) = self.frontend_events.next_event() => {
                    if let MonitorEvent::HandshakeFailed { peer, error, .. } = ev {
                        self.handshake_failed("frontend", peer, &error);
                    }
                    Ok(())
                }
                Some(ev) = self.backend_events.next_event() => match ev {
                    MonitorEvent::HandshakeFailed { peer, error, .. } => {
                        self.handshake_failed("backend", peer, &error);
                        Ok(())
                    }
                    MonitorEvent::Disconnected { .. } => {
                        // Whatever the peer sent before it went counts (a reply, say); then find
                        // out which worker it was: the route is gone, so a send to it fails.
                        let drained = self.drain_backend().map(drop);
                        self.probe();
                        drained
                    }
                    _ => Ok(()),
                },
                () = &mut timer => {
                    let now = Instant::now();
                    // Messages already received count as signs of life: read them before judging.
                    let drained = self.drain_backend().map(drop);
                    if self.next_expiry_check.is_some_and(|t| t <= now) {
                        self.purge_expired(now);
                    }
                    if now >= next_heartbeat {
                        self.requeue_timed_out(now);
                        self.heartbeat();
                        next_heartbeat += self.interval;
                        if next_heartbeat <= now {
                            next_heartbeat = now + self.interval;
                        }
                    }
                    drained
                }
            };
            if let Err(e) = outcome {
                if !matches!(e, zmtp::Error::Closed) {
                    tracing::error!(error = %e, "queue socket failed; stopping");
                }
                break;
            }
            self.dispatch();
            self.publish_stats();
        }
        tracing::info!(pending = self.pending.len(), workers = self.workers.len(), "queue stopping");
        let Broker { frontend, backend, .. } = self;
        tokio::join!(frontend.close(), backend.close());
    }

    fn publish_stats(&self) {
        let stats = QueueStats {
            workers: self.workers.len(),
            idle: self.idle.len(),
            pending: self.pending.len(),
            ..self.stats
        };
        *self.published.lock().unwrap_or_else(|e| e.into_inner()) = stats;
    }

    /// Publishes the stats first, so that whoever sees the event sees stats at least as new.
    fn emit(&self, event: QueueEvent) {
        self.publish_stats();
        let _ = self.events.send(event);
    }

    /// Handles whatever else is already queued on both sockets (up to a bound), so one wake-up
    /// serves a burst.
    fn drain(&mut self) -> zmtp::Result<()> {
        for _ in 0..8 {
            self.dispatch();
            if self.drain_backend()? + self.drain_frontend()? == 0 {
                break;
            }
        }
        Ok(())
    }

    fn drain_backend(&mut self) -> zmtp::Result<usize> {
        for n in 0..BATCH {
            match self.backend.try_recv() {
                Ok(msg) => self.on_backend(msg),
                Err(zmtp::Error::WouldBlock) => return Ok(n),
                Err(e) => return Err(e),
            }
        }
        Ok(BATCH)
    }

    fn drain_frontend(&mut self) -> zmtp::Result<usize> {
        for n in 0..BATCH {
            if self.overflow == Overflow::Backpressure && self.pending.len() >= self.max_pending {
                return Ok(n);
            }
            self.dispatch();
            match self.frontend.try_recv() {
                Ok(msg) => self.on_frontend(msg),
                Err(zmtp::Error::WouldBlock) => return Ok(n),
                Err(e) => return Err(e),
            }
        }
        Ok(BATCH)
    }

    fn malformed(&self, side: &'static str, error: ProtocolError, from: &Bytes) {
        if let Some(suppressed) = zmtp::throttle::allow("ppp queue: malformed message") {
            tracing::warn!(side, peer = %display_id(from), %error, suppressed, "malformed message dropped");
        }
        self.emit(QueueEvent::Malformed { side, error });
    }

    /// A client request: `[client id, addresses…, "", content…]`.
    fn on_frontend(&mut self, msg: Message) {
        if let Err(error) = Envelope::check(&msg, 1) {
            self.malformed("frontend", error, &msg[0]);
            return;
        }
        if self.pending.len() >= self.max_pending {
            // Only reachable with DropOldest: Backpressure stops reading before this.
            self.pending.pop_front();
            self.stats.requests_dropped += 1;
            tracing::warn!(max_pending = self.max_pending, "pending queue full: dropped the oldest request");
            self.emit(QueueEvent::RequestDropped);
        }
        self.stats.requests += 1;
        self.pending.push_back(msg);
    }

    /// A worker message: `[worker id, READY | HEARTBEAT]` or a reply `[worker id, addresses…, "", content…]`.
    fn on_backend(&mut self, mut msg: Message) {
        let worker = msg.pop_front().expect("ROUTER messages carry the routing id");
        let now = Instant::now();
        let known = match self.workers.get_mut(&worker) {
            Some(w) => {
                w.seen = now;
                true
            }
            None => false,
        };
        if msg.len() == 1 {
            match Command::parse(&msg) {
                Ok(Command::Ready) => {
                    if let Some(user) = msg.property("User-Id").filter(|u| !u.is_empty()) {
                        tracing::debug!(worker = %display_id(&worker), user, "READY from an authenticated worker");
                    }
                    self.on_ready(worker, now)
                }
                Ok(Command::Heartbeat) if known => self.recovered(&worker),
                Ok(Command::Heartbeat) => {
                    tracing::debug!(worker = %display_id(&worker), "HEARTBEAT from an unregistered worker ignored (READY must come first)");
                }
                Err(error) => self.malformed("backend", error, &worker),
            }
            return;
        }
        if !known {
            self.drop_reply(worker, "from an unregistered worker (expired, or never sent READY)".into());
            return;
        }
        if let Err(error) = Envelope::check(&msg, 1) {
            self.malformed("backend", error, &worker);
            return;
        }
        let answers_job = {
            let w = &self.workers[&worker];
            w.job.as_ref().is_some_and(|(_, request)| same_envelope(request, &msg))
        };
        if !answers_job {
            // A late reply (its request timed out, or was re-dispatched) still shows the worker is
            // done and alive.
            self.recovered(&worker);
            self.drop_reply(worker, "not the reply to the worker's current request (late, or re-dispatched)".into());
            return;
        }
        let w = self.workers.get_mut(&worker).expect("known");
        w.job = None;
        self.idle.push_back(worker);
        self.stats.replies += 1;
        // Before the client can see its reply, so stats never lag behind what it saw.
        self.publish_stats();
        // A frontend ROUTER never blocks; a client that has gone away loses its reply.
        let _ = self.frontend.try_send(msg);
    }

    /// A worker whose request timed out shows a sign of life: it rejoins the idle list.
    fn recovered(&mut self, worker: &Bytes) {
        let Some(w) = self.workers.get_mut(worker) else { return };
        if w.timed_out && w.job.is_none() {
            w.timed_out = false;
            tracing::info!(worker = %display_id(worker), "worker whose request timed out is alive: idle again");
            self.idle.push_back(worker.clone());
        }
    }

    /// Requests held longer than `request_timeout` go back to the front of the pending queue.
    fn requeue_timed_out(&mut self, now: Instant) {
        let timeout = self.request_timeout;
        let stuck: Vec<Bytes> = self
            .workers
            .iter()
            .filter(|(_, w)| w.job.as_ref().is_some_and(|(since, _)| *since + timeout <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for worker in stuck {
            let w = self.workers.get_mut(&worker).expect("listed");
            let (_, request) = w.job.take().expect("listed with a job");
            w.timed_out = true;
            tracing::warn!(worker = %display_id(&worker), timeout_ms = timeout.as_millis() as u64, "request timed out; re-dispatching it");
            self.pending.push_front(request);
            self.stats.redispatched += 1;
            self.emit(QueueEvent::RequestTimedOut { worker });
        }
    }

    fn handshake_failed(&mut self, side: &'static str, peer: String, error: &zmtp::ConnectionError) {
        let reason = error.to_string();
        let now = Instant::now();
        if self.refusal_logged.is_none_or(|at| now >= at + self.interval) {
            self.refusal_logged = Some(now);
            tracing::warn!(side, %peer, %reason, "security handshake failed; peer disconnected");
        } else {
            tracing::debug!(side, %peer, %reason, "security handshake failed; peer disconnected");
        }
        self.emit(QueueEvent::HandshakeFailed { side, peer, reason });
    }

    fn drop_reply(&mut self, worker: Bytes, reason: String) {
        self.stats.replies_dropped += 1;
        if let Some(suppressed) = zmtp::throttle::allow("ppp queue: reply dropped") {
            tracing::warn!(worker = %display_id(&worker), %reason, suppressed, "reply dropped");
        }
        self.emit(QueueEvent::ReplyDropped { worker, reason });
    }

    fn on_ready(&mut self, worker: Bytes, now: Instant) {
        match self.workers.entry(worker.clone()) {
            Entry::Occupied(mut e) => {
                // A READY from a known worker restarts its conversation: whatever it was doing is lost.
                let state = e.get_mut();
                let was_timed_out = std::mem::take(&mut state.timed_out);
                if let Some((_, request)) = state.job.take() {
                    tracing::warn!(worker = %display_id(&worker), "busy worker sent READY (restarted); re-dispatching its request");
                    self.pending.push_front(request);
                    self.idle.push_back(worker.clone());
                    self.stats.redispatched += 1;
                    self.emit(QueueEvent::Redispatched { worker });
                } else if was_timed_out {
                    self.idle.push_back(worker);
                }
            }
            Entry::Vacant(e) => {
                e.insert(WorkerState { seen: now, job: None, timed_out: false });
                self.idle.push_back(worker.clone());
                let expiry = now + self.liveness_span;
                self.next_expiry_check = Some(self.next_expiry_check.map_or(expiry, |t| t.min(expiry)));
                tracing::info!(worker = %display_id(&worker), workers = self.workers.len(), "worker ready");
                self.emit(QueueEvent::WorkerReady { worker });
            }
        }
    }

    /// Forgets a worker; its request, if any, goes back to the front of the queue.
    fn remove_worker(&mut self, worker: &Bytes) {
        let Some(state) = self.workers.remove(worker) else { return };
        match state.job {
            Some((_, request)) => {
                tracing::warn!(worker = %display_id(worker), "re-dispatching the lost worker's request");
                self.pending.push_front(request);
                self.stats.redispatched += 1;
                self.emit(QueueEvent::Redispatched { worker: worker.clone() });
            }
            None if state.timed_out => {}
            None => self.idle.retain(|w| w != worker),
        }
    }

    fn purge_expired(&mut self, now: Instant) {
        let span = self.liveness_span;
        let expired: Vec<(Bytes, Duration)> = self
            .workers
            .iter()
            .filter(|(_, w)| w.seen + span <= now)
            .map(|(id, w)| (id.clone(), now - w.seen))
            .collect();
        for (worker, silent_for) in expired {
            tracing::warn!(worker = %display_id(&worker), silent_ms = silent_for.as_millis() as u64, "worker expired");
            self.remove_worker(&worker);
            self.emit(QueueEvent::WorkerExpired { worker, silent_for });
        }
        self.next_expiry_check = self.workers.values().map(|w| w.seen + span).min();
    }

    /// HEARTBEAT to every worker, idle or busy: on schedule, and as a probe after a connection
    /// dropped (an extra heartbeat is harmless; a worker whose connection is gone is purged).
    fn probe(&mut self) {
        self.heartbeat();
    }

    /// HEARTBEAT to every worker, idle or busy.
    fn heartbeat(&mut self) {
        let mut gone = Vec::new();
        for worker in self.workers.keys() {
            let mut msg = Message::single(worker.clone());
            msg.push(Command::Heartbeat.frame());
            match self.backend.try_send(msg) {
                Ok(()) => {}
                // Its outbound queue is full: it is not reading; expiry will decide.
                Err(zmtp::Error::WouldBlock) => {}
                Err(_) => gone.push(worker.clone()),
            }
        }
        for worker in gone {
            self.worker_disconnected(worker);
        }
    }

    fn worker_disconnected(&mut self, worker: Bytes) {
        tracing::warn!(worker = %display_id(&worker), "worker disconnected; purged");
        self.remove_worker(&worker);
        self.emit(QueueEvent::WorkerDisconnected { worker });
    }

    /// Hands pending requests to idle workers, longest-idle first.
    fn dispatch(&mut self) {
        while !self.pending.is_empty() {
            let Some(worker) = self.idle.pop_front() else { return };
            let request = self.pending.pop_front().expect("non-empty");
            // Exactly what the client sent, behind the worker's routing id: nothing added.
            let mut msg = request.clone();
            msg.push_front(worker.clone());
            match self.backend.try_send(msg) {
                Ok(()) => {
                    self.workers.get_mut(&worker).expect("idle workers are known").job =
                        Some((Instant::now(), request));
                }
                Err(e) => {
                    // Gone (HostUnreachable) or not reading (WouldBlock): either way not usable.
                    self.pending.push_front(request);
                    tracing::debug!(worker = %display_id(&worker), error = %e, "dispatch failed");
                    self.worker_disconnected(worker);
                }
            }
        }
    }
}

/// True when `reply` carries the same address stack (the frames up to the empty delimiter) as
/// `request`: the worker's answer to that request.
fn same_envelope(request: &Message, reply: &Message) -> bool {
    let stack = |m: &Message| m.iter().position(|f| f.is_empty()).map(|end| m.frames()[..end].to_vec());
    stack(request).is_some() && stack(request) == stack(reply)
}
