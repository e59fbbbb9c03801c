//! SERVER and PEER (RFC 41, RFC 51; libzmq's server.cpp, peer.cpp): every peer gets a 32-bit
//! routing id, never 0, counted up from a random start; a received message carries its sender's
//! ([`Message::routing_id`]) and a sent one goes to the peer its routing id names. A message for
//! an id that is not connected is refused (EHOSTUNREACH); one for a peer at its HWM waits. Only
//! single-frame messages (the socket refuses more on send and drops them on receive).
//!
//! The id rides in the inbox as the routing-id bytes ROUTER uses (4 bytes, big-endian), so the
//! receive path is ROUTER's. PEER's `connect_peer` needs the id before the connection is up: a
//! connect-side peer has one reserved when it is created ([`Pattern::reserve_routing_id`]) and
//! keeps it across reconnects.

use std::collections::HashMap;

use bytes::Bytes;

use super::{Pattern, RecvRule, SendFlags, TrySend};
use crate::error::{ConnectionError, Error, Result};
use crate::link::peer_id::{PeerId, PeerMap};
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct Addressed {
    kind: SocketType,
    /// Routing id → connected peer.
    routes: HashMap<u32, PeerId>,
    /// Peer → its routing id.
    names: PeerMap<u32>,
    /// The next id to hand out (libzmq starts at a random value too).
    next: u32,
}

use super::routing_id_of;

impl Addressed {
    pub fn new(kind: SocketType) -> Self {
        debug_assert!(matches!(kind, SocketType::Server | SocketType::Peer));
        Addressed { kind, routes: HashMap::new(), names: PeerMap::default(), next: rand::random() }
    }

    fn fresh_id(&mut self) -> u32 {
        loop {
            let id = self.next;
            self.next = self.next.wrapping_add(1);
            // Never 0 (libzmq's "no routing id"), and never one still in use after a wrap.
            if id != 0 && !self.routes.contains_key(&id) {
                return id;
            }
        }
    }
}

impl Pattern for Addressed {
    /// The route exists from now on, so messages to a peer still connecting queue for it (libzmq
    /// creates the pipe at connect time too).
    fn reserve_routing_id(&mut self, slot: PeerId) -> Option<Bytes> {
        let rid = self.fresh_id();
        self.routes.insert(rid, slot);
        self.names.insert(slot, rid);
        Some(Bytes::copy_from_slice(&rid.to_be_bytes()))
    }

    /// A connect-side peer joins under its reserved id, an accepted one under a fresh one.
    fn admit(
        &mut self,
        peers: &Peers,
        slot: Option<PeerId>,
        _: &Bytes,
        _: &Options,
    ) -> Result<Option<Bytes>, ConnectionError> {
        let reserved = slot.and_then(|id| peers.map.get(&id)).and_then(|p| p.assigned_routing_id.as_deref().cloned());
        Ok(Some(reserved.unwrap_or_else(|| Bytes::copy_from_slice(&self.fresh_id().to_be_bytes()))))
    }

    fn attached(&mut self, _: &Peers, id: PeerId, routing_id: Option<Bytes>, _: &Options) {
        if let Some(rid) = routing_id.as_deref().map(routing_id_of) {
            self.routes.insert(rid, id);
            self.names.insert(id, rid);
        }
    }

    /// A connect-side peer that will reconnect (`removed` false) keeps its route.
    fn detached(&mut self, id: PeerId, removed: bool, _: &Options, _: &mut Vec<super::Notice>) {
        if !removed {
            return;
        }
        if let Some(rid) = self.names.remove(&id)
            && self.routes.get(&rid) == Some(&id)
        {
            self.routes.remove(&rid);
        }
    }

    fn send(&mut self, peers: &mut Peers, msg: Message, _: &SendFlags<'_>) -> Result<TrySend> {
        let rid = msg.routing_id().unwrap_or(0);
        let Some(p) = self.routes.get(&rid).and_then(|id| peers.map.get(id)) else {
            return Err(Error::HostUnreachable(Bytes::copy_from_slice(&rid.to_be_bytes())));
        };
        Ok(p.out.try_push(msg).map_or_else(TrySend::Full, |_| TrySend::Sent))
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::SingleFrame
    }

    fn peer_by_routing_id(&self, routing_id: &[u8]) -> Option<PeerId> {
        self.routes.get(&routing_id_of(routing_id)).copied()
    }

