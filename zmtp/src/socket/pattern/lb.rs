//! Load balancing (libzmq's `lb`): each message to the next peer in round-robin order that has
//! room, so a slow peer is skipped rather than waited for. DEALER and PUSH, and REQ underneath.

use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::socket::pattern::TrySend;
use crate::socket::peers::Peers;

/// The message goes to the next peer with room, or waits if none has any.
#[inline]
pub(crate) fn send(peers: &mut Peers, msg: Message, immediate: bool) -> TrySend {
    load_balance(peers, msg, immediate).map_or_else(TrySend::Full, |_| TrySend::Sent)
}

/// Sends from the front of `batch` what goes without waiting; how many (the caller drops those
/// slots). With a single peer the run goes to its queue at once (runs of small messages
/// encoded); with more, message by message as [`send`] would (round-robin).
pub(crate) fn send_many(peers: &mut Peers, batch: &mut [Message], immediate: bool) -> usize {
    if let [(id, out)] = peers.order.as_slice() {
        if immediate && !peers.map[id].connected {
            return 0;
        }
        return out.try_push_many(batch);
    }
    for (i, slot) in batch.iter_mut().enumerate() {
        if let Err(back) = load_balance(peers, std::mem::take(slot), immediate) {
            *slot = back;
            return i;
        }
    }
    batch.len()
}

/// Queues `msg` for the next peer in round-robin order with room; the peer, or the message back if
/// none has room. IMMEDIATE skips connect-side peers without a connection.
pub(crate) fn load_balance(peers: &mut Peers, mut msg: Message, immediate: bool) -> Result<PeerId, Message> {
    let n = peers.order.len();
    for i in 0..n {
        let idx = (peers.cursor + i) % n;
        let (id, out) = &peers.order[idx];
        if immediate && !peers.map[id].connected {
            continue; // IMMEDIATE: no queueing for peers that are not connected
        }
        match out.try_push(msg) {
            Ok(()) => {
                let id = *id;
                peers.cursor = (idx + 1) % n;
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
    use crate::socket::pattern::dealer::Dealer;
    use crate::socket::pattern::testing::{add_peer, msg, taken};

    #[test]
    fn round_robin_skips_a_full_peer_and_waits_when_all_are() {
        let mut s = Peers::default();
        let (a, b) = (add_peer(&mut Dealer, &mut s, 1, "", 1), add_peer(&mut Dealer, &mut s, 2, "", 2));
        for body in ["1", "2", "3"] {
            assert!(matches!(send(&mut s, msg(&[body]), false), TrySend::Sent));
        }
        assert!(matches!(send(&mut s, msg(&["4"]), false), TrySend::Full(_)));
        assert_eq!(taken(&s, a), [["1"]]);
        assert_eq!(taken(&s, b), [["2"], ["3"]]);
    }

    #[test]
    fn immediate_skips_peers_not_yet_connected() {
        let mut s = Peers::default();
        let (a, b) = (add_peer(&mut Dealer, &mut s, 1, "", 10), add_peer(&mut Dealer, &mut s, 2, "", 10));
        s.map.get_mut(&a).unwrap().connected = false;
        for body in ["1", "2"] {
            assert!(matches!(send(&mut s, msg(&[body]), true), TrySend::Sent));
        }
        assert!(taken(&s, a).is_empty());
        assert_eq!(taken(&s, b), [["1"], ["2"]]);
        s.map.get_mut(&b).unwrap().connected = false;
        assert!(matches!(send(&mut s, msg(&["3"]), true), TrySend::Full(_)), "no connected peer: wait");
    }
}
