//! ROUTER: every peer has a routing id (its own, or one we generate); a received message gets
//! the sender's as its first frame, and a sent message's first frame picks the peer. Unroutable
//! messages are dropped, or refused with ROUTER_MANDATORY; a second peer with a routing id in use
//! is refused, or takes it over with ROUTER_HANDOVER.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::{Notice, Pattern, RecvRule, SendFlags, TrySend, probe};
use crate::error::{ConnectionError, Error, Refusal, Result};
use crate::link::peer_id::{PeerId, PeerMap};
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct Router {
    /// Routing id → peer.
    routes: HashMap<Bytes, PeerId>,
    /// Peer → its routing id.
    names: PeerMap<Bytes>,
    /// The next generated routing id (`0` + 4 bytes, as libzmq).
    next_generated_id: u32,
}

impl Router {
    pub fn new() -> Self {
        Router { routes: HashMap::new(), names: PeerMap::default(), next_generated_id: rand::random::<u32>().max(1) }
    }

    /// The routing id of a connected peer.
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub fn routing_id_of(&self, id: PeerId) -> Option<&Bytes> {
        self.names.get(&id)
    }
}

impl Pattern for Router {
    /// The peer's routing id: CONNECT_ROUTING_ID for a connect-side peer that was given one, else
    /// the one it announced, else a generated one.
    fn admit(
        &mut self,
        peers: &Peers,
        slot: Option<PeerId>,
        announced: &Bytes,
        options: &Options,
    ) -> Result<Option<Bytes>, ConnectionError> {
        let assigned = slot.and_then(|id| peers.map.get(&id)).and_then(|p| p.assigned_routing_id.as_deref());
        let wanted = assigned.unwrap_or(announced);
        if wanted.is_empty() {
            let mut rid = BytesMut::with_capacity(5);
            rid.put_u8(0);
            rid.put_u32(self.next_generated_id);
            self.next_generated_id = self.next_generated_id.wrapping_add(1).max(1);
            return Ok(Some(rid.freeze()));
        }
        if let Some(&holder) = self.routes.get(wanted)
            && Some(holder) != slot
        {
            if !options.router_handover {
                return Err(ConnectionError::Refused(Refusal::DuplicateRoutingId));
            }
            // Handover: the old connection loses the name and is closed.
            self.routes.remove(wanted);
            if let Some(old) = peers.map.get(&holder) {
                old.kill.cancel();
            }
        }
        Ok(Some(wanted.clone()))
    }

    fn attached(&mut self, peers: &Peers, id: PeerId, routing_id: Option<Bytes>, options: &Options) {
        if let Some(rid) = routing_id {
            self.routes.insert(rid.clone(), id);
            self.names.insert(id, rid);
        }
        probe(peers, id, options);
    }

    #[cfg(feature = "draft")]
    fn notifies_connect(&self, options: &Options) -> bool {
        options.router_notify & crate::options::NOTIFY_CONNECT != 0
    }

    /// ROUTER_NOTIFY's disconnect notice: `[id, ""]`, for a peer that had its route.
    fn detached(&mut self, id: PeerId, _: bool, options: &Options, notices: &mut Vec<Notice>) {
        #[cfg(not(feature = "draft"))]
        let _ = (options, &notices);
        if let Some(rid) = self.names.remove(&id)
            && self.routes.get(&rid) == Some(&id)
        {
            self.routes.remove(&rid);
            #[cfg(feature = "draft")]
            if options.router_notify & crate::options::NOTIFY_DISCONNECT != 0 {
                notices.push((id, Message::single(Bytes::new())));
            }
        }
    }

    fn send(&mut self, peers: &mut Peers, mut msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        let rid = msg.pop_front().expect("non-empty");
        if msg.is_empty() {
            // A routing id with nothing after it: dropped, as libzmq does (router.cpp: "malformed
            // message (prefix with no subsequent message) ... silently ignore it").
            return Ok(TrySend::Sent);
        }
        let Some(p) = self.routes.get(&rid).and_then(|id| peers.map.get(id)) else {
            return if flags.router_mandatory() { Err(Error::HostUnreachable(rid)) } else { Ok(TrySend::Sent) };
        };
        match p.out.try_push(msg) {
            Ok(()) => Ok(TrySend::Sent),
            Err(mut msg) if flags.router_mandatory() => {
                msg.push_front(rid);
                Ok(TrySend::Full(msg))
            }
            Err(_) => Ok(TrySend::Sent),
        }
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::RoutingIdFirst
    }

