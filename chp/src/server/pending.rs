//! The bookkeeping a server of a high-availability pair keeps about client updates: the *pending
//! list* (updates a client sent to this server that the active has not published yet) and the
//! *published set* (updates recently published, by the active peer or by this server). Pure logic,
//! no sockets, no clock of its own: every method takes the current `Instant`.
//!
//! Clients publish every KVSET to both servers. While passive, a server holds each one on the
//! pending list until the same update comes back on the active's publisher; on promotion it
//! replays what is still pending (the updates the active never published) with new sequences.
//! The reference (the Guide's `clonesrv6`) gets this wrong in several ways; here:
//!
//! - **Matching is by identity in both orders.** An update is identified by its UUID, or — for the
//!   UUID-less updates 12/CHP allows — by a hash of key, properties and value ([`Ident`]), so empty
//!   UUIDs neither crash nor all match each other. An update published by the active *before* the
//!   client's copy reaches the passive is remembered, and the late copy is dropped instead of
//!   staying pending (and being replayed: a duplicate after takeover).
//! - **Entries that never match do not stay forever.** An entry still pending after
//!   [`PendingConfig::window`] *of the active being heard from* is dropped: the active had its
//!   chance and did not publish it (its client's link to the active is down, say), and replaying
//!   it at a later takeover could overwrite a newer value. The window is measured against the last
//!   time the active was heard, so entries that arrive around the active's death are kept however
//!   long the takeover takes. Entries that arrived before this server's snapshot of the active was
//!   requested are dropped when that snapshot completes ([`Pending::discard_before`]).
//! - **No duplicates after takeover.** The published set is kept for
//!   [`PendingConfig::remember`] (and at most [`PendingConfig::remember_capacity`] entries): once
//!   active, a KVSET whose UUID is in it — a client retransmitting an update the old active had
//!   already published, or one just replayed — is dropped ([`Pending::is_duplicate`]).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use chp::kvmsg::KvMsg;
//! use chp::server::pending::{Held, Pending, PendingConfig};
//!
//! let t0 = Instant::now();
//! let mut pending = Pending::new(PendingConfig::default());
//! let mut update = KvMsg::new("/k", "v");
//! update.uuid = Some(chp::Uuid::new_v4());
//!
//! // The client's copy arrives first: held; then the active publishes it: matched, gone.
//! assert_eq!(pending.hold(update.clone(), t0), Held::Queued);
//! assert!(pending.published(&update, t0));
//! assert_eq!(pending.len(), 0);
//! // A retransmitted copy arriving later is recognised as already published.
//! assert_eq!(pending.hold(update.clone(), t0), Held::AlreadyPublished);
//! assert!(pending.is_duplicate(&update));
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::uuid::Uuid;

use crate::kvmsg::KvMsg;

/// How an update is recognised when it comes back from the active server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ident {
    /// By its UUID (what every client of this crate sends).
    Uuid(Uuid),
    /// A UUID-less update, by a hash of key, properties and value.
    Content(u64),
}

impl Ident {
    /// The identity of `msg`.
    pub fn of(msg: &KvMsg) -> Ident {
        match msg.uuid {
            Some(uuid) => Ident::Uuid(uuid),
            None => {
                // FNV-1a over length-prefixed parts: the same on both servers, whatever they were
                // built with.
                let mut h = Fnv(0xcbf2_9ce4_8422_2325);
                for part in [&msg.key[..], msg.properties.encode().as_bytes(), &msg.body[..]] {
                    h.write(&(part.len() as u64).to_be_bytes());
                    h.write(part);
                }
                Ident::Content(h.0)
            }
        }
    }
}

struct Fnv(u64);

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Limits of the pending list and the published set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingConfig {
    /// A pending entry is dropped once the active has been heard from this long after it arrived
    /// without publishing it. Default 5 s.
    pub window: Duration,
    /// How long a published update is remembered (to drop late copies and retransmits). Default 30 s.
    pub remember: Duration,
    /// At most this many published updates are remembered (the oldest are forgotten first).
    /// Default 262 144.
    pub remember_capacity: usize,
    /// At most this many entries are pending (the oldest are dropped first). Default 1 000 000.
    pub limit: usize,
}

