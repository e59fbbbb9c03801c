//! One attempt's synchronisation with a server, as a pure state machine: parsed messages in,
//! decisions out; no sockets, no clock, no replica (the agent carries the decisions out).
//!
//! | state | input | next state | the agent |
//! |---|---|---|---|
//! | Syncing (early) | subscriber message | same: first message noted, KVPUB queued | — |
//! | Syncing (early) | KTHXBAI, the subscriber silent so far | Loaded | loads it: `Status::Loaded` |
//! | Syncing (early) | KTHXBAI covered by the first message | Active | loads it: `Status::Active` |
//! | Syncing (early) | KTHXBAI not covered by the first message | Syncing (live), queue kept | asks again |
//! | Syncing (live) | KTHXBAI | Active | loads it (no second `Synced` after a reload) |
//! | Loaded | first message a KVPUB or HUGZ covering it | Active | `Status::Active`, applies a KVPUB |
//! | Loaded | first message anything else | Syncing (live, reload) | asks again |
//! | Active | KVPUB | Active | applies it |
//! | any but Syncing | snapshot reply | same | ignores it |
//!
//! The snapshot is asked for at once (as the reference client does), not after the subscription
//! has proven live: a one-shot `get` then answers in one round trip instead of waiting up to a
//! HUGZ interval. The price is the subscribe-before-snapshot race (updates published after the
//! snapshot's sequence `S` but before the server had our subscription are in neither), so such a
//! snapshot is *loaded* but not exact until the subscriber's first message settles it: a KVPUB
//! numbered at most `S + 1` proves the subscription was live in time, and so does a HUGZ carrying
//! a sequence `h` with `0 < h <= S` (the server was at `h` when it sent it, so every update after
//! `h` follows it on this subscription; ours and the Guide's reference servers say their sequence
//! in HUGZ, 12/CHP's literal HUGZ says 0 and proves nothing). Anything else (a later KVPUB, a
//! later or silent HUGZ) cannot prove it, so the snapshot is asked for once more on a fresh
//! snapshot socket, now that the subscription is known to be live: that one is exact. So an
//! attempt takes at most two snapshots, and against a server that says its sequence in HUGZ, one
//! unless updates raced the request (a million-key sync of a quiet map used to take two).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::command::{SnapshotReply, Subtree, Update};
use crate::kvmsg::KvMsg;

/// Where one attempt's synchronisation stands.
pub(super) enum SyncState {
    /// ICANHAZ? sent: collecting KVSYNCs, queueing KVPUBs.
    Syncing(Syncing),
    /// Applying KVPUBs on top of snapshot `sequence`, which is not yet proven exact: the
    /// subscriber has not spoken yet.
    Loaded {
        /// The snapshot's (KTHXBAI's) sequence.
        sequence: u64,
    },
    /// Applying KVPUBs on top of an exact snapshot.
    Active,
}

/// A snapshot on its way.
pub(super) struct Syncing {
    entries: Entries,
    queued: Vec<KvMsg>,
    request: Request,
}

/// A snapshot's KVSYNCs as they arrive, in arrival order: the server sends them in key order, so
/// the map is built at the end in one pass (`BTreeMap`'s bulk build from sorted pairs, full
/// nodes) instead of by a million inserts that each search the tree from its root (measured:
/// a tenth of a 1M-key sync's CPU).
///
/// The size-limited build (feature `small`) inserts into the map as the pairs arrive instead:
/// `from_iter` brings a stable sort's code, and the binary's limit is tight.
#[derive(Default)]
struct Entries {
    /// Key and value, copied out of the message (whose buffer may hold much more than the pair)
    /// into `arena`; an empty value deletes the key.
    #[cfg(not(feature = "small"))]
    pairs: Vec<(Bytes, Bytes)>,
    #[cfg(not(feature = "small"))]
    deletes: bool,
    #[cfg(not(feature = "small"))]
    arena: Arena,
    #[cfg(feature = "small")]
    map: BTreeMap<Bytes, Bytes>,
}

