//! The state a socket shares with its connections: the peer table, routing, and the pattern rules for
//! each socket type. Connections call `attach`/`detach`/`deliver`; the public `Socket` calls
//! `try_send`/`try_recv`. Nothing here parses bytes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::inbox::{Inbox, Pushed};
use super::pattern::{self, SendFlags, rep, req, router};
pub(crate) use super::state::TrySend;
use super::state::{Peer, ReqState, State};
use super::subscriptions::Subscriptions;
use crate::engine::{Attached, Host};
use crate::error::{ConnectionError, Error, LimitError, Result};
use crate::link::peer_id::PeerId;
use crate::link::pipe::{OutPipe, Outbound};
pub(crate) use crate::link::waiters::Waiters;
use crate::message::Message;
use crate::options::Options;
use crate::wire::{PeerInfo, SocketType};

/// Access to a socket's options; mutable access clones them first if a connection shares them.
pub(crate) struct OptionsGuard<'a>(MutexGuard<'a, Arc<Options>>);

impl std::ops::Deref for OptionsGuard<'_> {
    type Target = Options;
    fn deref(&self) -> &Options {
        &self.0
    }
}

impl std::ops::DerefMut for OptionsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Options {
        Arc::make_mut(&mut self.0)
    }
}

/// Everything a socket's connections share.
#[derive(Debug)]
pub(crate) struct Core {
    pub socket_type: SocketType,
    /// Shared copy-on-write: each connection keeps an `Arc` of the options it started with (8 bytes, not
    /// a 500-byte copy per connection); setters clone only when a connection still holds the old ones.
    options: Mutex<Arc<Options>>,
    state: Mutex<State>,
    pub inbox: Inbox,
    pub space: Arc<Waiters>,
    pub shutdown: CancellationToken,
    /// Cancelled when the socket starts closing (handshakes in progress give up).
    pub closing: CancellationToken,
    next_peer: AtomicU64,
    /// Live connection tasks, so `close` can wait for them to flush.
    pub connections: AtomicUsize,
    pub connections_done: Notify,
    pub monitors: crate::monitor::Monitors,
    /// Set by `close`; read on every receive, so an atomic rather than the state lock.
    pub closed: std::sync::atomic::AtomicBool,
    /// Boolean options the send path reads, kept out of the options lock.
    pub hot: HotOptions,
}

/// The boolean options that the send path reads (and no connection does): atomics, so a send does not
/// take the options lock.
#[derive(Debug, Default)]
pub(crate) struct HotOptions {
    pub immediate: std::sync::atomic::AtomicBool,
    pub xpub_nodrop: std::sync::atomic::AtomicBool,
    pub router_mandatory: std::sync::atomic::AtomicBool,
}

impl Core {
    pub fn new(socket_type: SocketType) -> Arc<Core> {
        let mut next_generated_id = rand::random::<u32>();
        if next_generated_id == 0 {
            next_generated_id = 1;
        }
        Arc::new(Core {
            socket_type,
            options: Mutex::new(Arc::new(Options::default())),
            state: Mutex::new(State {
                next_generated_id,
                // As libzmq: a random first id, so a reply meant for an earlier incarnation of this
                // REQ is not taken for one to this one.
                req: ReqState { request_id: rand::random(), ..ReqState::default() },
                ..State::default()
            }),
            inbox: Inbox::new(socket_type == SocketType::Sub),
            space: Arc::new(Waiters::default()),
            shutdown: CancellationToken::new(),
            closing: CancellationToken::new(),
            next_peer: AtomicU64::new(1),
            connections: AtomicUsize::new(0),
            connections_done: Notify::new(),
            monitors: Default::default(),
            closed: Default::default(),
            hot: HotOptions::default(),
        })
    }

