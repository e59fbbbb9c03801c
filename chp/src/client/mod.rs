//! The CHP client: a [`Client`] handle backed by an agent task that keeps a replica of the server's
//! map (or of one subtree of it) in sync.
//!
//! The agent does the spec's state synchronisation, with the reference's known holes closed:
//!
//! 1. It subscribes (SUB to P+1: the subtree, then — once connected — `HUGZ`) and, at the same
//!    time, sends ICANHAZ? (DEALER to P), as the reference client does: a one-shot `get` answers in
//!    one round trip, without waiting for a first published message (up to a HUGZ interval).
//! 2. It stores the KVSYNCs and queues the KVPUBs that arrive meanwhile. On KTHXBAI it replaces
//!    its map with the snapshot, applies the queued updates whose sequence is above the KTHXBAI's,
//!    and from then on every KVPUB with a higher sequence.
//! 3. Asking before the subscription is live opens the race of zguide issue #818 (an update
//!    published after the snapshot but before the server had the subscription is in neither), so
//!    the snapshot counts as exact only once the subscriber's first message proves it: a KVPUB
//!    numbered at most the KTHXBAI's sequence + 1, or a HUGZ the server sent at or before that
//!    sequence (ours and the Guide's servers put their sequence in HUGZ). Anything else (a HUGZ
//!    with a later sequence or none, a later KVPUB) and the client asks once more, on a fresh snapshot socket, now that the subscription is live;
//!    the second snapshot replaces the first (changes reported as events) and is exact. Until
//!    then the status is [`Status::Loaded`]: [`Client::loaded`] returns (what a one-shot read
//!    needs), [`Client::synced`] waits for [`Status::Active`] (what a watcher needs).
//! 4. A skipped sequence (whole-map clients only; a subtree client sees only some sequences) means
//!    updates were lost: per [`GapPolicy`] it re-syncs or fails. A sequence going backwards means a
//!    restarted server: it re-syncs. Silence (no HUGZ) for [`ClientOptions::server_ttl`], or a
//!    dropped connection, means the server is lost: it starts over with the next server in
//!    [`ClientOptions::servers`] (with fresh sockets, so nothing stale from the old one arrives).
//!    A server whose ports refuse the connection is passed over at once, not after the server ttl
//!    (the normal state of the first server of a pair after a failover); once every server in the
//!    list was unreachable in a row, the next round waits 100 ms, doubling up to the server ttl.
//!    A refused handshake (a wrong CURVE key, say) counts as a loss too, and once every server
//!    refused the client fails (see [`ClientOptions::curve`]).
//!
//! Every KVSET carries a fresh UUID. [`Client::set`] waits until the server has republished the
//! update (matched by UUID), retransmitting the same KVSET if no echo arrives, so a returned `set`
//! is in the map; keys outside the client's subtree cannot be echoed and are sent once.
//!
//! A confirmed write survives the loss of the server that confirmed it: a pair server killed between
//! echoing a KVSET to its clients and passing it to its peer leaves the new active without it, so after
//! a failover the client sends again its writes of the last few [`ClientOptions::server_ttl`]s that
//! the new snapshot shows as never applied (the key still holds what it held before them; a key
//! changed by someone else since is left alone).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use chp::{Client, Event, server::{Server, ServerConfig}};
//!
//! let server = Server::bind(ServerConfig { bind: "127.0.0.1".into(), ..ServerConfig::default() }).await?;
//! let client = Client::connect(&server.address().to_string()).await?; // in sync when it returns
//! let mut events = client.events();
//! let sequence = client.set("/config/color", "blue", None).await?;
//! assert_eq!(sequence, Some(1));
//! assert_eq!(client.get("/config/color").as_deref(), Some(&b"blue"[..]));
//! assert_eq!(
//!     events.next().await,
//!     Some(Event::Set { key: "/config/color".into(), value: "blue".into(), sequence: 1 })
//! );
//! client.delete("/config/color").await?;
//! assert!(client.get("/config/color").is_none());
//! # Ok(()) }
//! ```

mod agent;
mod attempt;
mod failure;
mod outbox;
mod proof;
mod recent;
pub(crate) mod replica;
mod sync;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::ReusableBoxFuture;