impl Default for PendingConfig {
    fn default() -> Self {
        PendingConfig {
            window: Duration::from_secs(5),
            remember: Duration::from_secs(30),
            remember_capacity: 1 << 18,
            limit: 1_000_000,
        }
    }
}

/// What [`Pending::hold`] did with a client's update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Put on the pending list.
    Queued,
    /// Dropped: the active has already published it (the client's copy came late, or is a
    /// retransmit).
    AlreadyPublished,
    /// Dropped: the same UUID is already pending (a retransmit).
    AlreadyPending,
}

/// Counters since creation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingStats {
    /// Client updates put on the pending list.
    pub held: u64,
    /// Pending entries matched by the active's publication.
    pub matched: u64,
    /// Client copies dropped because the active had already published them.
    pub late_copies: u64,
    /// Pending entries dropped because the active never published them within the window, or
    /// because they predate this server's snapshot of the active.
    pub pruned: u64,
    /// Pending entries dropped because the list was full.
    pub overflowed: u64,
    /// Entries handed out for replay at promotion.
    pub replayed: u64,
}

#[derive(Debug)]
struct Entry {
    ident: Ident,
    msg: KvMsg,
    arrived: Instant,
}

/// The pending list and the published set (see the [module docs](self)).
#[derive(Debug)]
pub struct Pending {
    config: PendingConfig,
    next: u64,
    /// By arrival number, so in arrival order.
    entries: BTreeMap<u64, Entry>,
    /// Arrival numbers per identity, oldest first (UUID-less updates may repeat).
    index: HashMap<Ident, VecDeque<u64>>,
    recent: VecDeque<(Instant, Ident)>,
    recent_count: HashMap<Ident, u32>,
    stats: PendingStats,
}

impl Pending {
    /// An empty list.
    pub fn new(config: PendingConfig) -> Pending {
        Pending {
            config,
            next: 0,
            entries: BTreeMap::new(),
            index: HashMap::new(),
            recent: VecDeque::new(),
            recent_count: HashMap::new(),
            stats: PendingStats::default(),
        }
    }

    /// The limits.
    pub fn config(&self) -> &PendingConfig {
        &self.config
    }

    /// Number of pending entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of published updates remembered.
    pub fn remembered(&self) -> usize {
        self.recent.len()
    }

    /// Counters.
    pub fn stats(&self) -> PendingStats {
        self.stats
    }

    /// A client's update arrived at `now` on a server that is not active.
    pub fn hold(&mut self, msg: KvMsg, now: Instant) -> Held {
        let ident = Ident::of(&msg);
        if let Some(count) = self.recent_count.get_mut(&ident) {
            // A UUID stays remembered (retransmits carry it again); a UUID-less copy pairs off with
            // one publication.
            if let Ident::Content(_) = ident {
                *count -= 1;
                if *count == 0 {
                    self.recent_count.remove(&ident);
                }
            }
            self.stats.late_copies += 1;
            return Held::AlreadyPublished;
        }
        if matches!(ident, Ident::Uuid(_)) && self.index.contains_key(&ident) {
            return Held::AlreadyPending;
        }
        let n = self.next;
        self.next += 1;
        self.entries.insert(n, Entry { ident, msg, arrived: now });
        self.index.entry(ident).or_default().push_back(n);
        self.stats.held += 1;
        while self.entries.len() > self.config.limit {
            self.pop_oldest();
            self.stats.overflowed += 1;
        }
        Held::Queued
    }

    /// The active published `msg` (seen on its publisher at `now`): removes the matching pending
    /// entry, if any (returns true), and remembers the update as published.
    pub fn published(&mut self, msg: &KvMsg, now: Instant) -> bool {
        let ident = Ident::of(msg);
        let matched = self.take(&ident);
        if matched {
            self.stats.matched += 1;
        }
        // A matched UUID-less copy has paired off; anything else may still see copies arrive.
        if !(matched && matches!(ident, Ident::Content(_))) {
            self.remember(ident, now);
        }
        matched
    }

