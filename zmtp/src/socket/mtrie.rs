//! A radix trie from subscription prefix to the peers subscribed to it (libzmq's `mtrie`).
//!
//! PUB/XPUB match a message's first frame with one walk down the trie, collecting every peer on the
//! way, so the cost of a send grows with the topic's length, not with the number of subscriptions or
//! subscribers. Edges are compressed, so 100k long topics cost about one node each.

use smallvec::SmallVec;

use super::inbox::PeerId;

#[derive(Debug, Default)]
struct Node {
    /// Peers subscribed to exactly the prefix that ends at this node.
    peers: SmallVec<[PeerId; 2]>,
    /// Children, sorted by the first byte of their (non-empty) label.
    children: Vec<Edge>,
}

#[derive(Debug)]
struct Edge {
    label: Box<[u8]>,
    node: Node,
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
        self.children.binary_search_by_key(&first, |e| e.label[0])
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
                self.children.insert(at, Edge { label: key.into(), node });
                (true, true)
            }
            Ok(at) => {
                let edge = &mut self.children[at];
                let common = common_prefix(&edge.label, key);
                if common < edge.label.len() {
                    // Split the edge at the divergence point.
                    let rest: Box<[u8]> = edge.label[common..].into();
                    let old = std::mem::take(&mut edge.node);
                    edge.label = key[..common].into();
                    edge.node.children.push(Edge { label: rest, node: old });
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
        if !key.starts_with(&edge.label) {
            return (false, false);
        }
        let result = edge.node.remove(&key[edge.label.len()..], peer);
        if edge.node.is_empty() {
            self.children.remove(at);
        } else if edge.node.peers.is_empty() && edge.node.children.len() == 1 {
            // Merge a pass-through node into its only child to keep edges compressed.
            let child = edge.node.children.pop().expect("one child");
            let mut label = Vec::with_capacity(edge.label.len() + child.label.len());
            label.extend_from_slice(&edge.label);
            label.extend_from_slice(&child.label);
            *edge = Edge { label: label.into(), node: child.node };
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
            if !rest.starts_with(&edge.label) {
                return;
            }
            rest = &rest[edge.label.len()..];
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