/// Where a snapshot's keys and values are copied: blocks, each key and value a slice of one, so
/// a pair costs no allocation of its own (two per pair, and their frees on replacement, were the
/// largest share of a million-key sync's client CPU after the transfer).
///
/// A block is as large as everything copied before it, from 1 KiB up to 64 KiB, so the unused
/// tail of the last one is never more than what the snapshot holds (a small subtree's client
/// does not pay 64 KiB). A pair larger than a quarter of the block gets an allocation of its own.
///
/// The price: a block is freed when the last pair in it is, so a replica whose keys were
/// replaced one by one may keep blocks alive for a few survivors. That is bounded by the
/// snapshot it came from (at most its bytes again, beside the live map) until the next sync
/// replaces the map whole.
#[cfg(not(feature = "small"))]
#[derive(Default)]
struct Arena {
    block: bytes::BytesMut,
    /// Bytes copied into blocks so far.
    copied: usize,
}

#[cfg(not(feature = "small"))]
impl Arena {
    /// The first block's size.
    const MIN_BLOCK: usize = 1024;
    /// The largest block's.
    const MAX_BLOCK: usize = 64 * 1024;

    /// `bytes` copied into the current block (a new one if it has no room).
    fn copy(&mut self, bytes: &[u8]) -> Bytes {
        let block = self.copied.clamp(Self::MIN_BLOCK, Self::MAX_BLOCK);
        if bytes.len() > block / 4 {
            return Bytes::copy_from_slice(bytes);
        }
        if self.block.capacity() - self.block.len() < bytes.len() {
            self.block = bytes::BytesMut::with_capacity(block);
        }
        self.copied += bytes.len();
        self.block.extend_from_slice(bytes);
        self.block.split().freeze()
    }
}

impl Entries {
    #[cfg(not(feature = "small"))]
    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.deletes |= value.is_empty();
        let pair = (self.arena.copy(key), self.arena.copy(value));
        self.pairs.push(pair);
    }

    #[cfg(feature = "small")]
    fn push(&mut self, key: &[u8], value: &[u8]) {
        match value.is_empty() {
            true => self.map.remove(key),
            false => self.map.insert(Bytes::copy_from_slice(key), Bytes::copy_from_slice(value)),
        };
    }

    #[cfg(feature = "small")]
    fn into_map(self) -> BTreeMap<Bytes, Bytes> {
        self.map
    }

    fn clear(&mut self) {
        *self = Entries::default();
    }

    /// The map the pairs make when applied in order: the last pair of a key wins and an empty
    /// value leaves the key out. Any order works; in key order the sort is one linear pass.
    #[cfg(not(feature = "small"))]
    fn into_map(self) -> BTreeMap<Bytes, Bytes> {
        // `from_iter` sorts stably and keeps the last of equal keys, as inserting in order does.
        let mut map: BTreeMap<Bytes, Bytes> = self.pairs.into_iter().collect();
        if self.deletes {
            map.retain(|_, value| !value.is_empty());
        }
        map
    }
}

/// When the snapshot being received was asked for.
enum Request {
    /// At the start of the attempt, maybe before the subscription was live.
    Early {
        /// The subscriber's first message, once one came.
        first: Option<First>,
    },
    /// After the subscription proved live: the snapshot will be exact.
    Live {
        /// A snapshot not proven exact was loaded already: this one confirms it (no second
        /// `Synced` event).
        reload: bool,
    },
}

/// The subscriber's first message of an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum First {
    /// A KVPUB with this sequence.
    KvPub(u64),
    /// A HUGZ sent when the server was at this sequence (0: not said).
    Hugz(u64),
    /// A message that did not parse.
    Other,
}

impl First {
    fn of(update: Option<&Update>) -> First {
        match update {
            Some(Update::KvPub(m)) => First::KvPub(m.sequence),
            Some(Update::Hugz { sequence }) => First::Hugz(*sequence),
            None => First::Other,
        }
    }

