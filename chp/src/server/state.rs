//! The server's state machine: the map, the sequence counter, TTL deadlines. No sockets, no clock:
//! every method takes the current `Instant` and returns the messages to publish, so a driver (the
//! single [`Server`](super::Server) today, a Binary Star pair later) decides what to do with them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;

use zmtp::EncodedBatch;

use crate::command::{KvSet, Subtree};
use crate::kvmsg::{KvMsg, Properties};
use crate::store::{Entry, OwnedEntry, Store};

pub use crate::ttl::MAX_TTL;

/// Why an update was not applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The `ttl` property is not a non-negative number of seconds up to [`MAX_TTL`].
    #[error("invalid ttl property {0:?} (expected seconds, e.g. \"30\" or \"1.5\")")]
    InvalidTtl(String),
    /// The value is larger than the configured limit.
    #[error("value of {0} bytes is larger than the limit of {1}")]
    ValueTooLarge(usize, usize),
}

/// What [`ServerState::follow`] did with an update from the active server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Followed {
    /// Stored; the sequence is now the update's.
    Applied,
    /// Sequence at or below ours: already covered (by the snapshot, or seen before). Not applied.
    Stale,
    /// A sequence was skipped: updates from the active were lost. Not applied.
    Gap {
        /// The sequence that should have come.
        expected: u64,
        /// The sequence that came.
        got: u64,
    },
}