    /// This server, active, published `msg`: remember its UUID so a retransmit is recognised.
    pub fn record(&mut self, msg: &KvMsg, now: Instant) {
        if let Some(uuid) = msg.uuid {
            self.remember(Ident::Uuid(uuid), now);
        }
    }

    /// An update with this UUID was published before this server started (its journal says so):
    /// remembered as [`record`](Self::record) does, from `now`.
    pub fn record_uuid(&mut self, uuid: Uuid, now: Instant) {
        self.remember(Ident::Uuid(uuid), now);
    }

    /// True when `msg` carries a UUID that was published recently (by this server or the active
    /// it took over from): an active server drops such a KVSET rather than publish it twice.
    pub fn is_duplicate(&self, msg: &KvMsg) -> bool {
        msg.uuid.is_some_and(|u| self.recent_count.contains_key(&Ident::Uuid(u)))
    }

    /// The active was heard at `heard`: drops entries that arrived more than the window before.
    /// Returns how many were dropped.
    pub fn prune(&mut self, heard: Instant) -> usize {
        match heard.checked_sub(self.config.window) {
            Some(cutoff) => self.discard_before(cutoff),
            None => 0,
        }
    }

    /// Drops entries that arrived before `cutoff` (e.g. before this server asked the active for
    /// its snapshot: their effect is in the snapshot, or the active never had them). Returns how
    /// many were dropped.
    pub fn discard_before(&mut self, cutoff: Instant) -> usize {
        let mut dropped = 0;
        while self.entries.first_key_value().is_some_and(|(_, e)| e.arrived < cutoff) {
            self.pop_oldest();
            dropped += 1;
        }
        self.stats.pruned += dropped as u64;
        dropped
    }

    /// Empties the pending list for replay at promotion, in arrival order.
    pub fn take_all(&mut self) -> Vec<KvMsg> {
        self.index.clear();
        let all: Vec<KvMsg> = std::mem::take(&mut self.entries).into_values().map(|e| e.msg).collect();
        self.stats.replayed += all.len() as u64;
        all
    }

    /// Forgets published updates older than [`PendingConfig::remember`] at `now`.
    pub fn forget(&mut self, now: Instant) {
        let Some(cutoff) = now.checked_sub(self.config.remember) else { return };
        while self.recent.front().is_some_and(|(at, _)| *at < cutoff) {
            self.forget_oldest();
        }
    }

