//! Load balancing (libzmq's `lb`): each message to the next peer in round-robin order that has
//! room, so a slow peer is skipped rather than waited for. DEALER and PUSH, and REQ underneath.

use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::socket::state::{State, TrySend};

/// DEALER, PUSH: the message goes to the next peer with room, or waits if none has any.
#[inline]
pub(crate) fn send(state: &mut State, msg: Message, immediate: bool) -> TrySend {
    load_balance(state, msg, immediate).map_or_else(TrySend::Full, |_| TrySend::Sent)
}

/// Round-robin over peers with room; returns the peer used. With IMMEDIATE, peers not yet
/// connected are skipped (nothing is queued for them).
pub(crate) fn load_balance(state: &mut State, mut msg: Message, immediate: bool) -> Result<PeerId, Message> {
    let n = state.order.len();
    for i in 0..n {
        let idx = (state.cursor + i) % n;
        let (id, out) = &state.order[idx];
        if immediate && !state.peers[id].connected {
            continue; // IMMEDIATE: no queueing for peers that are not connected
        }
        match out.try_push(msg) {
            Ok(()) => {
                let id = *id;
                state.cursor = (idx + 1) % n;
                return Ok(id);
            }
            Err(back) => msg = back,
        }
    }
    Err(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, msg, taken};

    #[test]
    fn round_robin_skips_a_full_peer_and_waits_when_all_are() {
        let mut s = State::default();
        let (a, b) = (add_peer(&mut s, 1, "", 1), add_peer(&mut s, 2, "", 2));
        for body in ["1", "2", "3"] {
            assert!(matches!(send(&mut s, msg(&[body]), false), TrySend::Sent));
        }
        // a took "1" and is full; b took "2", then "3" (a skipped).
        assert!(matches!(send(&mut s, msg(&["4"]), false), TrySend::Full(_)));
        assert_eq!(taken(&s, a), [["1"]]);
        assert_eq!(taken(&s, b), [["2"], ["3"]]);
    }

    #[test]
    fn immediate_skips_peers_not_yet_connected() {
        let mut s = State::default();
        let (a, b) = (add_peer(&mut s, 1, "", 10), add_peer(&mut s, 2, "", 10));
        s.peers.get_mut(&a).unwrap().connected = false;
        for body in ["1", "2"] {
            assert!(matches!(send(&mut s, msg(&[body]), true), TrySend::Sent));
        }
        assert!(taken(&s, a).is_empty());
        assert_eq!(taken(&s, b), [["1"], ["2"]]);
        s.peers.get_mut(&b).unwrap().connected = false;
        assert!(matches!(send(&mut s, msg(&["3"]), true), TrySend::Full(_)), "no connected peer: wait");
    }
}