    /// True when a subscriber whose first message was this one was live for every update after
    /// snapshot `sequence`.
    fn covers(self, sequence: u64) -> bool {
        match self {
            First::KvPub(seq) => seq <= sequence.saturating_add(1),
            First::Hugz(at) => at != 0 && at <= sequence,
            First::Other => false,
        }
    }
}

/// What the agent does with a message from the subscriber.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// Nothing (queued for the snapshot, or not a KVPUB).
    Nothing,
    /// Apply this KVPUB.
    Apply(KvMsg),
    /// The loaded snapshot was exact: the client is active; apply this KVPUB (the one that proved
    /// it, unless a HUGZ did).
    Proven(Option<KvMsg>),
    /// The loaded snapshot may have missed updates: ask for it again (the KVPUB, if any, is queued).
    AskAgain,
}

/// What the agent does with a message from the snapshot socket.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// Nothing (a KVSYNC stored, or not syncing).
    Nothing,
    /// A KVSYNC for a key outside our subtree: dropped.
    OutsideSubtree(Bytes),
    /// The snapshot is older than the subscription: ask for it again (the queue is kept).
    AskAgain,
    /// The snapshot is complete: load it.
    Load(Load),
}

/// A complete snapshot, and what to do with it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Load {
    /// The map as of `sequence`.
    pub entries: BTreeMap<Bytes, Bytes>,
    /// KVPUBs that arrived meanwhile, in order (those at or below `sequence` are stale).
    pub queued: Vec<KvMsg>,
    /// KTHXBAI's sequence.
    pub sequence: u64,
    /// Report it with a `Synced` event (not when it only confirms a snapshot loaded before).
    pub announce: bool,
    /// Known to be exact (`Status::Active`); else loaded but not proven (`Status::Loaded`).
    pub exact: bool,
}

impl SyncState {
    /// The state right after the first ICANHAZ? of an attempt.
    pub(super) fn start() -> SyncState {
        SyncState::Syncing(Syncing {
            entries: Entries::default(),
            queued: Vec::new(),
            request: Request::Early { first: None },
        })
    }

    /// True while a snapshot is on its way.
    pub(super) fn is_syncing(&self) -> bool {
        matches!(self, SyncState::Syncing(_))
    }

    /// A message on the subscriber socket (`None`: one that did not parse).
    pub(super) fn on_update(&mut self, update: Option<Update>) -> Heard {
        let first = First::of(update.as_ref());
        let kvpub = match update {
            Some(Update::KvPub(m)) => Some(m),
            Some(Update::Hugz { .. }) | None => None,
        };
        match self {
            SyncState::Syncing(syncing) => {
                if let Request::Early { first: noted @ None } = &mut syncing.request {
                    *noted = Some(first);
                }
                syncing.queued.extend(kvpub);
                Heard::Nothing
            }
            SyncState::Loaded { sequence } => match first.covers(*sequence) {
                true => {
                    *self = SyncState::Active;
                    Heard::Proven(kvpub)
                }
                false => {
                    // Loaded a snapshot the subscription may have missed updates after.
                    *self = SyncState::Syncing(Syncing {
                        entries: Entries::default(),
                        queued: kvpub.into_iter().collect(),
                        request: Request::Live { reload: true },
                    });
                    Heard::AskAgain
                }
            },
            SyncState::Active => kvpub.map_or(Heard::Nothing, Heard::Apply),
        }
    }

