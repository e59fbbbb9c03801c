//! PUB and XPUB: publish by subscription ([`super::dist`]). A PUB never receives; an XPUB's
//! application receives its subscribers' subscription changes as `\x01topic` / `\x00topic`
//! notices — the first subscriber of a prefix and the last one leaving (every subscribe with
//! XPUB_VERBOSE, every change with XPUB_VERBOSER) — and greets each with XPUB_WELCOME_MSG.
//!
//! With XPUB_MANUAL (libzmq's xpub.cpp) the application decides: every subscription change is
//! passed up and nobody is subscribed by it, until the application, having received a notice,
//! calls `subscribe`/`unsubscribe`, which applies to the subscriber that notice came from. With
//! XPUB_MANUAL_LAST_VALUE also, the first send after a notice goes to that subscriber alone (the
//! last value cache's answer to a newcomer). A subscriber that goes is told up as `\x00topic` for
//! each topic it had asked for.

use bytes::Bytes;

use super::dist::{Change, Distributor, Limits};
use super::{Notice, Pattern, RecvRule, SendFlags, TrySend, subscription_message};
use crate::error::Error;
use crate::error::{LimitError, Result};
use crate::link::peer_id::PeerId;
use crate::link::peer_id::PeerMap;
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::socket::subscriptions::Subscriptions;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct XPub {
    dist: Distributor,
    /// XPUB (its application sees subscriptions) rather than PUB.
    extended: bool,
    /// XPUB_MANUAL: what each subscriber asked for (the trie holds what the application granted).
    asked: PeerMap<Subscriptions>,
    /// XPUB_MANUAL: the subscriber the last received notice came from.
    last_from: Option<PeerId>,
    /// XPUB_MANUAL_LAST_VALUE, as the options said at the last subscription change.
    last_value: bool,
}

impl XPub {
    pub fn new(extended: bool) -> Self {
        XPub { dist: Distributor::default(), extended, asked: PeerMap::default(), last_from: None, last_value: false }
    }

    fn manual(&self, options: &Options) -> bool {
        self.extended && (options.xpub_manual || options.xpub_manual_last_value)
    }

    /// XPUB_MANUAL: a change a subscriber asks for is only recorded and passed up, whatever it is.
    fn asked_for(&mut self, peer: PeerId, topic: &[u8], subscribe: bool, options: &Options) -> Result<(), LimitError> {
        self.last_value = options.xpub_manual_last_value;
        let asked = self.asked.entry(peer).or_default();
        if !subscribe {
            asked.remove_all(topic);
            return Ok(());
        }
        if !asked.contains(topic) {
            if let Some(limit) = options.max_subscriptions
                && asked.len() >= limit
            {
                return Err(LimitError::Subscriptions { limit });
            }
            if let Some(limit) = options.max_subscription_bytes
                && asked.bytes() + topic.len() > limit
            {
                return Err(LimitError::SubscriptionBytes { limit });
            }
        }
        asked.insert_once(topic);
        Ok(())
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
        if self.last_from == Some(id) {
            self.last_from = None;
        }
        if let Some(asked) = self.asked.remove(&id) {
            self.dist.leave(id);
            // In libzmq's order: its trie is walked in byte order.
            let mut topics: Vec<&Bytes> = asked.iter().collect();
            topics.sort();
            notices.extend(topics.into_iter().filter_map(|topic| self.notice(id, topic, false)));
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
        if self.last_value
            && let Some(to) = self.last_from.take()
        {
            return Ok(self.dist.publish_to(to, msg, flags.xpub_nodrop()));
        }
        Ok(self.dist.publish(msg, flags.xpub_nodrop(), flags.invert_matching()))
    }

    /// An XPUB's receive notes who sent what it takes, for XPUB_MANUAL's `subscribe`.
    fn recv_rule(&self) -> RecvRule {
        if self.extended { RecvRule::Stateful } else { RecvRule::NotSupported }
    }

    fn on_recv(&mut self, from: PeerId, msg: Message, _: bool) -> Option<Message> {
        self.last_from = Some(from);
        Some(msg)
    }

    /// XPUB_MANUAL: subscribes (or unsubscribes) the subscriber of the last notice received; a
    /// no-op when there is none. Without XPUB_MANUAL an XPUB takes no subscriptions (EINVAL).
    fn local_subscription(&mut self, _: &Peers, topic: &[u8], subscribe: bool, options: &Options) -> Result<()> {
        if !self.manual(options) {
            return Err(Error::InvalidArgument("an XPUB subscribes its peers only with XPUB_MANUAL"));
        }
        self.last_value = options.xpub_manual_last_value;
        let Some(peer) = self.last_from else { return Ok(()) };
        if subscribe {
            // What the application grants is not bounded by the peer's limits: it is its own call.
            self.dist.subscribe(peer, topic, Limits::default()).map_err(|_| Error::InvalidState)?;
        } else {
            self.dist.unsubscribe(peer, topic);
        }
        Ok(())
    }

    fn peer_subscription(
        &mut self,
        peer: PeerId,
        topic: &[u8],
        subscribe: bool,
        options: &Options,
    ) -> Result<Option<Notice>, LimitError> {
        if self.manual(options) {
            self.asked_for(peer, topic, subscribe, options)?;
            return Ok(self.notice(peer, topic, subscribe));
        }
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

    fn topics_count(&self) -> Option<usize> {
        Some(self.dist.topics())
    }

    fn socket_type(&self) -> SocketType {
        if self.extended { SocketType::XPub } else { SocketType::Pub }
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
