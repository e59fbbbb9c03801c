//! PUB and XPUB: publish by subscription ([`super::dist`]). A PUB never receives; an XPUB's
//! application receives its subscribers' subscription changes as `\x01topic` / `\x00topic`
//! notices — the first subscriber of a prefix and the last one leaving (every subscribe with
//! XPUB_VERBOSE, every change with XPUB_VERBOSER) — and greets each with XPUB_WELCOME_MSG.
//!
//! XPUB_MANUAL and XPUB_MANUAL_LAST_VALUE are [`super::xpub_manual`]'s (feature `draft`).

use bytes::Bytes;

use super::dist::{Change, Distributor, Limits};
use super::{Notice, Pattern, RecvRule, SendFlags, TrySend, subscription_message};
use crate::error::Error;
use crate::error::{LimitError, Result};
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct XPub {
    dist: Distributor,
    /// XPUB (its application sees subscriptions) rather than PUB.
    extended: bool,
    /// XPUB_MANUAL's state (feature `draft`).
    #[cfg(feature = "draft")]
    manual: super::xpub_manual::Manual,
}

impl XPub {
    pub fn new(extended: bool) -> Self {
        XPub {
            dist: Distributor::default(),
            extended,
            #[cfg(feature = "draft")]
            manual: Default::default(),
        }
    }

    /// XPUB_MANUAL or XPUB_MANUAL_LAST_VALUE on an XPUB (never without feature `draft`).
    fn manual(&self, _options: &Options) -> bool {
        #[cfg(feature = "draft")]
        return self.extended && super::xpub_manual::on(_options);
        #[cfg(not(feature = "draft"))]
        false
    }

    fn notice(&self, peer: PeerId, topic: &[u8], subscribe: bool) -> Option<Notice> {
        self.extended.then(|| (peer, subscription_message(topic, subscribe)))
    }
}

impl Pattern for XPub {
    fn attached(&mut self, peers: &Peers, id: PeerId, _: Option<Bytes>, options: &Options) {
        let Some(p) = peers.map.get(&id) else { return };
        self.dist.join(id, p.out.clone());
        if let Some(welcome) = options.xpub_welcome_msg.clone().filter(|_| self.extended) {
            let _ = p.out.try_push(Message::single(welcome));
        }
    }

    fn detached(&mut self, id: PeerId, _: bool, options: &Options, notices: &mut Vec<Notice>) {
        #[cfg(feature = "draft")]
        if let Some(topics) = self.manual.left(id) {
            self.dist.leave(id);
            notices.extend(topics.iter().filter_map(|topic| self.notice(id, topic, false)));
            return;
        }
        for (topic, change) in self.dist.leave(id) {
            if change == Change::Last || (change == Change::Fewer && options.xpub_verboser) {
                notices.extend(self.notice(id, &topic, false));
            }
        }
    }

    #[inline]
    fn send(&mut self, _: &mut Peers, msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        #[cfg(feature = "draft")]
        if let Some(to) = self.manual.last_value_target() {
            return Ok(self.dist.publish_to(to, msg, flags.xpub_nodrop()));
        }
        Ok(self.dist.publish(msg, flags.xpub_nodrop(), flags.invert_matching()))
    }

    /// An XPUB's receive notes who sent what it takes, for XPUB_MANUAL's `subscribe`.
    fn recv_rule(&self) -> RecvRule {
        match self.extended {
            true if cfg!(feature = "draft") => RecvRule::Stateful,
            true => RecvRule::AsQueued,
            false => RecvRule::NotSupported,
        }
    }

    fn on_recv(&mut self, _from: PeerId, msg: Message, _: bool) -> Option<Message> {
        #[cfg(feature = "draft")]
        {
            self.manual.last_from = Some(_from);
        }
        Some(msg)
    }

    /// XPUB_MANUAL: subscribes (or unsubscribes) the subscriber of the last notice received; a
    /// no-op when there is none. Without XPUB_MANUAL an XPUB takes no subscriptions (EINVAL).
    fn local_subscription(&mut self, _: &Peers, _topic: &[u8], _subscribe: bool, options: &Options) -> Result<()> {
        if !self.manual(options) {
            return Err(Error::InvalidArgument("an XPUB subscribes its peers only with XPUB_MANUAL"));
        }
        #[cfg(feature = "draft")]
        self.grant(_topic, _subscribe, options)?;
        Ok(())
    }

    fn peer_subscription(
        &mut self,
        peer: PeerId,
        topic: &[u8],
        subscribe: bool,
        options: &Options,
    ) -> Result<Option<Notice>, LimitError> {
        #[cfg(feature = "draft")]
        if self.manual(options) {
            self.manual.asked_for(peer, topic, subscribe, options)?;
            return Ok(self.notice(peer, topic, subscribe));
        }
        self.automatic(peer, topic, subscribe, options)
    }

    fn topics_count(&self) -> Option<usize> {
        Some(self.dist.topics())
    }

    fn socket_type(&self) -> SocketType {
        if self.extended { SocketType::XPub } else { SocketType::Pub }
    }
}

