//! A radix trie from subscription prefix to the peers subscribed to it (libzmq's `mtrie`).
//!
//! PUB/XPUB match a message's first frame with one walk down the trie, collecting every peer on the
//! way, so the cost of a send grows with the topic's length, not with the number of subscriptions or
//! subscribers. Edges are compressed, so 100k long topics cost about one node each.
//!
//! A peer drives this trie with SUBSCRIBE/CANCEL, so no operation may cost more than the bytes it
//! carries. Labels are views into shared buffers: splitting an edge and merging it back (say
//! SUBSCRIBE/CANCEL of a short prefix of a 16 MiB topic, 25 bytes on the wire) re-slices the same
//! buffer instead of copying it. A merge copies only when the two labels come from different
//! buffers, which takes a fresh SUBSCRIBE at least as long as the path; a label left alone in a
//! much larger buffer is copied out (small) so the buffer is freed.

use bytes::Bytes;
use smallvec::SmallVec;

use crate::link::peer_id::PeerId;

#[derive(Debug, Default)]
struct Node {
    /// Peers subscribed to exactly the prefix that ends at this node.
    peers: SmallVec<[PeerId; 2]>,
    /// Children, sorted by the first byte of their (non-empty) label.
    children: Vec<Edge>,
}

#[derive(Debug)]
struct Edge {
    /// The buffer the label is a view of (shared with other edges cut from the same subscription).
    origin: Bytes,
    /// The label: `origin[start..end]`, never empty.
    start: usize,
    end: usize,
    node: Node,
}

impl Edge {
    fn new(label: &[u8], node: Node) -> Edge {
        Edge { origin: Bytes::copy_from_slice(label), start: 0, end: label.len(), node }
    }

    fn label(&self) -> &[u8] {
        &self.origin[self.start..self.end]
    }

    /// Cuts the label after `at` bytes: this edge keeps the head, the rest moves to a new child
    /// holding this edge's old node. No bytes are copied.
    fn split(&mut self, at: usize) {
        let old = std::mem::take(&mut self.node);
        let rest = Edge { origin: self.origin.clone(), start: self.start + at, end: self.end, node: old };
        self.end = self.start + at;
        self.node.children.push(rest);
    }

    /// Joins this (pass-through) edge with its only child: a re-slice when the two labels are
    /// adjacent views of one buffer, else a copy of both.
    fn merge_with_only_child(&mut self) {
        let child = self.node.children.pop().expect("one child");
        let adjacent = self.origin.as_ptr() == child.origin.as_ptr()
            && self.origin.len() == child.origin.len()
            && self.end == child.start;
        *self = if adjacent {
            Edge { origin: child.origin, start: self.start, end: child.end, node: child.node }
        } else {
            let mut label = Vec::with_capacity(self.end - self.start + child.end - child.start);
            label.extend_from_slice(self.label());
            label.extend_from_slice(child.label());
            Edge {
                origin: label.into(),
                start: 0,
                end: self.end - self.start + child.end - child.start,
                node: child.node,
            }
        };
    }

    /// A label that alone holds a much larger buffer is copied out, so the buffer is freed.
    fn compact(&mut self) {
        let len = self.end - self.start;
        if self.origin.len() > 2 * len + 64 && self.origin.is_unique() {
            self.origin = Bytes::copy_from_slice(self.label());
            (self.start, self.end) = (0, len);
        }
    }
}

