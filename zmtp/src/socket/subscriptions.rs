//! A set of subscription prefixes with reference counts.
//!
//! Matching looks up each distinct prefix length present in the set, so its cost grows with the number
//! of distinct lengths, not the number of subscriptions.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

/// Refcounted subscription prefixes.
#[derive(Debug, Default, Clone)]
pub(crate) struct Subscriptions {
    prefixes: HashMap<Bytes, u32>,
    /// Total length of the distinct prefixes.
    bytes: usize,
    /// How many prefixes exist of each length.
    lengths: BTreeMap<usize, u32>,
}

impl Subscriptions {
    /// Adds one reference; true if the prefix is new.
    pub fn add(&mut self, prefix: &[u8]) -> bool {
        if let Some(count) = self.prefixes.get_mut(prefix) {
            *count += 1;
            return false;
        }
        self.prefixes.insert(Bytes::copy_from_slice(prefix), 1);
        self.bytes += prefix.len();
        *self.lengths.entry(prefix.len()).or_insert(0) += 1;
        true
    }

    /// Drops one reference; true if the prefix is now gone.
    pub fn remove(&mut self, prefix: &[u8]) -> bool {
        let Some(count) = self.prefixes.get_mut(prefix) else {
            return false;
        };
        *count -= 1;
        if *count > 0 {
            return false;
        }
        self.prefixes.remove(prefix);
        self.bytes -= prefix.len();
        if let Some(n) = self.lengths.get_mut(&prefix.len()) {
            *n -= 1;
            if *n == 0 {
                self.lengths.remove(&prefix.len());
            }
        }
        true
    }

    /// Adds a prefix as a set member (no refcount): PUB keeps one entry per prefix per peer.
    pub fn insert_once(&mut self, prefix: &[u8]) {
        if !self.prefixes.contains_key(prefix) {
            self.add(prefix);
        }
    }

    /// Removes a prefix entirely.
    pub fn remove_all(&mut self, prefix: &[u8]) {
        if let Some(&count) = self.prefixes.get(prefix) {
            for _ in 0..count {
                self.remove(prefix);
            }
        }
    }

    /// Whether some prefix matches the start of `data`.
    pub fn matches(&self, data: &[u8]) -> bool {
        // Subscribed to everything: the common case, without hashing.
        if self.lengths.contains_key(&0) {
            return true;
        }
        self.lengths.keys().take_while(|&&len| len <= data.len()).any(|&len| self.prefixes.contains_key(&data[..len]))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Bytes> {
        self.prefixes.keys()
    }

    /// Distinct prefixes.
    pub fn len(&self) -> usize {
        self.prefixes.len()
    }

    /// Whether `prefix` is present.
    pub fn contains(&self, prefix: &[u8]) -> bool {
        self.prefixes.contains_key(prefix)
    }

    /// Total length of the distinct prefixes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_matching_and_refcounts() {
        let mut s = Subscriptions::default();
        assert!(!s.matches(b"anything"));
        assert!(s.add(b"ab"));
        assert!(!s.add(b"ab"));
        assert!(s.matches(b"abc") && s.matches(b"ab") && !s.matches(b"a") && !s.matches(b"xab"));
        assert!(!s.remove(b"ab"));
        assert!(s.matches(b"abc"));
        assert!(s.remove(b"ab"));
        assert!(!s.matches(b"abc"));
        s.add(b"");
        assert!(s.matches(b"") && s.matches(b"zzz"));
        assert!(!s.remove(b"nope"));
    }
}
