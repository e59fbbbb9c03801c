//! Distribution (libzmq's `dist` over its `mtrie`): PUB/XPUB send a message to every subscriber
//! with a matching prefix, once each, dropping it for one at its HWM (or, with XPUB_NODROP,
//! waiting while any matching subscriber is full); XSUB sends to every publisher.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::LimitError;
use crate::link::peer_id::{PeerId, PeerMap};
use crate::link::pipe::{CHUNK_MESSAGE_COST_MAX, ChunkFiller, OutPipe};
use crate::message::Message;
use crate::socket::mtrie::MTrie;
use crate::socket::pattern::TrySend;
use crate::socket::peers::Peers;
use crate::socket::subscriptions::Subscriptions;

/// A connected subscriber.
#[derive(Debug)]
struct Subscriber {
    out: Arc<OutPipe>,
    /// Its prefixes (a set: libzmq does not refcount a peer's duplicate subscribes).
    topics: Subscriptions,
    /// The last send delivered to it (see [`Distributor::send_stamp`]).
    sent_stamp: u64,
}

/// Every connected subscriber's prefixes, and the trie that finds the matching ones.
#[derive(Debug, Default)]
pub(crate) struct Distributor {
    subscribers: PeerMap<Subscriber>,
    mtrie: MTrie,
    /// Numbers each send: a subscriber matched by several of its prefixes is sent a message once,
    /// marked with the send's number, instead of collecting and deduplicating a target list.
    send_stamp: u64,
    /// Distinct prefixes in the trie.
    topics: usize,
    /// A send's matching subscribers, collected before it is queued for them; kept between sends
    /// (a fan-out to more subscribers than fit inline allocated a list per message).
    targets: Vec<PeerId>,
    /// Where small messages for several subscribers are stored once (see
    /// [`Chunk`](crate::link::pipe::Chunk)).
    chunks: ChunkFiller,
}

/// What a subscription change did to the trie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// The first subscriber of this prefix.
    First,
    /// Another subscriber (or the same one again) of a prefix already wanted.
    More,
    /// The last subscriber of this prefix left.
    Last,
    /// One of several subscribers left.
    Fewer,
    /// A cancel of a prefix this peer had not subscribed to.
    Unknown,
}

/// The per-peer subscription limits (`max_subscriptions`, `max_subscription_bytes`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    pub count: Option<usize>,
    pub bytes: Option<usize>,
}

impl Distributor {
    pub fn join(&mut self, id: PeerId, out: Arc<OutPipe>) {
        self.subscribers.insert(id, Subscriber { out, topics: Subscriptions::default(), sent_stamp: 0 });
    }

    /// `id` subscribed to `topic`; `None` if it is not a subscriber (any more).
    pub fn subscribe(&mut self, id: PeerId, topic: &[u8], limits: Limits) -> Result<Option<Change>, LimitError> {
        let Some(s) = self.subscribers.get_mut(&id) else { return Ok(None) };
        if !s.topics.contains(topic) {
            if let Some(limit) = limits.count
                && s.topics.len() >= limit
            {
                return Err(LimitError::Subscriptions { limit });
            }
            if let Some(limit) = limits.bytes
                && s.topics.bytes() + topic.len() > limit
            {
                return Err(LimitError::SubscriptionBytes { limit });
            }
        }
        s.topics.insert_once(topic);
        let (first, _) = self.mtrie.add(topic, id);
        self.topics += first as usize;
        Ok(Some(if first { Change::First } else { Change::More }))
    }

    /// `id` cancelled `topic`; `None` if it is not a subscriber (any more).
    pub fn unsubscribe(&mut self, id: PeerId, topic: &[u8]) -> Option<Change> {
        let s = self.subscribers.get_mut(&id)?;
        s.topics.remove_all(topic);
        Some(self.remove(id, topic))
    }

    fn remove(&mut self, id: PeerId, topic: &[u8]) -> Change {
        match self.mtrie.remove(topic, id) {
            (false, _) => Change::Unknown,
            (true, true) => {
                self.topics -= 1;
                Change::Last
            }
            (true, false) => Change::Fewer,
        }
    }

    /// `id` left: its prefixes go, each with what its leaving did.
    pub fn leave(&mut self, id: PeerId) -> Vec<(Bytes, Change)> {
        let Some(s) = self.subscribers.remove(&id) else { return Vec::new() };
        s.topics.iter().map(|topic| (topic.clone(), self.remove(id, topic))).collect()
    }

    /// XPUB_MANUAL_LAST_VALUE: sends `msg` to `id` alone, if one of its prefixes matches.
    #[cfg(feature = "draft")]
    pub fn publish_to(&mut self, id: PeerId, msg: Message, nodrop: bool) -> TrySend {
        let topic = msg.first().expect("non-empty");
        let Some(s) = self.subscribers.get(&id).filter(|s| s.topics.matches(topic)) else { return TrySend::Sent };
        match s.out.try_push(msg) {
            Err(msg) if nodrop => TrySend::Full(msg),
            _ => TrySend::Sent,
        }
    }

