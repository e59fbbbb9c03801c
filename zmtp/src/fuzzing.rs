//! Internals exposed to the fuzz targets (feature `fuzzing`): not a public API.

use crate::socket::mtrie::MTrie;

/// The PUB/XPUB subscription trie, by peer number.
#[derive(Debug, Default)]
pub struct Trie(MTrie);

impl Trie {
    /// Subscribes `peer` to `prefix`: `(first, added)` as the socket sees it.
    pub fn add(&mut self, prefix: &[u8], peer: u64) -> (bool, bool) {
        self.0.add(prefix, peer)
    }

    /// Unsubscribes: `(removed, last)`.
    pub fn remove(&mut self, prefix: &[u8], peer: u64) -> (bool, bool) {
        self.0.remove(prefix, peer)
    }

    /// The peers subscribed to a prefix of `data`, sorted and deduplicated.
    pub fn matches(&self, data: &[u8]) -> Vec<u64> {
        let mut peers = Vec::new();
        self.0.for_each_match(data, |p| peers.push(p));
        peers.sort_unstable();
        peers.dedup();
        peers
    }
}
