//! The public socket: one type for every ZeroMQ pattern, chosen by [`SocketType`].

mod ahead;
mod batch;
mod busy_poll;
mod coop;
pub(crate) mod core;
mod endpoints;
pub(crate) mod inbox;
pub(crate) mod mtrie;
pub(crate) mod pattern;
pub(crate) mod peers;
mod security;
mod subscriptions;

pub use batch::{MessageSink, SINK_BATCH};
pub use security::Security;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;

use self::core::{Core, TrySend};
use self::endpoints::{EndpointHandle, Endpoints};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::security::KeyPair;
use crate::transport::Endpoint;
use crate::wire::{Mechanism, SocketType};

/// A ZeroMQ socket of any type, `Send + Sync`, cheap to clone (clones share the socket).
///
/// Every method takes `&self`, so one socket can be shared between tasks (receive in one, send in
/// another). The socket closes when the last clone is dropped, or explicitly with [`Socket::close`],
/// which also waits (up to LINGER) for queued messages to go out.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> zmtp::Result<()> {
/// use zmtp::{Socket, SocketType};
/// let rep = Socket::new(SocketType::Rep);
/// let endpoint = rep.bind("tcp://127.0.0.1:0").await?;
/// let req = Socket::new(SocketType::Req);
/// req.connect(&endpoint).await?;
/// req.send("hello").await?;
/// let request = rep.recv().await?;
/// rep.send(request).await?;
/// assert_eq!(req.recv().await?[0], "hello");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Socket {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    core: Arc<Core>,
    endpoints: Mutex<Endpoints>,
    last_endpoint: Mutex<Option<String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let linger = self.core.options().linger;
        let _ = close_core(&self.core, &mut self.endpoints.lock().unwrap_or_else(|e| e.into_inner()));
        let core = self.core.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { linger_then_shutdown(&core, linger).await });
            }
            Err(_) => core.shutdown.cancel(),
        }
    }
}

/// Closes the socket's core and stops every endpoint; returns the accept tasks, whose end means their
/// addresses are free again.
fn close_core(core: &Core, endpoints: &mut Endpoints) -> Vec<tokio::task::JoinHandle<()>> {
    core.close();
    endpoints.drain().filter_map(|ep| ep.stop_accepting(core)).collect()
}

async fn linger_then_shutdown(core: &Arc<Core>, linger: Option<Duration>) {
    let flushed = core.wait_connections_done();
    match linger {
        Some(limit) => {
            let _ = tokio::time::timeout(limit, flushed).await;
        }
        None => flushed.await,
    }
    core.shutdown.cancel();
}