/// Subscriptions of every peer of a socket.
#[derive(Debug, Default)]
pub(crate) struct MTrie {
    root: Node,
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Node {
    fn child(&self, first: u8) -> Result<usize, usize> {
        self.children.binary_search_by_key(&first, |e| e.origin[e.start])
    }

    fn is_empty(&self) -> bool {
        self.peers.is_empty() && self.children.is_empty()
    }

    /// Adds `peer` under `key`; returns true if the prefix had no peer before.
    fn add(&mut self, key: &[u8], peer: PeerId) -> (bool, bool) {
        let Some(&first) = key.first() else {
            let was_empty = self.peers.is_empty();
            let added = !self.peers.contains(&peer);
            if added {
                self.peers.push(peer);
            }
            return (was_empty, added);
        };
        match self.child(first) {
            Err(at) => {
                let mut node = Node::default();
                node.peers.push(peer);
                self.children.insert(at, Edge::new(key, node));
                (true, true)
            }
            Ok(at) => {
                let edge = &mut self.children[at];
                let common = common_prefix(edge.label(), key);
                if common < edge.end - edge.start {
                    // Split the edge at the divergence point.
                    edge.split(common);
                }
                edge.node.add(&key[common..], peer)
            }
        }
    }

    /// Removes `peer` from `key`; returns (was subscribed, prefix now has no peer).
    fn remove(&mut self, key: &[u8], peer: PeerId) -> (bool, bool) {
        let Some(&first) = key.first() else {
            let Some(pos) = self.peers.iter().position(|&p| p == peer) else { return (false, false) };
            self.peers.swap_remove(pos);
            return (true, self.peers.is_empty());
        };
        let Ok(at) = self.child(first) else { return (false, false) };
        let edge = &mut self.children[at];
        if !key.starts_with(edge.label()) {
            return (false, false);
        }
        let result = edge.node.remove(&key[edge.end - edge.start..], peer);
        if edge.node.is_empty() {
            self.children.remove(at);
        } else if edge.node.peers.is_empty() && edge.node.children.len() == 1 {
            // Merge a pass-through node into its only child to keep edges compressed.
            edge.merge_with_only_child();
        } else {
            edge.compact();
        }
        result
    }
}

impl MTrie {
    /// Subscribes `peer` to `prefix`. Returns `(first, added)`: `first` if no peer had this prefix
    /// before, `added` if this peer did not have it yet.
    pub fn add(&mut self, prefix: &[u8], peer: PeerId) -> (bool, bool) {
        self.root.add(prefix, peer)
    }

    /// Unsubscribes `peer` from `prefix`. Returns `(removed, last)`: `last` if no peer has it now.
    pub fn remove(&mut self, prefix: &[u8], peer: PeerId) -> (bool, bool) {
        let (removed, last) = self.root.remove(prefix, peer);
        (removed, removed && last)
    }

