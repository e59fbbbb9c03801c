//! The CHP client's replica (the pure part of the client agent) against a model: snapshots and
//! KVPUBs in any order. An applied update changes exactly its key; a discarded one (stale, gap,
//! regression, outside the subtree) changes nothing; the sequence never goes back except by a
//! snapshot.
#![no_main]
use std::collections::{BTreeMap, HashSet};

use arbitrary::Arbitrary;
use bytes::Bytes;
use chp::KvMsg;
use chp::command::Subtree;
use chp::fuzzing::{Applied, Replica};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Snapshot { pairs: Vec<(u8, Vec<u8>)>, sequence: u16 },
    Pub { key: u8, value: Vec<u8>, sequence: u16 },
}

fuzz_target!(|input: (bool, bool, Vec<Op>)| {
    let (subtree_client, check_gaps, ops) = input;
    let subtree = if subtree_client { Subtree::new("/a/").unwrap() } else { Subtree::all() };
    let key_of = |k: u8| Bytes::from(format!("/{}/{}", if k % 2 == 0 { "a" } else { "b" }, k % 8));
    let mut replica = Replica::default();
    let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    for op in ops.into_iter().take(256) {
        match op {
            Op::Snapshot { pairs, sequence } => {
                let map: BTreeMap<Bytes, Bytes> = pairs
                    .into_iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| (key_of(k), Bytes::from(v)))
                    .filter(|(k, _)| subtree.contains(k))
                    .collect();
                replica.load(map.clone(), u64::from(sequence), &HashSet::new());
                model = map;
                assert_eq!(replica.sequence(), u64::from(sequence));
            }
            Op::Pub { key, value, sequence } => {
                let (key, before) = (key_of(key), replica.sequence());
                let mut msg = KvMsg::new(key.clone(), value.clone());
                msg.sequence = u64::from(sequence);
                match replica.apply(msg, &subtree, check_gaps && !subtree_client) {
                    Applied::Applied => {
                        assert!(u64::from(sequence) > before, "applied {sequence} after {before}");
                        assert!(subtree.contains(&key));
                        match value.is_empty() {
                            true => model.remove(&key),
                            false => model.insert(key, Bytes::from(value)),
                        };
                        assert_eq!(replica.sequence(), u64::from(sequence));
                    }
                    Applied::OutsideSubtree => assert!(!subtree.contains(&key)),
                    Applied::Stale | Applied::Regression => assert!(u64::from(sequence) <= before),
                    Applied::Gap => assert!(u64::from(sequence) > before + 1),
                }
            }
        }
        assert_eq!(replica.map(), &model);
    }
});
