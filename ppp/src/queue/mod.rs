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
//!   disconnect, and the worker no longer among the backend's connected routing ids is the one
//!   that left (the spec: stop sending to a worker once it is known to be gone). A heartbeat or a
//!   request that cannot be routed purges its worker the same way.
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
//!
//! # Layout
//!
//! - `broker`: every decision above as a plain state machine: messages, disconnects and timer
//!   ticks go in with the time they happened, actions (send this request to that worker, heartbeat
//!   it, forward this reply, publish this event) come out. No sockets and no clock, so the rules
//!   are unit-tested to the instant.
//! - `runner`: the task that owns the sockets, their monitors and the timer, feeds the broker and
//!   performs its actions.
//! - This module: the public configuration, handle, stats and events.

mod broker;
mod runner;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::broadcast;
use tokio::time::Instant;
use zmtp::task::{Background, Events};
use zmtp::{Socket, SocketType};

use crate::EVENT_CAPACITY;
use crate::protocol::ProtocolError;
use crate::security::Security;
use broker::Broker;
use runner::Runner;

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
        frontend.set_security(&self.frontend_security);
        backend.set_security(&self.backend_security);
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
        let (events_tx, events) = Events::channel(EVENT_CAPACITY);
        let runner = Runner {
            broker: Broker::new(&self, Instant::now().into_std()),
            frontend,
            backend,
            backend_events,
            frontend_events,
            refusal_logged: None,
            interval: self.interval,
            events: events_tx.clone(),
            published: Arc::default(),
        };
        let stats = runner.published.clone();
        let task = Background::spawn(|stop| runner.run(stop));
        Ok(QueueHandle { frontend: frontend_ep, backend: backend_ep, task, events, events_tx, stats })
    }
}

/// A running queue. Dropping the handle stops the queue too.
#[derive(Debug)]
pub struct QueueHandle {
    frontend: String,
    backend: String,
    task: Background<()>,
    events: Events<QueueEvent>,
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
        self.events.next().await
    }

    /// An independent receiver of the events from now on.
    pub fn subscribe(&self) -> Events<QueueEvent> {
        Events::subscribe(&self.events_tx)
    }

    /// True once the queue task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the queue, closes its sockets (flushing for up to one interval) and waits for it.
    pub async fn close(self) {
        self.task.close().await;
    }
}
