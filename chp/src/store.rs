//! The server's compact ordered key-value store.
//!
//! Each entry is **one heap allocation** holding a 10-byte header (key length, expiry deadline), the
//! key and the value, kept in a `BTreeSet` ordered by key, with the key's first 16 bytes inline in
//! the tree so that a search rarely reads the heap. Per stored key that is the payload, the
//! header, allocator rounding and ~32–50 bytes of B-tree slot — no per-entry `Bytes`, `String` or
//! `Vec` headers, and no second allocation. Ordering by key makes a subtree snapshot a range scan
//! (`O(log n + k)`) that can resume after any key, which is what lets the server stream a large
//! snapshot in chunks while it keeps applying updates.
//!
//! ```
//! use chp::store::Store;
//! let mut store = Store::new();
//! store.insert(b"/a/1", b"one", None);
//! store.insert(b"/a/2", b"two", Some(5_000));
//! store.insert(b"/b/1", b"three", None);
//! let a: Vec<_> = store.range(b"/a/", None).map(|e| e.key.to_vec()).collect();
//! assert_eq!(a, [b"/a/1".to_vec(), b"/a/2".to_vec()]);
//! assert_eq!(store.get(b"/a/2").unwrap().deadline, Some(5_000));
//! assert_eq!(store.remove(b"/a/2"), Some(Some(5_000)));
//! assert_eq!(store.len(), 2);
//! ```

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::Bound;

/// Header: key length (u16 BE), deadline (u64 BE, 0 = none).
const HEADER: usize = 10;

/// One entry, in one allocation: `[key_len u16][deadline u64][key][value]`, and the key's first
/// [`PREFIX`] bytes inline beside the pointer.
///
/// The inline prefix is what the B-tree compares: a search compares keys in a node one after the
/// other, and reading each from its own allocation made the store a chain of cache misses (a
/// fifth of the server's CPU per update, measured). Two keys whose prefixes differ are ordered by
/// them alone; only equal prefixes (a key and itself, or keys sharing their first 16 bytes) read
/// the heap. Costs 16 bytes per key.
struct Record {
    prefix: u128,
    data: Box<[u8]>,
}

/// Bytes of the key kept inline in a [`Record`].
const PREFIX: usize = 16;

/// The key's first [`PREFIX`] bytes, zero-padded, as a big-endian integer. Ordering by it agrees
/// with byte order: keys that differ within their first 16 bytes differ here in the same
/// direction (a shorter key pads with zeros, and is a prefix of the other or compares at a byte
/// where it has zero and the other more), and otherwise it ties.
fn prefix_of(key: &[u8]) -> u128 {
    let mut bytes = [0u8; PREFIX];
    let n = key.len().min(PREFIX);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}

impl Record {
    fn new(key: &[u8], value: &[u8], deadline: Option<u64>) -> Record {
        let key_len = u16::try_from(key.len()).expect("key longer than 65535 bytes");
        let mut buf = Vec::with_capacity(HEADER + key.len() + value.len());
        buf.extend_from_slice(&key_len.to_be_bytes());
        buf.extend_from_slice(&deadline.unwrap_or(0).to_be_bytes());
        buf.extend_from_slice(key);
        buf.extend_from_slice(value);
        Record { prefix: prefix_of(key), data: buf.into_boxed_slice() }
    }

    fn key_len(&self) -> usize {
        u16::from_be_bytes([self.data[0], self.data[1]]) as usize
    }

    fn key(&self) -> &[u8] {
        &self.data[HEADER..HEADER + self.key_len()]
    }

    fn value(&self) -> &[u8] {
        &self.data[HEADER + self.key_len()..]
    }

    /// Key and value bytes.
    fn payload(&self) -> usize {
        self.data.len() - HEADER
    }

    fn deadline(&self) -> Option<u64> {
        let d = u64::from_be_bytes(self.data[2..10].try_into().expect("8 bytes"));
        (d != 0).then_some(d)
    }

    fn entry(&self) -> Entry<'_> {
        Entry { key: self.key(), value: self.value(), deadline: self.deadline() }
    }
}

