//! STREAM (libzmq's stream.cpp): raw TCP, no ZMTP. Each connection gets a routing id (libzmq's
//! form, a zero byte and 4 bytes counted up from a random start, or CONNECT_ROUTING_ID for a
//! connect), which comes first on what it receives — `[id, bytes]`, the bytes as one read returned
//! them — and picks the connection a send goes to: `[id, bytes]` writes the bytes, `[id, ""]`
//! closes the connection. With STREAM_NOTIFY (the default) the application receives `[id, ""]`
//! when a connection is made and again when the peer ends it. Unknown ids are refused
//! (EHOSTUNREACH) and a full connection makes the send wait, as libzmq's blocking send does.
//!
//! As in libzmq, a connection the application closes says nothing more to it and is not remade
//! (its connect-side slot goes), while one the peer closes is remade under the same routing id.

use bytes::Bytes;

use std::collections::HashSet;

use super::router::Router;
use super::{Notice, Pattern, RecvRule, SendFlags, TrySend};
use crate::error::{ConnectionError, Error, Result};
use crate::link::peer_id::{PeerId, PeerMap};
use crate::link::pipe::Outbound;
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct Stream {
    /// The routes and generated ids are ROUTER's.
    routes: Router,
    /// A connect-side peer's routing id, kept for its reconnects.
    slot_ids: PeerMap<Bytes>,
    /// Peers the application closed (an empty message): their end is not announced.
    closed_here: HashSet<PeerId>,
}

impl Stream {
    pub fn new() -> Self {
        Stream { routes: Router::new(), slot_ids: PeerMap::default(), closed_here: HashSet::new() }
    }
}

impl Pattern for Stream {
    fn admit(
        &mut self,
        peers: &Peers,
        slot: Option<PeerId>,
        _: &Bytes,
        options: &Options,
    ) -> Result<Option<Bytes>, ConnectionError> {
        if let Some(rid) = slot.and_then(|slot| self.slot_ids.get(&slot)) {
            return Ok(Some(rid.clone()));
        }
        // A raw peer announces nothing: the id is generated, or CONNECT_ROUTING_ID's.
        let rid = self.routes.admit(peers, slot, &Bytes::new(), options)?;
        if let (Some(slot), Some(rid)) = (slot, &rid) {
            self.slot_ids.insert(slot, rid.clone());
        }
        Ok(rid)
    }

    fn attached(&mut self, peers: &Peers, id: PeerId, routing_id: Option<Bytes>, options: &Options) {
        self.routes.attached(peers, id, routing_id, &Options { probe_router: false, ..options.clone() });
    }

    fn notifies_connect(&self, options: &Options) -> bool {
        options.stream_notify
    }

    fn detached(&mut self, id: PeerId, removed: bool, options: &Options, notices: &mut Vec<Notice>) {
        let was_connected = self.routes.routing_id_of(id).is_some();
        self.routes.detached(id, removed, &Options { router_notify: 0, ..options.clone() }, notices);
        let closed_here = self.closed_here.remove(&id);
        if removed {
            self.slot_ids.remove(&id);
        }
        if was_connected && !closed_here && options.stream_notify {
            notices.push((id, Message::single(Bytes::new())));
        }
    }

    fn send(&mut self, peers: &mut Peers, mut msg: Message, _: &SendFlags<'_>) -> Result<TrySend> {
        if msg.len() < 2 {
            return Err(Error::InvalidArgument("a STREAM message is a routing id, then the bytes to send"));
        }
        let rid = msg.pop_front().expect("two frames");
        let Some((id, p)) = self.routes.peer_by_routing_id(&rid).and_then(|id| Some((id, peers.map.get_mut(&id)?)))
        else {
            return Err(Error::HostUnreachable(rid));
        };
        if msg.len() == 1 && msg[0].is_empty() {
            // An empty message closes the connection once what was queued before it is written
            // (libzmq may drop that; a server that answers and hangs up wants it sent); a
            // connect-side one is not remade. The marker is a message of no frames, which nothing
            // else queues, past the HWM as a command is.
            self.closed_here.insert(id);
            p.persistent = false;
            p.out.push_command(Outbound::Message(Message::new()));
            return Ok(TrySend::Sent);
        }
        match p.out.try_push(msg) {
            Ok(()) => Ok(TrySend::Sent),
            Err(mut msg) => {
                msg.push_front(rid);
                Ok(TrySend::Full(msg))
            }
        }
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::RoutingIdFirst
    }