    /// Distinct prefixes some subscriber wants (ZMQ_TOPICS_COUNT).
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub fn topics(&self) -> usize {
        self.topics
    }

    /// INVERT_MATCHING: sends `msg` to every subscriber with *no* prefix of its first frame. Kept
    /// out of line: it is rare, and inlined it doubled `publish`.
    #[cold]
    #[inline(never)]
    fn publish_inverted(&mut self, msg: Message, nodrop: bool) -> TrySend {
        let topic = msg.first().expect("non-empty");
        self.send_stamp += 1;
        let stamp = self.send_stamp;
        let Distributor { subscribers, mtrie, .. } = self;
        mtrie.for_each_match(topic, |id| {
            if let Some(s) = subscribers.get_mut(&id) {
                s.sent_stamp = stamp; // matched: left out
            }
        });
        let mut targets = subscribers.values().filter(|s| s.sent_stamp != stamp);
        if nodrop && targets.clone().any(|s| !s.out.has_room()) {
            return TrySend::Full(msg);
        }
        for s in targets.by_ref() {
            let _ = s.out.try_push(msg.clone());
        }
        TrySend::Sent
    }

    /// Sends `msg` to every subscriber with a prefix of its first frame, once each.
    pub fn publish(&mut self, msg: Message, nodrop: bool, invert: bool) -> TrySend {
        if invert {
            return self.publish_inverted(msg, nodrop);
        }
        let topic = msg.first().expect("non-empty");
        let Distributor { subscribers, mtrie, send_stamp, targets, chunks, .. } = self;
        if nodrop {
            let mut full = false;
            mtrie.for_each_match(topic, |id| {
                full |= subscribers.get(&id).is_some_and(|s| !s.out.has_room());
            });
            if full {
                return TrySend::Full(msg);
            }
        }
        *send_stamp += 1;
        let stamp = *send_stamp;
        targets.clear();
        mtrie.for_each_match(topic, |id| {
            if let Some(s) = subscribers.get_mut(&id)
                && s.sent_stamp != stamp
            {
                s.sent_stamp = stamp;
                targets.push(id);
            }
        });
        match targets[..] {
            [] => {}
            [only] => {
                let _ = subscribers[&only].out.try_push(msg);
            }
            _ => {
                // Several subscribers share one copy: a small message in a chunk, a large one
                // alone (see `Chunk` and `Outbound::Shared`).
                let cost = crate::link::pipe::cost(&msg);
                if cost <= CHUNK_MESSAGE_COST_MAX {
                    let (chunk, slot) = chunks.put(msg, cost);
                    for id in targets.iter() {
                        subscribers[id].out.try_push_chunk(chunk, slot);
                    }
                } else {
                    let shared = Arc::new(msg);
                    for id in targets.iter() {
                        subscribers[id].out.try_push_shared(&shared, cost);
                    }
                }
            }
        }
        TrySend::Sent
    }
}

