//! The client's copy of the map and the sequence rules that keep it equal to the server's.
//! Pure logic (no sockets), so every rule is unit-tested directly.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;

use super::Event;
use crate::command::Subtree;
use crate::kvmsg::KvMsg;

/// The replica: map, and the sequence of the last KTHXBAI or KVPUB applied.
#[derive(Debug, Default)]
pub(crate) struct Replica {
    pub map: BTreeMap<Bytes, Bytes>,
    pub sequence: u64,
    /// A KVPUB newer than the snapshot has been applied since the last snapshot.
    beyond_snapshot: bool,
}

/// What [`Replica::apply`] did with a KVPUB.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Applied, with its event when one was asked for.
    Applied(Option<Event>),
    /// Sequence ≤ the snapshot's: already in the snapshot, discarded.
    Stale,
    /// Key outside our subtree (the HUGZ subscription also matches keys such as `HUGZ…`): ignored.
    OutsideSubtree,
    /// A sequence was skipped: updates were lost (publisher queue overflow). Not applied.
    Gap { expected: u64, got: u64 },
    /// The sequence went backwards after updates newer than the snapshot: a different (restarted)
    /// server. Not applied.
    Regression { last: u64, got: u64 },
}

impl Replica {
    /// Replaces the map with a snapshot taken at `sequence`, appending to `events` the changes from
    /// the old map to the new one (so an event consumer's view stays exact across re-syncs).
    ///
    /// Keys in `superseded` are left out of the events: updates newer than the snapshot, queued
    /// while it streamed, are about to be applied to them and report them with their own sequence.
    /// (A snapshot is fuzzy: a key read late may already hold such an update's value, which would
    /// otherwise be reported twice, first with the snapshot's sequence.)
    pub fn load(
        &mut self,
        snapshot: BTreeMap<Bytes, Bytes>,
        sequence: u64,
        superseded: &HashSet<Bytes>,
        events: Option<&mut Vec<Event>>,
    ) {
        let old = std::mem::replace(&mut self.map, snapshot);
        let Some(events) = events else {
            // Nobody listens: no per-key comparison (a million-key sync spent a tenth of its
            // time building events nobody would read).
            self.sequence = sequence;
            self.beyond_snapshot = false;
            return;
        };
        for (key, value) in &self.map {
            if old.get(key) != Some(value) && !superseded.contains(key) {
                events.push(Event::Set { key: key.clone(), value: value.clone(), sequence });
            }
        }
        for key in old.keys() {
            if !self.map.contains_key(key) && !superseded.contains(key) {
                events.push(Event::Deleted { key: key.clone(), sequence });
            }
        }
        self.sequence = sequence;
        self.beyond_snapshot = false;
    }

