//! The socket patterns, one module each behind the [`Pattern`] trait: what a pattern does when a
//! connection asks to join and when it has joined, when it leaves, on a send, on a receive and on a
//! subscription. Each pattern owns the state only it needs (ROUTER its routes, PUB its subscribers'
//! prefixes, REQ its outstanding request); the peers all patterns share are [`Peers`]. The
//! strategies patterns share are modules of their own: load balancing ([`lb`]) and distribution by
//! subscription ([`dist`]); fair queueing is the socket's inbox. No sockets and no runtime here, so
//! each pattern is unit-tested by feeding it peer events.
//!
//! | type | module | send | receive |
//! |---|---|---|---|
//! | PAIR | [`pair`] | the one peer (a second is refused) | as queued |
//! | DEALER | [`dealer`] | [`lb`]: round-robin over peers with room | fair-queued (the inbox) |
//! | PUSH, PULL | [`pipeline`] | PUSH: [`lb`] | PULL: fair-queued |
//! | REQ | [`req`] | an empty delimiter (and REQ_CORRELATE id), [`lb`], one at a time | only the awaited peer's reply |
//! | REP | [`rep`] | back along the request's envelope | the envelope kept for the reply |
//! | ROUTER | [`router`] | by routing id (ROUTER_MANDATORY) | the sender's routing id first |
//! | PUB, XPUB | [`xpub`] | [`dist`]: every matching subscriber, once (XPUB_NODROP) | XPUB: notices and messages |
//! | SUB, XSUB | [`xsub`] | XSUB: subscriptions, and everything to every publisher | SUB: filtered |
//! | SERVER, PEER | [`addressed`] | to the peer the message's routing id names | with the sender's routing id |
//! | CLIENT, SCATTER, GATHER, CHANNEL | [`single_frame`] | DEALER's, PUSH's, PAIR's | fair-queued |
//! | RADIO, DISH | [`radio`] | RADIO: to the DISHes that joined the message's group | DISH: its groups' |
//! | STREAM | [`stream`] | raw bytes by routing id (empty: close) | the sender's routing id first; `""` on connect and end |
//!
//! The draft types (the last three rows) carry single-frame messages only: the socket refuses a
//! multipart send (EINVAL) and drops a multipart message received, as libzmq does.
//!
//! Not every rule is here: a SUB's receive-side filter is the inbox's (it must drop what is already
//! queued when a subscription goes), and which peer *commands* a socket heeds is the engine's.

#[cfg(feature = "draft")]
pub(crate) mod addressed;
pub(crate) mod dealer;
pub(crate) mod dist;
pub(crate) mod lb;
pub(crate) mod pair;
pub(crate) mod pipeline;
#[cfg(feature = "draft")]
pub(crate) mod radio;
pub(crate) mod rep;
pub(crate) mod req;
pub(crate) mod router;
#[cfg(feature = "draft")]
pub(crate) mod single_frame;
#[cfg(feature = "draft")]
pub(crate) mod stream;
pub(crate) mod xpub;
#[cfg(feature = "draft")]
pub(crate) mod xpub_manual;
pub(crate) mod xsub;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{BufMut, Bytes, BytesMut};

use super::peers::Peers;
use crate::error::{ConnectionError, Error, LimitError, Result};
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::options::Options;
use crate::wire::SocketType;

/// The boolean options the send path reads (and no connection does): atomics, so a send does not
/// take the options lock.
#[derive(Debug, Default)]
pub(crate) struct HotOptions {
    pub immediate: AtomicBool,
    pub xpub_nodrop: AtomicBool,
    pub router_mandatory: AtomicBool,
    /// ZMQ_INVERT_MATCHING: PUB/XPUB send to the subscribers that do not match.
    pub invert_matching: AtomicBool,
}

