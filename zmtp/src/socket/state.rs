//! What a socket knows behind its core's one lock: its peers (live connections and connect-side
//! slots), their order for load balancing, ROUTER routes, subscriptions both ways, and REQ/REP
//! state. Plain data: the pattern rules that read and change it are in `pattern/`.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::mtrie::MTrie;
use super::subscriptions::Subscriptions;
use crate::link::peer_id::{PeerId, PeerMap};
use crate::link::pipe::OutPipe;
use crate::message::Message;

/// One peer: a live connection, or a connect-side slot waiting for (re)connection.
#[derive(Debug)]
pub(crate) struct Peer {
    pub out: Arc<OutPipe>,
    pub routing_id: Bytes,
    /// PUB: the prefixes this peer subscribed to.
    pub subscriptions: Subscriptions,
    pub connected: bool,
    /// The peer's ZMTP minor version (subscription encoding).
    pub minor: u8,
    /// Closes the current connection (handover, disconnect, close).
    pub kill: CancellationToken,
    /// Created by `connect()`: survives disconnects and keeps its queue.
    pub persistent: bool,
    /// CONNECT_ROUTING_ID given to this connect-side peer (ROUTER).
    pub assigned_routing_id: Option<Bytes>,
    /// PUB/XPUB: the last send delivered to this peer (see [`State::send_stamp`]).
    pub sent_stamp: u64,
}

#[derive(Debug, Default)]
pub(crate) struct ReqState {
    /// The peer the outstanding request went to.
    pub awaiting: Option<PeerId>,
    /// REQ_CORRELATE: the id of the outstanding request, sent as 4 bytes in the host's byte
    /// order (libzmq copies its `uint32_t` as is).
    pub request_id: u32,
}

#[derive(Debug, Default)]
pub(crate) struct RepState {
    /// The peer and envelope of the request being answered.
    pub pending: Option<(PeerId, Message)>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub peers: PeerMap<Peer>,
    /// Peers in round-robin order (load balancing, PAIR).
    pub order: Vec<(PeerId, Arc<OutPipe>)>,
    pub cursor: usize,
    /// ROUTER: routing id → peer.
    pub routes: HashMap<Bytes, PeerId>,
    pub next_generated_id: u32,
    /// SUB/XSUB: our subscriptions, refcounted.
    pub subscriptions: Subscriptions,
    /// PUB/XPUB: every peer's subscriptions.
    pub mtrie: MTrie,
    /// PUB/XPUB: numbers each send, for [`Peer::sent_stamp`].
    pub send_stamp: u64,
    pub req: ReqState,
    pub rep: RepState,
    pub closed: bool,
}

/// The result of one send attempt.
pub(crate) enum TrySend {
    Sent,
    /// Every eligible peer is at its HWM (or there is none yet): wait for room, then retry.
    Full(Message),
}
