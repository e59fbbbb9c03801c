//! Distribution (libzmq's `dist`): PUB/XPUB send a message to every subscriber with a matching
//! prefix, once each, dropping it for one at its HWM (or, with XPUB_NODROP, waiting while any
//! matching subscriber is full); XSUB sends to every publisher.

use crate::message::Message;
use crate::socket::state::{State, TrySend};

pub(crate) fn publish(state: &mut State, msg: Message, nodrop: bool) -> TrySend {
    let topic = msg.first().expect("non-empty");
    // NODROP is honoured by PUB too: libzmq's PUB is an XPUB underneath.
    if nodrop {
        let mut full = false;
        state.mtrie.for_each_match(topic, |id| {
            full |= state.peers.get(&id).is_some_and(|p| p.connected && !p.out.has_room());
        });
        if full {
            return TrySend::Full(msg);
        }
    }
    // A peer subscribed to several matching prefixes gets the message once: each delivery stamps
    // the peer with this send's number (no per-message list to collect and sort).
    let State { mtrie, peers, send_stamp, .. } = state;
    *send_stamp += 1;
    let stamp = *send_stamp;
    // A subscriber at its HWM loses the message (libzmq PUB semantics) unless NODROP.
    mtrie.for_each_match(topic, |id| {
        if let Some(p) = peers.get_mut(&id)
            && p.connected
            && p.sent_stamp != stamp
        {
            p.sent_stamp = stamp;
            let _ = p.out.try_push(msg.clone());
        }
    });
    TrySend::Sent
}

/// XSUB: every publisher gets every (non-subscription) message.
pub(crate) fn to_all(state: &mut State, msg: Message) -> TrySend {
    for p in state.peers.values() {
        let _ = p.out.try_push(msg.clone());
    }
    TrySend::Sent
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, msg, taken};

    #[test]
    fn each_matching_subscriber_once_and_a_full_one_loses_it() {
        let mut s = State::default();
        let (a, b, c) = (add_peer(&mut s, 1, "", 10), add_peer(&mut s, 2, "", 1), add_peer(&mut s, 3, "", 10));
        s.mtrie.add(b"weather", a);
        s.mtrie.add(b"weather.paris", a); // two matching prefixes: still one copy
        s.mtrie.add(b"", b);
        s.mtrie.add(b"sport", c);
        for body in ["weather.paris 12C", "weather.oslo 3C"] {
            assert!(matches!(publish(&mut s, msg(&[body]), false), TrySend::Sent));
        }
        assert_eq!(taken(&s, a), [["weather.paris 12C"], ["weather.oslo 3C"]]);
        assert_eq!(taken(&s, b), [["weather.paris 12C"]], "HWM 1: the second is dropped");
        assert!(taken(&s, c).is_empty());
    }

    #[test]
    fn nodrop_waits_while_a_matching_subscriber_is_full() {
        let mut s = State::default();
        let a = add_peer(&mut s, 1, "", 1);
        s.mtrie.add(b"t", a);
        assert!(matches!(publish(&mut s, msg(&["t1"]), true), TrySend::Sent));
        assert!(matches!(publish(&mut s, msg(&["t2"]), true), TrySend::Full(_)));
        assert!(matches!(publish(&mut s, msg(&["other"]), true), TrySend::Sent), "no match: no wait");
        assert_eq!(taken(&s, a), [["t1"]]);
    }

    #[test]
    fn xsub_sends_everything_to_every_publisher() {
        let mut s = State::default();
        let (a, b) = (add_peer(&mut s, 1, "", 10), add_peer(&mut s, 2, "", 10));
        assert!(matches!(to_all(&mut s, msg(&["m"])), TrySend::Sent));
        assert_eq!((taken(&s, a), taken(&s, b)), (vec![vec!["m".to_owned()]], vec![vec!["m".to_owned()]]));
    }
}
