//! The Paranoid Pirate worker: a DEALER that announces itself with READY, heartbeats the queue, runs
//! requests through an application [`Handler`], and reconnects with exponential backoff when the
//! queue falls silent.
//!
//! The life of a worker, as in the Guide's `ppworker` (with the spec's READY rule made strict):
//!
//! 1. Make a fresh DEALER socket (a new random identity), connect, send READY.
//! 2. Every `interval`, send HEARTBEAT — also while a request is being handled, because the handler
//!    runs in its own task.
//! 3. Any message from the queue (heartbeat or request) proves it alive: it resets the liveness
//!    deadline (`liveness × interval` of silence) and the reconnect backoff.
//! 4. Silence until the deadline: drop the socket (abandoning any request in progress: the queue
//!    re-dispatches it, or, if the queue died, the client retries), wait the backoff, double the
//!    backoff up to `reconnect_max`, go to 1.
//!
//! If the connection itself is re-established underneath (the queue restarted quickly), the
//! worker restarts the conversation at once: it abandons any request in progress and sends READY
//! again, so a restarted queue learns about it without waiting for the liveness deadline.
//!
//! Every step is reported as a [`WorkerEvent`] (and logged with `tracing`), which is how tests
//! observe the backoff sequence.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};
use zmtp::task::{Background, Events, StopSignal};
use zmtp::{Message, MonitorEvent, Socket, SocketType};

use crate::protocol::{Command, Envelope, ProtocolError};
use crate::security::Security;
use crate::{EVENT_CAPACITY, display_id};

/// The application's work: turns a request's content into a reply's content.
///
/// Any `Fn(Message) -> impl Future<Output = Message>` closure is a handler:
///
/// ```
/// # async fn demo() -> Result<(), zmtp::Error> {
/// use zmtp::Message;
/// let worker = ppp::Worker::new("tcp://127.0.0.1:5556")
///     .spawn(|request: Message| async move {
///         let mut reply = Message::single("echo");
///         for frame in request {
///             reply.push(frame);
///         }
///         reply
///     })
///     .await?;
/// # worker.close().await;
/// # Ok(()) }
/// ```
///
/// Each request runs in its own task, one at a time per worker. A handler that panics is treated
/// like a crashed worker: no reply is sent, the worker restarts its conversation with READY and the
/// queue hands the request to another worker.
pub trait Handler: Send + Sync + 'static {
    /// Handles one request (the content frames, without the envelope).
    fn handle(&self, request: Message) -> impl Future<Output = Message> + Send;
}

impl<F, Fut> Handler for F
where
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Message> + Send + 'static,
{
    fn handle(&self, request: Message) -> impl Future<Output = Message> + Send {
        self(request)
    }
}

/// Configuration of a worker; every constant defaults to the Guide's value.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use zmtp::Message;
/// let queue = ppp::Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*").spawn().await?;
/// let worker = ppp::Worker {
///     interval: Duration::from_millis(250),
///     ..ppp::Worker::new(queue.backend())
/// }
/// .spawn(|request: Message| async move { request })
/// .await?;
/// let mut client = ppp::Client::connect(queue.frontend(), ppp::ClientConfig::default()).await?;
/// assert_eq!(client.request("hello").await?, Message::single("hello"));
/// worker.close().await;
/// queue.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Worker {
    /// The queue's backend endpoint.
    pub endpoint: String,
    /// Heartbeat intervals of silence after which the queue is considered gone. Default 3.
    pub liveness: u32,
    /// Heartbeat interval. Default 1000 ms.
    pub interval: Duration,
    /// First reconnect delay (INTERVAL_INIT). Default 1000 ms.
    pub reconnect_init: Duration,
    /// Largest reconnect delay (INTERVAL_MAX). Default 32000 ms.
    pub reconnect_max: Duration,
    /// Security of each socket: NULL, or a client role ([`Security::CurveClient`],
    /// [`Security::PlainClient`]) matching the queue's backend. Default NULL.
    pub security: Security,
}