macro_rules! option {
    ($(#[$doc:meta])* $get:ident, $set:ident, $field:ident: $ty:ty) => {
        $(#[$doc])*
        pub fn $set(&self, value: $ty) {
            self.inner.core.options().$field = value;
        }
        #[doc = concat!("Current value of the option set by [`Socket::", stringify!($set), "`].")]
        pub fn $get(&self) -> $ty {
            self.inner.core.options().$field.clone()
        }
    };
}

/// A boolean option read on every send: it lives in an atomic of the core (connections never read it),
/// so the send path does not take the options lock.
macro_rules! hot_option {
    ($(#[$doc:meta])* $get:ident, $set:ident, $field:ident) => {
        $(#[$doc])*
        pub fn $set(&self, value: bool) {
            self.inner.core.hot.$field.store(value, std::sync::atomic::Ordering::Relaxed);
        }
        #[doc = concat!("Current value of the option set by [`Socket::", stringify!($set), "`].")]
        pub fn $get(&self) -> bool {
            self.inner.core.hot.$field.load(std::sync::atomic::Ordering::Relaxed)
        }
    };
}

impl Socket {
    /// A new socket of the given type, with libzmq's default options.
    pub fn new(socket_type: SocketType) -> Socket {
        let core = Core::new(socket_type);
        Socket { inner: Arc::new(Inner { core, endpoints: Mutex::default(), last_endpoint: Mutex::default() }) }
    }

    /// The socket's type.
    pub fn socket_type(&self) -> SocketType {
        self.inner.core.socket_type
    }

    /// Binds to an endpoint and returns it as bound, with wildcards resolved
    /// (`tcp://*:0` → `tcp://0.0.0.0:41234`, `ipc://*` → a fresh path).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// let pull = zmtp::Socket::new(zmtp::SocketType::Pull);
    /// let endpoint = pull.bind("tcp://127.0.0.1:*").await?;
    /// assert!(endpoint.starts_with("tcp://127.0.0.1:"));
    /// assert_eq!(pull.last_endpoint().as_deref(), Some(endpoint.as_str()));
    /// # Ok(()) }
    /// ```
    pub async fn bind(&self, endpoint: &str) -> Result<String> {
        let ep: Endpoint = endpoint.parse()?;
        let how = {
            let o = self.inner.core.options();
            crate::transport::BindOptions {
                ipv6: o.ipv6,
                backlog: o.backlog,
                buffers: crate::transport::Buffers::of(&o),
            }
        };
        let (handle, bound) = endpoints::bind(&self.inner.core, &ep, how).await?;
        self.endpoints().insert(handle);
        *self.inner.last_endpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(bound.clone());
        Ok(bound)
    }

    /// Connects to an endpoint. Returns at once: the connection is made (and remade after failures,
    /// per RECONNECT_IVL) in the background, and messages sent meanwhile are queued for it.
    ///
    /// Cancel safety: it completes in its first poll, so a dropped call either did nothing or
    /// connected.
    pub async fn connect(&self, endpoint: &str) -> Result<()> {
        let ep: Endpoint = endpoint.parse()?;
        let handle = endpoints::connect(&self.inner.core, ep, endpoint.to_owned())?;
        self.endpoints().insert(handle);
        *self.inner.last_endpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(endpoint.to_owned());
        Ok(())
    }

    /// Stops listening on an endpoint returned by [`bind`](Self::bind) (connections it accepted close).
    /// When this returns the address is free to bind again.
    pub async fn unbind(&self, endpoint: &str) -> Result<()> {
        self.take_endpoint(endpoint)?.terminate(&self.inner.core).await;
        Ok(())
    }

    /// PEER: connects like [`connect`](Self::connect) and returns the routing id that messages to
    /// this peer carry ([`Message::with_routing_id`]); libzmq's `zmq_connect_peer`. The id is known
    /// at once and kept across reconnects; sends to it wait until the connection is up.
    ///
    /// Cancel safety: like [`connect`](Self::connect) it completes in its first poll (the id is
    /// reserved before the connection exists), so a dropped call either did nothing or connected.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::{Message, Socket, SocketType};
    /// let a = Socket::new(SocketType::Peer);
    /// let endpoint = a.bind("tcp://127.0.0.1:*").await?;
    /// let b = Socket::new(SocketType::Peer);
    /// let to_a = b.connect_peer(&endpoint).await?;
    /// b.send(Message::from("hello").with_routing_id(to_a)).await?;
    /// let hello = a.recv().await?;
    /// a.send(Message::from("hi back").with_routing_id(hello.routing_id().unwrap())).await?;
    /// assert_eq!(b.recv().await?.routing_id(), Some(to_a));
    /// # Ok(()) }
    /// ```
    pub async fn connect_peer(&self, endpoint: &str) -> Result<u32> {
        if self.socket_type() != SocketType::Peer {
            return Err(Error::NotSupported(self.socket_type()));
        }
        if self.immediate() {
            return Err(Error::InvalidArgument("connect_peer needs IMMEDIATE off (libzmq)"));
        }
        self.connect(endpoint).await?;
        let slot = self.endpoints().get(endpoint).and_then(|handle| handle.slot());
        slot.and_then(|slot| self.inner.core.slot_routing_id(slot)).ok_or(Error::InvalidState)
    }

    /// Drops a connection made by [`connect`](Self::connect), with its queued messages.
    ///
    /// A connect that ZMQ_RECONNECT_STOP_CONN_REFUSED ended is no longer an endpoint of the socket:
    /// [`Error::EndpointNotFound`], as in libzmq. One that stopped after a protocol error, or under
    /// RECONNECT_STOP_HANDSHAKE_FAILED or _AFTER_DISCONNECT, still is (libzmq's answer too).
    pub async fn disconnect(&self, endpoint: &str) -> Result<()> {
        let handle = self.take_endpoint(endpoint)?;
        if handle.gave_up() {
            return Err(Error::EndpointNotFound(endpoint.to_owned()));
        }
        self.inner.core.disconnected.store(true, std::sync::atomic::Ordering::Relaxed);
        handle.terminate(&self.inner.core).await;
        Ok(())
    }

    /// ROUTER: closes the connection of the peer with this routing id, freeing what is queued for
    /// it (a peer this socket connected to is reconnected, keeping its queue). Not a libzmq call:
    /// libzmq has no way to drop one ROUTER peer, and a server needs one to shed a client that
    /// stopped reading. Returns false when no peer has that routing id (or the socket is not a
    /// ROUTER).
    pub fn drop_peer(&self, routing_id: &[u8]) -> bool {
        self.inner.core.socket_type == SocketType::Router && self.inner.core.drop_route(routing_id)
    }

    /// ROUTER: waits until everything queued for the peer with this routing id has been written
    /// to its connection (handed to the kernel), so that a sender can bound what it has in
    /// flight across peers, not only per peer: a server streaming large replies to many clients
    /// holds a slot until the reply is out, not merely queued. Not a libzmq call.
    ///
    /// [`Error::HostUnreachable`] when no peer has that id, or it leaves while this waits (what
    /// was queued for it is then gone). Cancel-safe: it takes nothing.
    pub async fn flushed(&self, routing_id: &[u8]) -> Result<()> {
        let core = &self.inner.core;
        let gone = || Error::HostUnreachable(Bytes::copy_from_slice(routing_id));
        if self.inner.core.socket_type != SocketType::Router {
            return Err(gone());
        }
        core.space
            .wait_until(|| match core.route_drained(routing_id) {
                None => Some(Err(gone())),
                Some(true) => Some(Ok(())),
                Some(false) => None,
            })
            .await
    }

    /// SERVER and PEER: closes the connection of the peer with this routing id (libzmq's
    /// `zmq_disconnect_peer`); a peer this socket connected to is reconnected. Returns false when
    /// no peer has that id (or the socket is of another type).
    pub fn disconnect_peer(&self, routing_id: u32) -> bool {
        matches!(self.socket_type(), SocketType::Server | SocketType::Peer)
            && self.inner.core.drop_route(&routing_id.to_be_bytes())
    }

    /// DISH: receive the messages RADIOs send to `group` (an exact name of at most 255 bytes, not a
    /// prefix). Joining a group twice is an error, as in libzmq ([`Error::InvalidArgument`]). The
    /// JOIN goes to every connected RADIO now and to each one that connects later; like a
    /// subscription it takes effect when the RADIO has read it (RFC 48). Not async: nothing to
    /// cancel.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::{Message, Socket, SocketType};
    /// let radio = Socket::new(SocketType::Radio);
    /// let endpoint = radio.bind("tcp://127.0.0.1:*").await?;
    /// let dish = Socket::new(SocketType::Dish);
    /// dish.join("weather")?;
    /// dish.connect(&endpoint).await?;
    /// // Like PUB, a RADIO drops what it sends before the DISH's JOIN has arrived: repeat until heard.
    /// let msg = loop {
    ///     radio.send(Message::from("sunny").with_group("weather")).await?;
    ///     let wait = std::time::Duration::from_millis(20);
    ///     if let Ok(received) = tokio::time::timeout(wait, dish.recv()).await {
    ///         break received?;
    ///     }
    /// };
    /// assert_eq!((msg.group().unwrap().as_ref(), msg[0].as_ref()), (&b"weather"[..], &b"sunny"[..]));
    /// # Ok(()) }
    /// ```
    pub fn join(&self, group: impl AsRef<[u8]>) -> Result<()> {
        self.inner.core.local_group(group.as_ref(), true)
    }

    /// DISH: stop receiving `group`'s messages (those already queued are dropped on receive).
    /// Leaving a group not joined is an error, as in libzmq.
    pub fn leave(&self, group: impl AsRef<[u8]>) -> Result<()> {
        self.inner.core.local_group(group.as_ref(), false)
    }

    fn take_endpoint(&self, endpoint: &str) -> Result<EndpointHandle> {
        self.endpoints().remove(endpoint).ok_or_else(|| Error::EndpointNotFound(endpoint.to_owned()))
    }

    fn endpoints(&self) -> std::sync::MutexGuard<'_, Endpoints> {
        self.inner.endpoints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The endpoint of the last `bind` (as bound) or `connect`.
    pub fn last_endpoint(&self) -> Option<String> {
        self.inner.last_endpoint.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sends a whole message, waiting while the socket's rule says to block (HWM reached on DEALER,
    /// PUSH, REQ, PAIR, or no peer yet). PUB, and ROUTER without ROUTER_MANDATORY, never wait: at the
    /// HWM they drop, as libzmq does.
    ///
    /// **Cancel safety:** the message is queued atomically; if the future is dropped before it
    /// completes, the message was not sent at all.
    ///
    /// **Fairness:** a send that never has to wait (PUB, or room at the HWM) still takes part in
    /// tokio's cooperative budget, so a loop of sends gives the runtime back now and then and
    /// cannot starve other tasks on it — zmtp's own connection tasks included.
    pub async fn send(&self, msg: impl Into<Message>) -> Result<()> {
        if coop::due() {
            tokio::task::coop::consume_budget().await;
        }
        let core = &self.inner.core;
        // Fast path first: registering as a waiter costs more than a send.
        let mut slot = match core.try_send(msg.into())? {
            TrySend::Sent => return Ok(()),
            TrySend::Full(msg) => Some(msg),
        };
        core.space
            .wait_until(|| match core.try_send(slot.take().expect("message present")) {
                Ok(TrySend::Sent) => Some(Ok(())),
                Ok(TrySend::Full(msg)) => {
                    slot = Some(msg);
                    None
                }
                Err(e) => Some(Err(e)),
            })
            .await
    }

    /// Sends if that needs no wait; otherwise hands the message back (`Ok(Some(msg))`), so a
    /// caller with a slow path of its own (a timed `send`, say) offers the same message again
    /// without cloning it first. Errors as [`try_send`](Self::try_send), except that a full queue
    /// is not one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> zmtp::Result<()> {
    /// use zmtp::{Socket, SocketType};
    /// let push = Socket::new(SocketType::Push); // no peer yet: nowhere to send
    /// let kept = push.try_send_or_keep("hello".into())?.expect("handed back");
    /// assert_eq!(kept[0], "hello");
    /// # Ok(()) }
    /// ```
    pub fn try_send_or_keep(&self, msg: Message) -> Result<Option<Message>> {
        match self.inner.core.try_send(msg)? {
            TrySend::Sent => Ok(None),
            TrySend::Full(msg) => Ok(Some(msg)),
        }
    }

    /// Sends without waiting; [`Error::WouldBlock`] where [`send`](Self::send) would wait.
    pub fn try_send(&self, msg: impl Into<Message>) -> Result<()> {
        match self.try_send_or_keep(msg.into())? {
            None => Ok(()),
            Some(_) => Err(Error::WouldBlock),
        }
    }

    /// Receives the next whole message (fair-queued across peers).
    ///
    /// **Cancel safety:** a message is taken from the queue only when this returns; dropping the
    /// future loses nothing.
    ///
    /// **Fairness:** like [`send`](Self::send), a receive that finds a message at once still
    /// takes part in tokio's cooperative budget.
    pub async fn recv(&self) -> Result<Message> {
        if coop::due() {
            tokio::task::coop::consume_budget().await;
        }
        let core = &self.inner.core;
        // Fast path first: registering as a waiter takes the notifier's lock twice, more than a receive.
        if let Some(ready) = core.try_recv().transpose() {
            return ready;
        }
        if let Some(budget) = self.spin_budget()
            && let Some(ready) = busy_poll::spin(budget, || core.try_recv().transpose()).await
        {
            return ready;
        }
        core.inbox.readable().wait_until(|| core.try_recv().transpose()).await
    }

    /// Busy polling (in the spirit of `ZMQ_BUSY_POLL`): a [`recv`](Self::recv) or
    /// [`recv_many`](Self::recv_many) that finds nothing keeps trying for up to `budget` (yielding
    /// to the runtime between tries, so other tasks and the connections' I/O still run) before it
    /// parks. That saves the kernel wake-up a parked receive pays, which is most of a round trip's
    /// latency on loopback, at the price of the thread's CPU for up to `budget` per receive that
    /// waits. `None` (the default) parks at once. Budgets round down to whole microseconds, and are
    /// capped at about 71 minutes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use std::time::Duration;
    /// let req = zmtp::Socket::new(zmtp::SocketType::Req);
    /// req.set_busy_poll(Some(Duration::from_micros(50)));
    /// assert_eq!(req.busy_poll(), Some(Duration::from_micros(50)));
    /// # Ok(()) }
    /// ```
    pub fn set_busy_poll(&self, budget: Option<Duration>) {
        let micros = budget.map_or(0, |b| b.as_micros().min(u32::MAX as u128) as u32);
        self.inner.core.busy_poll_us.store(micros, std::sync::atomic::Ordering::Relaxed);
    }

    /// The budget set by [`set_busy_poll`](Self::set_busy_poll).
    pub fn busy_poll(&self) -> Option<Duration> {
        self.spin_budget()
    }

    pub(super) fn spin_budget(&self) -> Option<Duration> {
        match self.inner.core.busy_poll_us.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us.into())),
        }
    }

    /// Receives without waiting; [`Error::WouldBlock`] when nothing is queued.
    pub fn try_recv(&self) -> Result<Message> {
        self.inner.core.try_recv()?.ok_or(Error::WouldBlock)
    }

    /// Appends to `out`, without waiting, up to `max` of the messages queued now, in the order
    /// [`recv`](Self::recv) would return them, under one lock of the socket's inbox; how many
    /// (`Ok(0)` when none is queued). The non-waiting [`recv_many`](Self::recv_many): drain what
    /// a first `recv` left behind in one call instead of a `try_recv` each.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::{Socket, SocketType};
    /// let pull = Socket::new(SocketType::Pull);
    /// let endpoint = pull.bind("inproc://try-recv-many").await?;
    /// let push = Socket::new(SocketType::Push);
    /// push.connect(&endpoint).await?;
    /// let mut batch = vec!["a".into(), "b".into(), "c".into()];
    /// push.send_many(&mut batch).await?;
    /// let mut got = vec![pull.recv().await?];
    /// while got.len() < 3 {
    ///     pull.try_recv_many(&mut got, 16)?; // whatever has arrived so far
    ///     tokio::task::yield_now().await;
    /// }
    /// assert_eq!(got[2][0], "c");
    /// assert_eq!(pull.try_recv_many(&mut got, 16)?, 0);
    /// # Ok(()) }
    /// ```
    pub fn try_recv_many(&self, out: &mut Vec<Message>, max: usize) -> Result<usize> {
        self.inner.core.try_recv_many(out, max)
    }

    /// SUB/XSUB: subscribe to messages whose first frame starts with `prefix` (`""` = everything).
    /// Subscriptions are refcounted as in libzmq.
    pub fn subscribe(&self, prefix: impl AsRef<[u8]>) -> Result<()> {
        self.subscription(prefix.as_ref(), true)
    }

    /// SUB/XSUB: drop one reference to a subscription.
    pub fn unsubscribe(&self, prefix: impl AsRef<[u8]>) -> Result<()> {
        self.subscription(prefix.as_ref(), false)
    }

    fn subscription(&self, prefix: &[u8], on: bool) -> Result<()> {
        self.inner.core.local_subscription(prefix, on)
    }

    /// Closes the socket: stops accepting and reconnecting, waits up to LINGER for queued messages to
    /// be written, then drops every connection. Other clones see [`Error::Closed`].
    pub async fn close(self) {
        let core = self.inner.core.clone();
        let linger = core.options().linger;
        let listeners = close_core(&core, &mut self.endpoints());
        drop(self);
        // Bound addresses are free once `close` returns: a new socket may bind them at once.
        for task in listeners {
            let _ = task.await;
        }
        linger_then_shutdown(&core, linger).await;
    }

    /// A `Stream` of received messages. It ends (`None`) once the socket is closed, and after
    /// yielding [`Error::NotSupported`] (a socket type that cannot receive): errors that would
    /// come back at once on every poll end it, so a consumer that skips errors cannot spin. Other
    /// errors are yielded and the stream goes on. Cancel-safe like [`recv`](Self::recv).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use futures::StreamExt;
    /// let pull = zmtp::Socket::new(zmtp::SocketType::Pull);
    /// let mut messages = pull.stream(); // Unpin: no pin! needed
    /// pull.clone().close().await;
    /// assert!(messages.next().await.is_none()); // closed: the stream ends
    /// # Ok(()) }
    /// ```
    pub fn stream(&self) -> impl Stream<Item = Result<Message>> + Send + Unpin + 'static {
        let socket = self.clone();
        // Boxed once per stream (not per message), so the stream is Unpin like `monitor()`.
        Box::pin(futures::stream::unfold(Some(socket), |s| async move {
            let s = s?;
            match s.recv().await {
                Err(Error::Closed) => None,
                Err(e @ Error::NotSupported(_)) => Some((Err(e), None)),
                item => Some((item, Some(s))),
            }
        }))
    }

    /// A stream of connection events (listening, accepted, connected, retried, handshake
    /// succeeded/failed with the typed reason, disconnected). Each call makes an independent monitor.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::{MonitorEvent, Socket, SocketType};
    /// let pull = Socket::new(SocketType::Pull);
    /// let mut events = pull.monitor();
    /// pull.bind("tcp://127.0.0.1:*").await?;
    /// assert!(matches!(events.next_event().await, Some(MonitorEvent::Listening { .. })));
    /// # Ok(()) }
    /// ```
    pub fn monitor(&self) -> crate::monitor::Monitor {
        self.inner.core.monitors.subscribe()
    }

    /// ROUTER: the routing ids of currently connected peers.
    pub fn peer_routing_ids(&self) -> Vec<Bytes> {
        self.inner.core.routing_ids()
    }

    option!(
        /// ZMQ_SNDHWM: outbound queue limit per peer, in messages (0 = none). Default 1000.
        sndhwm, set_sndhwm, sndhwm: usize);
    option!(
        /// Beside ZMQ_SNDHWM (not a libzmq option): outbound queue limit per peer in bytes — each
        /// message counts its payload plus 64 bytes per frame (what a queued frame costs in memory),
        /// an [`EncodedBatch`](crate::EncodedBatch) its encoded bytes, as does a run of small
        /// messages that [`send_many`](Socket::send_many) encodes itself — including what the
        /// connection is still writing (0 = none). Whichever limit is reached
        /// first applies, with the socket type's HWM behaviour (PUB drops, DEALER/PUSH wait, …);
        /// a single message larger than the limit still goes when nothing else is queued. Default
        /// 128 MiB ([`DEFAULT_SNDHWM_BYTES`](crate::DEFAULT_SNDHWM_BYTES)): a peer that stops
        /// reading cannot make the socket hold more than that for it. Applies to connections made
        /// afterwards.
        sndhwm_bytes, set_sndhwm_bytes, sndhwm_bytes: usize);
    option!(
        /// ZMQ_RCVHWM: inbound queue limit per peer, in messages (0 = none). Default 1000. A PULL's
        /// or a SUB's receive takes up to a thirty-second of it (at most 32 messages) off the
        /// queues at once and serves the next receives from them, so it may hold that many more.
        rcvhwm, set_rcvhwm, rcvhwm: usize);
    option!(
        /// ZMQ_LINGER: how long closing waits for queued messages (`None` = forever). Default forever.
        linger, set_linger, linger: Option<Duration>);
    hot_option!(
        /// ZMQ_ROUTER_MANDATORY: unknown routing ids fail with [`Error::HostUnreachable`] and full
        /// peers block instead of dropping. Default off.
        router_mandatory, set_router_mandatory, router_mandatory);
    option!(
        /// ZMQ_ROUTER_HANDOVER: a new peer with a routing id in use takes it over. Default off.
        router_handover, set_router_handover, router_handover: bool);
    option!(
        /// ZMQ_PROBE_ROUTER: send an empty message to each new peer (ROUTER, DEALER, REQ). Default off.
        probe_router, set_probe_router, probe_router: bool);
    option!(
        /// ZMQ_MAXMSGSIZE: largest inbound frame in bytes (`None` = unlimited); larger ones drop
        /// the connection.
        maxmsgsize, set_maxmsgsize, maxmsgsize: Option<u64>);
    option!(
        /// Beside ZMQ_MAXMSGSIZE (not a libzmq option): most frames in one inbound message (`None`
        /// = unlimited). A peer that sends more has its connection closed with
        /// [`LimitError::Frames`](crate::LimitError::Frames), reported on the monitor. Default
        /// 65,536 ([`DEFAULT_MAX_FRAMES`](crate::DEFAULT_MAX_FRAMES)).
        max_frames, set_max_frames, max_frames: Option<usize>);
    option!(
        /// Beside libzmq's options: whether received messages carry the properties of the
        /// connection they came from ([`Message::property`](crate::Message::property):
        /// `Socket-Type`, `Identity`, `User-Id`, `Peer-Address`, the peer's metadata), as libzmq's
        /// `zmq_msg_gets` reads them. Default on. Off, [`Message::properties`](crate::Message::properties)
        /// is `None` and each received message costs two atomic reference-count operations less
        /// (one as it is taken, one as it is dropped): 16-byte messages through
        /// [`recv_many`](Socket::recv_many) came 1.2× faster. Routing ids (ROUTER's first frame,
        /// SERVER's [`Message::routing_id`](crate::Message::routing_id)) are not properties and
        /// stay. Applies to connections made afterwards.
        ///
        /// ```
        /// let pull = zmtp::Socket::new(zmtp::SocketType::Pull);
        /// assert!(pull.msg_properties());
        /// pull.set_msg_properties(false); // before bind/connect
        /// ```
        msg_properties, set_msg_properties, msg_properties: bool);
    option!(
        /// PUB/XPUB (not a libzmq option): most distinct subscriptions kept for one peer (`None` =
        /// unlimited). A peer that subscribes to more has its connection closed with
        /// [`LimitError::Subscriptions`](crate::LimitError::Subscriptions), reported on the
        /// monitor (over inproc, on the subscriber's monitor). Default 250,000
        /// ([`DEFAULT_MAX_SUBSCRIPTIONS`](crate::DEFAULT_MAX_SUBSCRIPTIONS)).
        max_subscriptions, set_max_subscriptions, max_subscriptions: Option<usize>);
    option!(
        /// PUB/XPUB (not a libzmq option): most bytes of subscription prefixes kept for one peer
        /// (`None` = unlimited); over it, [`LimitError::SubscriptionBytes`](crate::LimitError::SubscriptionBytes).
        /// Default 16 MiB.
        max_subscription_bytes, set_max_subscription_bytes, max_subscription_bytes: Option<usize>);
    option!(
        /// ZMQ_RECONNECT_IVL: wait before reconnecting (`None` = never). Default 100 ms.
        reconnect_ivl, set_reconnect_ivl, reconnect_ivl: Option<Duration>);
    option!(
        /// ZMQ_RECONNECT_IVL_MAX: cap for the doubling reconnect backoff (zero = no backoff).
        reconnect_ivl_max, set_reconnect_ivl_max, reconnect_ivl_max: Duration);
    option!(
        /// ZMQ_HEARTBEAT_IVL: send a PING this often (zero = off). Default off.
        heartbeat_ivl, set_heartbeat_ivl, heartbeat_ivl: Duration);
    option!(
        /// ZMQ_HEARTBEAT_TTL: how long the peer should wait for our traffic before giving up.
        heartbeat_ttl, set_heartbeat_ttl, heartbeat_ttl: Duration);
    option!(
        /// ZMQ_HEARTBEAT_TIMEOUT: silence after a PING that drops the connection (`None` = the interval).
        heartbeat_timeout, set_heartbeat_timeout, heartbeat_timeout: Option<Duration>);
    option!(
        /// ZMQ_HANDSHAKE_IVL: limit for the ZMTP handshake (`None` = none). Default 30 s.
        handshake_ivl, set_handshake_ivl, handshake_ivl: Option<Duration>);
    option!(
        /// ZMQ_REQ_RELAXED: REQ may send a new request without waiting for the reply. Default off.
        req_relaxed, set_req_relaxed, req_relaxed: bool);
    option!(
        /// ZMQ_IPV6: `tcp://*` binds the IPv6 wildcard. Default off.
        ipv6, set_ipv6, ipv6: bool);
    option!(
        /// ZMQ_BACKLOG: how many connections a TCP listener queues before the socket accepts them;
        /// the kernel caps it (Linux: `net.core.somaxconn`). Beyond it, a connecting peer's SYN is
        /// dropped and it waits for TCP to retry (1 s, then 3, 7, 15 …): raise it on a server that
        /// thousands of clients reconnect to at once. Applies to later binds (tcp; ipc and inproc
        /// listen with their own queues). Default 1024 ([`DEFAULT_BACKLOG`](crate::DEFAULT_BACKLOG);
        /// libzmq's is 100).
        backlog, set_backlog, backlog: u32);
    /// ZMQ_ROUTER_NOTIFY (ROUTER): the application receives `[routing id, ""]` when a peer's
    /// handshake completes ([`NOTIFY_CONNECT`](crate::NOTIFY_CONNECT)) and when its connection ends
    /// ([`NOTIFY_DISCONNECT`](crate::NOTIFY_DISCONNECT)); both: `NOTIFY_CONNECT | NOTIFY_DISCONNECT`.
    /// Default 0. Unlike libzmq, inproc peers are announced too.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::{Socket, SocketType, NOTIFY_CONNECT, NOTIFY_DISCONNECT};
    /// let router = Socket::new(SocketType::Router);
    /// router.set_router_notify(NOTIFY_CONNECT | NOTIFY_DISCONNECT)?;
    /// let endpoint = router.bind("tcp://127.0.0.1:*").await?;
    /// let dealer = Socket::new(SocketType::Dealer);
    /// dealer.set_routing_id("worker-1")?;
    /// dealer.connect(&endpoint).await?;
    /// let hello = router.recv().await?;
    /// assert_eq!((&hello[0][..], hello[1].is_empty()), (&b"worker-1"[..], true));
    /// dealer.close().await;
    /// let bye = router.recv().await?;
    /// assert_eq!((&bye[0][..], bye[1].is_empty()), (&b"worker-1"[..], true));
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "draft")]
    pub fn set_router_notify(&self, bits: u8) -> Result<()> {
        if bits > (crate::NOTIFY_CONNECT | crate::NOTIFY_DISCONNECT) {
            return Err(Error::InvalidOption("ROUTER_NOTIFY takes NOTIFY_CONNECT and NOTIFY_DISCONNECT bits"));
        }
        if self.socket_type() != SocketType::Router {
            return Err(Error::NotSupported(self.socket_type()));
        }
        self.inner.core.options().router_notify = bits;
        Ok(())
    }

    /// Current value of the option set by [`Socket::set_router_notify`].
    #[cfg(feature = "draft")]
    pub fn router_notify(&self) -> u8 {
        self.inner.core.options().router_notify
    }

    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_HELLO_MSG: a message sent to each peer before anything else, on every connection
        /// and reconnection (ROUTER, DEALER, CLIENT, SERVER, PEER; a single frame, no envelope).
        /// `None` (the default) sends none.
        hello_msg, set_hello_msg, hello_msg: Option<Bytes>);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_DISCONNECT_MSG: a message the application receives, as if the peer had sent it, when
        /// a peer this socket accepted disconnects (ROUTER, SERVER, PEER). Default none.
        disconnect_msg, set_disconnect_msg, disconnect_msg: Option<Bytes>);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_HICCUP_MSG: a message the application receives, as if the peer had sent it, when a
        /// connection this socket made drops and is to be remade (DEALER, CLIENT, PEER). Default none.
        hiccup_msg, set_hiccup_msg, hiccup_msg: Option<Bytes>);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_RECONNECT_STOP: the cases in which a `connect` stops retrying, as bits:
        /// [`RECONNECT_STOP_CONN_REFUSED`](crate::RECONNECT_STOP_CONN_REFUSED) (the peer's host
        /// refused the connection), [`RECONNECT_STOP_HANDSHAKE_FAILED`](crate::RECONNECT_STOP_HANDSHAKE_FAILED)
        /// (the connection ended or timed out before its handshake completed),
        /// [`RECONNECT_STOP_AFTER_DISCONNECT`](crate::RECONNECT_STOP_AFTER_DISCONNECT) (refused, once
        /// `disconnect` was called on this socket; libzmq 4.3.5 applies this one to ipc only).
        /// A stopped connect drops what was queued for it and the monitor reports `Closed`. Default 0.
        reconnect_stop, set_reconnect_stop, reconnect_stop: u8);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_XPUB_MANUAL (XPUB): subscribers are subscribed by the application, not by what they
        /// ask. Every subscription change is received as a `\x01topic` / `\x00topic` notice, and
        /// [`subscribe`](Self::subscribe) / [`unsubscribe`](Self::unsubscribe) then apply to the
        /// subscriber the last received notice came from. Default off.
        xpub_manual, set_xpub_manual, xpub_manual: bool);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_XPUB_MANUAL_LAST_VALUE (XPUB): XPUB_MANUAL, and the first send after a notice goes
        /// to the subscriber it came from alone, so a newcomer gets the last value without
        /// everyone getting it again. Default off.
        xpub_manual_last_value, set_xpub_manual_last_value, xpub_manual_last_value: bool);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_ONLY_FIRST_SUBSCRIBE (XPUB, XSUB): in a multipart message only the first frame may
        /// be a subscription; when it is not, the rest are plain data. By default, as in libzmq,
        /// any frame starting with `\x01` or `\x00` of a message an XSUB sends (or an XPUB
        /// receives) is a subscription or a cancel, and an XPUB's application receives the data
        /// frames before it with the notice as their last frame. Default off.
        only_first_subscribe, set_only_first_subscribe, only_first_subscribe: bool);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_XSUB_VERBOSE_UNSUBSCRIBE (XSUB): send every unsubscribe upstream, not only the one
        /// that drops a topic's last reference. Default off.
        xsub_verbose_unsubscribe, set_xsub_verbose_unsubscribe, xsub_verbose_unsubscribe: bool);

    /// ZMQ_INVERT_MATCHING: a PUB/XPUB sends each message to the subscribers whose subscriptions do
    /// *not* match it, and a SUB keeps the messages its subscriptions do not match (libzmq's rule:
    /// a publisher and its subscribers should agree on it). Default off.
    #[cfg(feature = "draft")]
    pub fn set_invert_matching(&self, invert: bool) {
        self.inner.core.hot.invert_matching.store(invert, std::sync::atomic::Ordering::Relaxed);
        self.inner.core.inbox.set_invert(invert);
        self.inner.core.refilter_taken_ahead();
    }

    /// Current value of the option set by [`Socket::set_invert_matching`].
    #[cfg(feature = "draft")]
    pub fn invert_matching(&self) -> bool {
        self.inner.core.hot.invert_matching.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// ZMQ_TOPICS_COUNT: how many subscriptions the socket holds — a PUB/XPUB the distinct prefixes
    /// its subscribers want, a SUB/XSUB its own distinct ones. [`Error::NotSupported`] for other
    /// types. (libzmq 4.3.5 does not lower a PUB's count when a subscriber disconnects; this does.)
    #[cfg(feature = "draft")]
    pub fn topics_count(&self) -> Result<usize> {
        self.inner.core.topics_count().ok_or(Error::NotSupported(self.socket_type()))
    }

    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_STREAM_NOTIFY (STREAM): receive `[routing id, ""]` when a connection is made and when
        /// it ends. Default on.
        stream_notify, set_stream_notify, stream_notify: bool);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_MULTICAST_HOPS: the TTL of multicast a RADIO sends over `udp://`. Default 1 (the
        /// local network).
        multicast_hops, set_multicast_hops, multicast_hops: u32);
    #[cfg(feature = "draft")]
    option!(
        /// ZMQ_MULTICAST_LOOP: whether multicast a RADIO sends over `udp://` reaches this host's own
        /// DISHes too. Default on.
        multicast_loop, set_multicast_loop, multicast_loop: bool);

    option!(
        /// ZMQ_REQ_CORRELATE: REQ tags each request with an id and drops replies without it. Default off.
        req_correlate, set_req_correlate, req_correlate: bool);
    option!(
        /// ZMQ_CONFLATE: keep only the newest message per queue (DEALER, PULL, PUSH, PUB, SUB; single-part
        /// messages). Applies to connections made afterwards. Default off.
        conflate, set_conflate, conflate: bool);
    option!(
        /// ZMQ_XPUB_VERBOSE: pass every subscribe, not only a prefix's first, to the XPUB application.
        xpub_verbose, set_xpub_verbose, xpub_verbose: bool);
    option!(
        /// ZMQ_XPUB_VERBOSER: pass every subscribe and every unsubscribe to the XPUB application.
        xpub_verboser, set_xpub_verboser, xpub_verboser: bool);
    hot_option!(
        /// ZMQ_XPUB_NODROP (XPUB and PUB): at a subscriber's HWM, `send` waits (`try_send`: WouldBlock)
        /// instead of dropping.
        xpub_nodrop, set_xpub_nodrop, xpub_nodrop);
    option!(
        /// ZMQ_XPUB_WELCOME_MSG: a message sent to every new subscriber of an XPUB.
        xpub_welcome_msg, set_xpub_welcome_msg, xpub_welcome_msg: Option<Bytes>);
    option!(
        /// ZMQ_CONNECT_ROUTING_ID: the routing id a ROUTER uses for the peer of its next `connect`.
        connect_routing_id, set_connect_routing_id, connect_routing_id: Option<Bytes>);
    option!(
        /// ZMQ_TCP_KEEPALIVE: `None` keeps the OS default (libzmq -1), `Some(on)` sets SO_KEEPALIVE.
        tcp_keepalive, set_tcp_keepalive, tcp_keepalive: Option<bool>);
    option!(
        /// ZMQ_TCP_KEEPALIVE_IDLE: idle time before keepalive probes (`None` = OS default).
        tcp_keepalive_idle, set_tcp_keepalive_idle, tcp_keepalive_idle: Option<Duration>);
    option!(
        /// ZMQ_TCP_KEEPALIVE_INTVL: time between keepalive probes (`None` = OS default).
        tcp_keepalive_intvl, set_tcp_keepalive_intvl, tcp_keepalive_intvl: Option<Duration>);
    option!(
        /// ZMQ_TCP_KEEPALIVE_CNT: unanswered probes before the connection drops (`None` = OS default).
        tcp_keepalive_cnt, set_tcp_keepalive_cnt, tcp_keepalive_cnt: Option<u32>);
    option!(
        /// ZMQ_SNDBUF: the kernel send buffer (SO_SNDBUF) of each tcp and ipc connection made
        /// after it is set, in bytes. Over tcp it is set, as libzmq does, on the listener before
        /// `bind` listens and on the socket a `connect` makes before the handshake (a connection
        /// accepted by an earlier `bind` gets it once established). `None` (libzmq's -1)
        /// keeps the OS default; the OS may round the size or cap it (Linux: doubles it, at most
        /// `net.core.wmem_max`). libzmq applies it to tcp only. Over ipc on Linux this buffer is
        /// what bounds the bytes in flight (large messages: see the README's performance notes).
        sndbuf, set_sndbuf, sndbuf: Option<usize>);
    option!(
        /// ZMQ_RCVBUF: the kernel receive buffer (SO_RCVBUF) of each tcp and ipc connection made
        /// after it is set, in bytes. Over tcp it is in place before the handshake, as in libzmq:
        /// set on the listener before `bind` listens and on the socket a `connect` makes (a
        /// connection accepted by an earlier `bind` gets it once established, which works but,
        /// when the size is below 64 KiB, can make Linux's sender wait for zero-window probes).
        /// `None` (libzmq's -1) keeps the OS default; the OS may
        /// round the size or cap it (Linux: doubles it, at most `net.core.rmem_max`). libzmq
        /// applies it to tcp only; over ipc Linux's flow control does not use it.
        rcvbuf, set_rcvbuf, rcvbuf: Option<usize>);
    option!(
        /// ZMQ_TOS: the IP type-of-service byte of each tcp connection made after it is set (IPv6:
        /// the traffic class too; a dual-stack socket's IPv4 traffic is marked as well). Set as
        /// the connection is established, so unlike libzmq's its handshake's first packets go
        /// unmarked. 0, the default, leaves the OS's.
        tos, set_tos, tos: u32);

    /// ZMQ_PLAIN_SERVER: be the PLAIN server; handshakes are checked by the
    /// [authenticator](Self::set_authenticator) (without one every PLAIN client is refused, as in libzmq).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::security::StaticAuthenticator;
    /// let server = zmtp::Socket::new(zmtp::SocketType::Rep);
    /// server.set_plain_server(true);
    /// server.set_authenticator(StaticAuthenticator::new().plain_user("admin", "secret"));
    /// let ep = server.bind("tcp://127.0.0.1:*").await?;
    /// let client = zmtp::Socket::new(zmtp::SocketType::Req);
    /// client.set_plain_username("admin");
    /// client.set_plain_password("secret");
    /// client.connect(&ep).await?;
    /// client.send("hi").await?;
    /// let msg = server.recv().await?;
    /// assert_eq!(msg.property("User-Id"), Some("admin"));
    /// # Ok(()) }
    /// ```
    pub fn set_plain_server(&self, on: bool) {
        let mut o = self.inner.core.options();
        o.mechanism = if on { Mechanism::Plain } else { Mechanism::Null };
        o.as_server = on;
    }

    /// ZMQ_PLAIN_USERNAME: makes this socket a PLAIN client with this user name.
    pub fn set_plain_username(&self, user: impl Into<Bytes>) {
        let mut o = self.inner.core.options();
        o.plain_username = user.into();
        o.mechanism = Mechanism::Plain;
        o.as_server = false;
    }

    /// ZMQ_PLAIN_PASSWORD: makes this socket a PLAIN client with this password.
    pub fn set_plain_password(&self, password: impl Into<Bytes>) {
        let mut o = self.inner.core.options();
        o.plain_password = password.into();
        o.mechanism = Mechanism::Plain;
        o.as_server = false;
    }

    /// ZMQ_CURVE_SERVER: be the CURVE server (needs [`set_curve_keypair`](Self::set_curve_keypair)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::security::KeyPair;
    /// let server_keys = KeyPair::generate();
    /// let server = zmtp::Socket::new(zmtp::SocketType::Pull);
    /// server.set_curve_server(true);
    /// server.set_curve_keypair(server_keys.clone());
    /// let ep = server.bind("tcp://127.0.0.1:*").await?;
    ///
    /// let client = zmtp::Socket::new(zmtp::SocketType::Push);
    /// client.set_curve_keypair(KeyPair::generate());
    /// client.set_curve_serverkey(&server_keys.public_z85())?;
    /// client.connect(&ep).await?;
    /// client.send("secret").await?;
    /// assert_eq!(server.recv().await?[0], "secret");
    /// # Ok(()) }
    /// ```
    pub fn set_curve_server(&self, on: bool) {
        let mut o = self.inner.core.options();
        o.mechanism = if on { Mechanism::Curve } else { Mechanism::Null };
        o.as_server = on;
    }

    /// ZMQ_CURVE_SECRETKEY + ZMQ_CURVE_PUBLICKEY: this socket's long-term CURVE key pair.
    pub fn set_curve_keypair(&self, keys: KeyPair) {
        self.inner.core.options().curve_keypair = Some(keys);
    }

    /// ZMQ_CURVE_SECRETKEY in Z85 (the public key is derived from it).
    pub fn set_curve_secretkey(&self, secret_z85: &str) -> Result<()> {
        self.set_curve_keypair(KeyPair::from_secret_z85(secret_z85)?);
        Ok(())
    }

    /// ZMQ_CURVE_SERVERKEY in Z85: makes this socket a CURVE client of that server.
    pub fn set_curve_serverkey(&self, public_z85: &str) -> Result<()> {
        let key = crate::security::decode_key(public_z85)?;
        self.set_curve_serverkey_bytes(key);
        Ok(())
    }

    /// ZMQ_CURVE_SERVERKEY as 32 raw bytes.
    pub fn set_curve_serverkey_bytes(&self, public: [u8; 32]) {
        let mut o = self.inner.core.options();
        o.curve_serverkey = Some(public);
        o.mechanism = Mechanism::Curve;
        o.as_server = false;
    }

    /// The security mechanism and whether this socket is its server.
    pub fn mechanism(&self) -> (Mechanism, bool) {
        let o = self.inner.core.options();
        (o.mechanism, o.as_server)
    }

    /// ZMQ_ZAP_DOMAIN: passed to the authenticator.
    pub fn set_zap_domain(&self, domain: impl Into<String>) {
        self.inner.core.options().zap_domain = domain.into();
    }

    /// The authenticator consulted by this socket's server-side handshakes (libzmq's ZAP handler). With
    /// one set, NULL handshakes are checked too (e.g. by address).
    pub fn set_authenticator(&self, authenticator: impl crate::security::Authenticator) {
        self.inner.core.options().authenticator = Some(Arc::new(authenticator));
    }

    hot_option!(
        /// ZMQ_IMMEDIATE: queue messages only for completed connections, not for `connect`s still
        /// pending (DEALER, PUSH, REQ, PAIR). Default off.
        immediate, set_immediate, immediate);

    /// ZMQ_ROUTING_ID: the identity this socket announces to peers (REQ, DEALER, ROUTER), 0–255 bytes.
    pub fn set_routing_id(&self, id: impl Into<Bytes>) -> Result<()> {
        let id = id.into();
        if id.len() > 255 {
            return Err(Error::InvalidOption("routing id longer than 255 bytes"));
        }
        self.inner.core.options().routing_id = id;
        Ok(())
    }

    /// The routing id set with [`set_routing_id`](Self::set_routing_id).
    pub fn routing_id(&self) -> Bytes {
        self.inner.core.options().routing_id.clone()
    }
}