/// What a send reads of the options: each atomic only by the pattern that needs it (loading all
/// of them on every send showed as 7 instructions per message), REQ's two options taken by the
/// socket only for a REQ.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendFlags<'a> {
    hot: &'a HotOptions,
    pub req_relaxed: bool,
    pub req_correlate: bool,
    pub xsub_verbose_unsubscribe: bool,
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub only_first_subscribe: bool,
}

/// All options off (tests build other flags from it).
static DEFAULT_HOT: HotOptions = HotOptions {
    immediate: AtomicBool::new(false),
    xpub_nodrop: AtomicBool::new(false),
    router_mandatory: AtomicBool::new(false),
    invert_matching: AtomicBool::new(false),
};

impl Default for SendFlags<'static> {
    fn default() -> Self {
        SendFlags::new(&DEFAULT_HOT)
    }
}

impl<'a> SendFlags<'a> {
    pub fn new(hot: &'a HotOptions) -> Self {
        SendFlags {
            hot,
            req_relaxed: false,
            req_correlate: false,
            xsub_verbose_unsubscribe: false,
            only_first_subscribe: false,
        }
    }

    /// IMMEDIATE: queue only for connected peers.
    #[inline]
    pub fn immediate(&self) -> bool {
        self.hot.immediate.load(Ordering::Relaxed)
    }

    /// ROUTER_MANDATORY: unroutable is an error, full is a wait.
    #[inline]
    pub fn router_mandatory(&self) -> bool {
        self.hot.router_mandatory.load(Ordering::Relaxed)
    }

    /// INVERT_MATCHING: publish to the subscribers that do not match.
    #[inline]
    pub fn invert_matching(&self) -> bool {
        // Without feature `draft` nothing sets it, and the inverted path is not linked.
        cfg!(feature = "draft") && self.hot.invert_matching.load(Ordering::Relaxed)
    }

    /// XPUB_NODROP: wait while a matching subscriber is full.
    #[inline]
    pub fn xpub_nodrop(&self) -> bool {
        self.hot.xpub_nodrop.load(Ordering::Relaxed)
    }
}

/// The result of one send attempt.
pub(crate) enum TrySend {
    Sent,
    /// Every eligible peer is at its HWM (or there is none yet): wait for room, then retry.
    Full(Message),
}

/// What a receive does with a message taken from the inbox. Fixed per pattern, so the socket takes
/// its lock on a receive only for the patterns that keep receive state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvRule {
    /// This type never receives (PUSH, PUB).
    NotSupported,
    /// The message as queued.
    AsQueued,
    /// The sender's routing id as a first frame (ROUTER).
    RoutingIdFirst,
    /// [`Pattern::check_recv`] before and [`Pattern::on_recv`] on each message (REQ, REP, DISH).
    Stateful,
    /// Single-frame messages as queued; multipart ones are dropped (the draft types: a SERVER's
    /// and PEER's carry the sender's routing id from the connection's `Meta`).
    #[cfg(feature = "draft")]
    SingleFrame,
}

/// A message the socket's own application is told of, queued as if `from` had sent it (XPUB's
/// subscription notices).
pub(crate) type Notice = (PeerId, Message);

/// One socket pattern's rules and state. Every hook but `send` has the default of a pattern that
/// does nothing there.
pub(crate) trait Pattern: Send + Sync + fmt::Debug {
    /// Whether a connection that finished its handshake may join (`slot`: the connect-side peer it
    /// fills), and the routing id it joins under (ROUTER). Called before the peer exists.
    fn admit(
        &mut self,
        _peers: &Peers,
        _slot: Option<PeerId>,
        _announced: &Bytes,
        _options: &Options,
    ) -> Result<Option<Bytes>, ConnectionError> {
        Ok(None)
    }

    /// The connection joined as `id` under `routing_id` (from [`Pattern::admit`]): what it is
    /// sent first.
    fn attached(&mut self, _peers: &Peers, _id: PeerId, _routing_id: Option<Bytes>, _options: &Options) {}

