//! PUSH and PULL (the pipeline): PUSH load-balances ([`super::lb`]) and never receives; PULL
//! receives fair-queued and never sends.

use super::{Pattern, RecvRule, SendFlags, TrySend, lb};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct Push;

impl Pattern for Push {
    #[inline]
    fn send(&mut self, peers: &mut Peers, msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        Ok(lb::send(peers, msg, flags.immediate()))
    }

    fn send_many(&mut self, peers: &mut Peers, batch: &mut [Message], flags: &SendFlags<'_>) -> (usize, Result<()>) {
        (lb::send_many(peers, batch, flags.immediate()), Ok(()))
    }

    fn recv_rule(&self) -> RecvRule {
        RecvRule::NotSupported
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Push
    }
}

#[derive(Debug)]
pub(crate) struct Pull;

impl Pattern for Pull {
    fn send(&mut self, _: &mut Peers, _: Message, _: &SendFlags<'_>) -> Result<TrySend> {
        Err(Error::NotSupported(SocketType::Pull))
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Pull
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, msg, taken};

    #[test]
    fn push_only_sends_and_pull_only_receives() {
        let mut peers = Peers::default();
        let p = add_peer(&mut Push, &mut peers, 1, "", 10);
        assert!(matches!(Push.send(&mut peers, msg(&["job"]), &SendFlags::default()), Ok(TrySend::Sent)));
        assert_eq!(taken(&peers, p), [["job"]]);
        assert_eq!(Push.recv_rule(), RecvRule::NotSupported);
        assert!(matches!(Pull.send(&mut peers, msg(&["x"]), &SendFlags::default()), Err(Error::NotSupported(_))));
        assert_eq!(Pull.recv_rule(), RecvRule::AsQueued);
    }
}
