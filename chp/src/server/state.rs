//! The server's state machine: the map, the sequence counter, TTL deadlines. No sockets, no clock:
//! every method takes the current `Instant` and returns the messages to publish, so a driver (the
//! single [`Server`](super::Server) today, a Binary Star pair later) decides what to do with them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::command::{KvSet, KvSync, Subtree};
use crate::kvmsg::{KvMsg, Properties};
use crate::store::{Entry, Store};

/// Longest accepted ttl (ten years): larger values are rejected rather than overflowing deadlines.
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Why an update was not applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The `ttl` property is not a non-negative number of seconds up to [`MAX_TTL`].
    #[error("invalid ttl property {0:?} (expected seconds, e.g. \"30\" or \"1.5\")")]
    InvalidTtl(String),
    /// The value is larger than the configured limit.
    #[error("value of {0} bytes is larger than the limit of {1}")]
    ValueTooLarge(usize, usize),
}

/// Parses a `ttl` property: seconds, integer or decimal. `0` means "no ttl".
///
/// ```
/// use std::time::Duration;
/// use chp::server::parse_ttl;
/// assert_eq!(parse_ttl("1.5"), Ok(Some(Duration::from_millis(1500))));
/// assert_eq!(parse_ttl("0"), Ok(None));
/// assert!(parse_ttl("-1").is_err() && parse_ttl("soon").is_err());
/// ```
pub fn parse_ttl(text: &str) -> Result<Option<Duration>, ApplyError> {
    let bad = || ApplyError::InvalidTtl(text.to_owned());
    let secs: f64 = text.trim().parse().map_err(|_| bad())?;
    if !secs.is_finite() || secs < 0.0 || secs > MAX_TTL.as_secs_f64() {
        return Err(bad());
    }
    Ok((secs > 0.0).then(|| Duration::from_secs_f64(secs)))
}

/// The map and its sequence: the server's state machine, free of sockets and clocks (every method
/// takes the current `Instant` and returns what to publish), so any driver can run it.
///
/// ```
/// use std::time::{Duration, Instant};
/// use chp::command::KvSet;
/// use chp::kvmsg::KvMsg;
/// use chp::server::ServerState;
///
/// let t0 = Instant::now();
/// let mut state = ServerState::new(t0);
/// let mut msg = KvMsg::new("/a", "1");
/// msg.properties.insert("ttl", "2").unwrap();
/// let published = state.apply(KvSet(msg), t0).unwrap();
/// assert_eq!(published.sequence, 1);
/// assert_eq!(state.get(b"/a"), Some(&b"1"[..]));
///
/// let mut deletes = Vec::new();
/// state.expire(t0 + Duration::from_secs(2), &mut deletes);
/// assert_eq!(deletes.len(), 1);
/// assert!(deletes[0].is_delete() && deletes[0].sequence == 2);
/// assert!(state.get(b"/a").is_none());
/// ```
#[derive(Debug)]
pub struct ServerState {
    store: Store,
    sequence: u64,
    /// (deadline in ms since `epoch`, key), for keys with a ttl.
    expiries: BTreeSet<(u64, Box<[u8]>)>,
    epoch: Instant,
    max_value_len: usize,
}

impl ServerState {
    /// An empty map at sequence 0. Deadlines are kept in milliseconds since `epoch`.
    pub fn new(epoch: Instant) -> ServerState {
        ServerState { store: Store::new(), sequence: 0, expiries: BTreeSet::new(), epoch, max_value_len: usize::MAX }
    }

    /// Rejects values larger than `limit` bytes.
    pub fn set_max_value_len(&mut self, limit: usize) {
        self.max_value_len = limit;
    }

    /// The sequence of the last published update (0 before any).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// True when the map is empty.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Bytes of keys and values stored.
    pub fn payload_bytes(&self) -> usize {
        self.store.payload_bytes()
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.store.get(key).map(|e| e.value)
    }

    /// When `key` expires, if it has a ttl.
    pub fn expiry_of(&self, key: &[u8]) -> Option<Instant> {
        self.store.get(key)?.deadline.map(|ms| self.instant(ms))
    }

