//! REQ: one request at a time (unless REQ_RELAXED), sent with an empty delimiter (and with
//! REQ_CORRELATE a request id before it) to the next peer by load balancing; only that peer's
//! reply to that request is taken.

use bytes::Bytes;

use super::SendFlags;
use super::lb::load_balance;
use crate::error::{Error, Result};
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::socket::state::{State, TrySend};

pub(crate) fn send(state: &mut State, mut msg: Message, flags: &SendFlags) -> Result<TrySend> {
    if state.req.awaiting.is_some() && !flags.req_relaxed {
        return Err(Error::InvalidState);
    }
    msg.push_front(Bytes::new());
    let request_id = state.req.request_id.wrapping_add(1);
    if flags.req_correlate {
        msg.push_front(Bytes::copy_from_slice(&request_id.to_ne_bytes()));
    }
    match load_balance(state, msg, flags.immediate) {
        Ok(peer) => {
            state.req.awaiting = Some(peer);
            state.req.request_id = request_id;
            Ok(TrySend::Sent)
        }
        Err(mut msg) => {
            msg.pop_front();
            if flags.req_correlate {
                msg.pop_front();
            }
            Ok(TrySend::Full(msg))
        }
    }
}

/// A receive needs a request outstanding.
pub(crate) fn check_recv(state: &State) -> Result<()> {
    if state.req.awaiting.is_none() { Err(Error::InvalidState) } else { Ok(()) }
}

/// The reply without its envelope, if it answers the outstanding request; `None` drops it.
pub(crate) fn on_recv(state: &mut State, from: PeerId, mut msg: Message, correlate: bool) -> Option<Message> {
    if state.req.awaiting != Some(from) {
        return None; // a reply from a peer we are not waiting for
    }
    if correlate {
        let id = msg.pop_front();
        if id.as_deref() != Some(&state.req.request_id.to_ne_bytes()[..]) {
            return None; // a stale reply to an earlier request
        }
    }
    if msg.first().is_none_or(|f| !f.is_empty()) {
        return None; // no empty delimiter: malformed
    }
    msg.pop_front();
    state.req.awaiting = None;
    Some(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, frames, msg, taken};

    #[test]
    fn one_request_at_a_time_and_only_its_reply() {
        let mut s = State::default();
        let (a, b) = (add_peer(&mut s, 1, "", 10), add_peer(&mut s, 2, "", 10));
        let flags = SendFlags::default();
        assert!(matches!(check_recv(&s), Err(Error::InvalidState)), "nothing to wait for yet");
        assert!(matches!(send(&mut s, msg(&["q1"]), &flags), Ok(TrySend::Sent)));
        assert!(matches!(send(&mut s, msg(&["q2"]), &flags), Err(Error::InvalidState)));
        assert_eq!(taken(&s, a), [["", "q1"]]);
        assert!(on_recv(&mut s, b, msg(&["", "not yours"]), false).is_none());
        assert!(on_recv(&mut s, a, msg(&["no delimiter"]), false).is_none());
        assert_eq!(frames(&on_recv(&mut s, a, msg(&["", "r1"]), false).unwrap()), ["r1"]);
        // The next request goes to the next peer.
        assert!(matches!(send(&mut s, msg(&["q2"]), &flags), Ok(TrySend::Sent)));
        assert_eq!(taken(&s, b), [["", "q2"]]);
    }

    #[test]
    fn relaxed_and_correlated_take_only_the_latest_reply() {
        let mut s = State::default();
        let a = add_peer(&mut s, 1, "", 10);
        let flags = SendFlags { req_relaxed: true, req_correlate: true, ..SendFlags::default() };
        assert!(matches!(send(&mut s, msg(&["q1"]), &flags), Ok(TrySend::Sent)));
        assert!(matches!(send(&mut s, msg(&["q2"]), &flags), Ok(TrySend::Sent)));
        let sent = taken(&s, a);
        assert_eq!(sent.len(), 2);
        let id = |i: usize| -> &'static str { Box::leak(sent[i][0].clone().into_boxed_str()) };
        assert_eq!(&sent[1][1..], ["", "q2"]);
        assert!(on_recv(&mut s, a, msg(&[id(0), "", "stale"]), true).is_none(), "the reply to q1 is stale");
        assert_eq!(frames(&on_recv(&mut s, a, msg(&[id(1), "", "fresh"]), true).unwrap()), ["fresh"]);
    }

    #[test]
    fn a_request_that_finds_no_room_comes_back_as_it_was_given() {
        let mut s = State::default();
        let flags = SendFlags { req_correlate: true, ..SendFlags::default() };
        let TrySend::Full(back) = send(&mut s, msg(&["q"]), &flags).unwrap() else { panic!("no peer: must wait") };
        assert_eq!(frames(&back), ["q"]);
        assert!(s.req.awaiting.is_none());
    }
}