use self::replica::Replica;
use crate::address::{AddressError, ServerAddress};
use crate::command::{Subtree, is_reserved_key};
use crate::kvmsg::{KvMsg, check_key};
use crate::security::ClientCurve;

pub use self::failure::{Failure, Refusal, RefusalKind, ServerLoss};

/// What to do when a whole-map client detects a skipped sequence (lost updates).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GapPolicy {
    /// Report [`Event::Gap`] and re-sync from a fresh snapshot (default).
    #[default]
    Resync,
    /// Report [`Event::Gap`] and stop: [`Status::Failed`], every later call fails.
    Fail,
}

/// Client settings. [`ClientOptions::new`] gives the defaults for one server.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Servers to use, in order; on server loss the agent moves to the next (wrapping around).
    pub servers: Vec<ServerAddress>,
    /// The part of the map to replicate (and to subscribe to). Default: all of it.
    pub subtree: Subtree,
    /// A server silent for this long (no HUGZ, no update) is considered lost. Must exceed the
    /// server's HUGZ interval. Default 5 s.
    pub server_ttl: Duration,
    /// Reaction to a sequence gap. Default [`GapPolicy::Resync`].
    pub gap_policy: GapPolicy,
    /// Retransmit a KVSET whose echo has not arrived after this long. Default 1 s.
    pub set_retry: Duration,
    /// [`Client::set`] fails with [`ClientError::SetTimeout`] after this long. Default 10 s.
    pub set_timeout: Duration,
    /// Events buffered per [`Events`] receiver before it lags (the buffer is allocated up front,
    /// about 100 bytes per event). Default 4096.
    pub event_capacity: usize,
    /// Socket queue limit (subscriber receive, publisher send), in messages. Default 100 000.
    pub queue_limit: usize,
    /// CURVE (see [`ClientCurve`]): every socket to a server is a CURVE client of it. `None` (the
    /// default): no security.
    ///
    /// A server that refuses the handshake (with or without CURVE) — authentication failed (this
    /// client's key is not on its allow list), CURVE on one side only, another protocol error
    /// during the handshake (not a ZMTP server, a wrong socket type), or the server closing the
    /// connection during the handshake twice in a row on one socket (a CURVE server that cannot
    /// decrypt our HELLO: a wrong server key) — is reported as [`Event::ServerLost`] with reason
    /// `refused: …`, and the next server is tried; once every server of the list has refused
    /// since the last sync, the client fails ([`Status::Failed`] with [`Failure::Refused`], whose
    /// [`Refusal`] names the endpoint, the connection error and its likely meaning as a
    /// [`RefusalKind`]; shown as `refused by the server: …` or `refused by every server: …`),
    /// since retrying would not help.
    pub curve: Option<ClientCurve>,
}

impl ClientOptions {
    /// Defaults for one server at `tcp://host:P`.
    pub fn new(server: &str) -> Result<ClientOptions, AddressError> {
        Ok(ClientOptions::for_servers(vec![server.parse()?]))
    }

    /// Defaults for a list of servers.
    pub fn for_servers(servers: Vec<ServerAddress>) -> ClientOptions {
        ClientOptions {
            servers,
            subtree: Subtree::all(),
            server_ttl: Duration::from_secs(5),
            gap_policy: GapPolicy::Resync,
            set_retry: Duration::from_secs(1),
            set_timeout: Duration::from_secs(10),
            event_capacity: 4096,
            queue_limit: 100_000,
            curve: None,
        }
    }

    /// Sets the subtree.
    pub fn subtree(mut self, subtree: Subtree) -> Self {
        self.subtree = subtree;
        self
    }

    /// Sets the server ttl.
    pub fn server_ttl(mut self, ttl: Duration) -> Self {
        self.server_ttl = ttl;
        self
    }

    /// Sets the gap policy.
    pub fn gap_policy(mut self, policy: GapPolicy) -> Self {
        self.gap_policy = policy;
        self
    }

    /// Connects over CURVE.
    pub fn curve(mut self, curve: ClientCurve) -> Self {
        self.curve = Some(curve);
        self
    }

    /// Sets the KVSET retransmit interval and the `set` timeout.
    pub fn set_timing(mut self, retry: Duration, timeout: Duration) -> Self {
        self.set_retry = retry;
        self.set_timeout = timeout;
        self
    }
}

