//! The HA pending list (client updates held by a passive server until the active publishes them)
//! against a model: a list of held updates by identity, in arrival order. Holding, publication by
//! the active, pruning by the window, discarding before a snapshot and replay at promotion must all
//! agree with it, and its limits must hold.
#![no_main]
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use chp::KvMsg;
use chp::server::pending::{Held, Pending, PendingConfig};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A client's update arrives (uuid: one of 8, or none).
    Hold {
        id: Option<u8>,
        key: u8,
        value: u8,
    },
    /// The active publishes an update.
    Published {
        id: Option<u8>,
        key: u8,
        value: u8,
    },
    Advance(u16),
    /// The active was heard now.
    Prune,
    /// The snapshot completed: entries that arrived before now go.
    DiscardBefore,
    /// Promotion: replay everything.
    TakeAll,
}

fn update(id: Option<u8>, key: u8, value: u8) -> KvMsg {
    let mut m = KvMsg::new(format!("/k/{}", key % 4), format!("v{}", value % 4));
    m.uuid = id.map(|i| chp::Uuid::from_slice(&[i % 8; 16]).unwrap());
    m
}

fuzz_target!(|ops: Vec<Op>| {
    let t0 = Instant::now();
    let mut now = t0;
    let config = PendingConfig { limit: 16, remember_capacity: 32, ..PendingConfig::default() };
    let window = config.window;
    let mut pending = Pending::new(config);
    // Model: (update, arrival) in arrival order.
    let mut model: Vec<(KvMsg, Instant)> = Vec::new();
    for op in ops.into_iter().take(256) {
        match op {
            Op::Hold { id, key, value } => {
                let m = update(id, key, value);
                let held = pending.hold(m.clone(), now);
                if held == Held::Queued {
                    model.push((m, now));
                    if model.len() > 16 {
                        model.remove(0);
                    }
                }
            }
            Op::Published { id, key, value } => {
                let m = update(id, key, value);
                let matched = pending.published(&m, now);
                let at = model.iter().position(|(h, _)| match (h.uuid, m.uuid) {
                    (Some(a), Some(b)) => a == b,
                    (None, None) => h.key == m.key && h.body == m.body && h.properties == m.properties,
                    _ => false,
                });
                assert_eq!(matched, at.is_some(), "publication of {m:?} matched the model?");
                if let Some(at) = at {
                    model.remove(at);
                }
            }
            Op::Advance(ms) => now += Duration::from_millis(u64::from(ms) * 10),
            Op::Prune => {
                let dropped = pending.prune(now);
                let before = model.len();
                model.retain(|(_, arrived)| *arrived + window >= now);
                assert_eq!(dropped, before - model.len(), "pruned");
            }
            Op::DiscardBefore => {
                let dropped = pending.discard_before(now);
                let before = model.len();
                model.retain(|(_, arrived)| *arrived >= now);
                assert_eq!(dropped, before - model.len(), "discarded");
            }
            Op::TakeAll => {
                let replay = pending.take_all();
                let want: Vec<KvMsg> = model.drain(..).map(|(m, _)| m).collect();
                assert_eq!(replay, want, "replayed in arrival order");
            }
        }
        assert_eq!(pending.len(), model.len());
        assert!(pending.len() <= 16 && pending.remembered() <= 32);
    }
});
