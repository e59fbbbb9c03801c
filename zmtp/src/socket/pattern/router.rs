//! ROUTER: a message's first frame names the peer (its routing id); an unknown or full peer's
//! message is dropped, or with ROUTER_MANDATORY refused (EHOSTUNREACH) or made to wait. Received
//! messages carry the sender's routing id first.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::message::Message;
use crate::socket::state::{State, TrySend};

pub(crate) fn send(state: &mut State, mut msg: Message, mandatory: bool) -> Result<TrySend> {
    let rid = msg.pop_front().expect("non-empty");
    let Some(p) = state.routes.get(&rid).and_then(|id| state.peers.get(id)) else {
        return if mandatory { Err(Error::HostUnreachable(rid)) } else { Ok(TrySend::Sent) };
    };
    match p.out.try_push(msg) {
        Ok(()) => Ok(TrySend::Sent),
        Err(mut msg) if mandatory => {
            msg.push_front(rid);
            Ok(TrySend::Full(msg))
        }
        Err(_) => Ok(TrySend::Sent),
    }
}

/// The sender's routing id goes first.
#[inline]
pub(crate) fn on_recv(routing_id: Bytes, mut msg: Message) -> Message {
    msg.push_front(routing_id);
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, frames, msg, taken};

    #[test]
    fn routes_by_id_and_drops_or_refuses_the_unroutable() {
        let mut s = State::default();
        let a = add_peer(&mut s, 1, "alice", 1);
        assert!(matches!(send(&mut s, msg(&["alice", "hi"]), false), Ok(TrySend::Sent)));
        assert!(matches!(send(&mut s, msg(&["alice", "dropped: full"]), false), Ok(TrySend::Sent)));
        assert!(matches!(send(&mut s, msg(&["bob", "dropped: unknown"]), false), Ok(TrySend::Sent)));
        assert!(matches!(send(&mut s, msg(&["bob", "x"]), true), Err(Error::HostUnreachable(_))));
        let TrySend::Full(back) = send(&mut s, msg(&["alice", "waits"]), true).unwrap() else { panic!("full: wait") };
        assert_eq!(frames(&back), ["alice", "waits"]);
        assert_eq!(taken(&s, a), [["hi"]]);
        assert_eq!(frames(&on_recv(Bytes::from_static(b"alice"), msg(&["m"]))), ["alice", "m"]);
    }
}
