//! The PUB/XPUB subscription trie against a model (a list of (prefix, peer) pairs): a sequence of
//! subscribe / unsubscribe / match operations; every answer must equal the model's.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zmtp::fuzzing::Trie;

#[derive(Arbitrary, Debug)]
enum Op {
    Add(Vec<u8>, u8),
    Remove(Vec<u8>, u8),
    Match(Vec<u8>),
}

fuzz_target!(|ops: Vec<Op>| {
    let mut trie = Trie::default();
    let mut model: Vec<(Vec<u8>, u64)> = Vec::new();
    for op in ops.into_iter().take(512) {
        match op {
            Op::Add(prefix, peer) => {
                let peer = u64::from(peer % 8);
                let first = !model.iter().any(|(p, _)| *p == prefix);
                let added = !model.contains(&(prefix.clone(), peer));
                assert_eq!(trie.add(&prefix, peer), (first, added), "add {prefix:?} {peer}");
                if added {
                    model.push((prefix, peer));
                }
            }
            Op::Remove(prefix, peer) => {
                let peer = u64::from(peer % 8);
                let removed = model.contains(&(prefix.clone(), peer));
                model.retain(|e| *e != (prefix.clone(), peer));
                let last = removed && !model.iter().any(|(p, _)| *p == prefix);
                assert_eq!(trie.remove(&prefix, peer), (removed, last), "remove {prefix:?} {peer}");
            }
            Op::Match(data) => {
                let mut want: Vec<u64> =
                    model.iter().filter(|(p, _)| data.starts_with(p)).map(|(_, peer)| *peer).collect();
                want.sort_unstable();
                want.dedup();
                assert_eq!(trie.matches(&data), want, "match {data:?}");
            }
        }
    }
});