/// Errors from the client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No server address given.
    #[error("no server to connect to")]
    NoServers,
    /// A bad server address.
    #[error(transparent)]
    Address(#[from] AddressError),
    /// CURVE is on but the public key of this server is not known (see [`ClientCurve`]).
    #[error("no CURVE server key for {0}")]
    NoServerKey(ServerAddress),
    /// The key cannot be set (empty, too long, or reserved).
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The key (lossy UTF-8).
        key: String,
        /// Why.
        reason: String,
    },
    /// The server did not republish the update within [`ClientOptions::set_timeout`].
    #[error("no confirmation from the server for {key:?} within {timeout:?}")]
    SetTimeout {
        /// The key (lossy UTF-8).
        key: String,
        /// The timeout.
        timeout: Duration,
    },
    /// [`Client::set`] of a key outside the client's subtree: the client does not receive that
    /// part of the map, so it could never see the server confirm the update.
    #[error("key {key:?} is outside this client's subtree {subtree:?}")]
    OutsideSubtree {
        /// The key (lossy UTF-8).
        key: String,
        /// The client's subtree (lossy UTF-8).
        subtree: String,
    },
    /// No server brought the client in sync within the time given to
    /// [`Client::connect`] or [`Client::synced_within`] (none running there, or unreachable).
    #[error("no CHP server brought the client in sync within {0:?}")]
    NotSynced(Duration),
    /// The client stopped for good: a gap under [`GapPolicy::Fail`], or every server refused it.
    #[error("client failed: {0}")]
    Failed(Failure),
    /// The client was closed.
    #[error("client closed")]
    Closed,
}

/// A change seen by the client, in the order it was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `key` now has `value`. `sequence` is the KVPUB's, or the snapshot's for a change found by a
    /// (re)synchronisation.
    Set {
        /// The key.
        key: Bytes,
        /// The new value.
        value: Bytes,
        /// Sequence.
        sequence: u64,
    },
    /// `key` was deleted (by a client, by its ttl, or — at a re-sync — absent from the snapshot).
    Deleted {
        /// The key.
        key: Bytes,
        /// Sequence.
        sequence: u64,
    },
    /// A (re)synchronisation finished: the map equals the server's as of `sequence`.
    Synced {
        /// The server.
        server: ServerAddress,
        /// KTHXBAI's sequence.
        sequence: u64,
        /// Keys in the map.
        keys: usize,
    },
    /// The client moved to another server after losing the one it was in sync with (a
    /// high-availability pair's failover) and is in sync again: its map was *replaced* by the
    /// new server's (the differences came just before as [`Event::Set`] / [`Event::Deleted`],
    /// then [`Event::Synced`], then this).
    Failover {
        /// The server lost.
        from: ServerAddress,
        /// The server now in use.
        to: ServerAddress,
        /// The new snapshot's sequence.
        sequence: u64,
        /// Keys in the map now.
        keys: usize,
        /// From the last message of the old server to the end of the new snapshot: the failover
        /// time as this client saw it (detection included).
        outage: Duration,
    },
    /// The server was lost (silent, disconnected, or inconsistent); the agent starts over.
    ServerLost {
        /// The server.
        server: ServerAddress,
        /// Why (its `Display` is the line a log or a CLI shows).
        reason: ServerLoss,
    },
    /// Updates were lost: the sequence jumped from `expected - 1` to `got`.
    Gap {
        /// The sequence that should have come.
        expected: u64,
        /// The sequence that came.
        got: u64,
    },
    /// This receiver fell behind and `missed` events were dropped for it (never sent by the agent).
    Lagged {
        /// How many.
        missed: u64,
    },
}

/// Where the agent is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Connecting to `server` and proving the subscription live.
    Connecting(ServerAddress),
    /// Receiving a snapshot from `server`.
    Syncing(ServerAddress),
    /// Holding a snapshot from `server` that is not yet proven exact (it was asked for before the
    /// subscription was live; see the module docs): the map is served and sets go out, and the
    /// client becomes [`Active`](Status::Active) once its subscription proves live (or after one
    /// more snapshot). [`Client::loaded`] waits for this, [`Client::synced`] for `Active`.
    Loaded(ServerAddress),
    /// In sync with `server`, applying its updates.
    Active(ServerAddress),
    /// Stopped after an unrecoverable error.
    Failed(Failure),
    /// Closed.
    Closed,
}

