//! REP: a request's envelope (every frame up to the empty delimiter) is kept, the body received,
//! and the reply sent back along the envelope to the peer that asked. Strictly alternating.

use super::{Pattern, RecvRule, SendFlags, TrySend};
use crate::error::{Error, Result};
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug, Default)]
pub(crate) struct Rep {
    /// The peer and envelope of the request being answered.
    pending: Option<(PeerId, Message)>,
}

impl Pattern for Rep {
    fn send(&mut self, peers: &mut Peers, msg: Message, _: &SendFlags<'_>) -> Result<TrySend> {
        let Some((peer, envelope)) = self.pending.take() else {
            return Err(Error::InvalidState);
        };
        let mut out = envelope;
        for frame in msg {
            out.push(frame);
        }
        // The asker may be gone, or full: the reply is dropped, as libzmq drops it.
        if let Some(p) = peers.map.get(&peer) {
            let _ = p.out.try_push(out);
        }
        Ok(TrySend::Sent)
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::Stateful
    }

    fn check_recv(&self) -> Result<()> {
        if self.pending.is_some() { Err(Error::InvalidState) } else { Ok(()) }
    }

    fn on_recv(&mut self, from: PeerId, mut msg: Message, _: bool) -> Option<Message> {
        let envelope = msg.split_envelope()?; // no delimiter: malformed, skipped
        self.pending = Some((from, envelope));
        Some(msg)
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Rep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, frames, msg, taken};

    #[test]
    fn the_reply_goes_back_along_the_envelope() {
        let (mut r, mut s) = (Rep::default(), Peers::default());
        let p = add_peer(&mut r, &mut s, 3, "", 10);
        let flags = SendFlags::default();
        assert!(matches!(r.send(&mut s, msg(&["early"]), &flags), Err(Error::InvalidState)));
        assert!(r.on_recv(p, msg(&["no delimiter"]), false).is_none());
        let req = r.on_recv(p, msg(&["hop1", "hop2", "", "q"]), false).unwrap();
        assert_eq!(frames(&req), ["q"]);
        assert!(matches!(r.check_recv(), Err(Error::InvalidState)), "answer first");
        assert!(matches!(r.send(&mut s, msg(&["r"]), &flags), Ok(TrySend::Sent)));
        assert_eq!(taken(&s, p), [["hop1", "hop2", "", "r"]]);
        assert!(r.check_recv().is_ok());
    }
}
