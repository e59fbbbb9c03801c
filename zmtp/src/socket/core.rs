//! The state a socket shares with its connections: its options, its peers and its pattern behind one
//! lock, its inbox, and the signals its tasks wait on. Connections call `attach`/`detach`/`deliver`
//! (through the engine's [`Host`] interface); the public `Socket` calls `try_send`/`try_recv`. The
//! rules of each socket type are its pattern's (`pattern/`); nothing here parses bytes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::ahead::TakenAhead;
use super::inbox::{Inbox, Pushed};
pub(crate) use super::pattern::TrySend;
use super::pattern::{self, AnyPattern, HotOptions, RecvRule, SendFlags, router};
use super::peers::{Peer, Peers};
use crate::encoded::EncodedBatch;
use crate::engine::{Attached, Host};
use crate::error::{ConnectionError, Error, LimitError, Result};
use crate::link::live::LiveTasks;
use crate::link::peer_id::PeerId;
use crate::link::pipe::OutPipe;
pub(crate) use crate::link::waiters::Waiters;
use crate::message::Message;
use crate::options::Options;
use crate::wire::{PeerInfo, SocketType};

/// The options of every socket that has not changed one: a socket takes a copy of its own (696
/// bytes) only when it sets an option (see [`OptionsGuard`]), so a socket used with the defaults
/// holds none.
static DEFAULT_OPTIONS: std::sync::LazyLock<Arc<Options>> = std::sync::LazyLock::new(|| Arc::new(Options::default()));

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

/// What the core's one lock guards: the peers, and the pattern with its own state.
#[derive(Debug)]
pub(crate) struct State {
    pub peers: Peers,
    pub pattern: AnyPattern,
    pub closed: bool,
}

/// Everything a socket's connections share.
#[derive(Debug)]
pub(crate) struct Core {
    pub socket_type: SocketType,
    /// The pattern's receive rule, kept here so a receive takes the state lock only for REQ/REP.
    recv_rule: RecvRule,
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
    pub live: Arc<LiveTasks>,
    pub monitors: crate::monitor::Monitors,
    /// Set by `close`; read on every receive, so an atomic rather than the state lock.
    pub closed: std::sync::atomic::AtomicBool,
    /// Boolean options the send path reads, kept out of the options lock.
    pub hot: HotOptions,
    /// `disconnect` was called (RECONNECT_STOP_AFTER_DISCONNECT).
    pub disconnected: std::sync::atomic::AtomicBool,
    /// How long a receive spins before it parks, in microseconds (0: it parks at once).
    pub busy_poll_us: std::sync::atomic::AtomicU32,
    /// PULL, SUB: messages taken from the inbox ahead of the application's receives, in order (see
    /// [`Core::try_recv`]).
    ahead: Mutex<TakenAhead>,
}