    /// `id`'s connection ended; `removed`: the peer goes too (else its connect-side slot stays
    /// for the reconnect). Called while `id` is still in the peers.
    fn detached(&mut self, _id: PeerId, _removed: bool, _options: &Options, _notices: &mut Vec<Notice>) {}

    /// One non-blocking send of a non-empty message.
    fn send(&mut self, peers: &mut Peers, msg: Message, flags: &SendFlags<'_>) -> Result<TrySend>;

    /// Sends from the front of `batch` (non-empty messages) what goes without waiting. Returns how
    /// many slots it consumed (the caller drops them: each left empty, or as it was where a run
    /// was encoded from it) and the error that
    /// stopped it, if any (the last consumed message then failed). By default one
    /// [`send`](Pattern::send) per message; load balancing to a single peer pushes the run at once.
    fn send_many(&mut self, peers: &mut Peers, batch: &mut [Message], flags: &SendFlags<'_>) -> (usize, Result<()>) {
        send_each(batch, |msg| self.send(peers, msg, flags))
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::AsQueued
    }

    /// Whether a receive is allowed now ([`RecvRule::Stateful`] only).
    fn check_recv(&self) -> Result<()> {
        Ok(())
    }

    /// What the application gets of a message `from` sent, or `None` to skip it
    /// ([`RecvRule::Stateful`] only).
    fn on_recv(&mut self, _from: PeerId, msg: Message, _correlate: bool) -> Option<Message> {
        Some(msg)
    }

    /// A SUBSCRIBE/CANCEL from a peer; a notice for the application if the pattern tells it.
    /// Beyond the peer's limits it is an error, and the connection is closed.
    fn peer_subscription(
        &mut self,
        _peer: PeerId,
        _topic: &[u8],
        _subscribe: bool,
        _options: &Options,
    ) -> Result<Option<Notice>, LimitError> {
        Ok(None)
    }

    /// `subscribe()` / `unsubscribe()` by the application (SUB, XSUB).
    fn local_subscription(
        &mut self,
        _peers: &Peers,
        _topic: &[u8],
        _subscribe: bool,
        _options: &Options,
    ) -> Result<()> {
        Err(Error::NotSupported(self.socket_type()))
    }

    /// A connect-side peer was created: the routing id it is to join under (PEER, SERVER).
    fn reserve_routing_id(&mut self, _slot: PeerId) -> Option<Bytes> {
        None
    }

    /// A JOIN/LEAVE from a peer (RADIO). Beyond the peer's limits it is an error, and the
    /// connection is closed.
    fn peer_group(&mut self, _peer: PeerId, _group: &[u8], _join: bool, _options: &Options) -> Result<(), LimitError> {
        Ok(())
    }

    /// Whether the application receives an empty message (after the routing id) when a peer
    /// attaches (STREAM_NOTIFY).
    fn notifies_connect(&self, _options: &Options) -> bool {
        false
    }

    /// A RADIO's udp endpoint: `peer` gets every group's messages.
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    fn takes_every_group(&mut self, _peer: PeerId) {}

    /// `join()` / `leave()` by the application (DISH).
    fn local_group(&mut self, _peers: &Peers, _group: &[u8], _join: bool) -> Result<()> {
        Err(Error::NotSupported(self.socket_type()))
    }

    /// ZMQ_TOPICS_COUNT: the subscriptions this socket holds (PUB/XPUB: distinct prefixes its
    /// subscribers want; SUB/XSUB: its own), or `None` for the other types.
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    fn topics_count(&self) -> Option<usize> {
        None
    }

    /// ROUTER: the peer with this routing id.
    fn peer_by_routing_id(&self, _routing_id: &[u8]) -> Option<PeerId> {
        None
    }

    /// ROUTER: the routing ids of connected peers.
    fn routing_ids(&self) -> Vec<Bytes> {
        Vec::new()
    }

    fn socket_type(&self) -> SocketType;
}

/// One socket's pattern. An enum rather than a `Box<dyn Pattern>` so that a send, the one hook on
/// the hot path, is dispatched statically and inlined (a virtual call there cost ~26 instructions
/// per message, 3.8% of a PUSH's send side under callgrind); every other hook goes through
/// `Deref` to the trait object. The patterns with tables of their own (REP, ROUTER, XPUB, XSUB: up to
/// 184 bytes) are boxed, so that every other socket (a DEALER, a PUSH) carries only its own few bytes.
#[derive(Debug)]
pub(crate) enum AnyPattern {
    Pair(pair::Pair),
    Dealer(dealer::Dealer),
    Push(pipeline::Push),
    Pull(pipeline::Pull),
    Req(req::Req),
    Rep(Box<rep::Rep>),
    Router(Box<router::Router>),
    XPub(Box<xpub::XPub>),
    XSub(Box<xsub::XSub>),
    /// The draft types and STREAM (feature `draft`), through the trait object: their send is not
    /// on the classic types' path, and without the feature this is [`Unavailable`].
    Other(Box<dyn Pattern>),
}

macro_rules! each_pattern {
    ($value:expr, $p:ident => $body:expr) => {
        each_pattern!(@arms $value, $p => $body; inline: Pair, Dealer, Push, Pull, Req; boxed: Rep, Router, XPub, XSub, Other)
    };
    (@arms $value:expr, $p:ident => $body:expr; inline: $($inline:ident),*; boxed: $($boxed:ident),*) => {
        match $value {
            $(AnyPattern::$inline($p) => $body,)*
            $(AnyPattern::$boxed(boxed) => {
                let $p = &mut **boxed;
                $body
            })*
        }
    };
}

impl AnyPattern {
    /// The pattern of a new socket of this type.
    pub fn for_type(kind: SocketType) -> Self {
        match kind {
            SocketType::Pair => AnyPattern::Pair(pair::Pair),
            SocketType::Dealer => AnyPattern::Dealer(dealer::Dealer),
            SocketType::Push => AnyPattern::Push(pipeline::Push),
            SocketType::Pull => AnyPattern::Pull(pipeline::Pull),
            SocketType::Req => AnyPattern::Req(req::Req::new()),
            SocketType::Rep => AnyPattern::Rep(Box::default()),
            SocketType::Router => AnyPattern::Router(Box::new(router::Router::new())),
            SocketType::Pub => AnyPattern::XPub(Box::new(xpub::XPub::new(false))),
            SocketType::XPub => AnyPattern::XPub(Box::new(xpub::XPub::new(true))),
            SocketType::Sub => AnyPattern::XSub(Box::new(xsub::XSub::new(false))),
            SocketType::XSub => AnyPattern::XSub(Box::new(xsub::XSub::new(true))),
            other => AnyPattern::Other(draft_pattern(other)),
        }
    }