impl Borrow<[u8]> for Record {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

impl PartialEq for Record {
    fn eq(&self, other: &Self) -> bool {
        self.prefix == other.prefix && self.key() == other.key()
    }
}

impl Eq for Record {}

impl PartialOrd for Record {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Record {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| self.key().cmp(other.key()))
    }
}

/// A borrowed view of one stored entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value (never empty: empty values delete).
    pub value: &'a [u8],
    /// Expiry deadline in the owner's time unit (the server uses milliseconds since it started).
    pub deadline: Option<u64>,
}

/// One entry, owned: what a reader copies out of the store to use after unlocking it (a snapshot
/// stream's chunk, a compaction's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedEntry {
    /// The key.
    pub key: bytes::Bytes,
    /// The value (non-empty).
    pub value: bytes::Bytes,
    /// Expiry deadline, in the owner's time unit.
    pub deadline: Option<u64>,
}

/// An ordered map from key to value and optional deadline (see the [module docs](self)).
#[derive(Default)]
pub struct Store {
    records: BTreeSet<Record>,
    payload: usize,
}

impl Store {
    /// An empty store.
    pub fn new() -> Store {
        Store::default()
    }

    /// Inserts or replaces `key`. A deadline of `Some(0)` is stored as none. Returns the replaced
    /// entry's deadline (`Some(old_deadline)`), or `None` if the key is new.
    pub fn insert(&mut self, key: &[u8], value: &[u8], deadline: Option<u64>) -> Option<Option<u64>> {
        self.payload += key.len() + value.len();
        let old = self.records.replace(Record::new(key, value, deadline))?;
        self.payload -= old.payload();
        Some(old.deadline())
    }

    /// Removes `key`, returning its deadline (`Some(deadline)`) if it was present.
    pub fn remove(&mut self, key: &[u8]) -> Option<Option<u64>> {
        let old = self.records.take(key)?;
        self.payload -= old.payload();
        Some(old.deadline())
    }

    /// The entry for `key`.
    pub fn get(&self, key: &[u8]) -> Option<Entry<'_>> {
        self.records.get(key).map(Record::entry)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Sum of key and value bytes stored.
    pub fn payload_bytes(&self) -> usize {
        self.payload
    }