/// One entry of a peer snapshot: key, value, and the time it has left to live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerEntry {
    /// The key.
    pub key: Bytes,
    /// The value.
    pub value: Bytes,
    /// Time left before the key expires (`None`: no ttl).
    pub ttl: Option<Duration>,
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
    crate::ttl::parse(text).ok_or_else(|| ApplyError::InvalidTtl(text.to_owned()))
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

    /// The instant deadlines count from: an entry's `deadline` is milliseconds after it.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// `key`'s deadline in milliseconds after [`epoch`](Self::epoch), if it has a ttl.
    pub fn deadline_of(&self, key: &[u8]) -> Option<u64> {
        self.store.get(key)?.deadline
    }

    /// Every entry in key order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        self.store.iter()
    }

    /// The whole map a chunk at a time: see [`Store::copy_chunk`] (deadlines in milliseconds
    /// after [`epoch`](Self::epoch)).
    pub fn copy_chunk(&self, after: Option<&[u8]>, max: usize, max_bytes: usize) -> Vec<OwnedEntry> {
        self.store.copy_chunk(b"", after, max, max_bytes)
    }

    fn instant(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// Applies a client's KVSET received at `now`: next sequence, store (or delete, for an empty
    /// value), and (re)arm or clear the key's ttl. Returns the KVPUB to publish: the update with its
    /// new sequence, UUID and properties as received.
    pub fn apply(&mut self, set: KvSet, now: Instant) -> Result<KvMsg, ApplyError> {
        let mut msg = set.0;
        let ttl = self.check(&msg)?;
        self.sequence += 1;
        msg.sequence = self.sequence;
        self.store_update(&msg, ttl, now);
        Ok(msg)
    }

    /// Checks that a KVSET would be accepted by [`apply`](Self::apply) (valid `ttl` property, value
    /// within the limit) without applying it; returns its ttl. A passive server uses this to refuse
    /// what the active would refuse, so such updates never wait on its pending list.
    pub fn check(&self, msg: &KvMsg) -> Result<Option<Duration>, ApplyError> {
        let ttl = match msg.properties.get("ttl") {
            Some(text) => parse_ttl(text)?,
            None => None,
        };
        if msg.body.len() > self.max_value_len {
            return Err(ApplyError::ValueTooLarge(msg.body.len(), self.max_value_len));
        }
        Ok(ttl)
    }

    /// Stores (or deletes) `msg` with a deadline `ttl` after `now`, keeping the deadline index.
    fn store_update(&mut self, msg: &KvMsg, ttl: Option<Duration>, now: Instant) {
        let old = if msg.is_delete() {
            self.store.remove(&msg.key)
        } else {
            let deadline = ttl.map(|ttl| self.deadline_ms(now, ttl));
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
    }

    /// `now + ttl` in milliseconds since the epoch, rounded up (never expire before the ttl has
    /// elapsed), at least 1 (0 means "no deadline" in the store).
    fn deadline_ms(&self, now: Instant, ttl: Duration) -> u64 {
        let at = now.saturating_duration_since(self.epoch) + ttl;
        u64::try_from(at.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX).max(1)
    }

    /// Applies an update published by the *active* server of a pair (this one being passive) with
    /// the sequence the active gave it. Its `ttl` property is the client's relative one; the stored
    /// deadline is `now + ttl` on this server's own clock (the reference stored the relative value
    /// and read it as an absolute deadline, so keys vanished on the passive). Keys are not expired
    /// here while passive: the active publishes each expiry, and the deadlines only take effect
    /// once this server is promoted.
    ///
    /// Only the next sequence is applied: an older one is [`Followed::Stale`], a later one a
    /// [`Followed::Gap`] (updates were lost on the way, the caller must re-sync).
    pub fn follow(&mut self, msg: &KvMsg, now: Instant) -> Followed {
        if msg.sequence <= self.sequence {
            return Followed::Stale;
        }
        if msg.sequence != self.sequence + 1 {
            return Followed::Gap { expected: self.sequence + 1, got: msg.sequence };
        }
        // The active accepted it, so the ttl parses; should it not, keep the value without a ttl
        // rather than diverge on the value itself.
        let ttl = msg.properties.get("ttl").and_then(|t| parse_ttl(t).ok().flatten());
        self.store_update(msg, ttl, now);
        self.sequence = msg.sequence;
        Followed::Applied
    }

    /// Replaces the whole map with a snapshot taken at `sequence` (a passive server's copy of its
    /// peer): `(key, value, remaining ttl)` entries; each remaining ttl becomes a deadline on this
    /// server's clock, counted from `now`.
    pub fn load(&mut self, entries: impl IntoIterator<Item = PeerEntry>, sequence: u64, now: Instant) {
        self.clear();
        self.overlay(entries, now);
        self.sequence = sequence;
    }

    /// Replaces the map with `store` (a recovered journal's, its deadlines in Unix milliseconds)
    /// at `sequence`, taking it whole: only the keys with a deadline are visited, each deadline
    /// converted to this state's clock by `ttl_of` (the time left until it). Loading the entries
    /// one by one instead built a second million-key map from copies of the first.
    #[cfg_attr(not(feature = "durable"), allow(dead_code))]
    pub fn adopt(&mut self, mut store: Store, sequence: u64, now: Instant, ttl_of: impl Fn(u64) -> Duration) {
        self.clear();
        /// A key with a deadline, its value, and the deadline in Unix milliseconds.
        type Timed = (Box<[u8]>, Box<[u8]>, u64);
        let timed: Vec<Timed> =
            store.iter().filter_map(|e| Some((Box::from(e.key), Box::from(e.value), e.deadline?))).collect();
        for (key, value, unix_ms) in timed {
            let deadline = self.deadline_ms(now, ttl_of(unix_ms));
            store.insert(&key, &value, Some(deadline));
            self.expiries.insert((deadline, key));
        }
        self.store = store;
        self.sequence = sequence;
    }

    /// Stores snapshot entries on top of the current map (for a promotion in the middle of a
    /// snapshot: better the part that arrived than nothing).
    pub fn overlay(&mut self, entries: impl IntoIterator<Item = PeerEntry>, now: Instant) {
        for entry in entries {
            let msg = KvMsg::new(entry.key, entry.value);
            self.store_update(&msg, entry.ttl, now);
        }
    }

    /// Raises the sequence to at least `sequence` (the next update gets `sequence + 1`).
    pub fn advance_sequence(&mut self, sequence: u64) {
        self.sequence = self.sequence.max(sequence);
    }

    /// Drops every key and deadline and resets the sequence to 0.
    pub fn clear(&mut self) {
        self.store = Store::new();
        self.expiries.clear();
        self.sequence = 0;
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

    /// Encodes into `batch` the KVSYNCs for `subtree` after key `after` (exclusive), in key
    /// order: up to `max`, stopping once they hold `max_bytes` of keys and values (at least one).
    /// Each carries `sequence_frame` (the snapshot's sequence). Returns the last key encoded
    /// (`None`: none was left).
    ///
    /// Encoded straight from the map in ZMTP framing, a pair is copied once, into the buffer the
    /// connection writes, and costs no message of its own (no frame list, no reference counts),
    /// so the caller sends the chunk without holding the state; the byte bound keeps the copy
    /// small whatever the value sizes.
    pub fn encode_snapshot_chunk(
        &self,
        subtree: &Subtree,
        after: Option<&[u8]>,
        (max, max_bytes): (usize, usize),
        sequence_frame: &[u8],
        batch: &mut EncodedBatch,
    ) -> Option<Bytes> {
        let mut last = None;
        for e in self.store.chunk(subtree.as_bytes(), after, max, max_bytes) {
            batch.push(&[e.key, sequence_frame, b"", b"", e.value]).expect("a KVSYNC has five frames");
            last = Some(e.key);
        }
        last.map(Bytes::copy_from_slice)
    }

    /// Encodes into `batch` the whole map's KVSYNCs after key `after` (exclusive), for the pair's
    /// other server: each carries `ttl=` with the time its key has left to live at `now` (the
    /// passive keeps expiring them once promoted; a key already past its deadline but not yet
    /// expired is given 1 ms). Bounded and returning as
    /// [`encode_snapshot_chunk`](Self::encode_snapshot_chunk) does.
    pub fn encode_peer_snapshot_chunk(
        &self,
        after: Option<&[u8]>,
        (max, max_bytes): (usize, usize),
        now: Instant,
        sequence_frame: &[u8],
        batch: &mut EncodedBatch,
    ) -> Option<Bytes> {
        let now_ms = u64::try_from(now.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX);
        let mut last = None;
        for e in self.store.chunk(b"", after, max, max_bytes) {
            let ttl = e.deadline.map(|ms| Duration::from_millis(ms.saturating_sub(now_ms).max(1)));
            let properties = ttl.map(|ttl| format!("ttl={}\n", crate::ttl::format(ttl))).unwrap_or_default();
            batch
                .push(&[e.key, sequence_frame, b"", properties.as_bytes(), e.value])
                .expect("a KVSYNC has five frames");
            last = Some(e.key);
        }
        last.map(Bytes::copy_from_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::SnapshotReply;

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
    fn follow_applies_the_actives_sequence_with_a_deadline_on_our_clock() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut s = ServerState::new(t0);
        let mut m = KvMsg::new("/a", "1");
        m.sequence = 1;
        m.properties.insert("ttl", "2").unwrap();
        assert_eq!(s.follow(&m, t0 + ms(500)), Followed::Applied);
        // The relative ttl becomes a deadline counted from when *we* got it (bug 1 of the
        // reference read it as an absolute time).
        assert_eq!(s.expiry_of(b"/a"), Some(t0 + ms(2500)));
        assert_eq!(s.follow(&m, t0), Followed::Stale);
        let mut later = KvMsg::new("/b", "2");
        later.sequence = 3;
        assert_eq!(s.follow(&later, t0), Followed::Gap { expected: 2, got: 3 });
        assert_eq!((s.sequence(), s.len()), (1, 1));
        // The active's ttl delete (empty UUID, empty value) applies like any update.
        let mut del = KvMsg::new("/a", "");
        del.sequence = 2;
        assert_eq!(s.follow(&del, t0 + ms(2500)), Followed::Applied);
        assert!(s.is_empty() && s.next_expiry().is_none());
        // Promoted: the next client update continues the sequence.
        assert_eq!(s.apply(set("/c", "3", None), t0).unwrap().sequence, 3);
    }

    #[test]
    fn peer_snapshots_carry_remaining_ttls_and_load_replaces_the_map() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut active = ServerState::new(t0);
        active.apply(set("/a", "1", Some("10")), t0).unwrap();
        active.apply(set("/b", "2", None), t0).unwrap();
        let mut batch = EncodedBatch::new();
        let last =
            active.encode_peer_snapshot_chunk(None, (100, usize::MAX), t0 + ms(4000), &2u64.to_be_bytes(), &mut batch);
        assert_eq!(last.as_deref(), Some(&b"/b"[..]));
        let entries: Vec<PeerEntry> = batch
            .to_messages()
            .iter()
            .map(|msg| {
                let kv = KvMsg::parse(msg.frames()).unwrap();
                let ttl = kv.properties.get("ttl").map(|t| parse_ttl(t).unwrap().unwrap());
                PeerEntry { key: kv.key, value: kv.body, ttl }
            })
            .collect();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].ttl, Some(ms(6000)));
        assert_eq!(entries[1].ttl, None);
        // The passive (another clock, another epoch) keeps the remaining time.
        let t1 = t0 + ms(100_000);
        let mut passive = ServerState::new(t1);
        passive.apply(set("/stale", "x", None), t1).unwrap();
        passive.load(entries, active.sequence(), t1);
        assert_eq!(passive.sequence(), 2);
        assert!(passive.get(b"/stale").is_none());
        assert_eq!(passive.expiry_of(b"/a"), Some(t1 + ms(6000)));
        let mut out = Vec::new();
        passive.expire(t1 + ms(6000), &mut out);
        assert_eq!((out.len(), out[0].sequence), (1, 3));
    }

    #[test]
    fn check_refuses_what_apply_refuses() {
        let mut s = ServerState::new(Instant::now());
        s.set_max_value_len(3);
        assert!(s.check(&set("/a", "1", Some("x")).0).is_err());
        assert!(s.check(&set("/a", "1234", None).0).is_err());
        assert_eq!(s.check(&set("/a", "1", Some("1.5")).0), Ok(Some(Duration::from_millis(1500))));
    }

    #[test]
    fn snapshot_chunks_by_subtree() {
        let t0 = Instant::now();
        let mut s = ServerState::new(t0);
        for k in ["/a/1", "/a/2", "/a/3", "/b/1"] {
            s.apply(set(k, "v", None), t0).unwrap();
        }
        let sub: Subtree = "/a/".parse().unwrap();
        // Each chunk: its KVSYNCs' keys, and the last key it returned.
        let chunk = |subtree: &Subtree, after: Option<&[u8]>, bounds| {
            let mut batch = EncodedBatch::new();
            let last = s.encode_snapshot_chunk(subtree, after, bounds, &4u64.to_be_bytes(), &mut batch);
            let keys: Vec<Bytes> = batch
                .to_messages()
                .iter()
                .map(|msg| match SnapshotReply::parse(msg.frames()).unwrap() {
                    SnapshotReply::KvSync(kv) => {
                        assert_eq!((kv.sequence, &kv.value[..]), (4, &b"v"[..]));
                        kv.key
                    }
                    other => panic!("not a KVSYNC: {other:?}"),
                })
                .collect();
            assert_eq!(last.as_ref(), keys.last());
            keys
        };
        assert_eq!(chunk(&sub, None, (2, usize::MAX)), ["/a/1", "/a/2"]);
        assert_eq!(chunk(&sub, Some(b"/a/2"), (2, usize::MAX)), ["/a/3"]);
        assert!(chunk(&sub, Some(b"/a/3"), (2, usize::MAX)).is_empty());
        assert_eq!(chunk(&Subtree::all(), None, (100, usize::MAX)).len(), 4);
        // The byte bound: the first entry always, then only while under the bound.
        assert_eq!(chunk(&Subtree::all(), None, (100, 1)).len(), 1);
        let one = "/a/1".len() + "v".len();
        assert_eq!(chunk(&Subtree::all(), None, (100, one + 1)).len(), 2);
    }
}