    /// [`Pattern::send`], statically dispatched.
    #[inline]
    pub fn send(&mut self, peers: &mut Peers, msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        each_pattern!(self, p => p.send(peers, msg, flags))
    }

    /// [`Pattern::send_many`], statically dispatched.
    pub fn send_many(
        &mut self,
        peers: &mut Peers,
        batch: &mut [Message],
        flags: &SendFlags<'_>,
    ) -> (usize, Result<()>) {
        each_pattern!(self, p => p.send_many(peers, batch, flags))
    }
}

/// [`Pattern::send_many`] as one `send` per message.
pub(crate) fn send_each(
    batch: &mut [Message],
    mut send: impl FnMut(Message) -> Result<TrySend>,
) -> (usize, Result<()>) {
    for (i, slot) in batch.iter_mut().enumerate() {
        match send(std::mem::take(slot)) {
            Ok(TrySend::Sent) => {}
            Ok(TrySend::Full(msg)) => {
                *slot = msg;
                return (i, Ok(()));
            }
            Err(e) => return (i + 1, Err(e)),
        }
    }
    (batch.len(), Ok(()))
}

/// The pattern of a draft type or STREAM.
#[cfg(feature = "draft")]
fn draft_pattern(kind: SocketType) -> Box<dyn Pattern> {
    match kind {
        SocketType::Server | SocketType::Peer => Box::new(addressed::Addressed::new(kind)),
        SocketType::Client | SocketType::Scatter => Box::new(single_frame::Balanced(kind)),
        SocketType::Gather => Box::new(single_frame::Gather),
        SocketType::Channel => Box::new(single_frame::Channel),
        SocketType::Radio => Box::new(radio::Radio::default()),
        SocketType::Dish => Box::new(radio::Dish::default()),
        SocketType::Stream => Box::new(stream::Stream::new()),
        classic => unreachable!("{classic} has a pattern of its own"),
    }
}

/// Without feature `draft`, the draft types and STREAM are [`Unavailable`].
#[cfg(not(feature = "draft"))]
fn draft_pattern(kind: SocketType) -> Box<dyn Pattern> {
    Box::new(Unavailable(kind))
}

/// A socket type this build leaves out (feature `draft` off): it refuses every peer, and sends
/// and receives nothing ([`Error::NotSupported`]).
#[cfg_attr(feature = "draft", allow(dead_code))]
#[derive(Debug)]
pub(crate) struct Unavailable(pub SocketType);

impl Pattern for Unavailable {
    fn admit(
        &mut self,
        _: &Peers,
        _: Option<PeerId>,
        _: &Bytes,
        _: &Options,
    ) -> Result<Option<Bytes>, ConnectionError> {
        Err(ConnectionError::PeerViolation("this build has no draft socket types (feature `draft`)"))
    }