impl Worker {
    /// The reference configuration, connecting to `endpoint`.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Worker {
            endpoint: endpoint.into(),
            liveness: 3,
            interval: Duration::from_millis(1000),
            reconnect_init: Duration::from_millis(1000),
            reconnect_max: Duration::from_millis(32_000),
            security: Security::Null,
        }
    }

    /// Sets [`security`](Self::security).
    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// Connects and runs the worker in a background task until the handle is stopped or dropped.
    /// Fails at once if the endpoint is invalid or the configuration is out of range.
    pub async fn spawn<H: Handler>(self, handler: H) -> Result<WorkerHandle, zmtp::Error> {
        if self.liveness == 0 || self.interval.is_zero() || self.reconnect_init.is_zero() {
            return Err(zmtp::Error::InvalidEndpoint(
                self.endpoint,
                "worker liveness, interval and reconnect_init must be positive",
            ));
        }
        if let Err(why) = self.security.check_role(false) {
            return Err(zmtp::Error::InvalidEndpoint(self.endpoint, why));
        }
        let (events_tx, events) = Events::channel(EVENT_CAPACITY);
        let first = Connection::open(&self.endpoint, &self.security).await?;
        let (results_tx, results) = mpsc::unbounded_channel();
        let run = Run {
            liveness_span: self.interval * self.liveness,
            config: self,
            handler: Arc::new(handler),
            events: events_tx.clone(),
            job: None,
            generation: 0,
            backlog: VecDeque::new(),
            results_tx,
            results,
        };
        let task = Background::spawn(|stop| run.run(first, stop));
        Ok(WorkerHandle { task, events, events_tx })
    }
}

/// Something the worker did; [`WorkerHandle::next_event`] delivers them in order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerEvent {
    /// A new socket was made and READY sent (queued until the connection is up).
    Ready {
        /// The socket's routing id (as the queue sees it).
        identity: Bytes,
    },
    /// The connection was re-established underneath; the conversation restarted with READY.
    Restarted {
        /// The socket's routing id.
        identity: Bytes,
    },
    /// A HEARTBEAT arrived from the queue.
    HeartbeatReceived,
    /// A HEARTBEAT was sent to the queue (`busy`: a request was in progress).
    HeartbeatSent {
        /// Whether a request was being handled at the time.
        busy: bool,
    },
    /// A request arrived.
    RequestReceived,
    /// A reply was sent.
    ReplySent,
    /// A request in progress was abandoned (queue lost, conversation restarted, or handler panic).
    RequestAbandoned,
    /// The queue was silent for `liveness × interval`.
    QueueSilent,
    /// Waiting this long before reconnecting (doubles each time, up to `reconnect_max`; reset by
    /// any message from the queue).
    Reconnecting {
        /// The backoff delay.
        delay: Duration,
    },
    /// A malformed message from the queue was dropped.
    Malformed(ProtocolError),
    /// The connection's security handshake failed (with CURVE, typically the wrong server key:
    /// the queue closes the connection; or this worker's key is not on its allow list). zmtp retries
    /// the connection; READY stays queued until a handshake succeeds.
    HandshakeFailed {
        /// Why, as the connection reported it.
        reason: String,
    },
}

/// A running worker. Dropping the handle stops the worker too.
#[derive(Debug)]
pub struct WorkerHandle {
    task: Background<()>,
    events: Events<WorkerEvent>,
    events_tx: broadcast::Sender<WorkerEvent>,
}

impl WorkerHandle {
    /// The next event since the worker started (if more than 1024 are unread, the oldest are
    /// skipped); `None` once it has stopped.
    pub async fn next_event(&mut self) -> Option<WorkerEvent> {
        self.events.next().await
    }

    /// An independent receiver of the events from now on.
    pub fn subscribe(&self) -> Events<WorkerEvent> {
        Events::subscribe(&self.events_tx)
    }

    /// True once the worker task has ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the worker (abandoning a request in progress) and waits for it.
    pub async fn close(self) {
        self.task.close().await;
    }
}

/// One socket's lifetime: from READY to silence.
struct Connection {
    socket: Socket,
    monitor: zmtp::Monitor,
    identity: Bytes,
    handshakes: u32,
    /// Handshake failures on this socket (the first is logged at `warn`, the rest at `debug`).
    failures: u32,
}