    /// A message on the snapshot socket.
    pub(super) fn on_snapshot(&mut self, reply: SnapshotReply, subtree: &Subtree) -> Answer {
        let SyncState::Syncing(syncing) = self else { return Answer::Nothing };
        let end = match reply {
            SnapshotReply::KvSync(kv) => {
                if !subtree.contains(&kv.key) {
                    return Answer::OutsideSubtree(kv.key);
                }
                syncing.entries.push(&kv.key, &kv.value);
                return Answer::Nothing;
            }
            SnapshotReply::KthxBai(end) => end,
        };
        let (exact, announce) = match syncing.request {
            Request::Early { first: Some(first) } if !first.covers(end.sequence) => {
                // The subscription went live too late for this snapshot: updates after it may
                // be in neither. Ask again, keeping what the subscriber queued.
                syncing.entries.clear();
                syncing.request = Request::Live { reload: false };
                return Answer::AskAgain;
            }
            Request::Early { first: Some(_) } => (true, true),
            Request::Early { first: None } => (false, true),
            Request::Live { reload } => (true, !reload),
        };
        let (entries, queued) = (std::mem::take(&mut syncing.entries).into_map(), std::mem::take(&mut syncing.queued));
        *self = match exact {
            true => SyncState::Active,
            false => SyncState::Loaded { sequence: end.sequence },
        };
        Answer::Load(Load { entries, queued, sequence: end.sequence, announce, exact })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{KthxBai, KvSync};

    fn kvpub(key: &str, value: &str, sequence: u64) -> KvMsg {
        KvMsg { sequence, ..KvMsg::new(key.to_owned(), value.to_owned()) }
    }

    fn kvsync(key: &str, value: &str) -> SnapshotReply {
        SnapshotReply::KvSync(KvSync { key: key.to_owned().into(), sequence: 0, value: value.to_owned().into() })
    }

    fn kthxbai(sequence: u64) -> SnapshotReply {
        SnapshotReply::KthxBai(KthxBai { sequence, subtree: Bytes::new() })
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<Bytes, Bytes> {
        pairs.iter().map(|(k, v)| (k.to_string().into(), v.to_string().into())).collect()
    }

    fn load(answer: Answer) -> Load {
        match answer {
            Answer::Load(load) => load,
            other => panic!("expected a load, got {other:?}"),
        }
    }

    fn all() -> Subtree {
        Subtree::all()
    }

    #[test]
    fn pairs_across_arena_blocks_and_larger_than_a_block_are_copied_whole() {
        let mut entries = Entries::default();
        let mut expected = BTreeMap::new();
        // 1,000 pairs of ~200 bytes span blocks of every size; every 97th is larger than the
        // largest block; a delete (empty value) of an earlier key in between.
        for i in 0..1000u32 {
            let key = format!("/k/{i:05}");
            let len = if i % 97 == 0 { 100_000 } else { 190 };
            let value: Vec<u8> = (0..len).map(|b| (b as u32 * 7 + i) as u8).collect();
            entries.push(key.as_bytes(), &value);
            expected.insert(Bytes::from(key), Bytes::from(value));
        }
        entries.push(b"/k/00003", b"");
        expected.remove(&b"/k/00003"[..]);
        assert_eq!(entries.into_map(), expected);
    }

    #[test]
    fn an_arenas_unused_tail_is_never_more_than_it_holds() {
        let mut arena = Arena::default();
        for i in 0..20_000usize {
            let pair = vec![b'x'; 10 + i % 150];
            assert_eq!(&arena.copy(&pair)[..], &pair[..]);
            let tail = arena.block.capacity();
            assert!(tail <= arena.copied.max(Arena::MIN_BLOCK), "after {i}: {tail} spare, {} held", arena.copied);
        }
    }

    #[test]
    fn a_snapshot_before_the_subscriber_speaks_is_loaded_not_exact() {
        let mut state = SyncState::start();
        assert_eq!(state.on_snapshot(kvsync("a", "1"), &all()), Answer::Nothing);
        assert_eq!(state.on_snapshot(kvsync("b", "2"), &all()), Answer::Nothing);
        assert_eq!(state.on_snapshot(kvsync("b", ""), &all()), Answer::Nothing, "an empty value deletes");
        let load = load(state.on_snapshot(kthxbai(7), &all()));
        assert_eq!(
            load,
            Load { entries: map(&[("a", "1")]), queued: vec![], sequence: 7, announce: true, exact: false }
        );
        assert!(matches!(state, SyncState::Loaded { sequence: 7 }));
    }

    #[test]
    fn a_loaded_snapshot_is_proven_by_a_kvpub_right_after_it() {
        for next in [7, 8] {
            let mut state = SyncState::Loaded { sequence: 7 };
            assert_eq!(
                state.on_update(Some(Update::KvPub(kvpub("a", "1", next)))),
                Heard::Proven(Some(kvpub("a", "1", next)))
            );
            assert!(matches!(state, SyncState::Active));
        }
    }

    #[test]
    fn a_loaded_snapshot_is_proven_by_a_hugz_the_server_sent_at_or_before_it() {
        for at in [1, 6, 7] {
            let mut state = SyncState::Loaded { sequence: 7 };
            assert_eq!(state.on_update(Some(Update::Hugz { sequence: at })), Heard::Proven(None));
            assert!(matches!(state, SyncState::Active));
        }
    }

    #[test]
    fn a_loaded_snapshot_is_asked_again_after_a_silent_or_later_hugz_a_later_kvpub_or_garbage() {
        for first in [
            Some(Update::Hugz { sequence: 0 }),
            Some(Update::Hugz { sequence: 8 }),
            Some(Update::KvPub(kvpub("a", "1", 9))),
            None,
        ] {
            let mut state = SyncState::Loaded { sequence: 7 };
            let queued: Vec<KvMsg> = match &first {
                Some(Update::KvPub(m)) => vec![m.clone()],
                _ => vec![],
            };
            assert_eq!(state.on_update(first), Heard::AskAgain);
            assert!(state.is_syncing());
            // The second snapshot confirms the first: exact, not announced again, queue kept.
            let load = load(state.on_snapshot(kthxbai(9), &all()));
            assert_eq!(load, Load { entries: map(&[]), queued, sequence: 9, announce: false, exact: true });
            assert!(matches!(state, SyncState::Active));
        }
    }

    #[test]
    fn a_snapshot_covered_by_the_subscribers_first_kvpub_is_exact() {
        let mut state = SyncState::start();
        assert_eq!(state.on_update(Some(Update::KvPub(kvpub("a", "1", 4)))), Heard::Nothing);
        assert_eq!(state.on_update(Some(Update::Hugz { sequence: 0 })), Heard::Nothing);
        assert_eq!(state.on_update(Some(Update::KvPub(kvpub("b", "2", 5)))), Heard::Nothing);
        let load = load(state.on_snapshot(kthxbai(3), &all()));
        assert_eq!(
            load,
            Load {
                entries: map(&[]),
                queued: vec![kvpub("a", "1", 4), kvpub("b", "2", 5)],
                sequence: 3,
                announce: true,
                exact: true
            }
        );
        assert!(matches!(state, SyncState::Active));
    }

    #[test]
    fn a_snapshot_covered_by_the_subscribers_first_hugz_is_exact() {
        let mut state = SyncState::start();
        assert_eq!(state.on_update(Some(Update::Hugz { sequence: 3 })), Heard::Nothing);
        assert_eq!(state.on_update(Some(Update::KvPub(kvpub("b", "2", 4)))), Heard::Nothing);
        state.on_snapshot(kvsync("a", "1"), &all());
        let load = load(state.on_snapshot(kthxbai(3), &all()));
        assert_eq!(
            load,
            Load {
                entries: map(&[("a", "1")]),
                queued: vec![kvpub("b", "2", 4)],
                sequence: 3,
                announce: true,
                exact: true
            }
        );
        assert!(matches!(state, SyncState::Active));
    }

    #[test]
    fn a_snapshot_older_than_the_subscription_is_asked_again_keeping_the_queue() {
        for first in [Update::Hugz { sequence: 0 }, Update::Hugz { sequence: 4 }, Update::KvPub(kvpub("a", "1", 5))] {
            let mut state = SyncState::start();
            let queued: Vec<KvMsg> = match &first {
                Update::KvPub(m) => vec![m.clone()],
                Update::Hugz { .. } => vec![],
            };
            state.on_update(Some(first));
            state.on_snapshot(kvsync("old", "x"), &all());
            assert_eq!(state.on_snapshot(kthxbai(3), &all()), Answer::AskAgain);
            assert!(state.is_syncing());
            // The first message does not count twice: the live snapshot is exact, whatever came.
            state.on_update(Some(Update::Hugz { sequence: 0 }));
            state.on_snapshot(kvsync("new", "y"), &all());
            let load = load(state.on_snapshot(kthxbai(3), &all()));
            assert_eq!(load, Load { entries: map(&[("new", "y")]), queued, sequence: 3, announce: true, exact: true });
        }
    }

    #[test]
    fn only_the_first_subscriber_message_decides() {
        // A HUGZ first: a later KVPUB right after the snapshot does not make it exact.
        let mut state = SyncState::start();
        state.on_update(Some(Update::Hugz { sequence: 0 }));
        state.on_update(Some(Update::KvPub(kvpub("a", "1", 4))));
        assert_eq!(state.on_snapshot(kthxbai(3), &all()), Answer::AskAgain);
    }

    #[test]
    fn kvsyncs_outside_the_subtree_are_dropped() {
        let subtree = Subtree::new("/a/").unwrap();
        let mut state = SyncState::start();
        assert_eq!(state.on_snapshot(kvsync("/b/x", "1"), &subtree), Answer::OutsideSubtree("/b/x".into()));
        assert_eq!(state.on_snapshot(kvsync("/a/x", "1"), &subtree), Answer::Nothing);
        assert_eq!(load(state.on_snapshot(kthxbai(2), &subtree)).entries, map(&[("/a/x", "1")]));
    }

    #[test]
    fn active_applies_kvpubs_and_ignores_the_rest() {
        let mut state = SyncState::Active;
        assert_eq!(state.on_update(Some(Update::KvPub(kvpub("a", "1", 1)))), Heard::Apply(kvpub("a", "1", 1)));
        assert_eq!(state.on_update(Some(Update::Hugz { sequence: 0 })), Heard::Nothing);
        assert_eq!(state.on_update(None), Heard::Nothing);
        assert_eq!(state.on_snapshot(kthxbai(5), &all()), Answer::Nothing, "a late snapshot reply is ignored");
        assert!(matches!(state, SyncState::Active));
    }

    #[test]
    fn a_loaded_client_ignores_snapshot_replies() {
        let mut state = SyncState::Loaded { sequence: 3 };
        assert_eq!(state.on_snapshot(kvsync("a", "1"), &all()), Answer::Nothing);
        assert!(matches!(state, SyncState::Loaded { sequence: 3 }));
    }

    #[test]
    fn covers_allows_the_very_next_sequence_only() {
        assert!(First::KvPub(3).covers(3));
        assert!(First::KvPub(4).covers(3));
        assert!(!First::KvPub(5).covers(3));
        assert!(!First::Other.covers(3));
        assert!(First::Hugz(3).covers(3) && First::Hugz(1).covers(3));
        assert!(!First::Hugz(4).covers(3), "updates 4.. may have gone before the subscription");
        assert!(!First::Hugz(0).covers(0) && !First::Hugz(0).covers(3), "0 says nothing (12/CHP's HUGZ)");
        assert!(First::KvPub(u64::MAX).covers(u64::MAX), "no overflow");
    }

    #[test]
    fn snapshot_pairs_make_the_map_that_applying_them_in_order_makes() {
        let pairs = [("b", "1"), ("a", "1"), ("b", "2"), ("a", ""), ("c", "3"), ("d", ""), ("d", "4")];
        let mut entries = Entries::default();
        let mut model = BTreeMap::new();
        for (k, v) in pairs {
            entries.push(k.as_bytes(), v.as_bytes());
            match v.is_empty() {
                true => model.remove(k.as_bytes()),
                false => model.insert(Bytes::from(k), Bytes::from(v)),
            };
        }
        assert_eq!(entries.into_map(), model);
        assert_eq!(model, map(&[("b", "2"), ("c", "3"), ("d", "4")]));
    }
}
