//! PAIR: one peer at a time; a second connection is refused while the first is up.

use bytes::Bytes;

use super::{Pattern, SendFlags, TrySend};
use crate::error::{ConnectionError, Refusal, Result};
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct Pair;

impl Pattern for Pair {
    fn admit(
        &mut self,
        peers: &Peers,
        slot: Option<PeerId>,
        _: &Bytes,
        _: &Options,
    ) -> Result<Option<Bytes>, ConnectionError> {
        if peers.any_connected_but(slot) {
            return Err(ConnectionError::Refused(Refusal::PairTaken));
        }
        Ok(None)
    }

    fn send(&mut self, peers: &mut Peers, msg: Message, _: &SendFlags<'_>) -> Result<TrySend> {
        Ok(match peers.order.first() {
            Some((_, out)) => out.try_push(msg).map_or_else(TrySend::Full, |_| TrySend::Sent),
            None => TrySend::Full(msg),
        })
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Pair
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, join, leave, msg, taken};

    #[test]
    fn waits_for_its_peer_then_for_room() {
        let mut s = Peers::default();
        let flags = SendFlags::default();
        assert!(matches!(Pair.send(&mut s, msg(&["early"]), &flags), Ok(TrySend::Full(_))));
        let p = add_peer(&mut Pair, &mut s, 7, "", 1);
        assert!(matches!(Pair.send(&mut s, msg(&["a"]), &flags), Ok(TrySend::Sent)));
        assert!(matches!(Pair.send(&mut s, msg(&["b"]), &flags), Ok(TrySend::Full(_))));
        assert_eq!(taken(&s, p), [["a"]]);
    }

    #[test]
    fn a_second_peer_is_refused_until_the_first_leaves() {
        let mut s = Peers::default();
        let o = Options::default();
        add_peer(&mut Pair, &mut s, 1, "", 10);
        assert!(matches!(join(&mut Pair, &mut s, 2, "", 10, &o), Err(ConnectionError::Refused(Refusal::PairTaken))));
        leave(&mut Pair, &mut s, 1, false, &o);
        assert!(join(&mut Pair, &mut s, 2, "", 10, &o).is_ok());
    }
}