impl Connection {
    async fn open(endpoint: &str, security: &Security) -> zmtp::Result<Connection> {
        let socket = Socket::new(SocketType::Dealer);
        socket.set_linger(Some(Duration::ZERO));
        socket.set_security(security);
        let identity = Bytes::from(format!("{:04X}-{:04X}", rand::random::<u16>(), rand::random::<u16>()));
        socket.set_routing_id(identity.clone())?;
        let monitor = socket.monitor();
        socket.connect(endpoint).await?;
        // A connect-side DEALER queues messages until the connection is up: READY goes first.
        socket.try_send(Command::Ready.message())?;
        Ok(Connection { socket, monitor, identity, handshakes: 0, failures: 0 })
    }
}

/// The request being handled: its envelope, its task, and its generation (results from abandoned
/// generations are ignored).
struct Job {
    envelope: Envelope,
    task: JoinHandle<()>,
    generation: u64,
}

/// Requests received while busy. The PPP queue never sends a second request before the reply,
/// but a flawed one (like the Guide's) can; they are served in order.
const MAX_BACKLOG: usize = 64;

struct Run<H> {
    config: Worker,
    liveness_span: Duration,
    handler: Arc<H>,
    events: broadcast::Sender<WorkerEvent>,
    job: Option<Job>,
    generation: u64,
    backlog: VecDeque<(Envelope, Message)>,
    results_tx: mpsc::UnboundedSender<(u64, Option<Message>)>,
    results: mpsc::UnboundedReceiver<(u64, Option<Message>)>,
}

/// How a connection ended.
enum End {
    Stop,
    Silent,
}

impl<H: Handler> Run<H> {
    fn emit(&self, event: WorkerEvent) {
        let _ = self.events.send(event);
    }