    fn remember(&mut self, ident: Ident, now: Instant) {
        self.recent.push_back((now, ident));
        *self.recent_count.entry(ident).or_insert(0) += 1;
        while self.recent.len() > self.config.remember_capacity {
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        if let Some((_, ident)) = self.recent.pop_front()
            && let Some(count) = self.recent_count.get_mut(&ident)
        {
            *count -= 1;
            if *count == 0 {
                self.recent_count.remove(&ident);
            }
        }
    }

    /// Removes the oldest pending entry with this identity.
    fn take(&mut self, ident: &Ident) -> bool {
        let Some(queue) = self.index.get_mut(ident) else { return false };
        let n = queue.pop_front();
        if queue.is_empty() {
            self.index.remove(ident);
        }
        n.and_then(|n| self.entries.remove(&n)).is_some()
    }

    fn pop_oldest(&mut self) {
        if let Some((_, entry)) = self.entries.pop_first() {
            self.take_index_front(&entry.ident);
        }
    }

    fn take_index_front(&mut self, ident: &Ident) {
        if let Some(queue) = self.index.get_mut(ident) {
            queue.pop_front();
            if queue.is_empty() {
                self.index.remove(ident);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(key: &'static str, value: &'static str, uuid: bool) -> KvMsg {
        let mut m = KvMsg::new(key, value);
        if uuid {
            m.uuid = Some(Uuid::new_v4());
        }
        m
    }

    fn config(window_ms: u64) -> PendingConfig {
        PendingConfig { window: Duration::from_millis(window_ms), ..PendingConfig::default() }
    }

    #[test]
    fn client_first_then_active_matches_and_late_copies_are_dropped() {
        let t0 = Instant::now();
        let mut p = Pending::new(config(1000));
        let a = update("/a", "1", true);
        let b = update("/b", "2", true);
        assert_eq!(p.hold(a.clone(), t0), Held::Queued);
        assert_eq!(p.hold(a.clone(), t0), Held::AlreadyPending, "a retransmit is held once");
        assert!(p.published(&a, t0));
        // Active first: remembered, the client's copy is dropped when it comes.
        assert!(!p.published(&b, t0));
        assert_eq!(p.hold(b.clone(), t0), Held::AlreadyPublished);
        assert_eq!(p.hold(b.clone(), t0), Held::AlreadyPublished, "and every retransmit");
        assert!(p.is_empty());
        assert!(p.take_all().is_empty());
        assert!(p.is_duplicate(&a) && p.is_duplicate(&b));
        assert_eq!(p.stats().matched, 1);
        assert_eq!(p.stats().late_copies, 2);
    }

    #[test]
    fn empty_uuids_match_by_content_and_pair_off_one_to_one() {
        let t0 = Instant::now();
        let mut p = Pending::new(config(1000));
        let x = update("/x", "1", false);
        let y = update("/x", "2", false);
        // Two identical UUID-less updates and a different one.
        assert_eq!(p.hold(x.clone(), t0), Held::Queued);
        assert_eq!(p.hold(x.clone(), t0), Held::Queued);
        assert_eq!(p.hold(y.clone(), t0), Held::Queued);
        assert!(p.published(&x, t0));
        assert_eq!(p.len(), 2);
        // Active first for a UUID-less update: the one late copy pairs off, a second is new.
        let z = update("/z", "", false);
        assert!(!p.published(&z, t0));
        assert_eq!(p.hold(z.clone(), t0), Held::AlreadyPublished);
        assert_eq!(p.hold(z.clone(), t0), Held::Queued);
        // Nothing UUID-less is ever a duplicate for the active (repeats are legitimate).
        assert!(!p.is_duplicate(&z));
        let replay: Vec<_> = p.take_all().into_iter().map(|m| (m.key, m.body)).collect();
        assert_eq!(replay, vec![("/x".into(), "1".into()), ("/x".into(), "2".into()), ("/z".into(), "".into())]);
    }

    #[test]
    fn entries_never_matched_are_pruned_relative_to_the_active_being_heard() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pending::new(config(500));
        let old = update("/old", "1", true);
        let new = update("/new", "2", true);
        p.hold(old, t0);
        p.hold(new.clone(), t0 + ms(400));
        assert_eq!(p.prune(t0 + ms(499)), 0);
        assert_eq!(p.prune(t0 + ms(501)), 1);
        assert_eq!(p.len(), 1);
        // The active dies: nothing is heard any more, so the last entry is kept however long the
        // takeover takes; it is replayed.
        let replay = p.take_all();
        assert_eq!(replay, vec![new]);
        assert_eq!(p.stats().pruned, 1);
        assert_eq!(p.stats().replayed, 1);
    }

    #[test]
    fn discard_before_a_snapshot_and_limits() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut p = Pending::new(PendingConfig { limit: 2, remember_capacity: 2, ..config(1000) });
        p.hold(update("/1", "1", true), t0);
        p.hold(update("/2", "2", true), t0 + ms(10));
        p.hold(update("/3", "3", true), t0 + ms(20));
        assert_eq!((p.len(), p.stats().overflowed), (2, 1));
        assert_eq!(p.discard_before(t0 + ms(15)), 1);
        assert_eq!(p.take_all()[0].key, "/3");
        // The published set keeps the newest `remember_capacity`, and forgets by age.
        let (a, b, c) = (update("/a", "", true), update("/b", "", true), update("/c", "", true));
        p.record(&a, t0);
        p.record(&b, t0 + ms(10));
        p.record(&c, t0 + ms(20));
        assert!(!p.is_duplicate(&a) && p.is_duplicate(&b) && p.is_duplicate(&c));
        p.forget(t0 + Duration::from_secs(30) + ms(15));
        assert!(!p.is_duplicate(&b) && p.is_duplicate(&c));
        assert_eq!(p.remembered(), 1);
    }
}