    /// Calls `f` for every peer subscribed to a prefix of `data` (a peer may be reported more than once
    /// if it holds several matching prefixes).
    pub fn for_each_match(&self, data: &[u8], mut f: impl FnMut(PeerId)) {
        let mut node = &self.root;
        let mut rest = data;
        loop {
            node.peers.iter().for_each(|&p| f(p));
            let Some(&first) = rest.first() else { return };
            let Ok(at) = node.child(first) else { return };
            let edge = &node.children[at];
            let label = edge.label();
            if !rest.starts_with(label) {
                return;
            }
            rest = &rest[label.len()..];
            node = &edge.node;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(t: &MTrie, data: &[u8]) -> Vec<PeerId> {
        let mut v = vec![];
        t.for_each_match(data, |p| v.push(p));
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn prefixes_split_and_merge() {
        let mut t = MTrie::default();
        assert_eq!(t.add(b"weather.paris", 1), (true, true));
        assert_eq!(t.add(b"weather.oslo", 2), (true, true));
        assert_eq!(t.add(b"weather.", 3), (true, true));
        assert_eq!(t.add(b"weather.", 3), (false, false));
        assert_eq!(t.add(b"weather.", 4), (false, true));
        assert_eq!(matches(&t, b"weather.paris 12C"), vec![1, 3, 4]);
        assert_eq!(matches(&t, b"weather.oslo"), vec![2, 3, 4]);
        assert_eq!(matches(&t, b"weather"), Vec::<PeerId>::new());
        assert_eq!(t.remove(b"weather.", 3), (true, false));
        assert_eq!(t.remove(b"weather.", 4), (true, true));
        assert_eq!(t.remove(b"weather.", 4), (false, false));
        assert_eq!(matches(&t, b"weather.paris"), vec![1]);
        assert_eq!(t.remove(b"weather.paris", 1), (true, true));
        assert_eq!(t.remove(b"weather.oslo", 2), (true, true));
        assert!(t.root.is_empty());
    }

    #[test]
    fn empty_prefix_matches_everything() {
        let mut t = MTrie::default();
        t.add(b"", 9);
        assert_eq!(matches(&t, b""), vec![9]);
        assert_eq!(matches(&t, b"anything"), vec![9]);
        assert_eq!(t.remove(b"nope", 9), (false, false));
    }

    /// The edges' buffers, in bytes (what the trie holds beyond its nodes).
    fn held(node: &Node, seen: &mut Vec<*const u8>) -> usize {
        node.children
            .iter()
            .map(|e| {
                let new = !seen.contains(&e.origin.as_ptr());
                seen.push(e.origin.as_ptr());
                (if new { e.origin.len() } else { 0 }) + held(&e.node, seen)
            })
            .sum()
    }

    #[test]
    fn churn_beside_a_long_topic_neither_copies_it_nor_pins_it() {
        let mut t = MTrie::default();
        let long: Vec<u8> = std::iter::once(b'a').chain(std::iter::repeat_n(b'x', 1 << 20)).collect();
        t.add(b"a", 1);
        t.add(&long, 2);
        let buffer = |t: &MTrie| t.root.children[0].node.children[0].origin.as_ptr();
        let before = buffer(&t);
        // SUBSCRIBE/CANCEL of prefixes that split the long edge: re-slices of the same buffer.
        for cut in [2usize, 3, 1000, 1 << 19] {
            for _ in 0..100 {
                assert_eq!(t.add(&long[..cut], 3), (true, true));
                assert_eq!(t.remove(&long[..cut], 3), (true, true));
                assert_eq!(buffer(&t), before, "the long label was copied");
            }
        }
        assert_eq!(held(&t.root, &mut vec![]), 1 + long.len() - 1);
        // The long topic goes: what is left ("a") no longer holds its megabyte.
        t.add(b"ab", 4);
        assert_eq!(t.remove(&long, 2), (true, true));
        assert!(held(&t.root, &mut vec![]) < 100, "held {}", held(&t.root, &mut vec![]));
        assert_eq!(matches(&t, b"ab"), vec![1, 4]);

        // The same when the short prefix was cut out of the long topic's own buffer.
        let mut t = MTrie::default();
        t.add(&long, 2);
        t.add(b"a", 1);
        t.add(b"ab", 4);
        assert!(held(&t.root, &mut vec![]) > long.len());
        assert_eq!(t.remove(&long, 2), (true, true));
        assert!(held(&t.root, &mut vec![]) < 100, "held {}", held(&t.root, &mut vec![]));
        assert_eq!(matches(&t, b"abc"), vec![1, 4]);
    }

    #[test]
    fn agrees_with_a_naive_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut t = MTrie::default();
        let mut model: Vec<(Vec<u8>, PeerId)> = vec![];
        for _ in 0..5000 {
            let len = rng.gen_range(0..5);
            let key: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..b'd')).collect();
            let peer = rng.gen_range(0..4);
            if rng.gen_bool(0.6) {
                t.add(&key, peer);
                if !model.contains(&(key.clone(), peer)) {
                    model.push((key, peer));
                }
            } else {
                let had = model.iter().position(|e| *e == (key.clone(), peer));
                assert_eq!(t.remove(&key, peer).0, had.is_some());
                if let Some(i) = had {
                    model.swap_remove(i);
                }
            }
            let data: Vec<u8> = (0..rng.gen_range(0..6)).map(|_| rng.gen_range(b'a'..b'd')).collect();
            let mut want: Vec<PeerId> = model.iter().filter(|(k, _)| data.starts_with(k)).map(|(_, p)| *p).collect();
            want.sort();
            want.dedup();
            assert_eq!(matches(&t, &data), want, "data {data:?}");
        }
    }
}