    async fn run(mut self, first: Connection, mut stop: StopSignal) {
        let mut backoff = self.config.reconnect_init;
        let mut conn = Some(first);
        loop {
            let c = match conn.take() {
                Some(c) => c,
                None => match Connection::open(&self.config.endpoint, &self.config.security).await {
                    Ok(c) => c,
                    Err(e) => {
                        // Cannot happen for an endpoint that worked once; stop rather than spin.
                        tracing::error!(error = %e, "cannot reconnect; worker stopping");
                        return;
                    }
                },
            };
            tracing::info!(identity = %display_id(&c.identity), endpoint = %self.config.endpoint, "worker ready");
            self.emit(WorkerEvent::Ready { identity: c.identity.clone() });
            match self.converse(c, &mut stop, &mut backoff).await {
                End::Stop => {
                    self.abandon();
                    return;
                }
                End::Silent => {}
            }
            self.abandon();
            tracing::warn!(
                silent_ms = self.liveness_span.as_millis() as u64,
                backoff_ms = backoff.as_millis() as u64,
                "heartbeat failure: queue silent; reconnecting after backoff"
            );
            self.emit(WorkerEvent::QueueSilent);
            self.emit(WorkerEvent::Reconnecting { delay: backoff });
            tokio::select! {
                _ = &mut stop => return,
                () = sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(self.config.reconnect_max.max(self.config.reconnect_init));
        }
    }

    /// Runs one socket until the queue falls silent or the worker is stopped.
    async fn converse(&mut self, mut c: Connection, stop: &mut StopSignal, backoff: &mut Duration) -> End {
        let interval = self.config.interval;
        let mut deadline = Instant::now() + self.liveness_span;
        let mut next_heartbeat = Instant::now() + interval;
        let mut monitor_open = true;
        loop {
            let wake = deadline.min(next_heartbeat);
            tokio::select! {
                _ = &mut *stop => return End::Stop,
                r = c.socket.recv() => {
                    let Ok(msg) = r else { return End::Stop };
                    deadline = Instant::now() + self.liveness_span;
                    *backoff = self.config.reconnect_init;
                    self.on_message(msg);
                }
                Some((generation, reply)) = self.results.recv() => self.on_result(&c.socket, generation, reply),
                ev = c.monitor.next_event(), if monitor_open => match ev {
                    Some(MonitorEvent::HandshakeSucceeded { .. }) => {
                        c.handshakes += 1;
                        if c.handshakes > 1 {
                            // A new connection may be a new queue that has never heard of us.
                            tracing::info!(identity = %display_id(&c.identity), "reconnected; restarting the conversation with READY");
                            self.abandon();
                            let _ = c.socket.try_send(Command::Ready.message());
                            self.emit(WorkerEvent::Restarted { identity: c.identity.clone() });
                        }
                    }
                    Some(MonitorEvent::HandshakeFailed { endpoint, error, .. }) => {
                        c.failures += 1;
                        let reason = error.to_string();
                        if c.failures == 1 {
                            tracing::warn!(identity = %display_id(&c.identity), %endpoint, %reason, "security handshake with the queue failed (wrong server key or credentials?); retrying");
                        } else {
                            tracing::debug!(identity = %display_id(&c.identity), %endpoint, %reason, "security handshake with the queue failed");
                        }
                        self.emit(WorkerEvent::HandshakeFailed { reason });
                    }
                    Some(_) => {}
                    None => monitor_open = false,
                },
                () = sleep_until(wake) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return End::Silent;
                    }
                    if now >= next_heartbeat {
                        // Never blocks: if the queue is not reading, heartbeats are simply not queued.
                        let _ = c.socket.try_send(Command::Heartbeat.message());
                        self.emit(WorkerEvent::HeartbeatSent { busy: self.job.is_some() });
                        next_heartbeat += interval;
                        if next_heartbeat <= now {
                            next_heartbeat = now + interval;
                        }
                    }
                }
            }
        }
    }

    fn on_message(&mut self, msg: Message) {
        if msg.len() == 1 {
            match Command::parse(&msg) {
                Ok(Command::Heartbeat) => self.emit(WorkerEvent::HeartbeatReceived),
                Ok(Command::Ready) => {
                    tracing::warn!("READY from the queue ignored (only workers send READY)");
                }
                Err(error) => self.malformed(error),
            }
            return;
        }
        match Envelope::split(msg) {
            Ok((envelope, content)) => {
                self.emit(WorkerEvent::RequestReceived);
                if self.job.is_none() {
                    self.start(envelope, content);
                } else if self.backlog.len() < MAX_BACKLOG {
                    tracing::warn!("request received while busy (queue does not follow PPP); queued");
                    self.backlog.push_back((envelope, content));
                } else {
                    tracing::warn!("request received while busy and backlog full; dropped");
                }
            }
            Err(error) => self.malformed(error),
        }
    }

    fn malformed(&self, error: ProtocolError) {
        if let Some(suppressed) = zmtp::throttle::allow("ppp worker: malformed message") {
            tracing::warn!(%error, suppressed, "malformed message from the queue dropped");
        }
        self.emit(WorkerEvent::Malformed(error));
    }

    fn start(&mut self, envelope: Envelope, content: Message) {
        self.generation += 1;
        let generation = self.generation;
        let handler = self.handler.clone();
        let results = self.results_tx.clone();
        let task = tokio::spawn(async move {
            let reply = AssertUnwindSafe(handler.handle(content)).catch_unwind().await.ok();
            let _ = results.send((generation, reply));
        });
        self.job = Some(Job { envelope, task, generation });
    }

    fn on_result(&mut self, socket: &Socket, generation: u64, reply: Option<Message>) {
        let Some(job) = self.job.take_if(|j| j.generation == generation) else {
            return; // from an abandoned request
        };
        match reply {
            Some(mut reply) => {
                if reply.is_empty() {
                    // Content has at least one frame; an empty reply becomes one empty frame.
                    reply.push(Bytes::new());
                }
                match socket.try_send(job.envelope.wrap(reply)) {
                    Ok(()) => self.emit(WorkerEvent::ReplySent),
                    Err(e) => tracing::warn!(error = %e, "reply could not be queued; dropped"),
                }
            }
            None => {
                tracing::error!("handler panicked; restarting the conversation so the queue re-dispatches the request");
                self.abandon();
                let _ = socket.try_send(Command::Ready.message());
                self.emit(WorkerEvent::RequestAbandoned);
                return;
            }
        }
        if let Some((envelope, content)) = self.backlog.pop_front() {
            self.start(envelope, content);
        }
    }

    /// Drops the request in progress and any backlog.
    fn abandon(&mut self) {
        self.backlog.clear();
        if let Some(job) = self.job.take() {
            job.task.abort();
            self.emit(WorkerEvent::RequestAbandoned);
        }
    }
}