/// A copy of the replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Sequence of the last update applied (or of the snapshot, if none since).
    pub sequence: u64,
    /// Key → value.
    pub map: BTreeMap<Bytes, Bytes>,
}

/// A receiver of [`Event`]s, and a `Stream` of them (`Unpin`: no `pin!` needed). Each receiver gets
/// every event from its creation on; one that falls [`ClientOptions::event_capacity`] events
/// behind receives [`Event::Lagged`]. It ends once the client has closed and every event was read.
pub struct Events {
    /// The receive in progress: it owns the receiver and hands it back with each event, so a
    /// receive can be polled again after a cancelled `next()` without losing its place.
    next: ReusableBoxFuture<'static, Received>,
    ended: bool,
}

type Received = (Result<Event, broadcast::error::RecvError>, broadcast::Receiver<Event>);

async fn receive(mut rx: broadcast::Receiver<Event>) -> Received {
    let event = rx.recv().await;
    (event, rx)
}

impl Events {
    fn new(rx: broadcast::Receiver<Event>) -> Events {
        Events { next: ReusableBoxFuture::new(receive(rx)), ended: false }
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let (event, rx) = std::task::ready!(self.next.poll(cx));
        self.next.set(receive(rx));
        Poll::Ready(match event {
            Ok(e) => Some(e),
            Err(broadcast::error::RecvError::Lagged(missed)) => Some(Event::Lagged { missed }),
            Err(broadcast::error::RecvError::Closed) => {
                self.ended = true;
                None
            }
        })
    }

    /// The next event; `None` once the client has closed and every event was read. Cancel-safe:
    /// an event is taken only when this returns it.
    pub async fn next(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// The next event if one is ready.
    pub fn try_next(&mut self) -> Option<Event> {
        match self.poll_event(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(event) => event,
            Poll::Pending => None,
        }
    }

    /// As a `Stream` (it is one already; kept for code written before it was).
    pub fn into_stream(self) -> Self {
        self
    }
}

impl Stream for Events {
    type Item = Event;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.get_mut().poll_event(cx)
    }
}

/// State shared by the handle and the agent.
struct Shared {
    replica: RwLock<Replica>,
    /// Never read: kept to make new receivers.
    events: Mutex<broadcast::Receiver<Event>>,
    /// The writes in flight.
    outbox: outbox::Outbox,
}

impl Shared {
    /// The shared state, and the sender of events the agent takes.
    fn new(event_capacity: usize, set_timeout: Duration) -> (Arc<Shared>, broadcast::Sender<Event>) {
        let (events_tx, events_rx) = broadcast::channel(event_capacity.max(16));
        let outbox = outbox::Outbox::new(set_timeout);
        (Arc::new(Shared { replica: RwLock::default(), events: Mutex::new(events_rx), outbox }), events_tx)
    }

    fn replica(&self) -> std::sync::RwLockReadGuard<'_, Replica> {
        self.replica.read().unwrap_or_else(|e| e.into_inner())
    }

    fn replica_mut(&self) -> std::sync::RwLockWriteGuard<'_, Replica> {
        self.replica.write().unwrap_or_else(|e| e.into_inner())
    }

    fn subscribe(&self) -> Events {
        Events::new(self.events.lock().unwrap_or_else(|e| e.into_inner()).resubscribe())
    }
}

/// True when a user holds a receiver of the agent's `events`: more receivers than the one
/// [`Shared`] keeps (never read). Asked under the replica's write lock, it cannot race a
/// [`Client::watch`], which subscribes under the read lock. (It used to compare with 0, so the
/// kept receiver counted as a listener and a million-key sync built a million events nobody
/// would read.)
fn listened(events: &broadcast::Sender<Event>) -> bool {
    events.receiver_count() > 1
}

enum Command {
    Set { msg: KvMsg, reply: oneshot::Sender<Result<Option<u64>, ClientError>> },
}

