//! DEALER: sends load-balanced ([`super::lb`]), receives fair-queued, and greets a new peer with an
//! empty message under PROBE_ROUTER.

use bytes::Bytes;

use super::{Pattern, SendFlags, TrySend, lb, probe};
use crate::error::Result;
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct Dealer;

impl Pattern for Dealer {
    fn attached(&mut self, peers: &Peers, id: PeerId, _: Option<Bytes>, options: &Options) {
        probe(peers, id, options);
    }

    #[inline]
    fn send(&mut self, peers: &mut Peers, msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        Ok(lb::send(peers, msg, flags.immediate()))
    }

    fn send_many(&mut self, peers: &mut Peers, batch: &mut [Message], flags: &SendFlags<'_>) -> (usize, Result<()>) {
        (lb::send_many(peers, batch, flags.immediate()), Ok(()))
    }

    fn socket_type(&self) -> SocketType {
        SocketType::Dealer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{join, msg, taken};

    #[test]
    fn probes_each_new_peer_when_asked_to() {
        let mut peers = Peers::default();
        let probing = Options { probe_router: true, ..Options::default() };
        join(&mut Dealer, &mut peers, 1, "", 10, &probing).unwrap();
        join(&mut Dealer, &mut peers, 2, "", 10, &Options::default()).unwrap();
        assert!(matches!(Dealer.send(&mut peers, msg(&["m"]), &SendFlags::default()), Ok(TrySend::Sent)));
        assert_eq!(taken(&peers, 1), [vec![String::new()], vec!["m".to_owned()]]);
        assert!(taken(&peers, 2).is_empty());
    }
}