    /// Entries whose key starts with `prefix`, in key order, starting after `after` (exclusive) when
    /// given — so a scan can stop and resume later even if the store changed in between.
    pub fn range<'a>(&'a self, prefix: &'a [u8], after: Option<&'a [u8]>) -> impl Iterator<Item = Entry<'a>> + 'a {
        let start = match after {
            Some(k) if k >= prefix => Bound::Excluded(k),
            _ => Bound::Included(prefix),
        };
        self.records
            .range::<[u8], _>((start, Bound::Unbounded))
            .take_while(move |r| r.key().starts_with(prefix))
            .map(Record::entry)
    }

    /// Up to `max` entries whose key starts with `prefix`, in key order, after `after`
    /// (exclusive), stopping once they hold `max_bytes` of keys and values (at least one is
    /// returned): [`copy_chunk`](Self::copy_chunk)'s entries, borrowed.
    pub fn chunk<'a>(
        &'a self,
        prefix: &'a [u8],
        after: Option<&'a [u8]>,
        max: usize,
        max_bytes: usize,
    ) -> impl Iterator<Item = Entry<'a>> + 'a {
        let mut bytes = 0;
        self.range(prefix, after).take(max).take_while(move |e| {
            let fits = bytes < max_bytes;
            bytes += e.key.len() + e.value.len();
            fits
        })
    }

    /// Up to `max` entries whose key starts with `prefix`, in key order, after `after`
    /// (exclusive), stopping once they hold `max_bytes` of keys and values (at least one is
    /// returned): copied out, so the caller can use them without holding the store, and a byte
    /// bound keeps the copy small whatever the values. One copy and one allocation for the whole
    /// chunk, each key and value a slice of it (two allocations per key cost a million-key
    /// snapshot about a tenth of its time).
    pub fn copy_chunk(&self, prefix: &[u8], after: Option<&[u8]>, max: usize, max_bytes: usize) -> Vec<OwnedEntry> {
        let entries: Vec<Entry<'_>> = self.chunk(prefix, after, max, max_bytes).collect();
        let bytes = entries.iter().map(|e| e.key.len() + e.value.len()).sum();
        let mut buf = bytes::BytesMut::with_capacity(bytes);
        for e in &entries {
            buf.extend_from_slice(e.key);
            buf.extend_from_slice(e.value);
        }
        let mut buf = buf.freeze();
        entries
            .iter()
            .map(|e| OwnedEntry {
                key: buf.split_to(e.key.len()),
                value: buf.split_to(e.value.len()),
                deadline: e.deadline,
            })
            .collect()
    }

    /// Every entry in key order.
    pub fn iter(&self) -> impl Iterator<Item = Entry<'_>> {
        self.records.iter().map(Record::entry)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("len", &self.len()).field("payload_bytes", &self.payload).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_replace_remove_and_accounting() {
        let mut s = Store::new();
        assert_eq!(s.insert(b"k", b"v1", Some(10)), None);
        assert_eq!(s.payload_bytes(), 3);
        assert_eq!(s.insert(b"k", b"value2", None), Some(Some(10)));
        assert_eq!(s.payload_bytes(), 7);
        assert_eq!(s.get(b"k").unwrap(), Entry { key: b"k", value: b"value2", deadline: None });
        assert_eq!(s.insert(b"k", b"x", Some(0)), Some(None));
        assert_eq!(s.get(b"k").unwrap().deadline, None);
        assert_eq!(s.remove(b"k"), Some(None));
        assert_eq!(s.remove(b"k"), None);
        assert_eq!((s.len(), s.payload_bytes()), (0, 0));
    }

    #[test]
    fn order_and_lookups_agree_with_byte_order_across_the_inline_prefix() {
        use rand::{Rng, SeedableRng};
        // Few distinct bytes (zero among them) and lengths around the 16-byte prefix: many keys
        // share a prefix, are prefixes of each other, or differ only after byte 16.
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let mut store = Store::new();
        let mut model = std::collections::BTreeMap::new();
        for round in 0..20_000 {
            let len = rng.gen_range(1..40);
            let key: Vec<u8> = (0..len).map(|_| [0u8, 1, b'a', 0xff][rng.gen_range(0..4)]).collect();
            if round % 5 == 4 {
                assert_eq!(store.remove(&key).is_some(), model.remove(&key).is_some());
            } else {
                let value = round.to_string();
                store.insert(&key, value.as_bytes(), None);
                model.insert(key, value);
            }
        }
        let stored: Vec<(Vec<u8>, Vec<u8>)> = store.iter().map(|e| (e.key.to_vec(), e.value.to_vec())).collect();
        let expected: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())).collect();
        assert_eq!(stored, expected);
        for (key, value) in &model {
            assert_eq!(store.get(key).map(|e| e.value), Some(value.as_bytes()));
        }
        let prefix = [b'a', 0, 0xff];
        let ranged: Vec<Vec<u8>> = store.range(&prefix, None).map(|e| e.key.to_vec()).collect();
        let modeled: Vec<Vec<u8>> = model.keys().filter(|k| k.starts_with(&prefix)).cloned().collect();
        assert_eq!(ranged, modeled);
    }

    #[test]
    fn range_resumes_after_a_key() {
        let mut s = Store::new();
        for k in ["/a/1", "/a/2", "/a/3", "/ab", "/b/1", "/"] {
            s.insert(k.as_bytes(), b"v", None);
        }
        let keys = |it: &mut dyn Iterator<Item = Entry<'_>>| it.map(|e| e.key.to_vec()).collect::<Vec<_>>();
        assert_eq!(keys(&mut s.range(b"/a/", None)), [b"/a/1".to_vec(), b"/a/2".to_vec(), b"/a/3".to_vec()]);
        assert_eq!(keys(&mut s.range(b"/a/", Some(b"/a/1"))), [b"/a/2".to_vec(), b"/a/3".to_vec()]);
        // Resuming after a key that was deleted meanwhile still works.
        s.remove(b"/a/2");
        assert_eq!(keys(&mut s.range(b"/a/", Some(b"/a/2"))), [b"/a/3".to_vec()]);
        assert_eq!(s.range(b"", None).count(), 5);
        assert_eq!(s.range(b"/z/", None).count(), 0);
    }
}