/// How long [`Client::connect`] waits for a server to bring the client in sync.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A CHP client (see the [module docs](self)). Cheap to clone; the agent stops when the last clone
/// is dropped or [`close`](Client::close)d.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    commands: mpsc::Sender<Command>,
    status: watch::Receiver<Status>,
    subtree: Subtree,
    /// Set to true (or dropped) to stop the agent.
    close: watch::Sender<bool>,
    agent: Mutex<Option<JoinHandle<()>>>,
}

impl Client {
    /// A client of the whole map of the server at `tcp://host:P`, with default options, returned
    /// once it is in sync with the server ([`synced`](Self::synced)); fails with
    /// [`ClientError::NotSynced`] after [`CONNECT_TIMEOUT`] (no server there, or unreachable).
    /// For other options, or to return at once, use [`start`](Self::start).
    pub async fn connect(server: &str) -> Result<Client, ClientError> {
        let client = Client::start(ClientOptions::new(server)?)?;
        client.synced_within(CONNECT_TIMEOUT).await?;
        Ok(client)
    }

    /// Starts a client with `options` and returns at once: the agent syncs in the background (see
    /// [`synced`](Self::synced) / [`synced_within`](Self::synced_within)). Must be called inside a
    /// tokio runtime.
    pub fn start(options: ClientOptions) -> Result<Client, ClientError> {
        if options.servers.is_empty() {
            return Err(ClientError::NoServers);
        }
        if let Some(curve) = &options.curve
            && let Some(server) = options.servers.iter().find(|s| curve.key_of(s).is_none())
        {
            return Err(ClientError::NoServerKey(server.clone()));
        }
        let (shared, events_tx) = Shared::new(options.event_capacity, options.set_timeout);
        let (commands, commands_rx) = mpsc::channel(1024);
        let (status_tx, status) = watch::channel(Status::Connecting(options.servers[0].clone()));
        let (close, close_rx) = watch::channel(false);
        let subtree = options.subtree.clone();
        let agent = agent::Agent::new(options, shared.clone(), events_tx, status_tx, commands_rx, close_rx);
        let task = tokio::spawn(agent.run());
        let agent = Mutex::new(Some(task));
        Ok(Client { inner: Arc::new(Inner { shared, commands, status, subtree, close, agent }) })
    }

    /// The replicated subtree.
    pub fn subtree(&self) -> &Subtree {
        &self.inner.subtree
    }

    /// Current status.
    pub fn status(&self) -> Status {
        self.inner.status.borrow().clone()
    }

    /// Waits until the client holds a snapshot, exact or not yet proven so ([`Status::Loaded`]):
    /// what a one-shot read needs (it answers as of that snapshot, without waiting for the
    /// server's first publication). Returns the sequence.
    pub async fn loaded(&self) -> Result<u64, ClientError> {
        let mut status = self.inner.status.clone();
        let s = status
            .wait_for(|s| matches!(s, Status::Loaded(_) | Status::Active(_) | Status::Failed(_) | Status::Closed))
            .await
            .map_err(|_| ClientError::Closed)?
            .clone();
        match s {
            Status::Loaded(_) | Status::Active(_) => Ok(self.sequence()),
            Status::Failed(why) => Err(ClientError::Failed(why)),
            _ => Err(ClientError::Closed),
        }
    }

    /// Waits until the replica is in sync with a server, its snapshot proven exact
    /// ([`Status::Active`]); returns the sequence then. Events from here on come exactly once, in
    /// sequence order. With no server answering this waits as long as the client keeps trying:
    /// bound it with [`synced_within`](Self::synced_within) (or `tokio::time::timeout`).
    pub async fn synced(&self) -> Result<u64, ClientError> {
        let mut status = self.inner.status.clone();
        let s = status
            .wait_for(|s| matches!(s, Status::Active(_) | Status::Failed(_) | Status::Closed))
            .await
            .map_err(|_| ClientError::Closed)?
            .clone();
        match s {
            Status::Active(_) => Ok(self.sequence()),
            Status::Failed(why) => Err(ClientError::Failed(why)),
            _ => Err(ClientError::Closed),
        }
    }

    /// [`synced`](Self::synced), giving up after `timeout` with [`ClientError::NotSynced`] (the
    /// client keeps trying in the background; call again to wait more).
    pub async fn synced_within(&self, timeout: Duration) -> Result<u64, ClientError> {
        tokio::time::timeout(timeout, self.synced()).await.unwrap_or(Err(ClientError::NotSynced(timeout)))
    }