impl Core {
    pub fn new(socket_type: SocketType) -> Arc<Core> {
        let pattern = AnyPattern::for_type(socket_type);
        let recv_rule = pattern.recv_rule();
        Arc::new(Core {
            socket_type,
            recv_rule,
            options: Mutex::new(DEFAULT_OPTIONS.clone()),
            state: Mutex::new(State { peers: Peers::default(), pattern, closed: false }),
            inbox: Inbox::new(socket_type == SocketType::Sub),
            space: Arc::new(Waiters::default()),
            shutdown: CancellationToken::new(),
            closing: CancellationToken::new(),
            next_peer: AtomicU64::new(1),
            live: Arc::default(),
            monitors: Default::default(),
            closed: Default::default(),
            hot: HotOptions::default(),
            disconnected: Default::default(),
            busy_poll_us: Default::default(),
            ahead: Default::default(),
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

    fn new_peer(&self, peers: &mut Peers, persistent: bool, kill: CancellationToken) -> PeerId {
        let id = self.next_peer.fetch_add(1, Ordering::Relaxed);
        let (sndhwm, sndhwm_bytes, rcvhwm, conflate, assigned_routing_id) = {
            let mut o = self.options();
            // Taken only when set: writing through the guard copies options shared with others.
            let assigned =
                if persistent && o.connect_routing_id.is_some() { o.connect_routing_id.take() } else { None };
            (o.sndhwm, o.sndhwm_bytes, o.rcvhwm, o.conflate, assigned)
        };
        let out = Arc::new(OutPipe::new(sndhwm, sndhwm_bytes, conflate, self.space.clone()));
        let assigned_routing_id = assigned_routing_id.map(Box::new);
        peers.insert(id, Peer { out, connected: false, minor: 1, kill, persistent, assigned_routing_id });
        self.inbox.add_peer(id, rcvhwm, conflate, Bytes::new());
        id
    }

    /// A `connect()` creates its peer at once, so messages queue before the connection exists.
    pub fn add_connect_slot(&self, kill: CancellationToken) -> PeerId {
        let mut state = self.state();
        let State { peers, pattern, .. } = &mut *state;
        let id = self.new_peer(peers, true, kill);
        // PEER (and SERVER) name a connect-side peer at once, so `connect_peer` can return its id
        // before the connection is up; it keeps the id across reconnects, as libzmq's pipe does.
        if let Some(rid) = pattern.reserve_routing_id(id) {
            peers.map.get_mut(&id).expect("just added").assigned_routing_id = Some(Box::new(rid));
        }
        drop(state);
        self.space.wake();
        id
    }

    /// A connection finished its handshake: join the socket, if the pattern admits it.
    pub fn attach(
        &self,
        slot: Option<PeerId>,
        info: &PeerInfo,
        minor: u8,
        kill: CancellationToken,
    ) -> Result<Attached, ConnectionError> {
        let options = self.options_snapshot();
        let mut state = self.state();
        // A closing socket still lets connect-side peers in: they come to flush what is queued for them.
        if state.closed && slot.is_none() {
            return Err(ConnectionError::SocketClosed);
        }
        let State { peers, pattern, .. } = &mut *state;
        let routing_id = pattern.admit(peers, slot, &info.identity, &options)?;
        let id = match slot {
            Some(id) if peers.map.contains_key(&id) => id,
            Some(_) => return Err(ConnectionError::SocketClosed),
            None => self.new_peer(peers, false, kill.clone()),
        };
        let peer = peers.map.get_mut(&id).expect("peer exists");
        peer.connected = true;
        peer.minor = minor;
        peer.kill = kill.clone();
        let out = peer.out.clone();
        if let Some(rid) = &routing_id {
            self.inbox.set_routing_id(id, rid.clone());
            #[cfg(feature = "draft")]
            if matches!(self.socket_type, SocketType::Server | SocketType::Peer) {
                self.inbox.set_message_routing_id(id, pattern::routing_id_of(rid));
            }
        }
        let known_id = routing_id.clone().or_else(|| (!info.identity.is_empty()).then(|| info.identity.clone()));
        if pattern.notifies_connect(&options) {
            self.inbox.push_unbounded(id, Message::single(Bytes::new()));
        }
        pattern.attached(peers, id, routing_id, &options);
        #[cfg(feature = "draft")]
        if let Some(hello) = options.hello_msg.clone().filter(|_| self.socket_type.sends_hello_msg()) {
            out.push_first(Message::single(hello));
        }
        drop(state);
        self.space.wake();
        Ok(Attached { peer: id, out, routing_id: known_id })
    }

    /// ROUTER: closes the connection of the peer with this routing id. An accepted peer is removed
    /// at once with everything queued for it; a connected one is reconnected (keeping its queue).
    /// False when no peer has that routing id.
    pub fn drop_route(&self, routing_id: &[u8]) -> bool {
        let (id, persistent) = {
            let state = self.state();
            let Some(id) = state.pattern.peer_by_routing_id(routing_id) else { return false };
            let Some(peer) = state.peers.map.get(&id) else { return false };
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
        let options = self.options_snapshot();
        let mut state = self.state();
        let Some(peer) = state.peers.map.get(&id) else {
            return;
        };
        let persistent = peer.persistent;
        let keep = keep && persistent && !state.closed;
        self.leave(&mut state, id, !keep, &options);
        #[cfg(feature = "draft")]
        if !state.closed {
            self.tell_end(persistent, keep, id, &options);
        }
        if keep {
            let peer = state.peers.map.get_mut(&id).expect("present");
            peer.connected = false;
            peer.out.purge(self.hot.immediate.load(Ordering::Relaxed));
        } else {
            self.remove_peer_locked(&mut state, id);
        }
    }

    /// Tells the pattern that `id` left, and the application what the pattern wants it told.
    fn leave(&self, state: &mut State, id: PeerId, removed: bool, options: &Options) {
        let mut notices = Vec::new();
        state.pattern.detached(id, removed, options, &mut notices);
        for (from, notice) in notices {
            self.inbox.push_unbounded(from, notice);
        }
    }

    /// DISCONNECT_MSG for a peer we accepted, HICCUP_MSG for a connection we made that will be
    /// remade: what the application hears of a connection's end (after ROUTER_NOTIFY's notice).
    #[cfg(feature = "draft")]
    fn tell_end(&self, persistent: bool, keep: bool, id: PeerId, options: &Options) {
        let said = match (persistent, keep) {
            (false, _) if self.socket_type.receives_disconnect_msg() => options.disconnect_msg.clone(),
            (true, true) if self.socket_type.receives_hiccup_msg() => options.hiccup_msg.clone(),
            _ => None,
        };
        if let Some(said) = said {
            self.inbox.push_unbounded(id, Message::single(said));
        }
    }

    fn remove_peer_locked(&self, state: &mut State, id: PeerId) {
        if let Some(peer) = state.peers.remove(id) {
            peer.kill.cancel();
            peer.out.close();
        }
        self.inbox.detach_peer(id);
        // A sender or `flushed` waiting on this peer finds it gone.
        self.space.wake();
    }

    /// ROUTER: whether everything queued for the peer with this routing id has been written to
    /// its connection; `None` when no peer has it.
    pub fn route_drained(&self, routing_id: &[u8]) -> Option<bool> {
        let state = self.state();
        let id = state.pattern.peer_by_routing_id(routing_id)?;
        Some(state.peers.map.get(&id)?.out.is_drained())
    }

    /// `disconnect()`: drop the slot and its queue, closing its connection.
    pub fn remove_slot(&self, id: PeerId) {
        let options = self.options_snapshot();
        let mut state = self.state();
        if state.peers.map.contains_key(&id) {
            self.leave(&mut state, id, true, &options);
        }
        self.remove_peer_locked(&mut state, id);
        self.inbox.remove_peer(id);
        drop(state);
        // After the inbox: nothing more of the peer's can be taken ahead.
        if self.takes_ahead() {
            self.lock_ahead().drop_peer(id);
        }
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

    /// A subscription change from a subscriber (PUB/XPUB side), with the notice the pattern
    /// gives the application (see [`super::pattern::xpub`]). A subscription beyond the peer's limits
    /// (`max_subscriptions`, `max_subscription_bytes`) is refused, and the caller closes the
    /// connection.
    /// The monitor's account of a subscription or group change from `peer`.
    #[cfg(feature = "draft")]
    fn tell_subscription(&self, peer: PeerId, topic: &[u8], on: bool) {
        if !self.monitors.active() {
            return;
        }
        let routing_id = self.inbox.routing_id(peer).filter(|rid| !rid.is_empty());
        let topic = Bytes::copy_from_slice(topic);
        self.monitors.emit(|| match on {
            true => crate::monitor::MonitorEvent::Subscribed { topic, routing_id },
            false => crate::monitor::MonitorEvent::Unsubscribed { topic, routing_id },
        });
    }

    pub fn peer_subscription(&self, peer: PeerId, topic: &[u8], subscribe: bool) -> Result<(), LimitError> {
        if let Some(notice) = self.subscription_notice(peer, topic, subscribe)? {
            self.inbox.push_unbounded(peer, notice);
        }
        Ok(())
    }

    /// Applies a subscription change from `peer`; the notice for the application, if it is told.
    pub fn subscription_notice(
        &self,
        peer: PeerId,
        topic: &[u8],
        subscribe: bool,
    ) -> Result<Option<Message>, LimitError> {
        #[cfg(feature = "draft")]
        self.tell_subscription(peer, topic, subscribe);
        let options = self.options_snapshot();
        let notice = self.state().pattern.peer_subscription(peer, topic, subscribe, &options)?;
        Ok(notice.map(|(_, notice)| notice))
    }

    /// SUB/XSUB: subscribe/unsubscribe locally and tell every publisher (see [`super::pattern::xsub`]);
    /// a SUB's inbox filters by the same prefixes.
    pub fn peer_group(&self, peer: PeerId, group: &[u8], join: bool) -> Result<(), LimitError> {
        #[cfg(feature = "draft")]
        self.tell_subscription(peer, group, join);
        let options = self.options_snapshot();
        self.state().pattern.peer_group(peer, group, join, &options)
    }

    /// `join()` / `leave()` by the application (DISH).
    pub fn local_group(&self, group: &[u8], join: bool) -> Result<()> {
        let mut state = self.state();
        let State { peers, pattern, .. } = &mut *state;
        pattern.local_group(peers, group, join)
    }

    pub fn local_subscription(&self, topic: &[u8], subscribe: bool) -> Result<()> {
        let mut state = self.state();
        let State { peers, pattern, .. } = &mut *state;
        let options = self.options_snapshot();
        pattern.local_subscription(peers, topic, subscribe, &options)?;
        self.inbox.filter_update(topic, subscribe);
        self.refilter_taken_ahead();
        Ok(())
    }

    /// One non-blocking send attempt with the socket type's pattern (see [`super::pattern`]).
    pub fn try_send(&self, msg: Message) -> Result<TrySend> {
        Self::check_sendable(self.socket_type, &msg)?;
        let flags = self.send_flags();
        let mut state = self.state();
        if state.closed {
            return Err(Error::Closed);
        }
        let State { peers, pattern, .. } = &mut *state;
        pattern.send(peers, msg, &flags)
    }

    /// Sends from the front of `batch` under one lock of the socket's state, as many as go without
    /// waiting. Returns how many slots it consumed (sent: the caller drops them, each left empty
    /// or, in an encoded run, as it was) and whether it
    /// stopped on an error: then the last consumed message is the one that failed, dropped as a
    /// failed `send` drops it.
    pub fn try_send_many(&self, batch: &mut [Message]) -> (usize, Result<()>) {
        // The pattern sees only messages that pass the checks; the first that fails stops the batch.
        let valid = batch.iter().position(|msg| Self::check_sendable(self.socket_type, msg).is_err());
        let flags = self.send_flags();
        let mut state = self.state();
        if state.closed {
            return (0, Err(Error::Closed));
        }
        let State { peers, pattern, .. } = &mut *state;
        let end = valid.unwrap_or(batch.len());
        let (sent, result) = pattern.send_many(peers, &mut batch[..end], &flags);
        match valid {
            Some(bad) if sent == bad && result.is_ok() => {
                let error = Self::check_sendable(self.socket_type, &std::mem::take(&mut batch[bad]));
                (bad + 1, error)
            }
            _ => (sent, result),
        }
    }

    /// ROUTER: queues `batch` whole for the peer `routing_id` unless its queue is at its HWM
    /// (`Ok(false)`, batch untouched). As a ROUTER's `send` does, a batch for an unknown peer, or
    /// for a full one without ROUTER_MANDATORY, is dropped (and counts as sent); with it, an
    /// unknown peer is [`Error::HostUnreachable`].
    pub fn try_send_encoded(&self, routing_id: &[u8], batch: &mut EncodedBatch) -> Result<bool> {
        if self.socket_type != SocketType::Router {
            return Err(Error::NotSupported(self.socket_type));
        }
        if self.options().conflate {
            return Err(Error::InvalidArgument("CONFLATE keeps one message: a batch of them cannot be sent"));
        }
        let mandatory = self.send_flags().router_mandatory();
        let state = self.state();
        if state.closed {
            return Err(Error::Closed);
        }
        if batch.is_empty() {
            return Ok(true);
        }
        let Some(peer) = state.pattern.peer_by_routing_id(routing_id).and_then(|id| state.peers.map.get(&id)) else {
            drop(state);
            return match mandatory {
                true => Err(Error::HostUnreachable(Bytes::copy_from_slice(routing_id))),
                false => {
                    batch.clear();
                    Ok(true)
                }
            };
        };
        let (bytes, messages) = batch.take();
        let pushed = peer.out.try_push_encoded(bytes, messages);
        drop(state);
        match pushed {
            Ok(()) => Ok(true),
            // Dropped as `send` drops a message for a full peer (outside the socket's lock).
            Err(_) if !mandatory => Ok(true),
            Err(bytes) => {
                // Not queued: back into the batch, which the take emptied.
                batch.restore(bytes, messages);
                Ok(false)
            }
        }
    }

    /// The checks every message passes before its pattern sees it.
    #[inline]
    fn check_sendable(socket_type: SocketType, msg: &Message) -> Result<()> {
        if msg.is_empty() {
            return Err(Error::EmptyMessage);
        }
        if msg.len() > 1 && socket_type.is_draft() {
            return Err(Error::InvalidArgument("the draft socket types send single-frame messages only"));
        }
        Ok(())
    }

    /// The options the send path reads: atomics, and the options lock only for REQ.
    #[inline]
    fn send_flags(&self) -> SendFlags<'_> {
        let mut flags = SendFlags::new(&self.hot);
        if self.socket_type == SocketType::Req {
            let o = self.options();
            (flags.req_relaxed, flags.req_correlate) = (o.req_relaxed, o.req_correlate);
        }
        #[cfg(feature = "draft")]
        if self.socket_type == SocketType::XSub {
            let o = self.options();
            (flags.xsub_verbose_unsubscribe, flags.only_first_subscribe) =
                (o.xsub_verbose_unsubscribe, o.only_first_subscribe);
        }
        flags
    }

    /// Checks that this socket type can receive at all, and REQ/REP state.
    pub fn check_recv(&self) -> Result<()> {
        match self.recv_rule {
            RecvRule::NotSupported => return Err(Error::NotSupported(self.socket_type)),
            RecvRule::Stateful => self.state().pattern.check_recv()?,
            RecvRule::AsQueued | RecvRule::RoutingIdFirst => {}
            #[cfg(feature = "draft")]
            RecvRule::SingleFrame => {}
        }
        if self.closed.load(Ordering::Relaxed) { Err(Error::Closed) } else { Ok(()) }
    }

    /// Whether a receive takes messages ahead of the application (see [`Core::try_recv`]).
    fn takes_ahead(&self) -> bool {
        matches!(self.socket_type, SocketType::Pull | SocketType::Sub)
    }

    /// Applies SUB's filter, after a change, to what its receives took ahead too: an unsubscribe
    /// drops what is already queued, as in libzmq.
    pub fn refilter_taken_ahead(&self) {
        self.lock_ahead().refilter(&self.inbox);
    }

    fn lock_ahead(&self) -> MutexGuard<'_, TakenAhead> {
        self.ahead.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One non-blocking receive with the pattern's receive rule; messages the pattern skips
    /// (a stale reply, a request without a delimiter) are dropped.
    pub fn try_recv(&self) -> Result<Option<Message>> {
        self.check_recv()?;
        if self.takes_ahead() {
            // A PULL or a SUB takes every message as queued (a SUB's filter aside) and has nothing
            // to do per message, so a receive takes a few ahead under one lock of the inbox and the
            // next receives find them here, under a lock only receivers take: the inbox's lock, its
            // round-robin bookkeeping and a message's moves through a `Received` were a third of a
            // 64-byte message's receive (a quarter of a fan-out subscriber's CPU, where the
            // connection's reader on another thread shares that lock). They count against RCVHWM
            // no more: the socket holds up to [`ahead_for`] more than the HWM (libzmq's pipes let
            // a batch past their HWM too). A SUB's filter is applied again to them when it
            // changes (see [`Core::local_subscription`]).
            let mut ahead = self.lock_ahead();
            if let Some(msg) = ahead.pop_front() {
                return Ok(Some(msg));
            }
            let max = ahead_for(self.options().rcvhwm);
            ahead.refill(&self.inbox, max);
            return Ok(ahead.pop_front());
        }
        while let Some(received) = self.inbox.pop(self.recv_rule == RecvRule::RoutingIdFirst) {
            let taken = match self.recv_rule {
                RecvRule::Stateful => {
                    let correlate = self.socket_type == SocketType::Req && self.options().req_correlate;
                    self.state().pattern.on_recv(received.peer, received.message, correlate)
                }
                _ => self.stateless_take(received),
            };
            if taken.is_some() {
                return Ok(taken);
            }
        }
        Ok(None)
    }

    /// What the application gets of a received message under a stateless receive rule.
    #[inline]
    fn stateless_take(&self, received: super::inbox::Received) -> Option<Message> {
        match self.recv_rule {
            RecvRule::RoutingIdFirst => Some(router::with_routing_id(received.routing_id, received.message)),
            // The draft types drop a multipart message from a peer whole (server.cpp,
            // client.cpp); a SERVER's routing id came with the connection's `Meta`.
            #[cfg(feature = "draft")]
            RecvRule::SingleFrame => (received.message.len() == 1).then_some(received.message),
            RecvRule::AsQueued | RecvRule::NotSupported | RecvRule::Stateful => Some(received.message),
        }
    }

    /// Up to `max` messages appended to `out` under one lock of the inbox; how many. REQ and REP
    /// take one at a time (each receive changes their state), so for them this is `try_recv`.
    pub fn try_recv_many(&self, out: &mut Vec<Message>, max: usize) -> Result<usize> {
        if max == 0 {
            self.check_recv()?;
            return Ok(0);
        }
        if self.recv_rule == RecvRule::Stateful {
            return Ok(self.try_recv()?.map_or(0, |msg| {
                out.push(msg);
                1
            }));
        }
        self.check_recv()?;
        if self.recv_rule == RecvRule::AsQueued {
            // What a receive took ahead comes first.
            let mut early = 0;
            if self.takes_ahead() {
                early = self.lock_ahead().drain_into(out, max);
            }
            return Ok(early + self.inbox.pop_many_into(out, max - early, |_, _| {}));
        }
        let with_routing_id = self.recv_rule == RecvRule::RoutingIdFirst;
        Ok(self.inbox.pop_many(with_routing_id, max, |received| match self.stateless_take(received) {
            Some(msg) => {
                out.push(msg);
                true
            }
            None => false,
        }))
    }

    /// ROUTER: the routing ids of connected peers.
    /// Whether a connect-side peer is still the socket's (it goes when its connect gives up).
    pub fn slot_exists(&self, slot: PeerId) -> bool {
        self.state().peers.map.contains_key(&slot)
    }

    /// The routing id reserved for a connect-side peer (PEER, SERVER).
    pub fn slot_routing_id(&self, slot: PeerId) -> Option<u32> {
        let state = self.state();
        state.peers.map.get(&slot)?.assigned_routing_id.as_deref().map(|rid| pattern::routing_id_of(rid))
    }

    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub fn topics_count(&self) -> Option<usize> {
        self.state().pattern.topics_count()
    }

    pub fn routing_ids(&self) -> Vec<Bytes> {
        self.state().pattern.routing_ids()
    }

    /// Marks the socket closed and tells every connection to flush and stop.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        self.closed.store(true, Ordering::Relaxed);
        self.closing.cancel();
        for p in state.peers.map.values() {
            p.out.close();
        }
        drop(state);
        self.inbox.readable().wake();
        self.space.wake();
    }

    /// Whether a connect-side peer has messages waiting to be written.
    pub fn slot_has_pending(&self, slot: PeerId) -> bool {
        self.state().peers.map.get(&slot).is_some_and(|p| p.out.has_messages())
    }

    /// Resolves once no connection task is running.
    pub async fn wait_connections_done(&self) {
        self.live.all_done().await
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
    fn has_disconnected(&self) -> bool {
        self.disconnected.load(Ordering::Relaxed)
    }
    fn slot_alive(&self, slot: PeerId) -> bool {
        self.slot_exists(slot)
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
        let wanted = self.options().msg_properties;
        self.inbox.set_properties(peer, wanted.then_some(properties));
    }
    fn detach(&self, peer: PeerId, keep: bool) {
        Core::detach(self, peer, keep)
    }
    fn remove_slot(&self, slot: PeerId) {
        Core::remove_slot(self, slot)
    }
    fn live(&self) -> &Arc<LiveTasks> {
        &self.live
    }
    fn deliver(&self, peer: PeerId, batch: &mut VecDeque<Message>) -> impl std::future::Future<Output = ()> + Send {
        Core::deliver(self, peer, batch)
    }
    fn peer_subscription(&self, peer: PeerId, topic: &[u8], subscribe: bool) -> std::result::Result<(), LimitError> {
        Core::peer_subscription(self, peer, topic, subscribe)
    }
    #[cfg(feature = "draft")]
    fn subscription_notice(
        &self,
        peer: PeerId,
        topic: &[u8],
        subscribe: bool,
    ) -> std::result::Result<Option<Message>, LimitError> {
        Core::subscription_notice(self, peer, topic, subscribe)
    }
    fn peer_group(&self, peer: PeerId, group: &[u8], join: bool) -> std::result::Result<(), LimitError> {
        Core::peer_group(self, peer, group, join)
    }
    fn takes_every_group(&self, peer: PeerId) {
        self.state().pattern.takes_every_group(peer);
    }
    fn wait_below_hwm(&self, peer: PeerId) -> impl std::future::Future<Output = ()> + Send {
        Core::wait_below_hwm(self, peer)
    }
}

/// How many messages a PULL's or a SUB's receive takes from its inbox at once (see
/// [`Core::try_recv`]): a thirty-second of RCVHWM, 1 to 32 (32 without a HWM), so a small HWM stays
/// a tight bound.
fn ahead_for(rcvhwm: usize) -> usize {
    if rcvhwm == 0 { AHEAD_MAX } else { (rcvhwm / AHEAD_MAX).clamp(1, AHEAD_MAX) }
}

/// The most messages a PULL's or a SUB's receive takes ahead.
const AHEAD_MAX: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ConnectionInfo;
    use crate::transport::AnyStream;

    /// A connection's whole state lives in its task for as long as it is connected, so it is what
    /// an idle connection costs (with tokio's task header, in 128-byte steps). Bounded here, so that
    /// a change that makes every connection larger fails a test rather than only the bench's memory
    /// row. 1,080 bytes when written (from 1,568: see the engine's comments on what is boxed and why).
    #[tokio::test]
    async fn a_tcp_connection_state_stays_within_its_budget() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let core = Core::new(SocketType::Dealer);
        let info = ConnectionInfo { endpoint: "tcp://test", peer_addr: "peer" };
        let live = core.live().started();
        let connection =
            crate::engine::run(&core, None, AnyStream::Tcp(client), None, CancellationToken::new(), info, live);
        let size = std::mem::size_of_val(&connection);
        assert!(size <= 1_100, "a connection's state grew to {size} bytes");
    }
}