    fn routing_ids(&self) -> Vec<Bytes> {
        self.routes.keys().map(|rid| Bytes::copy_from_slice(&rid.to_be_bytes())).collect()
    }

    fn socket_type(&self) -> SocketType {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{join, leave, msg, taken};

    fn id_of(rid: Option<Bytes>) -> u32 {
        routing_id_of(&rid.expect("a routing id"))
    }

    #[test]
    fn peers_get_distinct_nonzero_ids_and_messages_go_by_them() {
        let (mut s, mut peers) = (Addressed::new(SocketType::Server), Peers::default());
        let o = Options::default();
        let a = id_of(join(&mut s, &mut peers, 1, "", 1, &o).unwrap());
        let b = id_of(join(&mut s, &mut peers, 2, "ignored: SERVER has no identities", 10, &o).unwrap());
        assert!(a != 0 && b != 0 && a != b);
        let flags = SendFlags::default();
        assert!(matches!(s.send(&mut peers, msg(&["to a"]).with_routing_id(a), &flags), Ok(TrySend::Sent)));
        assert!(matches!(s.send(&mut peers, msg(&["full"]).with_routing_id(a), &flags), Ok(TrySend::Full(_))));
        assert!(matches!(s.send(&mut peers, msg(&["to b"]).with_routing_id(b), &flags), Ok(TrySend::Sent)));
        assert_eq!(taken(&peers, 1), [["to a"]]);
        assert_eq!(taken(&peers, 2), [["to b"]]);
        assert_eq!(s.peer_by_routing_id(&b.to_be_bytes()), Some(2));
    }

    #[test]
    fn an_unknown_or_missing_id_is_unreachable() {
        let (mut s, mut peers) = (Addressed::new(SocketType::Peer), Peers::default());
        let a = id_of(join(&mut s, &mut peers, 1, "", 10, &Options::default()).unwrap());
        let flags = SendFlags::default();
        assert!(matches!(s.send(&mut peers, msg(&["x"]), &flags), Err(Error::HostUnreachable(_))));
        let other = a.wrapping_add(1000).max(1);
        assert!(matches!(
            s.send(&mut peers, msg(&["x"]).with_routing_id(other), &flags),
            Err(Error::HostUnreachable(_))
        ));
        leave(&mut s, &mut peers, 1, false, &Options::default());
        assert!(matches!(s.send(&mut peers, msg(&["x"]).with_routing_id(a), &flags), Err(Error::HostUnreachable(_))));
        assert!(s.routing_ids().is_empty());
    }

    #[test]
    fn a_connect_side_peer_keeps_its_reserved_id_across_reconnects() {
        let (mut s, mut peers) = (Addressed::new(SocketType::Peer), Peers::default());
        let o = Options::default();
        let reserved = s.reserve_routing_id(5).unwrap();
        assert_eq!(s.peer_by_routing_id(&reserved), Some(5), "routable before it connects");
        join(&mut s, &mut peers, 5, "", 10, &o).unwrap();
        peers.map.get_mut(&5).unwrap().assigned_routing_id = Some(Box::new(reserved.clone()));
        leave(&mut s, &mut peers, 5, true, &o);
        assert_eq!(s.peer_by_routing_id(&reserved), Some(5), "kept while it reconnects");
        assert_eq!(join(&mut s, &mut peers, 5, "", 10, &o).unwrap(), Some(reserved.clone()));
        assert_eq!(s.peer_by_routing_id(&reserved), Some(5));
        leave(&mut s, &mut peers, 5, false, &o);
        assert_eq!(s.peer_by_routing_id(&reserved), None, "gone with the slot");
    }

    #[test]
    fn ids_skip_zero_and_ids_in_use_when_the_counter_wraps() {
        let (mut s, mut peers) = (Addressed::new(SocketType::Server), Peers::default());
        s.next = u32::MAX;
        let o = Options::default();
        assert_eq!(id_of(join(&mut s, &mut peers, 1, "", 10, &o).unwrap()), u32::MAX);
        assert_eq!(id_of(join(&mut s, &mut peers, 2, "", 10, &o).unwrap()), 1, "0 is skipped");
        s.next = u32::MAX;
        assert_eq!(id_of(join(&mut s, &mut peers, 3, "", 10, &o).unwrap()), 2, "ids in use are skipped");
    }
}
