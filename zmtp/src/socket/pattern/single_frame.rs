//! The draft types that are a classic pattern carrying single frames (the socket refuses a
//! multipart send and drops a multipart message received): CLIENT is DEALER without its envelope
//! games (RFC 41: [`lb`] out, fair-queued in), SCATTER and GATHER are PUSH and PULL (RFC 49), and
//! CHANNEL is PAIR (RFC 52: one peer, a second refused).

use bytes::Bytes;

use super::{Pattern, RecvRule, SendFlags, TrySend, lb, pair::Pair};
use crate::error::{ConnectionError, Error, Result};
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

/// CLIENT and SCATTER: round-robin over peers with room.
#[derive(Debug)]
pub(crate) struct Balanced(pub SocketType);

impl Pattern for Balanced {
    #[inline]
    fn send(&mut self, peers: &mut Peers, msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        Ok(lb::send(peers, msg, flags.immediate()))
    }

    fn recv_rule(&self) -> RecvRule {
        match self.0 {
            SocketType::Scatter => RecvRule::NotSupported,
            _ => RecvRule::SingleFrame,
        }
    }

    fn socket_type(&self) -> SocketType {
        self.0
    }
}

/// GATHER: receives fair-queued, never sends.
#[derive(Debug)]
pub(crate) struct Gather;

impl Pattern for Gather {
    fn send(&mut self, _: &mut Peers, _: Message, _: &SendFlags<'_>) -> Result<TrySend> {
        Err(Error::NotSupported(SocketType::Gather))
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::SingleFrame
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Gather
    }
}

/// CHANNEL: PAIR's one peer.
#[derive(Debug)]
pub(crate) struct Channel;

impl Pattern for Channel {
    fn admit(
        &mut self,
        peers: &Peers,
        slot: Option<PeerId>,
        announced: &Bytes,
        options: &Options,
    ) -> Result<Option<Bytes>, ConnectionError> {
        Pair.admit(peers, slot, announced, options)
    }

    fn send(&mut self, peers: &mut Peers, msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        Pair.send(peers, msg, flags)
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::SingleFrame
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Channel
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Refusal;
    use crate::socket::pattern::testing::{add_peer, join, msg, taken};

    #[test]
    fn client_and_scatter_round_robin_and_gather_only_receives() {
        for kind in [SocketType::Client, SocketType::Scatter] {
            let (mut p, mut peers) = (Balanced(kind), Peers::default());
            let (a, b) = (add_peer(&mut p, &mut peers, 1, "", 10), add_peer(&mut p, &mut peers, 2, "", 10));
            for body in ["1", "2", "3"] {
                assert!(matches!(p.send(&mut peers, msg(&[body]), &SendFlags::default()), Ok(TrySend::Sent)));
            }
            assert_eq!(taken(&peers, a), [["1"], ["3"]]);
            assert_eq!(taken(&peers, b), [["2"]]);
            assert_eq!(p.socket_type(), kind);
        }
        assert_eq!(Balanced(SocketType::Client).recv_rule(), RecvRule::SingleFrame);
        assert_eq!(Balanced(SocketType::Scatter).recv_rule(), RecvRule::NotSupported);
        assert!(Gather.send(&mut Peers::default(), msg(&["x"]), &SendFlags::default()).is_err());
        assert_eq!(Gather.recv_rule(), RecvRule::SingleFrame);
    }

    #[test]
    fn channel_takes_one_peer() {
        let mut peers = Peers::default();
        let o = Options::default();
        add_peer(&mut Channel, &mut peers, 1, "", 10);
        assert!(matches!(
            join(&mut Channel, &mut peers, 2, "", 10, &o),
            Err(ConnectionError::Refused(Refusal::PairTaken))
        ));
        assert!(matches!(Channel.send(&mut peers, msg(&["m"]), &SendFlags::default()), Ok(TrySend::Sent)));
        assert_eq!(taken(&peers, 1), [["m"]]);
    }
}