    fn send(&mut self, _: &mut Peers, _: Message, _: &SendFlags<'_>) -> Result<TrySend> {
        Err(Error::NotSupported(self.0))
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::NotSupported
    }

    fn socket_type(&self) -> SocketType {
        self.0
    }
}

/// A SERVER's or PEER's routing id from its inbox form (4 bytes, big-endian); 0 for anything else.
pub(crate) fn routing_id_of(bytes: &[u8]) -> u32 {
    bytes.try_into().map_or(0, u32::from_be_bytes)
}

impl std::ops::Deref for AnyPattern {
    type Target = dyn Pattern;
    fn deref(&self) -> &(dyn Pattern + 'static) {
        match self {
            AnyPattern::Pair(p) => p,
            AnyPattern::Dealer(p) => p,
            AnyPattern::Push(p) => p,
            AnyPattern::Pull(p) => p,
            AnyPattern::Req(p) => p,
            AnyPattern::Rep(p) => &**p,
            AnyPattern::Router(p) => &**p,
            AnyPattern::XPub(p) => &**p,
            AnyPattern::XSub(p) => &**p,
            AnyPattern::Other(p) => &**p,
        }
    }
}

impl std::ops::DerefMut for AnyPattern {
    fn deref_mut(&mut self) -> &mut (dyn Pattern + 'static) {
        each_pattern!(self, p => p)
    }
}

/// PROBE_ROUTER: an empty message to a new peer, so a ROUTER learns of us before we send.
pub(crate) fn probe(peers: &Peers, id: PeerId, options: &Options) {
    if options.probe_router
        && let Some(p) = peers.map.get(&id)
    {
        let _ = p.out.try_push(Message::single(Bytes::new()));
    }
}

/// `\x01topic` / `\x00topic`, the message form of a subscription change.
pub(crate) fn subscription_message(topic: &[u8], subscribe: bool) -> Message {
    let mut frame = BytesMut::with_capacity(topic.len() + 1);
    frame.put_u8(subscribe as u8);
    frame.put_slice(topic);
    Message::single(frame.freeze())
}

#[cfg(test)]
pub(crate) mod testing {
    //! Peers whose queues the tests read, joined and left through a pattern's hooks; no runtime.

