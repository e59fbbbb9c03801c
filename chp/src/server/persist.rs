//! The server's use of the [journal](crate::durable) (feature `durable`; without it [`Persist`] is
//! a type with no values, so a server can hold none and none of the journal's code is linked):
//! what it appends, when it commits and
//! compacts, and the conversion between the state's deadlines (milliseconds after its epoch, a
//! monotonic instant) and the journal's (wall-clock Unix milliseconds, which survive a restart).
//!
//! The journal does blocking file I/O and fsyncs, so every call that may touch the disk runs on
//! tokio's blocking pool; the journal is moved there and back, which is why it is held in an
//! `Option`. An update is published only after the commit that covers it returns, so under
//! [`Durability::Always`](crate::durable::Durability::Always) every update a client sees (and
//! every `set` it had confirmed) is on disk.

#[cfg(not(feature = "durable"))]
pub(super) use self::disabled::Persist;
#[cfg(feature = "durable")]
pub(super) use self::enabled::Persist;

#[cfg(not(feature = "durable"))]
mod disabled {
    use std::sync::Arc;

    use super::super::ServerState;
    use super::super::view::Shared;
    use crate::durable::JournalError;
    use crate::kvmsg::KvMsg;

    /// No journal can exist in this build: `Option<Persist>` is always `None`.
    pub(in crate::server) enum Persist {}

    impl Persist {
        pub(in crate::server) fn append(&mut self, _: &ServerState, _: &[KvMsg]) -> Result<(), JournalError> {
            match *self {}
        }

        pub(in crate::server) async fn commit(&mut self, _: &Arc<Shared>) -> Result<(), JournalError> {
            match *self {}
        }

        pub(in crate::server) async fn tick(&mut self, _: &Shared) -> Result<(), JournalError> {
            match *self {}
        }

        pub(in crate::server) fn epoch(&self) -> u64 {
            match *self {}
        }

        pub(in crate::server) async fn set_epoch(&mut self, _: u64) -> Result<(), JournalError> {
            match *self {}
        }

        pub(in crate::server) async fn reset(&mut self, _: &Arc<Shared>, _: u64) -> Result<(), JournalError> {
            match *self {}
        }
    }
}

#[cfg(feature = "durable")]
mod enabled {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::{Duration, Instant, SystemTime};

    use super::super::view::Shared;
    use super::super::{PeerEntry, ServerState};
    use crate::durable::{Durability, Journal, JournalError, Recovered, Update, unix_millis};
    use crate::kvmsg::KvMsg;
    use crate::store::Entry;

    /// A call [`Persist::blocking`] runs on the journal.
    type JournalCall = Box<dyn FnOnce(&mut Journal) -> Result<(), JournalError> + Send>;

    /// The log may grow to this many bytes before a compaction, or to twice the map's size if larger
    /// (replaying a log costs about what writing the map once does).
    const COMPACT_AT_LEAST: u64 = 64 << 20;

    /// The journal of one running server, and the clock conversion for its deadlines.
    pub(in crate::server) struct Persist {
        journal: Option<Journal>,
        dir: PathBuf,
        /// What the log's tail said was published last, until a pair takes it.
        recent_uuids: Vec<crate::uuid::Uuid>,
        /// The state's epoch in Unix milliseconds.
        epoch_unix_ms: u64,
    }

    impl Persist {
        /// Opens (or creates) `dir` and loads what it holds into `state`: the map, its deadlines and
        /// its sequence. Blocking: call from the blocking pool.
        pub(in crate::server) fn open(
            dir: &Path,
            durability: Durability,
            state: &mut ServerState,
        ) -> Result<Persist, JournalError> {
            let (journal, recovered) = Journal::open(dir, durability)?;
            let now = Instant::now();
            let epoch_unix_ms = unix_millis(SystemTime::now())
                .saturating_sub(u64::try_from(now.saturating_duration_since(state.epoch()).as_millis()).unwrap_or(0));
            let mut persist =
                Persist { journal: Some(journal), dir: dir.to_owned(), recent_uuids: Vec::new(), epoch_unix_ms };
            persist.load(recovered, state, now);
            Ok(persist)
        }

        /// The UUIDs of the last updates the journal replayed, oldest first (once; see
        /// [`Recovered::recent_uuids`]).
        pub(in crate::server) fn take_recent_uuids(&mut self) -> Vec<crate::uuid::Uuid> {
            std::mem::take(&mut self.recent_uuids)
        }

        fn load(&mut self, mut recovered: Recovered, state: &mut ServerState, now: Instant) {
            self.recent_uuids = std::mem::take(&mut recovered.recent_uuids);
            if recovered.truncated_bytes > 0 {
                tracing::warn!(
                    dir = %self.dir.display(),
                    bytes = recovered.truncated_bytes,
                    what = ?recovered.tail_corruption,
                    "journal: cut a torn or damaged tail (the updates in it were never confirmed)"
                );
            }
            let now_unix = unix_millis(SystemTime::now());
            let entries = recovered.entries.iter().map(|e| PeerEntry {
                key: bytes::Bytes::copy_from_slice(e.key),
                value: bytes::Bytes::copy_from_slice(e.value),
                // A deadline that passed while the server was down expires at once (and its delete is
                // published and journaled like any other).
                ttl: e.deadline.map(|at| Duration::from_millis(at.saturating_sub(now_unix))),
            });
            state.load(entries, recovered.sequence, now);
            tracing::info!(
                dir = %self.dir.display(),
                sequence = recovered.sequence,
                keys = state.len(),
                replayed = recovered.updates_replayed,
                "journal: map recovered"
            );
        }