    fn peer_by_routing_id(&self, routing_id: &[u8]) -> Option<PeerId> {
        self.routes.get(routing_id).copied()
    }

    fn routing_ids(&self) -> Vec<Bytes> {
        self.routes.keys().cloned().collect()
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Router
    }
}

/// What a ROUTER's application receives: the sender's routing id, then the message.
#[inline]
pub(crate) fn with_routing_id(routing_id: Bytes, mut msg: Message) -> Message {
    msg.push_front(routing_id);
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::HotOptions;
    use crate::socket::pattern::testing::{add_peer, frames, join, leave, msg, taken};

    #[test]
    fn routes_by_id_and_drops_or_refuses_the_unroutable() {
        let (mut r, mut s) = (Router::new(), Peers::default());
        let a = add_peer(&mut r, &mut s, 1, "alice", 1);
        let hot = HotOptions { router_mandatory: true.into(), ..HotOptions::default() };
        let (lax, mandatory) = (SendFlags::default(), SendFlags::new(&hot));
        assert!(matches!(r.send(&mut s, msg(&["alice", "hi"]), &lax), Ok(TrySend::Sent)));
        assert!(matches!(r.send(&mut s, msg(&["alice", "dropped: full"]), &lax), Ok(TrySend::Sent)));
        assert!(matches!(r.send(&mut s, msg(&["bob", "dropped: unknown"]), &lax), Ok(TrySend::Sent)));
        assert!(matches!(r.send(&mut s, msg(&["bob", "x"]), &mandatory), Err(Error::HostUnreachable(_))));
        let TrySend::Full(back) = r.send(&mut s, msg(&["alice", "waits"]), &mandatory).unwrap() else {
            panic!("full: wait")
        };
        assert_eq!(frames(&back), ["alice", "waits"]);
        assert_eq!(taken(&s, a), [["hi"]]);
        assert_eq!(frames(&with_routing_id(Bytes::from_static(b"alice"), msg(&["m"]))), ["alice", "m"]);
    }

    #[test]
    fn anonymous_peers_get_distinct_generated_ids() {
        let (mut r, mut s) = (Router::new(), Peers::default());
        let o = Options::default();
        let first = join(&mut r, &mut s, 1, "", 10, &o).unwrap().unwrap();
        let second = join(&mut r, &mut s, 2, "", 10, &o).unwrap().unwrap();
        assert_ne!(first, second);
        assert!(first.len() == 5 && first[0] == 0, "libzmq's form: a zero byte and 4 bytes");
        assert_eq!(r.peer_by_routing_id(&second), Some(2));
    }

    #[test]
    fn a_duplicate_id_is_refused_or_handed_over() {
        let (mut r, mut s) = (Router::new(), Peers::default());
        add_peer(&mut r, &mut s, 1, "w", 10);
        let strict = Options::default();
        assert!(matches!(
            join(&mut r, &mut s, 2, "w", 10, &strict),
            Err(ConnectionError::Refused(Refusal::DuplicateRoutingId))
        ));
        let handover = Options { router_handover: true, ..Options::default() };
        join(&mut r, &mut s, 3, "w", 10, &handover).unwrap();
        assert!(s.map[&1].kill.is_cancelled(), "the old holder is closed");
        assert_eq!(r.peer_by_routing_id(b"w"), Some(3));
        leave(&mut r, &mut s, 1, false, &strict);
        assert_eq!(r.peer_by_routing_id(b"w"), Some(3), "the old holder's exit keeps the new route");
        leave(&mut r, &mut s, 3, false, &strict);
        assert!(r.routing_ids().is_empty());
    }
}