    fn peer_by_routing_id(&self, routing_id: &[u8]) -> Option<PeerId> {
        self.routes.peer_by_routing_id(routing_id)
    }

    fn routing_ids(&self) -> Vec<Bytes> {
        self.routes.routing_ids()
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{frames, join, leave, msg, taken};

    #[test]
    fn routes_by_generated_id_closes_on_empty_and_notifies_the_end() {
        let (mut s, mut peers) = (Stream::new(), Peers::default());
        let o = Options::default();
        let rid = join(&mut s, &mut peers, 1, "ignored", 1, &o).unwrap().unwrap();
        assert!(rid.len() == 5 && rid[0] == 0, "libzmq's generated form");
        assert!(s.notifies_connect(&o));
        let flags = SendFlags::default();
        let to = |body: &'static str| Message::from_frames([rid.clone(), Bytes::from_static(body.as_bytes())]);
        assert!(matches!(s.send(&mut peers, to("GET /"), &flags), Ok(TrySend::Sent)));
        let Ok(TrySend::Full(back)) = s.send(&mut peers, to("more"), &flags) else { panic!("full: wait") };
        assert_eq!(back[0], rid, "the message comes back whole");
        assert!(matches!(s.send(&mut peers, msg(&["nobody", "x"]), &flags), Err(Error::HostUnreachable(_))));
        assert!(matches!(s.send(&mut peers, msg(&["x"]), &flags), Err(Error::InvalidArgument(_))));
        assert_eq!(taken(&peers, 1), [["GET /"]]);
        let notices = leave(&mut s, &mut peers, 1, false, &o);
        assert_eq!(notices.iter().map(|(id, m)| (*id, frames(m))).collect::<Vec<_>>(), [(1, vec![String::new()])]);
        assert!(s.routing_ids().is_empty());
    }

    #[test]
    fn closing_here_is_not_announced_or_remade_and_a_peer_close_keeps_the_id() {
        let (mut s, mut peers) = (Stream::new(), Peers::default());
        let o = Options::default();
        let rid = join(&mut s, &mut peers, 1, "", 10, &o).unwrap().unwrap();
        // Make it a connect-side peer, as admitting a connect's slot would have.
        peers.map.get_mut(&1).unwrap().persistent = true;
        s.slot_ids.insert(1, rid.clone());
        // The peer closes: announced, and the reconnect has the same id.
        assert_eq!(leave(&mut s, &mut peers, 1, true, &o).len(), 1);
        assert_eq!(join(&mut s, &mut peers, 1, "", 10, &o).unwrap(), Some(rid.clone()));
        // We close: not announced, and the slot is no longer kept.
        let close = Message::from_frames([rid.clone(), Bytes::new()]);
        assert!(matches!(s.send(&mut peers, close, &SendFlags::default()), Ok(TrySend::Sent)));
        assert!(!peers.map[&1].persistent);
        assert_eq!(taken(&peers, 1), [Vec::<String>::new()], "a close marker follows what was queued");
        assert!(leave(&mut s, &mut peers, 1, false, &o).is_empty());
    }

    #[test]
    fn without_notify_nothing_is_said() {
        let (mut s, mut peers) = (Stream::new(), Peers::default());
        let quiet = Options { stream_notify: false, ..Options::default() };
        join(&mut s, &mut peers, 1, "", 10, &quiet).unwrap();
        assert!(!s.notifies_connect(&quiet));
        assert!(leave(&mut s, &mut peers, 1, false, &quiet).is_empty());
    }
}