impl XPub {
    /// XPUB_MANUAL: the application grants (or takes back) `topic` to the sender of the last notice.
    #[cfg(feature = "draft")]
    fn grant(&mut self, topic: &[u8], subscribe: bool, options: &Options) -> Result<()> {
        self.manual.last_value = options.xpub_manual_last_value;
        let Some(peer) = self.manual.last_from else { return Ok(()) };
        if subscribe {
            // What the application grants is not bounded by the peer's limits: it is its own call.
            self.dist.subscribe(peer, topic, Limits::default()).map_err(|_| Error::InvalidState)?;
        } else {
            self.dist.unsubscribe(peer, topic);
        }
        Ok(())
    }

    /// A subscriber's change, applied: the notice for the application, if it is told of it.
    fn automatic(
        &mut self,
        peer: PeerId,
        topic: &[u8],
        subscribe: bool,
        options: &Options,
    ) -> Result<Option<Notice>, LimitError> {
        let tell = if subscribe {
            let limits = Limits { count: options.max_subscriptions, bytes: options.max_subscription_bytes };
            match self.dist.subscribe(peer, topic, limits)? {
                Some(Change::First) => true,
                Some(_) => options.xpub_verbose || options.xpub_verboser,
                None => false,
            }
        } else {
            // libzmq passes a cancel up unless other subscribers remain, so a cancel of a topic
            // nobody had is passed up too (xpub.cpp: rm_result != values_remain).
            match self.dist.unsubscribe(peer, topic) {
                Some(Change::Fewer) => options.xpub_verboser,
                Some(_) => true,
                None => false,
            }
        };
        Ok(if tell { self.notice(peer, topic, subscribe) } else { None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, join, leave, msg, notices, taken};

    fn told(x: &mut XPub, peer: PeerId, topic: &str, on: bool, o: &Options) -> Vec<(PeerId, String)> {
        notices(&x.peer_subscription(peer, topic.as_bytes(), on, o).unwrap().into_iter().collect::<Vec<_>>())
    }

    #[test]
    fn xpub_hears_of_the_first_subscriber_and_the_last_one_leaving() {
        let (mut x, mut s, o) = (XPub::new(true), Peers::default(), Options::default());
        let (a, b) = (add_peer(&mut x, &mut s, 1, "", 10), add_peer(&mut x, &mut s, 2, "", 10));
        assert_eq!(told(&mut x, a, "news", true, &o), [(a, "+news".to_owned())]);
        assert!(told(&mut x, b, "news", true, &o).is_empty(), "not the first");
        assert!(told(&mut x, a, "news", false, &o).is_empty(), "b still wants it");
        assert_eq!(told(&mut x, b, "news", false, &o), [(b, "-news".to_owned())]);
        assert_eq!(told(&mut x, b, "never", false, &o), [(b, "-never".to_owned())], "libzmq passes it up");
        told(&mut x, a, "sport", true, &o);
        assert_eq!(notices(&leave(&mut x, &mut s, a, false, &o)), [(a, "-sport".to_owned())]);
    }

    #[test]
    fn verbose_tells_every_subscribe_and_verboser_every_cancel() {
        let (mut x, mut s) = (XPub::new(true), Peers::default());
        let verbose = Options { xpub_verbose: true, ..Options::default() };
        let verboser = Options { xpub_verboser: true, ..Options::default() };
        let (a, b) = (add_peer(&mut x, &mut s, 1, "", 10), add_peer(&mut x, &mut s, 2, "", 10));
        told(&mut x, a, "t", true, &verbose);
        assert_eq!(told(&mut x, b, "t", true, &verbose), [(b, "+t".to_owned())]);
        assert!(told(&mut x, a, "t", false, &verbose).is_empty());
        told(&mut x, a, "t", true, &verbose);
        assert_eq!(told(&mut x, a, "t", false, &verboser), [(a, "-t".to_owned())]);
        told(&mut x, a, "t", true, &verbose);
        assert_eq!(notices(&leave(&mut x, &mut s, a, false, &verboser)), [(a, "-t".to_owned())], "b remains");
    }

    #[test]
    fn a_pub_tells_nobody_and_never_receives_but_publishes_alike() {
        let (mut x, mut s, o) = (XPub::new(false), Peers::default(), Options::default());
        let a = add_peer(&mut x, &mut s, 1, "", 10);
        assert!(told(&mut x, a, "t", true, &o).is_empty());
        assert_eq!(x.recv_rule(), RecvRule::NotSupported);
        x.send(&mut s, msg(&["t1"]), &SendFlags::default()).unwrap();
        x.send(&mut s, msg(&["u1"]), &SendFlags::default()).unwrap();
        assert_eq!(taken(&s, a), [["t1"]]);
    }

    #[test]
    fn subscribers_over_their_limits_are_refused_and_a_welcome_greets_each() {
        let (mut x, mut s) = (XPub::new(true), Peers::default());
        let o = Options {
            max_subscriptions: Some(1),
            xpub_welcome_msg: Some(Bytes::from_static(b"hi")),
            ..Options::default()
        };
        join(&mut x, &mut s, 1, "", 10, &o).unwrap();
        assert_eq!(taken(&s, 1), [["hi"]]);
        x.peer_subscription(1, b"a", true, &o).unwrap();
        assert!(matches!(x.peer_subscription(1, b"b", true, &o), Err(LimitError::Subscriptions { limit: 1 })));
    }
}