    /// The options, readable and writable (writes copy them if a connection still uses the old ones).
    pub fn options(&self) -> OptionsGuard<'_> {
        OptionsGuard(self.options.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The current options, for a connection to keep.
    pub fn options_snapshot(&self) -> Arc<Options> {
        self.options.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn new_peer(&self, state: &mut State, persistent: bool, kill: CancellationToken) -> PeerId {
        let id = self.next_peer.fetch_add(1, Ordering::Relaxed);
        let (sndhwm, sndhwm_bytes, rcvhwm, conflate, assigned_routing_id) = {
            let mut o = self.options();
            let assigned = if persistent { o.connect_routing_id.take() } else { None };
            (o.sndhwm, o.sndhwm_bytes, o.rcvhwm, o.conflate, assigned)
        };
        let peer = Peer {
            out: Arc::new(OutPipe::new(sndhwm, sndhwm_bytes, conflate, self.space.clone())),
            routing_id: Bytes::new(),
            subscriptions: Subscriptions::default(),
            connected: false,
            minor: 1,
            kill,
            persistent,
            assigned_routing_id,
            sent_stamp: 0,
        };
        state.order.push((id, peer.out.clone()));
        state.peers.insert(id, peer);
        self.inbox.add_peer(id, rcvhwm, conflate, Bytes::new());
        id
    }

    /// A `connect()` creates its peer at once, so messages queue before the connection exists.
    pub fn add_connect_slot(&self, kill: CancellationToken) -> PeerId {
        let mut state = self.state();
        let id = self.new_peer(&mut state, true, kill);
        drop(state);
        self.space.wake();
        id
    }

    /// A connection finished its handshake: join the socket.
    pub fn attach(
        &self,
        slot: Option<PeerId>,
        info: &PeerInfo,
        minor: u8,
        kill: CancellationToken,
    ) -> Result<Attached, ConnectionError> {
        let mut state = self.state();
        // A closing socket still lets connect-side peers in: they come to flush what is queued for them.
        if state.closed && slot.is_none() {
            return Err(ConnectionError::SocketClosed);
        }
        if self.socket_type == SocketType::Pair && state.peers.iter().any(|(id, p)| p.connected && Some(*id) != slot) {
            return Err(ConnectionError::Refused("PAIR socket already has a peer"));
        }
        let routing_id = if self.socket_type == SocketType::Router {
            let assigned = slot.and_then(|id| state.peers.get(&id)).and_then(|p| p.assigned_routing_id.clone());
            Some(self.claim_routing_id(&mut state, slot, assigned.as_ref().unwrap_or(&info.identity))?)
        } else {
            None
        };
        let id = match slot {
            Some(id) if state.peers.contains_key(&id) => id,
            Some(_) => return Err(ConnectionError::SocketClosed),
            None => self.new_peer(&mut state, false, kill.clone()),
        };
        let peer = state.peers.get_mut(&id).expect("peer exists");
        peer.connected = true;
        peer.minor = minor;
        peer.kill = kill.clone();
        let out = peer.out.clone();
        if let Some(rid) = routing_id {
            peer.routing_id = rid.clone();
            state.routes.insert(rid.clone(), id);
            self.inbox.set_routing_id(id, rid);
        }
        if matches!(self.socket_type, SocketType::Sub | SocketType::XSub) {
            for topic in state.subscriptions.iter() {
                out.push_command(Outbound::Subscribe(topic.clone(), true));
            }
        }
        let (probe, welcome) = {
            let o = self.options();
            (o.probe_router, o.xpub_welcome_msg.clone())
        };
        if probe && matches!(self.socket_type, SocketType::Router | SocketType::Dealer | SocketType::Req) {
            let _ = out.try_push(Message::single(Bytes::new()));
        }
        if let Some(welcome) = welcome.filter(|_| self.socket_type == SocketType::XPub) {
            let _ = out.try_push(Message::single(welcome));
        }
        drop(state);
        self.space.wake();
        Ok(Attached { peer: id, out, kill })
    }

    /// Picks the ROUTER routing id for a new connection: the peer's own, or a generated one.
    fn claim_routing_id(
        &self,
        state: &mut State,
        slot: Option<PeerId>,
        announced: &Bytes,
    ) -> Result<Bytes, ConnectionError> {
        if announced.is_empty() {
            let mut rid = BytesMut::with_capacity(5);
            rid.put_u8(0);
            rid.put_u32(state.next_generated_id);
            state.next_generated_id = state.next_generated_id.wrapping_add(1).max(1);
            return Ok(rid.freeze());
        }
        if let Some(&holder) = state.routes.get(announced)
            && Some(holder) != slot
        {
            if !self.options().router_handover {
                return Err(ConnectionError::Refused("duplicate routing id"));
            }
            // Handover: the old connection loses the name and is closed.
            state.routes.remove(announced);
            if let Some(old) = state.peers.get(&holder) {
                old.kill.cancel();
            }
        }
        Ok(announced.clone())
    }

    /// ROUTER: closes the connection of the peer with this routing id. An accepted peer is removed
    /// at once with everything queued for it; a connected one is reconnected (keeping its queue).
    /// False when no peer has that routing id.
    pub fn drop_route(&self, routing_id: &[u8]) -> bool {
        let (id, persistent) = {
            let state = self.state();
            let Some(&id) = state.routes.get(routing_id) else { return false };
            let Some(peer) = state.peers.get(&id) else { return false };
            peer.kill.cancel();
            (id, peer.persistent)
        };
        if !persistent {
            self.detach(id, false);
        }
        true
    }

    /// A connection ended. `keep` keeps a connect-side slot (and its queue) for the reconnect.
    pub fn detach(&self, id: PeerId, keep: bool) {
        let mut state = self.state();
        let Some(peer) = state.peers.get_mut(&id) else {
            return;
        };
        let rid = std::mem::take(&mut peer.routing_id);
        if !rid.is_empty() && state.routes.get(&rid) == Some(&id) {
            state.routes.remove(&rid);
        }
        let closed = state.closed;
        let peer = state.peers.get_mut(&id).expect("present");
        if keep && peer.persistent && !closed {
            peer.connected = false;
            peer.out.purge(self.hot.immediate.load(Ordering::Relaxed));
            self.drop_peer_subscriptions(&mut state, id);
            return;
        }
        self.remove_peer_locked(&mut state, id);
    }

    fn remove_peer_locked(&self, state: &mut State, id: PeerId) {
        self.drop_peer_subscriptions(state, id);
        if let Some(peer) = state.peers.remove(&id) {
            peer.kill.cancel();
            peer.out.close();
        }
        state.order.retain(|(p, _)| *p != id);
        self.inbox.detach_peer(id);
        if state.req.awaiting == Some(id) && self.options().req_relaxed {
            state.req.awaiting = None;
        }
    }

    /// `disconnect()`: drop the slot and its queue, closing its connection.
    pub fn remove_slot(&self, id: PeerId) {
        let mut state = self.state();
        self.remove_peer_locked(&mut state, id);
        self.inbox.remove_peer(id);
    }

    /// Messages from a connection; parks while the peer's inbound queue is at RCVHWM.
    pub async fn deliver(&self, peer: PeerId, batch: &mut VecDeque<Message>) {
        while !batch.is_empty() {
            match self.inbox.push(peer, batch) {
                Pushed::All => return,
                // Boxed: parking is rare, and inline the `Notified` would sit in every connection's task.
                Pushed::Full(wake) => Box::pin(wake.notified()).await,
            }
        }
    }

    /// Parks while the peer's inbound queue is at or over RCVHWM: an XPUB's notices are queued
    /// past it (a notice is never dropped), so the reader stops taking commands from that peer
    /// until the application reads, as it does for messages.
    pub async fn wait_below_hwm(&self, peer: PeerId) {
        while let Some(wake) = self.inbox.over_hwm(peer) {
            Box::pin(wake.notified()).await;
        }
    }

    /// A subscription change from a subscriber (PUB/XPUB side). XPUB tells its application about the
    /// first subscriber of a prefix and the last one leaving (every change with VERBOSE/VERBOSER).
    ///
    /// A subscription beyond the peer's limits (`max_subscriptions`, `max_subscription_bytes`) is
    /// refused, and the caller closes the connection.
    pub fn peer_subscription(&self, peer: PeerId, topic: &[u8], subscribe: bool) -> Result<(), LimitError> {
        let limits = if subscribe {
            let o = self.options();
            (o.max_subscriptions, o.max_subscription_bytes)
        } else {
            (None, None)
        };
        let mut state = self.state();
        let state = &mut *state;
        let Some(p) = state.peers.get_mut(&peer) else { return Ok(()) };
        if subscribe && !p.subscriptions.contains(topic) {
            if let Some(limit) = limits.0
                && p.subscriptions.len() >= limit
            {
                return Err(LimitError::Subscriptions { limit });
            }
            if let Some(limit) = limits.1
                && p.subscriptions.bytes() + topic.len() > limit
            {
                return Err(LimitError::SubscriptionBytes { limit });
            }
        }
        let notify = if subscribe {
            p.subscriptions.insert_once(topic);
            let (first, _) = state.mtrie.add(topic, peer);
            first || self.xpub_option(|o| o.xpub_verbose || o.xpub_verboser)
        } else {
            p.subscriptions.remove_all(topic);
            let (removed, last) = state.mtrie.remove(topic, peer);
            // libzmq passes an unsubscribe up unless other subscribers remain, so a cancel of a
            // topic nobody had is passed up too (xpub.cpp: rm_result != values_remain).
            let others_remain = removed && !last;
            !others_remain || self.xpub_option(|o| o.xpub_verboser)
        };
        if notify && self.socket_type == SocketType::XPub {
            self.inbox.push_unbounded(peer, subscription_message(topic, subscribe));
        }
        Ok(())
    }

    fn xpub_option(&self, f: impl FnOnce(&Options) -> bool) -> bool {
        self.socket_type == SocketType::XPub && f(&self.options())
    }

    /// A subscriber left: its subscriptions go, and XPUB hears of prefixes nobody wants any more (of
    /// every one with VERBOSER).
    fn drop_peer_subscriptions(&self, state: &mut State, id: PeerId) {
        let Some(p) = state.peers.get_mut(&id) else { return };
        let topics: Vec<Bytes> = p.subscriptions.iter().cloned().collect();
        p.subscriptions.clear();
        let verboser = self.xpub_option(|o| o.xpub_verboser);
        for topic in topics {
            let (removed, last) = state.mtrie.remove(&topic, id);
            if removed && (last || verboser) && self.socket_type == SocketType::XPub {
                self.inbox.push_unbounded(id, subscription_message(&topic, false));
            }
        }
    }

    /// SUB/XSUB: subscribe/unsubscribe locally and tell every publisher. As in libzmq, every subscribe
    /// goes upstream (an XPUB there filters duplicates), an unsubscribe only when its refcount hits zero.
    pub fn local_subscription(&self, topic: &[u8], subscribe: bool) {
        let mut state = self.state();
        let forward = if subscribe {
            state.subscriptions.add(topic);
            true
        } else {
            state.subscriptions.remove(topic)
        };
        self.inbox.filter_update(topic, subscribe);
        if forward {
            let topic = Bytes::copy_from_slice(topic);
            for p in state.peers.values() {
                if p.connected {
                    p.out.push_command(Outbound::Subscribe(topic.clone(), subscribe));
                }
            }
        }
    }

    /// One non-blocking send attempt with the socket type's routing rule (see [`super::pattern`]).
    pub fn try_send(&self, msg: Message) -> Result<TrySend> {
        if msg.is_empty() {
            return Err(Error::EmptyMessage);
        }
        if self.socket_type == SocketType::XSub && msg.len() == 1 && matches!(msg[0].first(), Some(0 | 1)) {
            // XSUB: a subscription message updates our set (and the inbox filter), then goes upstream.
            if self.state().closed {
                return Err(Error::Closed);
            }
            self.local_subscription(&msg[0][1..], msg[0][0] == 1);
            return Ok(TrySend::Sent);
        }
        let flags = self.send_flags();
        let mut state = self.state();
        if state.closed {
            return Err(Error::Closed);
        }
        pattern::send(self.socket_type, &mut state, msg, &flags)
    }

    /// The options the send path reads: atomics, and the options lock only for REQ.
    fn send_flags(&self) -> SendFlags {
        let (req_relaxed, req_correlate) = if self.socket_type == SocketType::Req {
            let o = self.options();
            (o.req_relaxed, o.req_correlate)
        } else {
            (false, false)
        };
        SendFlags {
            immediate: self.hot.immediate.load(Ordering::Relaxed),
            router_mandatory: self.hot.router_mandatory.load(Ordering::Relaxed),
            xpub_nodrop: self.hot.xpub_nodrop.load(Ordering::Relaxed),
            req_relaxed,
            req_correlate,
        }
    }

    /// Checks that this socket type can receive at all, and REQ/REP state.
    pub fn check_recv(&self) -> Result<()> {
        match self.socket_type {
            SocketType::Push | SocketType::Pub => return Err(Error::NotSupported(self.socket_type)),
            SocketType::Req => req::check_recv(&self.state())?,
            SocketType::Rep => rep::check_recv(&self.state())?,
            _ => {}
        }
        if self.closed.load(Ordering::Relaxed) { Err(Error::Closed) } else { Ok(()) }
    }

    /// One non-blocking receive with the socket type's inbound rule; messages the pattern drops
    /// (a stale reply, a request without a delimiter) are skipped.
    pub fn try_recv(&self) -> Result<Option<Message>> {
        self.check_recv()?;
        while let Some(received) = self.inbox.pop(self.socket_type == SocketType::Router) {
            let taken = match self.socket_type {
                SocketType::Router => Some(router::on_recv(received.routing_id, received.message)),
                SocketType::Rep => rep::on_recv(&mut self.state(), received.peer, received.message),
                SocketType::Req => {
                    let correlate = self.options().req_correlate;
                    req::on_recv(&mut self.state(), received.peer, received.message, correlate)
                }
                _ => Some(received.message),
            };
            if taken.is_some() {
                return Ok(taken);
            }
        }
        Ok(None)
    }

    /// Marks the socket closed and tells every connection to flush and stop.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        self.closed.store(true, Ordering::Relaxed);
        self.closing.cancel();
        for p in state.peers.values() {
            p.out.close();
        }
        drop(state);
        self.inbox.readable().wake();
        self.space.wake();
    }

    /// Whether a connect-side peer has messages waiting to be written.
    pub fn slot_has_pending(&self, slot: PeerId) -> bool {
        self.state().peers.get(&slot).is_some_and(|p| p.out.has_messages())
    }

    /// Registers a running connection (or connect) task; the guard unregisters it. Taken before the
    /// task is spawned, so that a `close` right after `connect` already waits for it.
    pub fn connection_started(self: &Arc<Self>) -> LiveConnection {
        self.connections.fetch_add(1, Ordering::SeqCst);
        LiveConnection(self.clone())
    }

    /// Resolves once no connection task is running.
    pub async fn wait_connections_done(&self) {
        loop {
            let notified = self.connections_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.connections.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// `\x01topic` / `\x00topic`, the message form of a subscription change.
pub(crate) fn subscription_message(topic: &[u8], subscribe: bool) -> Message {
    let mut frame = BytesMut::with_capacity(topic.len() + 1);
    frame.put_u8(subscribe as u8);
    frame.put_slice(topic);
    Message::single(frame.freeze())
}

/// A running connection task (see [`Core::connection_started`]).
pub(crate) struct LiveConnection(Arc<Core>);

impl Drop for LiveConnection {
    fn drop(&mut self) {
        if self.0.connections.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.connections_done.notify_waiters();
        }
    }
}

/// The engine's view of its socket: each call is the core's own method of that name.
impl Host for Core {
    fn socket_type(&self) -> SocketType {
        self.socket_type
    }
    fn options_snapshot(&self) -> Arc<Options> {
        Core::options_snapshot(self)
    }
    fn monitors(&self) -> &crate::monitor::Monitors {
        &self.monitors
    }
    fn closing(&self) -> &CancellationToken {
        &self.closing
    }
    fn slot_has_pending(&self, slot: PeerId) -> bool {
        Core::slot_has_pending(self, slot)
    }
    fn attach(
        &self,
        slot: Option<PeerId>,
        peer: &PeerInfo,
        minor: u8,
        kill: CancellationToken,
    ) -> std::result::Result<Attached, ConnectionError> {
        Core::attach(self, slot, peer, minor, kill)
    }
    fn set_peer_properties(&self, peer: PeerId, properties: Arc<crate::message::Properties>) {
        self.inbox.set_properties(peer, properties);
    }
    fn detach(&self, peer: PeerId, keep: bool) {
        Core::detach(self, peer, keep)
    }
    fn deliver(&self, peer: PeerId, batch: &mut VecDeque<Message>) -> impl std::future::Future<Output = ()> + Send {
        Core::deliver(self, peer, batch)
    }
    fn peer_subscription(&self, peer: PeerId, topic: &[u8], subscribe: bool) -> std::result::Result<(), LimitError> {
        Core::peer_subscription(self, peer, topic, subscribe)
    }
    fn wait_below_hwm(&self, peer: PeerId) -> impl std::future::Future<Output = ()> + Send {
        Core::wait_below_hwm(self, peer)
    }
}