    /// A stream of status changes.
    pub fn status_watch(&self) -> watch::Receiver<Status> {
        self.inner.status.clone()
    }

    /// The replica's value of `key` (as last received; see [`status`](Self::status)).
    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<Bytes> {
        self.inner.shared.replica().map.get(key.as_ref()).cloned()
    }

    /// Number of keys in the replica.
    pub fn len(&self) -> usize {
        self.inner.shared.replica().map.len()
    }

    /// True when the replica is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sequence of the last update applied.
    pub fn sequence(&self) -> u64 {
        self.inner.shared.replica().sequence
    }

    /// A copy of the replica.
    pub fn snapshot(&self) -> Snapshot {
        let r = self.inner.shared.replica();
        Snapshot { sequence: r.sequence, map: r.map.clone() }
    }

    /// Events from now on.
    pub fn events(&self) -> Events {
        self.inner.shared.subscribe()
    }

    /// A copy of the replica and the events after it, taken atomically: applying the events in
    /// order to the snapshot tracks the replica exactly.
    pub fn watch(&self) -> (Snapshot, Events) {
        let r = self.inner.shared.replica();
        let events = self.inner.shared.subscribe();
        (Snapshot { sequence: r.sequence, map: r.map.clone() }, events)
    }

    /// Sets `key` to `value` (an empty value deletes), with an optional time to live. Waits until
    /// the server has republished it and returns its sequence. A key outside this client's subtree
    /// is refused ([`ClientError::OutsideSubtree`]): the client could never see it confirmed. Sets
    /// are held until the agent is in sync with a server, and fail after
    /// [`ClientOptions::set_timeout`].
    ///
    /// The result is an `Option` for compatibility; it is `Some` whenever it is `Ok`.
    ///
    /// One `set` waits a round trip to the server; to write faster, have many in flight:
    /// [`submit`](Self::submit) or [`set_many`](Self::set_many).
    pub async fn set(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        ttl: Option<Duration>,
    ) -> Result<Option<u64>, ClientError> {
        self.submit(key, value, ttl).await?.await.map(Some)
    }

