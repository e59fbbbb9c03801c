//! Our own writes that a server confirmed, kept for a short while.
//!
//! A pair server echoes a KVSET to its subscribers and its passive peer in separate writes; killed
//! between them, it leaves a write that this client saw confirmed but the peer never got (the copy we
//! publish to the peer directly can be lost too, while our connection to a restarted peer is not yet
//! up). After the failover the new server's snapshot shows the key as it was *before* the write. Such
//! a write is sent again, so a confirmed write survives the loss of the server that confirmed it.
//!
//! A key that holds a value other than what it held before our write (another client's newer write)
//! is left alone: only the exact "never applied" case is repaired.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::kvmsg::KvMsg;

/// Values a key held before our writes to it, kept per key.
const EARLIER_VALUES: usize = 32;
/// Writes remembered at most (the oldest go first): a lost write is one of the last few before a
/// server died, and this bounds the memory at any write rate.
const MAX_WRITES: usize = 4096;

#[derive(Debug)]
struct Recent {
    /// The latest write of ours to this key that a server confirmed.
    msg: KvMsg,
    /// Fingerprints of what the key held before each of our confirmed writes within the window. Not
    /// the values: a received value is a slice of a whole read buffer, and holding thousands of
    /// them kept that many buffers alive.
    earlier: VecDeque<u64>,
    confirmed: Instant,
}

/// Confirmed writes of the last `window`.
#[derive(Debug)]
pub(crate) struct RecentWrites {
    by_key: HashMap<Bytes, Recent>,
    /// Keys in confirmation order, for expiry in O(1) per write; an entry whose key was written
    /// again since is skipped (its time no longer matches).
    order: VecDeque<(Instant, Bytes)>,
    window: Duration,
}

impl RecentWrites {
    pub fn new(window: Duration) -> Self {
        RecentWrites { by_key: HashMap::new(), order: VecDeque::new(), window }
    }

    /// A server confirmed `msg` (ours); the key held `before` until then.
    /// Our write `msg` was confirmed now; `before` is the [`fingerprint`] of what its key held.
    pub fn confirmed(&mut self, msg: KvMsg, before: u64, now: Instant) {
        let fresh = |r: &Recent| now.duration_since(r.confirmed) <= self.window;
        let mut earlier = match self.by_key.remove(&msg.key) {
            Some(r) if fresh(&r) => r.earlier,
            _ => VecDeque::new(),
        };
        if earlier.len() == EARLIER_VALUES {
            earlier.pop_front();
        }
        earlier.push_back(before);
        self.order.push_back((now, msg.key.clone()));
        self.by_key.insert(msg.key.clone(), Recent { msg, earlier, confirmed: now });
        self.expire(now);
    }

    /// The writes that `map` (a new server's snapshot) shows as never applied: the key still holds a
    /// value it had before them. They are forgotten here; sent again, they are confirmed anew.
    pub fn lost(&mut self, map: &BTreeMap<Bytes, Bytes>, now: Instant) -> Vec<KvMsg> {
        self.expire(now);
        let missing: Vec<Bytes> = self
            .by_key
            .iter()
            .filter(|(key, r)| {
                let held = map.get(*key);
                let wanted = (!r.msg.is_delete()).then_some(&r.msg.body);
                held != wanted && r.earlier.contains(&fingerprint(held.map(|v| &v[..])))
            })
            .map(|(key, _)| key.clone())
            .collect();
        missing.into_iter().filter_map(|key| self.by_key.remove(&key)).map(|r| r.msg).collect()
    }

    /// Drops entries older than the window, and the oldest beyond [`MAX_WRITES`].
    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            let too_old = now.duration_since(*at) > self.window;
            // Stale order entries (keys written again since) count too, so `order` stays bounded.
            if !too_old && self.order.len() <= MAX_WRITES {
                break;
            }
            let (at, key) = self.order.pop_front().expect("front exists");
            if self.by_key.get(&key).is_some_and(|r| r.confirmed == at) {
                self.by_key.remove(&key);
            }
        }
    }
}

