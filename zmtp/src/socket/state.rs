//! What a socket knows behind its core's one lock: its peers (live connections and connect-side
//! slots) in load-balancing order, and its pattern with the pattern's own state (ROUTER's routes,
//! PUB's subscriptions, REQ's outstanding request, ...). The peers are plain data; the rules that
//! read and change them are the pattern's, in `pattern/`.

use std::sync::Arc;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::pattern::Pattern;
use crate::link::peer_id::{PeerId, PeerMap};
use crate::link::pipe::OutPipe;
use crate::message::Message;

/// One peer: a live connection, or a connect-side slot waiting for (re)connection.
#[derive(Debug)]
pub(crate) struct Peer {
    pub out: Arc<OutPipe>,
    pub connected: bool,
    /// The peer's ZMTP minor version (subscription encoding).
    pub minor: u8,
    /// Closes the current connection (handover, disconnect, close).
    pub kill: CancellationToken,
    /// Created by `connect()`: survives disconnects and keeps its queue.
    pub persistent: bool,
    /// CONNECT_ROUTING_ID given to this connect-side peer (ROUTER).
    pub assigned_routing_id: Option<Bytes>,
}

/// Every peer of a socket, and the round-robin order load balancing (and PAIR) walks.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    pub map: PeerMap<Peer>,
    /// Peers in round-robin order, each with its pipe (one lookup less per send).
    pub order: Vec<(PeerId, Arc<OutPipe>)>,
    /// Where the next round-robin send starts.
    pub cursor: usize,
}

impl Peers {
    pub fn insert(&mut self, id: PeerId, peer: Peer) {
        self.order.push((id, peer.out.clone()));
        self.map.insert(id, peer);
    }

    pub fn remove(&mut self, id: PeerId) -> Option<Peer> {
        self.order.retain(|(p, _)| *p != id);
        self.map.remove(&id)
    }

    /// Whether some peer other than `except` has a live connection.
    pub fn any_connected_but(&self, except: Option<PeerId>) -> bool {
        self.map.iter().any(|(id, p)| p.connected && Some(*id) != except)
    }
}

#[derive(Debug)]
pub(crate) struct State {
    pub peers: Peers,
    pub pattern: Box<dyn Pattern>,
    pub closed: bool,
}

/// The result of one send attempt.
pub(crate) enum TrySend {
    Sent,
    /// Every eligible peer is at its HWM (or there is none yet): wait for room, then retry.
    Full(Message),
}