    use std::collections::VecDeque;
    use std::sync::Arc;

    use bytes::Bytes;
    use tokio_util::sync::CancellationToken;

    use crate::error::ConnectionError;
    use crate::link::peer_id::PeerId;
    use crate::link::pipe::{OutPipe, Outbound};
    use crate::link::waiters::Waiters;
    use crate::message::Message;
    use crate::options::Options;
    use crate::socket::pattern::{Notice, Pattern};
    use crate::socket::peers::{Peer, Peers};

    /// A connection `id` (message HWM `hwm`) announcing `identity` asks to join; its routing id.
    pub fn join(
        pattern: &mut dyn Pattern,
        peers: &mut Peers,
        id: PeerId,
        identity: &'static str,
        hwm: usize,
        options: &Options,
    ) -> Result<Option<Bytes>, ConnectionError> {
        let slot = peers.map.contains_key(&id).then_some(id);
        let routing_id = pattern.admit(peers, slot, &Bytes::from_static(identity.as_bytes()), options)?;
        if slot.is_none() {
            let out = Arc::new(OutPipe::new(hwm, 0, false, Arc::new(Waiters::default())));
            let peer = Peer {
                out,
                connected: true,
                minor: 1,
                kill: CancellationToken::new(),
                persistent: false,
                assigned_routing_id: None,
            };
            peers.insert(id, peer);
        }
        peers.map.get_mut(&id).expect("joined").connected = true;
        pattern.attached(peers, id, routing_id.clone(), options);
        Ok(routing_id)
    }

    /// [`join`] with default options, which must succeed.
    pub fn add_peer(
        pattern: &mut dyn Pattern,
        peers: &mut Peers,
        id: PeerId,
        identity: &'static str,
        hwm: usize,
    ) -> PeerId {
        join(pattern, peers, id, identity, hwm, &Options::default()).expect("admitted");
        id
    }

    /// `id` leaves (and is removed unless `keep`); the notices it caused.
    pub fn leave(
        pattern: &mut dyn Pattern,
        peers: &mut Peers,
        id: PeerId,
        keep: bool,
        options: &Options,
    ) -> Vec<Notice> {
        let mut notices = Vec::new();
        pattern.detached(id, !keep, options, &mut notices);
        if keep {
            peers.map.get_mut(&id).expect("kept").connected = false;
        } else {
            peers.remove(id);
        }
        notices
    }

    /// Everything queued for a peer, as text frames (commands as `["SUBSCRIBE", topic]`).
    pub fn taken(peers: &Peers, id: PeerId) -> Vec<Vec<String>> {
        let mut items = VecDeque::new();
        peers.map[&id].out.drain(&mut items);
        items
            .into_iter()
            .flat_map(|item| match item {
                Outbound::Subscribe(topic, on) => {
                    vec![vec![if on { "SUBSCRIBE" } else { "CANCEL" }.to_owned(), text(&topic)]]
                }
                Outbound::Join(group, on) => vec![vec![if on { "JOIN" } else { "LEAVE" }.to_owned(), text(&group)]],
                item => item.messages().map(frames).collect(),
            })
            .collect()
    }

    pub fn text(frame: &[u8]) -> String {
        String::from_utf8_lossy(frame).into_owned()
    }

    pub fn frames(m: &Message) -> Vec<String> {
        m.iter().map(|f| text(f)).collect()
    }

    pub fn notices(list: &[Notice]) -> Vec<(PeerId, String)> {
        list.iter().map(|(id, m)| (*id, frames(m).concat().replace('\x01', "+").replace('\x00', "-"))).collect()
    }

    pub fn msg(frames: &[&'static str]) -> Message {
        frames.iter().map(|f| Bytes::from_static(f.as_bytes())).collect()
    }
}