    /// Applies a KVPUB under the spec's rule (discard sequences not above the last applied one).
    /// With `check_gaps` (only meaningful for a whole-map subscription: a subtree client sees only
    /// some sequences) a skipped sequence is reported instead of applied. The first update after a
    /// snapshot may skip ahead: 12/CHP lets KTHXBAI carry the highest KVSYNC sequence, which can
    /// be below the server's current one.
    /// Applies a KVPUB; the event it makes only when `events` (someone listens).
    pub fn apply(&mut self, msg: KvMsg, subtree: &Subtree, check_gaps: bool, events: bool) -> Outcome {
        if !subtree.contains(&msg.key) {
            return Outcome::OutsideSubtree;
        }
        if msg.sequence <= self.sequence {
            return match self.beyond_snapshot {
                true => Outcome::Regression { last: self.sequence, got: msg.sequence },
                false => Outcome::Stale,
            };
        }
        if check_gaps && self.beyond_snapshot && msg.sequence != self.sequence + 1 {
            return Outcome::Gap { expected: self.sequence + 1, got: msg.sequence };
        }
        let sequence = msg.sequence;
        self.sequence = sequence;
        self.beyond_snapshot = true;
        if msg.body.is_empty() {
            self.map.remove(&msg.key[..]);
            return Outcome::Applied(events.then(|| Event::Deleted { key: msg.key, sequence }));
        }
        // Copied: the message's frames are slices of a connection's read buffer, which a kept
        // slice would keep whole. A key already held keeps its copy (an update of a known key,
        // the usual case, copies only the value); the event shares the map's copies.
        let value = Bytes::copy_from_slice(&msg.body);
        let event_value = events.then(|| value.clone());
        let key = match self.map.get_mut(&msg.key[..]) {
            Some(held) => {
                *held = value;
                match events {
                    true => self.map.get_key_value(&msg.key[..]).map(|(key, _)| key.clone()),
                    false => None,
                }
            }
            None => {
                let key = Bytes::copy_from_slice(&msg.key);
                let event_key = events.then(|| key.clone());
                self.map.insert(key, value);
                event_key
            }
        };
        Outcome::Applied(key.zip(event_value).map(|(key, value)| Event::Set { key, value, sequence }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &'static str, value: &'static str, sequence: u64) -> KvMsg {
        let mut m = KvMsg::new(key, value);
        m.sequence = sequence;
        m
    }

    fn map(pairs: &[(&'static str, &'static str)]) -> BTreeMap<Bytes, Bytes> {
        pairs.iter().map(|(k, v)| (Bytes::from_static(k.as_bytes()), Bytes::from_static(v.as_bytes()))).collect()
    }

    #[test]
    fn discards_updates_at_or_below_the_snapshot() {
        let mut r = Replica::default();
        let mut ev = Vec::new();
        r.load(map(&[("a", "new")]), 6, &HashSet::new(), Some(&mut ev));
        assert_eq!(ev, vec![Event::Set { key: "a".into(), value: "new".into(), sequence: 6 }]);
        let all = Subtree::all();
        assert_eq!(r.apply(kv("a", "old", 5), &all, true, true), Outcome::Stale);
        assert_eq!(r.apply(kv("a", "old6", 6), &all, true, true), Outcome::Stale);
        assert_eq!(r.map, map(&[("a", "new")]));
        assert!(matches!(r.apply(kv("a", "", 7), &all, true, true), Outcome::Applied(Some(Event::Deleted { .. }))));
        assert!(r.map.is_empty());
        assert_eq!(r.sequence, 7);
    }

    #[test]
    fn gaps_and_regressions() {
        let mut r = Replica::default();
        r.load(BTreeMap::new(), 10, &HashSet::new(), Some(&mut Vec::new()));
        let all = Subtree::all();
        // The first update after a snapshot may skip ahead.
        assert!(matches!(r.apply(kv("a", "1", 12), &all, true, true), Outcome::Applied(_)));
        assert_eq!(r.apply(kv("a", "2", 14), &all, true, true), Outcome::Gap { expected: 13, got: 14 });
        assert_eq!(r.sequence, 12);
        assert!(matches!(r.apply(kv("a", "2", 14), &all, false, true), Outcome::Applied(_)));
        assert_eq!(r.apply(kv("a", "x", 3), &all, true, true), Outcome::Regression { last: 14, got: 3 });
        assert_eq!(r.apply(kv("a", "x", 14), &all, true, true), Outcome::Regression { last: 14, got: 14 });
        assert_eq!(r.map, map(&[("a", "2")]));
    }

    #[test]
    fn subtree_filter_and_resync_diff() {
        let mut r = Replica::default();
        let sub: Subtree = "/a/".parse().unwrap();
        r.load(map(&[("/a/1", "x"), ("/a/2", "y")]), 3, &HashSet::new(), Some(&mut Vec::new()));
        assert_eq!(r.apply(kv("HUGZx", "1", 4), &sub, false, true), Outcome::OutsideSubtree);
        assert_eq!(r.sequence, 3);
        let mut ev = Vec::new();
        r.load(map(&[("/a/1", "x"), ("/a/3", "z")]), 9, &HashSet::new(), Some(&mut ev));
        assert_eq!(
            ev,
            vec![
                Event::Set { key: "/a/3".into(), value: "z".into(), sequence: 9 },
                Event::Deleted { key: "/a/2".into(), sequence: 9 },
            ]
        );
    }

    #[test]
    fn keys_that_queued_updates_supersede_are_reported_once_by_those_updates() {
        let mut r = Replica::default();
        r.load(map(&[("k", "old"), ("gone", "x")]), 3070, &HashSet::new(), Some(&mut Vec::new()));
        // Re-sync: the fuzzy snapshot at 3071 already holds k's value from update 3072, which was
        // also queued while it streamed; "gone" was deleted by a queued 3073.
        let superseded: HashSet<Bytes> = ["k", "gone"].into_iter().map(Bytes::from).collect();
        let mut ev = Vec::new();
        r.load(map(&[("k", "new")]), 3071, &superseded, Some(&mut ev));
        assert!(ev.is_empty(), "{ev:?}");
        let all = Subtree::all();
        assert_eq!(
            r.apply(kv("k", "new", 3072), &all, true, true),
            Outcome::Applied(Some(Event::Set { key: "k".into(), value: "new".into(), sequence: 3072 }))
        );
        assert_eq!(
            r.apply(kv("gone", "", 3073), &all, true, true),
            Outcome::Applied(Some(Event::Deleted { key: "gone".into(), sequence: 3073 }))
        );
    }

    #[test]
    fn without_listeners_no_event_is_made_and_a_held_key_keeps_its_copy() {
        let mut r = Replica::default();
        r.load(map(&[("k", "old")]), 1, &HashSet::new(), None);
        let all = Subtree::all();
        let held = r.map.keys().next().unwrap().as_ptr();
        assert_eq!(r.apply(kv("k", "new", 2), &all, true, false), Outcome::Applied(None));
        assert_eq!(r.map, map(&[("k", "new")]));
        assert_eq!(r.map.keys().next().unwrap().as_ptr(), held, "the key was not copied again");
        assert_eq!(
            r.apply(kv("k", "newer", 3), &all, true, true),
            Outcome::Applied(Some(Event::Set { key: "k".into(), value: "newer".into(), sequence: 3 }))
        );
        assert_eq!(r.apply(kv("n", "1", 4), &all, true, false), Outcome::Applied(None));
        assert_eq!(r.apply(kv("n", "", 5), &all, true, false), Outcome::Applied(None));
        assert_eq!(r.map, map(&[("k", "newer")]));
    }
}