/// XSUB: every message to every publisher (queued for those not connected yet).
pub(crate) fn to_all(peers: &Peers, msg: Message) -> TrySend {
    for p in peers.map.values() {
        let _ = p.out.try_push(msg.clone());
    }
    TrySend::Sent
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::waiters::Waiters;
    use crate::socket::pattern::testing::{frames, msg};
    use std::collections::VecDeque;

    fn pipe(hwm: usize) -> Arc<OutPipe> {
        Arc::new(OutPipe::new(hwm, 0, false, Arc::new(Waiters::default())))
    }

    fn taken(out: &OutPipe) -> Vec<Vec<String>> {
        let mut items = VecDeque::new();
        out.drain(&mut items);
        items.iter().flat_map(|i| i.messages().map(frames)).collect()
    }

    #[test]
    fn inverted_matching_sends_to_the_others_and_topics_are_counted() {
        let mut d = Distributor::default();
        let (a, b, c) = (pipe(10), pipe(10), pipe(10));
        d.join(1, a.clone());
        d.join(2, b.clone());
        d.join(3, c.clone());
        let none = Limits::default();
        d.subscribe(1, b"A", none).unwrap();
        d.subscribe(1, b"AB", none).unwrap();
        d.subscribe(2, b"A", none).unwrap();
        assert_eq!(d.topics(), 2, "A and AB");
        assert!(matches!(d.publish(msg(&["AB1"]), false, true), TrySend::Sent));
        assert!(matches!(d.publish(msg(&["C1"]), false, true), TrySend::Sent));
        assert_eq!(taken(&a), [["C1"]]);
        assert_eq!(taken(&b), [["C1"]]);
        assert_eq!(taken(&c), [["AB1"], ["C1"]], "no subscription: matches nothing, so gets everything");
        d.leave(1);
        assert_eq!(d.topics(), 1, "AB went with its only subscriber (libzmq keeps counting it)");
    }

    #[test]
    fn each_matching_subscriber_once_and_a_full_one_loses_it() {
        let mut d = Distributor::default();
        let (a, b, c) = (pipe(10), pipe(1), pipe(10));
        d.join(1, a.clone());
        d.join(2, b.clone());
        d.join(3, c.clone());
        let none = Limits::default();
        d.subscribe(1, b"weather", none).unwrap();
        d.subscribe(1, b"weather.paris", none).unwrap(); // two matching prefixes: still one copy
        d.subscribe(2, b"", none).unwrap();
        d.subscribe(3, b"sport", none).unwrap();
        for body in ["weather.paris 12C", "weather.oslo 3C"] {
            assert!(matches!(d.publish(msg(&[body]), false, false), TrySend::Sent));
        }
        assert_eq!(taken(&a), [["weather.paris 12C"], ["weather.oslo 3C"]]);
        assert_eq!(taken(&b), [["weather.paris 12C"]], "HWM 1: the second is dropped");
        assert!(taken(&c).is_empty());
    }

    #[test]
    fn a_message_for_several_subscribers_is_queued_once_shared() {
        let mut d = Distributor::default();
        let (a, b) = (pipe(10), pipe(10));
        d.join(1, a.clone());
        d.join(2, b.clone());
        d.subscribe(1, b"", Limits::default()).unwrap();
        d.subscribe(2, b"x", Limits::default()).unwrap();
        let large = format!("x{}", "-".repeat(2000));
        for m in [msg(&["x1"]), msg(&["y1"]), Message::single(Bytes::from(large.clone()))] {
            assert!(matches!(d.publish(m, false, false), TrySend::Sent));
        }
        let mut items = VecDeque::new();
        a.drain(&mut items);
        use crate::link::pipe::Outbound;
        assert!(
            matches!(&items[0], Outbound::Chunk(part) if part.messages().map(frames).eq([["x1"]])),
            "small: in a chunk"
        );
        assert!(matches!(&items[1], Outbound::Message(m) if frames(m) == ["y1"]), "one subscriber: moved");
        assert!(
            matches!(&items[2], Outbound::Shared(m) if Arc::strong_count(m) == 2 && frames(m) == [large.as_str()]),
            "large: alone"
        );
        assert_eq!(taken(&b), [["x1"], [large.as_str()]]);
    }

    #[test]
    fn nodrop_waits_while_a_matching_subscriber_is_full() {
        let mut d = Distributor::default();
        let a = pipe(1);
        d.join(1, a.clone());
        d.subscribe(1, b"t", Limits::default()).unwrap();
        assert!(matches!(d.publish(msg(&["t1"]), true, false), TrySend::Sent));
        assert!(matches!(d.publish(msg(&["t2"]), true, false), TrySend::Full(_)));
        assert!(matches!(d.publish(msg(&["other"]), true, false), TrySend::Sent), "no match: no wait");
        assert_eq!(taken(&a), [["t1"]]);
    }

    #[test]
    fn changes_say_first_and_last_and_a_leaver_takes_its_prefixes() {
        let mut d = Distributor::default();
        let none = Limits::default();
        d.join(1, pipe(10));
        d.join(2, pipe(10));
        assert_eq!(d.subscribe(1, b"a", none).unwrap(), Some(Change::First));
        assert_eq!(d.subscribe(2, b"a", none).unwrap(), Some(Change::More));
        assert_eq!(d.subscribe(1, b"a", none).unwrap(), Some(Change::More), "a duplicate is not a second");
        assert_eq!(d.unsubscribe(1, b"a"), Some(Change::Fewer));
        assert_eq!(d.unsubscribe(1, b"a"), Some(Change::Unknown));
        assert_eq!(d.subscribe(9, b"a", none).unwrap(), None, "not a subscriber");
        assert_eq!(d.leave(2), [(Bytes::from_static(b"a"), Change::Last)]);
        let p = pipe(10);
        d.join(3, p.clone());
        d.publish(msg(&["a"]), false, false);
        assert!(taken(&p).is_empty(), "nobody wants a any more");
    }

    #[test]
    fn limits_count_distinct_prefixes_and_their_bytes() {
        let mut d = Distributor::default();
        d.join(1, pipe(10));
        let limits = Limits { count: Some(2), bytes: Some(5) };
        d.subscribe(1, b"ab", limits).unwrap();
        d.subscribe(1, b"ab", limits).unwrap();
        assert!(matches!(d.subscribe(1, b"cdef", limits), Err(LimitError::SubscriptionBytes { limit: 5 })));
        d.subscribe(1, b"cd", limits).unwrap();
        assert!(matches!(d.subscribe(1, b"e", limits), Err(LimitError::Subscriptions { limit: 2 })));
    }
}