/// A 64-bit digest of a key's value (`None`: absent); equal values give equal digests.
/// A value's fingerprint (`None`: no value), 8 bytes at a time. Not SipHash: it runs on every
/// confirmed write over the value it replaced, and no peer picks the values it tells apart (our
/// own earlier values from what a new server's snapshot holds).
pub(crate) fn fingerprint(value: Option<&[u8]>) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let Some(value) = value else { return 0 };
    let mut h = (value.len() as u64 ^ 0x5851_F42D_4C95_7F2D).wrapping_mul(K);
    for chunk in value.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = (h.rotate_left(23) ^ u64::from_le_bytes(word)).wrapping_mul(K);
    }
    (h ^ (h >> 29)) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> KvMsg {
        KvMsg {
            key: Bytes::copy_from_slice(key.as_bytes()),
            sequence: 0,
            uuid: None,
            properties: Default::default(),
            body: Bytes::copy_from_slice(value.as_bytes()),
        }
    }
    fn map(entries: &[(&str, &str)]) -> BTreeMap<Bytes, Bytes> {
        entries
            .iter()
            .map(|(k, v)| (Bytes::copy_from_slice(k.as_bytes()), Bytes::copy_from_slice(v.as_bytes())))
            .collect()
    }
    fn b(v: &str) -> u64 {
        fingerprint(Some(v.as_bytes()))
    }
    const ABSENT: u64 = 0;

    #[test]
    fn a_write_the_new_server_never_applied_is_returned_once() {
        let now = Instant::now();
        let mut r = RecentWrites::new(Duration::from_secs(10));
        r.confirmed(set("/k", "2"), b("1"), now);
        r.confirmed(set("/j", "b"), ABSENT, now);
        assert!(r.lost(&map(&[("/k", "2"), ("/j", "b")]), now).is_empty(), "both applied");
        r.confirmed(set("/k", "3"), b("2"), now);
        let lost = r.lost(&map(&[("/k", "2"), ("/j", "b")]), now);
        assert_eq!(lost, vec![set("/k", "3")]);
        assert!(r.lost(&map(&[("/k", "2"), ("/j", "b")]), now).is_empty(), "forgotten once returned");
    }

    #[test]
    fn several_lost_writes_to_one_key_return_the_latest() {
        let now = Instant::now();
        let mut r = RecentWrites::new(Duration::from_secs(10));
        r.confirmed(set("/k", "2"), b("1"), now);
        r.confirmed(set("/k", "3"), b("2"), now);
        assert_eq!(r.lost(&map(&[("/k", "1")]), now), vec![set("/k", "3")]);
    }

    #[test]
    fn deletes_and_absent_keys() {
        let now = Instant::now();
        let mut r = RecentWrites::new(Duration::from_secs(10));
        r.confirmed(set("/gone", ""), b("x"), now);
        r.confirmed(set("/new", "v"), ABSENT, now);
        let mut lost = r.lost(&map(&[("/gone", "x")]), now);
        lost.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(lost, vec![set("/gone", ""), set("/new", "v")]);
    }

    #[test]
    fn another_clients_newer_value_and_old_writes_are_left_alone() {
        let now = Instant::now();
        let mut r = RecentWrites::new(Duration::from_secs(10));
        r.confirmed(set("/k", "2"), b("1"), now);
        assert!(r.lost(&map(&[("/k", "someone else's")]), now).is_empty());
        r.confirmed(set("/old", "2"), b("1"), now);
        assert!(r.lost(&map(&[("/old", "1")]), now + Duration::from_secs(11)).is_empty(), "outside the window");
    }

    #[test]
    fn memory_is_bounded_at_any_write_rate() {
        let now = Instant::now();
        let mut r = RecentWrites::new(Duration::from_secs(3600));
        for i in 0..3 * MAX_WRITES {
            r.confirmed(set(&format!("/k{}", i % (2 * MAX_WRITES)), "v"), ABSENT, now);
        }
        assert!(r.by_key.len() <= MAX_WRITES && r.order.len() <= MAX_WRITES, "{} {}", r.by_key.len(), r.order.len());
        let newest = format!("/k{}", (3 * MAX_WRITES - 1) % (2 * MAX_WRITES));
        assert!(r.by_key.contains_key(newest.as_bytes()), "the newest are kept");
    }

    #[test]
    fn fingerprints_tell_values_apart() {
        assert_eq!(fingerprint(None), ABSENT);
        let values: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| i.to_le_bytes().repeat((i % 40) as usize + 1))
            .chain([vec![], vec![0], vec![0, 0], vec![0; 8], vec![0; 9]])
            .collect();
        let mut seen = std::collections::HashSet::new();
        for v in &values {
            assert!(seen.insert(fingerprint(Some(v))), "{v:?}: a collision");
        }
        assert!(!seen.contains(&ABSENT), "no value looks absent");
    }
}
