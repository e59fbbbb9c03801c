//! REQ: one request at a time, load-balanced ([`super::lb`]) behind an empty delimiter frame
//! (and, with REQ_CORRELATE, a request id); only the reply from the peer it asked, to the request
//! it sent last, is received. REQ_RELAXED allows a new request before the reply.

use bytes::Bytes;

use super::lb::load_balance;
use super::{Notice, Pattern, RecvRule, SendFlags, TrySend, probe};
use crate::error::{Error, Result};
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct Req {
    /// The peer the outstanding request went to.
    awaiting: Option<PeerId>,
    /// REQ_CORRELATE: the id of the outstanding request, sent as 4 bytes in the host's byte
    /// order (libzmq copies its `uint32_t` as is).
    request_id: u32,
}

impl Req {
    /// As libzmq: a random first id, so a reply meant for an earlier incarnation of this REQ is not
    /// taken for one to this one.
    pub fn new() -> Self {
        Req { awaiting: None, request_id: rand::random() }
    }
}

impl Pattern for Req {
    fn attached(&mut self, peers: &Peers, id: PeerId, _: Option<Bytes>, options: &Options) {
        probe(peers, id, options);
    }

    fn detached(&mut self, id: PeerId, removed: bool, options: &Options, _: &mut Vec<Notice>) {
        // A relaxed REQ may ask again once the peer it waited on is gone; a strict one keeps
        // waiting (for the reconnected slot), as libzmq does.
        if removed && self.awaiting == Some(id) && options.req_relaxed {
            self.awaiting = None;
        }
    }

    fn send(&mut self, peers: &mut Peers, mut msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        if self.awaiting.is_some() && !flags.req_relaxed {
            return Err(Error::InvalidState);
        }
        msg.push_front(Bytes::new());
        let request_id = self.request_id.wrapping_add(1);
        if flags.req_correlate {
            msg.push_front(Bytes::copy_from_slice(&request_id.to_ne_bytes()));
        }
        match load_balance(peers, msg, flags.immediate()) {
            Ok(peer) => {
                self.awaiting = Some(peer);
                self.request_id = request_id;
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

    fn recv_rule(&self) -> RecvRule {
        RecvRule::Stateful
    }

    fn check_recv(&self) -> Result<()> {
        if self.awaiting.is_none() { Err(Error::InvalidState) } else { Ok(()) }
    }

    fn on_recv(&mut self, from: PeerId, mut msg: Message, correlate: bool) -> Option<Message> {
        if self.awaiting != Some(from) {
            return None; // a reply from a peer we are not waiting for
        }
        if correlate {
            let id = msg.pop_front();
            if id.as_deref() != Some(&self.request_id.to_ne_bytes()[..]) {
                return None; // a stale reply to an earlier request
            }
        }
        if msg.first().is_none_or(|f| !f.is_empty()) {
            return None; // no empty delimiter: malformed
        }
        msg.pop_front();
        self.awaiting = None;
        Some(msg)
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Req
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, frames, leave, msg, taken};

    #[test]
    fn one_request_at_a_time_and_only_its_reply() {
        let (mut r, mut s) = (Req::new(), Peers::default());
        let (a, b) = (add_peer(&mut r, &mut s, 1, "", 10), add_peer(&mut r, &mut s, 2, "", 10));
        let flags = SendFlags::default();
        assert!(matches!(r.check_recv(), Err(Error::InvalidState)), "nothing to wait for yet");
        assert!(matches!(r.send(&mut s, msg(&["q1"]), &flags), Ok(TrySend::Sent)));
        assert!(matches!(r.send(&mut s, msg(&["q2"]), &flags), Err(Error::InvalidState)));
        assert_eq!(taken(&s, a), [["", "q1"]]);
        assert!(r.on_recv(b, msg(&["", "not yours"]), false).is_none());
        assert!(r.on_recv(a, msg(&["no delimiter"]), false).is_none());
        assert_eq!(frames(&r.on_recv(a, msg(&["", "r1"]), false).unwrap()), ["r1"]);
        assert!(matches!(r.send(&mut s, msg(&["q2"]), &flags), Ok(TrySend::Sent)));
        assert_eq!(taken(&s, b), [["", "q2"]]);
    }

    #[test]
    fn relaxed_and_correlated_take_only_the_latest_reply() {
        // Ids that read as text in either byte order, so the test can compare frames as strings.
        let (mut r, mut s) = (Req { awaiting: None, request_id: u32::from_ne_bytes(*b"id00") }, Peers::default());
        let a = add_peer(&mut r, &mut s, 1, "", 10);
        let flags = SendFlags { req_relaxed: true, req_correlate: true, ..SendFlags::default() };
        assert!(matches!(r.send(&mut s, msg(&["q1"]), &flags), Ok(TrySend::Sent)));
        assert!(matches!(r.send(&mut s, msg(&["q2"]), &flags), Ok(TrySend::Sent)));
        let sent = taken(&s, a);
        assert_eq!(sent.len(), 2);
        let id = |i: usize| -> &'static str { Box::leak(sent[i][0].clone().into_boxed_str()) };
        assert_eq!(&sent[1][1..], ["", "q2"]);
        assert!(r.on_recv(a, msg(&[id(0), "", "stale"]), true).is_none(), "the reply to q1 is stale");
        assert_eq!(frames(&r.on_recv(a, msg(&[id(1), "", "fresh"]), true).unwrap()), ["fresh"]);
    }

    #[test]
    fn a_request_that_finds_no_room_comes_back_as_it_was_given() {
        let (mut r, mut s) = (Req::new(), Peers::default());
        let flags = SendFlags { req_correlate: true, ..SendFlags::default() };
        let TrySend::Full(back) = r.send(&mut s, msg(&["q"]), &flags).unwrap() else { panic!("no peer: must wait") };
        assert_eq!(frames(&back), ["q"]);
        assert!(r.awaiting.is_none());
    }

    #[test]
    fn only_a_relaxed_req_may_ask_again_once_its_peer_is_gone() {
        for relaxed in [false, true] {
            let (mut r, mut s) = (Req::new(), Peers::default());
            let options = Options { req_relaxed: relaxed, ..Options::default() };
            let (a, _) = (add_peer(&mut r, &mut s, 1, "", 10), add_peer(&mut r, &mut s, 2, "", 10));
            assert!(matches!(r.send(&mut s, msg(&["q"]), &SendFlags::default()), Ok(TrySend::Sent)));
            leave(&mut r, &mut s, a, false, &options);
            assert_eq!(r.check_recv().is_ok(), !relaxed, "relaxed {relaxed}: still awaiting?");
        }
    }
}
