//! A socket's peers — live connections and connect-side slots — in load-balancing order: plain
//! data every pattern reads. The rules that read and change them are the patterns', in `pattern/`;
//! what only one pattern needs (ROUTER's routes, PUB's subscriptions) is that pattern's own.

use std::sync::Arc;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::link::peer_id::{PeerId, PeerMap};
use crate::link::pipe::OutPipe;

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
    /// Boxed: rarely set, and 24 bytes less in every peer's entry (4 entries for a socket with one).
    pub assigned_routing_id: Option<Box<Bytes>>,
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
        if self.order.is_empty() {
            // Room for exactly one (a vector's first allocation is otherwise room for 4): most
            // sockets have one peer, and every DEALER of a crowd carries this.
            self.order.reserve_exact(1);
        }
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