    /// Submits a write and returns once it is on its way (it waits only while the agent has 1024
    /// writes queued): while the client is in sync it is sent from this call (no hand-off to the
    /// agent's task), else the agent sends it once in sync; the returned
    /// [`Confirmation`] resolves when the server has republished it, as [`set`](Self::set)
    /// returns. Writes submitted one after another are sent in that order and so sequenced in it
    /// (by one server; a failover can resend some). After each new connection to a collector,
    /// one write goes out alone until its echo shows the server's subscription has reached our
    /// PUB (which drops what it sends before that, ZeroMQ's slow joiner); the writes behind it
    /// follow in order. Pipelining this way, one client writes as fast as the server applies,
    /// not one round trip per write.
    ///
    /// **Cancel safety:** dropping this future before it returns has not submitted the write
    /// (it only awaits a place in the agent's queue, before anything is sent); dropping the
    /// [`Confirmation`] does not withdraw it (it is still sent and retransmitted), only its
    /// answer is lost.
    ///
    /// ```no_run
    /// # async fn demo(client: chp::Client) -> Result<(), chp::ClientError> {
    /// let mut confirmations = Vec::new();
    /// for i in 0..1000 {
    ///     confirmations.push(client.submit(format!("/sensor/{i}"), "42", None).await?);
    /// }
    /// for confirmation in confirmations {
    ///     let sequence = confirmation.await?; // in order: each sequence is above the last
    ///     assert!(sequence > 0);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn submit(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
        ttl: Option<Duration>,
    ) -> Result<Confirmation, ClientError> {
        let mut msg = KvMsg::new(key, value);
        check_settable(&msg.key)?;
        if !self.inner.subtree.contains(&msg.key) {
            return Err(ClientError::OutsideSubtree {
                key: String::from_utf8_lossy(&msg.key).into_owned(),
                subtree: String::from_utf8_lossy(self.inner.subtree.as_bytes()).into_owned(),
            });
        }
        msg.uuid = Some(crate::uuid::Uuid::new_v4());
        if let Some(ttl) = ttl.filter(|t| !t.is_zero()) {
            msg.properties.insert("ttl", format_ttl(ttl)).expect("ttl encodes");
        }
        let (reply, rx) = oneshot::channel();
        // A place in the agent's channel first (the only await, so cancelling it does nothing),
        // then the write goes the direct way or into that place.
        let place = self.inner.commands.reserve().await.map_err(|_| self.stopped())?;
        if let outbox::Submitted::Queue(msg, reply) = self.inner.shared.outbox.submit(msg, reply) {
            place.send(Command::Set { msg, reply });
        }
        Ok(Confirmation { reply: rx, client: self.clone() })
    }

    /// Writes every `(key, value)` pair (no ttl), all in flight at once, and returns their
    /// sequences in the same order; the first failure is returned once every write has been
    /// answered. A pair [`submit`](Self::submit) refuses (a key outside the subtree, say) fails
    /// the call at once; the pairs before it were submitted and still go out. `submit` is the
    /// same with a window of the caller's choosing.
    pub async fn set_many<K, V>(&self, writes: impl IntoIterator<Item = (K, V)>) -> Result<Vec<u64>, ClientError>
    where
        K: Into<Bytes>,
        V: Into<Bytes>,
    {
        let mut confirmations = Vec::new();
        for (key, value) in writes {
            confirmations.push(self.submit(key, value, None).await?);
        }
        let mut sequences = Vec::with_capacity(confirmations.len());
        let mut failure = None;
        for confirmation in confirmations {
            match confirmation.await {
                Ok(sequence) => sequences.push(sequence),
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        failure.map_or(Ok(sequences), Err)
    }

    /// Deletes `key` (a set with an empty value).
    pub async fn delete(&self, key: impl Into<Bytes>) -> Result<Option<u64>, ClientError> {
        self.set(key, Bytes::new(), None).await
    }

    fn stopped(&self) -> ClientError {
        match self.status() {
            Status::Failed(why) => ClientError::Failed(why),
            _ => ClientError::Closed,
        }
    }

    /// Stops the agent (pending sets fail with [`ClientError::Closed`]) and waits for it, after
    /// flushing KVSETs already sent (up to 1 s).
    pub async fn close(self) {
        let _ = self.inner.close.send(true);
        let task = self.inner.agent.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// A write in flight ([`Client::submit`]): resolves to the sequence the server gave it once it has
/// republished it, or to the error [`Client::set`] would have returned. Polling it is
/// cancel-safe; dropping it does not withdraw the write.
#[must_use = "the write is sent either way; await this to know it was applied"]
pub struct Confirmation {
    reply: oneshot::Receiver<Result<Option<u64>, ClientError>>,
    client: Client,
}

impl std::future::Future for Confirmation {
    type Output = Result<u64, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(match std::task::ready!(Pin::new(&mut self.reply).poll(cx)) {
            Ok(Ok(Some(sequence))) => Ok(sequence),
            // The agent confirms with a sequence; `None` never comes, and is not a success.
            Ok(Ok(None)) => Err(ClientError::Closed),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(self.client.stopped()),
        })
    }
}

impl std::fmt::Debug for Confirmation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirmation").finish_non_exhaustive()
    }
}

fn check_settable(key: &[u8]) -> Result<(), ClientError> {
    let fail = |reason: String| ClientError::InvalidKey { key: String::from_utf8_lossy(key).into_owned(), reason };
    check_key(key).map_err(|e| fail(e.to_string()))?;
    if is_reserved_key(key) {
        return Err(fail("reserved by the protocol".into()));
    }
    Ok(())
}

pub use crate::ttl::format as format_ttl;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settable_keys() {
        assert!(check_settable(b"/a").is_ok());
        assert!(check_settable(b"").is_err());
        assert!(check_settable(b"HUGZ").is_err());
        assert!(check_settable(b"KTHXBAI").is_err());
        assert!(check_settable(&vec![b'x'; crate::kvmsg::MAX_KEY_LEN + 1]).is_err());
    }

    #[test]
    fn only_a_users_receiver_makes_the_events_listened() {
        let (shared, events) = Shared::new(16, Duration::from_secs(1));
        assert!(!listened(&events), "the receiver Shared keeps is not a listener");
        let user = shared.subscribe();
        assert!(listened(&events));
        drop(user);
        assert!(!listened(&events));
    }
}