        /// Buffers `updates` (just applied to `state`, in sequence order) for the next commit.
        pub(in crate::server) fn append(&mut self, state: &ServerState, updates: &[KvMsg]) -> Result<(), JournalError> {
            let journal = self.journal.as_mut().expect("journal is back from the blocking pool");
            for msg in updates {
                let deadline =
                    state.deadline_of(&msg.key).filter(|_| !msg.is_delete()).map(|ms| self.epoch_unix_ms + ms);
                journal.append(&Update { msg: msg.clone(), deadline })?;
            }
            Ok(())
        }

        /// Writes what was appended (and fsyncs it, as the durability says), then compacts if the log
        /// has outgrown the map. Returns once it is done.
        pub(in crate::server) async fn commit(&mut self, shared: &Arc<Shared>) -> Result<(), JournalError> {
            let for_compaction = shared.clone();
            let epoch_unix_ms = self.epoch_unix_ms;
            let result = self
                .blocking(Box::new(move |journal| {
                    journal.commit().and_then(|()| compact_if_due(journal, &for_compaction, epoch_unix_ms))
                }))
                .await;
            count(self.journal.as_ref().expect("back"), shared);
            result
        }

        /// The epoch stored with the map (a pair server's; see `server::ha`).
        pub(in crate::server) fn epoch(&self) -> u64 {
            self.journal.as_ref().expect("journal is back from the blocking pool").epoch()
        }

        /// Stores `epoch` durably before returning.
        pub(in crate::server) async fn set_epoch(&mut self, epoch: u64) -> Result<(), JournalError> {
            self.blocking(Box::new(move |journal| journal.set_epoch(epoch))).await
        }

        /// Replaces the journal with the map `shared` holds now (a pair server that took its
        /// peer's, or kept part of one), even at an older sequence than the journal's, labelled
        /// `epoch`. The epoch is set to 0 first and to `epoch` last, so a crash in between leaves
        /// a map that sorts below any other, never a partial one under a good epoch. The state
        /// stays locked while it is written, as in a compaction.
        pub(in crate::server) async fn reset(&mut self, shared: &Arc<Shared>, epoch: u64) -> Result<(), JournalError> {
            let (shared, epoch_unix_ms) = (shared.clone(), self.epoch_unix_ms);
            self.blocking(Box::new(move |journal| {
                journal.set_epoch(0)?;
                {
                    let state = shared.lock();
                    let entries =
                        state.entries().map(|e| Entry { deadline: e.deadline.map(|ms| epoch_unix_ms + ms), ..e });
                    journal.reset(state.sequence(), entries)?;
                }
                journal.set_epoch(epoch)
            }))
            .await
        }

        /// Runs `f` on the journal on tokio's blocking pool. One boxed type for every call, so the
        /// blocking task's code is in the binary once (each closure type was a copy: the size-
        /// limited static build counts).
        async fn blocking(&mut self, f: JournalCall) -> Result<(), JournalError> {
            let mut journal = self.journal.take().expect("one call at a time");
            let (journal, result) = tokio::task::spawn_blocking(move || {
                let result = f(&mut journal);
                (journal, result)
            })
            .await
            .expect("journal call panicked");
            self.journal = Some(journal);
            result
        }

        /// Under [`Durability::Interval`]: fsyncs if the interval has passed since writes were made.
        pub(in crate::server) async fn tick(&mut self, shared: &Shared) -> Result<(), JournalError> {
            if !self.journal.as_ref().is_some_and(|j| j.needs_sync(Instant::now())) {
                return Ok(());
            }
            let result = self.blocking(Box::new(|journal| journal.tick(Instant::now()).map(drop))).await;
            count(self.journal.as_ref().expect("back"), shared);
            result
        }
    }

    /// The journal's counters, in the server's stats.
    fn count(journal: &Journal, shared: &Shared) {
        shared.stats.journal_syncs.set(journal.sync_count());
        shared.stats.journal_bytes.set(journal.log_bytes());
    }

    /// Writes the map as a new snapshot once the log is larger than [`COMPACT_AT_LEAST`] and twice
    /// the map. The state stays locked while it is written (snapshot streams wait; about 0.2 s per
    /// million keys measured).
    fn compact_if_due(journal: &mut Journal, shared: &Shared, epoch_unix_ms: u64) -> Result<(), JournalError> {
        let state = shared.lock();
        let due = journal.log_bytes() > COMPACT_AT_LEAST.max(2 * state.payload_bytes() as u64);
        if !due {
            return Ok(());
        }
        let entries = state.entries().map(|e| Entry { deadline: e.deadline.map(|ms| epoch_unix_ms + ms), ..e });
        journal.compact(state.sequence(), entries)
    }
}