    /// Every entry in key order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        self.store.iter()
    }

    fn instant(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// Applies a client's KVSET received at `now`: next sequence, store (or delete, for an empty
    /// value), and (re)arm or clear the key's ttl. Returns the KVPUB to publish: the update with its
    /// new sequence, UUID and properties as received.
    pub fn apply(&mut self, set: KvSet, now: Instant) -> Result<KvMsg, ApplyError> {
        let mut msg = set.0;
        let ttl = match msg.properties.get("ttl") {
            Some(text) => parse_ttl(text)?,
            None => None,
        };
        if msg.body.len() > self.max_value_len {
            return Err(ApplyError::ValueTooLarge(msg.body.len(), self.max_value_len));
        }
        self.sequence += 1;
        msg.sequence = self.sequence;
        let old = if msg.is_delete() {
            self.store.remove(&msg.key)
        } else {
            let deadline = ttl.map(|ttl| {
                let at = now.saturating_duration_since(self.epoch) + ttl;
                // Round up: never expire before the ttl has elapsed.
                u64::try_from(at.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX).max(1)
            });
            if let Some(ms) = deadline {
                self.expiries.insert((ms, Box::from(&msg.key[..])));
            }
            self.store.insert(&msg.key, &msg.body, deadline)
        };
        if let Some(Some(old_deadline)) = old {
            // A re-set before expiry moves the deadline; a delete clears it.
            let new_deadline = self.store.get(&msg.key).and_then(|e| e.deadline);
            if new_deadline != Some(old_deadline) {
                self.expiries.remove(&(old_deadline, Box::from(&msg.key[..])));
            }
        }
        Ok(msg)
    }

    /// When the next key expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.expiries.first().map(|(ms, _)| self.instant(*ms))
    }

    /// Deletes every key whose deadline is at or before `now`, appending for each a KVPUB with the
    /// next sequence and an empty value (and empty UUID and properties: the server originated it).
    pub fn expire(&mut self, now: Instant, out: &mut Vec<KvMsg>) {
        let now_ms = u64::try_from(now.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX);
        while self.expiries.first().is_some_and(|(ms, _)| *ms <= now_ms) {
            let (_, key) = self.expiries.pop_first().expect("non-empty");
            self.store.remove(&key);
            self.sequence += 1;
            out.push(KvMsg {
                key: Bytes::from(key),
                sequence: self.sequence,
                uuid: None,
                properties: Properties::new(),
                body: Bytes::new(),
            });
        }
    }

    /// Up to `max` KVSYNCs for `subtree`, in key order, after key `after` (exclusive). Each carries
    /// `sequence` (the snapshot's). Keys and values are copied out, so the caller can send them
    /// without holding the state.
    pub fn snapshot_chunk(&self, subtree: &Subtree, after: Option<&[u8]>, max: usize, sequence: u64) -> Vec<KvSync> {
        self.store
            .range(subtree.as_bytes(), after)
            .take(max)
            .map(|e| KvSync { key: Bytes::copy_from_slice(e.key), sequence, value: Bytes::copy_from_slice(e.value) })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str, ttl: Option<&str>) -> KvSet {
        let mut m = KvMsg::new(key.to_owned(), value.to_owned());
        if let Some(t) = ttl {
            m.properties.insert("ttl", t).unwrap();
        }
        KvSet(m)
    }

    #[test]
    fn sequences_deletes_and_ttl() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = ServerState::new(t0);
        assert_eq!(s.apply(set("a", "1", None), t0).unwrap().sequence, 1);
        assert_eq!(s.apply(set("b", "2", Some("0.1")), t0).unwrap().sequence, 2);
        assert_eq!(s.apply(set("c", "3", Some("0")), t0).unwrap().sequence, 3);
        assert_eq!(s.next_expiry(), Some(t0 + ms(100)));
        // Delete of a missing key still takes a sequence (and is published).
        let d = s.apply(set("zz", "", None), t0).unwrap();
        assert!(d.is_delete() && d.sequence == 4);
        let mut out = Vec::new();
        s.expire(t0 + ms(99), &mut out);
        assert!(out.is_empty());
        // Re-set before expiry moves the deadline.
        s.apply(set("b", "2b", Some("0.2")), t0 + ms(50)).unwrap();
        assert_eq!(s.next_expiry(), Some(t0 + ms(250)));
        s.expire(t0 + ms(200), &mut out);
        assert!(out.is_empty());
        s.expire(t0 + ms(250), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].key.as_ref(), out[0].sequence, out[0].body.len()), (&b"b"[..], 6, 0));
        assert_eq!(s.next_expiry(), None);
        // A re-set without ttl clears the deadline.
        s.apply(set("a", "1", Some("1")), t0).unwrap();
        s.apply(set("a", "1", None), t0).unwrap();
        assert_eq!(s.next_expiry(), None);
        // A delete clears it too.
        s.apply(set("c", "1", Some("1")), t0).unwrap();
        s.apply(set("c", "", None), t0).unwrap();
        assert_eq!(s.next_expiry(), None);
        assert_eq!(s.sequence(), 10);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn rejects_bad_ttl_and_large_values_without_consuming_a_sequence() {
        let t0 = Instant::now();
        let mut s = ServerState::new(t0);
        s.set_max_value_len(4);
        for bad in ["-1", "x", "NaN", "inf", "1e20"] {
            assert!(matches!(s.apply(set("a", "1", Some(bad)), t0), Err(ApplyError::InvalidTtl(_))), "{bad}");
        }
        assert_eq!(s.apply(set("a", "12345", None), t0), Err(ApplyError::ValueTooLarge(5, 4)));
        assert_eq!(s.sequence(), 0);
        assert!(s.is_empty());
    }

    #[test]
    fn snapshot_chunks_by_subtree() {
        let t0 = Instant::now();
        let mut s = ServerState::new(t0);
        for k in ["/a/1", "/a/2", "/a/3", "/b/1"] {
            s.apply(set(k, "v", None), t0).unwrap();
        }
        let sub: Subtree = "/a/".parse().unwrap();
        let c1 = s.snapshot_chunk(&sub, None, 2, 4);
        assert_eq!(c1.iter().map(|k| k.key.clone()).collect::<Vec<_>>(), ["/a/1", "/a/2"]);
        assert!(c1.iter().all(|k| k.sequence == 4));
        let c2 = s.snapshot_chunk(&sub, Some(&c1[1].key), 2, 4);
        assert_eq!(c2.iter().map(|k| k.key.clone()).collect::<Vec<_>>(), ["/a/3"]);
        assert_eq!(s.snapshot_chunk(&Subtree::all(), None, 100, 4).len(), 4);
    }
}
