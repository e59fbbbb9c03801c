//! CHP server state application against a model (a BTreeMap): KVSETs with and without ttl,
//! deletes, bad ttls, time passing and expiry. Sequences must increase by one per accepted update,
//! refusals must change nothing, keys without a ttl must equal the model's, and once every ttl has
//! run out the whole map must equal it.
#![no_main]
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use chp::KvMsg;
use chp::command::KvSet;
use chp::server::ServerState;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    Set { key: u8, value: Vec<u8>, ttl: Option<u16> },
    BadTtl { key: u8, ttl: String },
    Advance(u16),
    ExpireAll,
}

fuzz_target!(|ops: Vec<Op>| {
    let t0 = Instant::now();
    let mut now = t0;
    let mut state = ServerState::new(t0);
    // Model: key -> (value, has a ttl).
    let mut model: BTreeMap<Vec<u8>, (Vec<u8>, bool)> = BTreeMap::new();
    let mut sequence = 0;
    for op in ops.into_iter().take(256) {
        match op {
            Op::Set { key, value, ttl } => {
                let key = format!("/k/{}", key % 16).into_bytes();
                let mut msg = KvMsg::new(key.clone(), value.clone());
                if let Some(ms) = ttl {
                    msg.properties.insert("ttl", format!("{}.{:03}", ms / 1000, ms % 1000)).unwrap();
                }
                let applied = state.apply(KvSet(msg), now).expect("a valid KVSET applies");
                sequence += 1;
                assert_eq!((applied.sequence, state.sequence()), (sequence, sequence));
                match value.is_empty() {
                    true => {
                        model.remove(&key);
                    }
                    // ttl 0 means none.
                    false => {
                        model.insert(key, (value, ttl.is_some_and(|ms| ms > 0)));
                    }
                }
            }
            Op::BadTtl { key, ttl } => {
                let mut msg = KvMsg::new(format!("/k/{}", key % 16), "v");
                if msg.properties.insert("ttl", ttl.clone()).is_err() {
                    continue;
                }
                if chp::server::parse_ttl(&ttl).is_ok() {
                    continue; // a valid ttl after all: not this op's business
                }
                assert!(state.apply(KvSet(msg), now).is_err(), "ttl {ttl:?} refused");
                assert_eq!(state.sequence(), sequence, "a refusal takes no sequence");
            }
            Op::Advance(ms) => {
                now += Duration::from_millis(u64::from(ms));
                let mut out = Vec::new();
                state.expire(now, &mut out);
                for deleted in out {
                    sequence += 1;
                    assert_eq!(deleted.sequence, sequence);
                    assert!(deleted.body.is_empty());
                    let (_, had_ttl) = model.remove(deleted.key.as_ref()).expect("expired a key the model has");
                    assert!(had_ttl, "only keys with a ttl expire");
                }
            }
            Op::ExpireAll => {
                now += Duration::from_secs(100_000);
                let mut out = Vec::new();
                state.expire(now, &mut out);
                sequence += out.len() as u64;
                model.retain(|_, (_, ttl)| !*ttl);
                let all: BTreeMap<Vec<u8>, Vec<u8>> = model.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect();
                let got: BTreeMap<Vec<u8>, Vec<u8>> =
                    state.entries().map(|e| (e.key.to_vec(), e.value.to_vec())).collect();
                assert_eq!(got, all);
            }
        }
        assert_eq!(state.sequence(), sequence);
        for (key, (value, ttl)) in &model {
            if !*ttl {
                assert_eq!(state.get(key), Some(&value[..]), "key {key:?}");
            }
        }
        assert!(state.len() <= model.len() + 0, "the state holds no key the model lacks");
    }
});
