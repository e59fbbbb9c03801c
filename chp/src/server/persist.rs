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

        pub(in crate::server) async fn finish(&mut self) {
            match *self {}
        }

        pub(in crate::server) fn take_recent_uuids(&mut self) -> Vec<crate::uuid::Uuid> {
            match *self {}
        }
    }
}

#[cfg(feature = "durable")]
mod enabled {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::{Duration, Instant, SystemTime};

    use super::super::ServerState;
    use super::super::view::Shared;
    use bytes::Bytes;

    use crate::durable::{Compaction, Durability, Journal, JournalError, OwnedEntry, Recovered, Update, unix_millis};
    use crate::kvmsg::KvMsg;

    /// A call [`Persist::blocking`] runs on the journal.
    type JournalCall = Box<dyn FnOnce(&mut Journal) -> Result<(), JournalError> + Send>;

    /// The log may grow to this many bytes before a compaction, or to twice the map's size if larger
    /// (replaying a log costs about what writing the map once does).
    const COMPACT_AT_LEAST: u64 = 64 << 20;

    /// Entries per lock of the state while a compaction reads the map.
    const COMPACTION_CHUNK: usize = 4096;
    /// Bytes of keys and values copied out per lock (at least one entry).
    const COMPACTION_CHUNK_BYTES: usize = 1 << 20;

    /// The journal of one running server, and the clock conversion for its deadlines.
    pub(in crate::server) struct Persist {
        journal: Option<Journal>,
        /// The compaction writing its snapshot on the blocking pool, if one runs.
        compacting: Option<tokio::task::JoinHandle<Result<(), JournalError>>>,
        /// The log's size that makes a compaction due, at least (see [`COMPACT_AT_LEAST`]).
        compact_at: u64,
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
            // One reading of both clocks, taken back to back: every conversion between the state's
            // instants and the journal's Unix milliseconds goes through this one pair, so a pause
            // between two readings cannot shift the deadlines.
            let now = Instant::now();
            Ok(Persist::with_journal(journal, recovered, dir, state, now, SystemTime::now()))
        }

        /// [`Persist::open`] once the journal is open, with the clocks read at `now` and
        /// `now_unix` (the same moment).
        fn with_journal(
            journal: Journal,
            recovered: Recovered,
            dir: &Path,
            state: &mut ServerState,
            now: Instant,
            now_unix: SystemTime,
        ) -> Persist {
            let now_unix = unix_millis(now_unix);
            let epoch_unix_ms = now_unix
                .saturating_sub(u64::try_from(now.saturating_duration_since(state.epoch()).as_millis()).unwrap_or(0));
            let mut persist = Persist {
                journal: Some(journal),
                compacting: None,
                compact_at: COMPACT_AT_LEAST,
                dir: dir.to_owned(),
                recent_uuids: Vec::new(),
                epoch_unix_ms,
            };
            persist.load(recovered, state, now, now_unix);
            persist
        }

        /// The UUIDs of the last updates the journal replayed, oldest first (once; see
        /// [`Recovered::recent_uuids`]).
        pub(in crate::server) fn take_recent_uuids(&mut self) -> Vec<crate::uuid::Uuid> {
            std::mem::take(&mut self.recent_uuids)
        }

        fn load(&mut self, mut recovered: Recovered, state: &mut ServerState, now: Instant, now_unix: u64) {
            self.recent_uuids = std::mem::take(&mut recovered.recent_uuids);
            if recovered.truncated_bytes > 0 {
                tracing::warn!(
                    dir = %self.dir.display(),
                    bytes = recovered.truncated_bytes,
                    what = ?recovered.tail_corruption,
                    "journal: cut a torn or damaged tail (the updates in it were never confirmed)"
                );
            }
            // A deadline that passed while the server was down expires at once (and its delete is
            // published and journaled like any other).
            let ttl_of = |at: u64| Duration::from_millis(at.saturating_sub(now_unix));
            let keys = std::mem::take(&mut recovered.entries);
            state.adopt(keys, recovered.sequence, now, ttl_of);
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

        /// Writes what was appended (and fsyncs it, as the durability says). Returns once it is
        /// done. If the log has outgrown the map, it also starts a compaction, which writes its
        /// snapshot in the background (see [`compact_in_background`]).
        pub(in crate::server) async fn commit(&mut self, shared: &Arc<Shared>) -> Result<(), JournalError> {
            self.reap_compaction(false).await;
            let due = self.compacting.is_none() && {
                let log_bytes = self.journal.as_ref().expect("back").log_bytes();
                log_bytes > self.compact_at.max(2 * shared.lock().payload_bytes() as u64)
            };
            // Where the blocking call leaves a compaction it began: only made when one is due, so
            // an ordinary commit allocates nothing for it.
            let begun = due.then(|| Arc::new(std::sync::Mutex::new(None)));
            let slot = begun.clone();
            let result = self
                .blocking(Box::new(move |journal| {
                    journal.commit()?;
                    if let Some(slot) = slot {
                        *slot.lock().unwrap_or_else(|e| e.into_inner()) = journal.begin_compaction()?;
                    }
                    Ok(())
                }))
                .await;
            count(self.journal.as_ref().expect("back"), shared);
            if let Some(compaction) = begun.and_then(|b| b.lock().unwrap_or_else(|e| e.into_inner()).take()) {
                self.compacting = Some(compact_in_background(compaction, shared.clone(), self.epoch_unix_ms));
            }
            result
        }

        /// Takes the result of the running compaction once it has finished (with `wait`, waits
        /// for it). A failed compaction is not the journal's failure: the files it left are the
        /// journal's before it, and the next one tries again.
        async fn reap_compaction(&mut self, wait: bool) {
            if !self.compacting.as_ref().is_some_and(|c| wait || c.is_finished()) {
                return;
            }
            // One log line for a failure and a panic alike (each call site costs the small build).
            let failed = match self.compacting.take().expect("checked").await {
                Ok(Ok(())) => return tracing::debug!(dir = %self.dir.display(), "journal: compacted"),
                Ok(Err(e)) => e.to_string(),
                Err(panicked) => panicked.to_string(),
            };
            tracing::warn!(dir = %self.dir.display(), error = %failed, "journal: compaction failed (will retry)");
        }

        /// Waits for a running compaction (before the server stops, so the next one to open the
        /// directory finds it finished).
        pub(in crate::server) async fn finish(&mut self) {
            self.reap_compaction(true).await;
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
        /// a map that sorts below any other, never a partial one under a good epoch.
        ///
        /// The map is copied out a chunk at a time, each under a short lock (as a compaction reads
        /// it), so snapshot streams and statistics go on while the snapshot is written and
        /// fsynced. That is exact because the map's one writer, the pair's driver, awaits this
        /// call: nothing changes it meanwhile.
        pub(in crate::server) async fn reset(&mut self, shared: &Arc<Shared>, epoch: u64) -> Result<(), JournalError> {
            // A compaction removes files older than its snapshot: never beside a reset.
            self.reap_compaction(true).await;
            let (shared, epoch_unix_ms) = (shared.clone(), self.epoch_unix_ms);
            self.blocking(Box::new(move |journal| {
                journal.set_epoch(0)?;
                let sequence = shared.lock().sequence();
                journal.reset_chunks(sequence, map_chunks(&shared, epoch_unix_ms))?;
                debug_assert_eq!(shared.lock().sequence(), sequence, "the map changed during a reset");
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

    /// Writes the compaction's snapshot on the blocking pool from the map read a chunk at a time
    /// (the state is locked only while a chunk is copied out, so updates and snapshot streams go
    /// on), deadlines converted to Unix milliseconds. The log begun with the compaction holds
    /// every update meanwhile, which makes the fuzzy snapshot exact on replay.
    fn compact_in_background(
        compaction: Compaction,
        shared: Arc<Shared>,
        epoch_unix_ms: u64,
    ) -> tokio::task::JoinHandle<Result<(), JournalError>> {
        tokio::task::spawn_blocking(move || compaction.finish(map_chunks(&shared, epoch_unix_ms)))
    }

    /// The map in key order, a chunk at a time: each chunk is copied out under its own lock of the
    /// state, taken when the chunk is asked for and released before it is returned.
    fn map_chunks(shared: &Shared, epoch_unix_ms: u64) -> impl Iterator<Item = Vec<OwnedEntry>> + '_ {
        let mut after: Option<Bytes> = None;
        std::iter::from_fn(move || {
            let chunk = read_chunk(&shared.lock(), after.as_deref(), epoch_unix_ms);
            after = chunk.last().map(|e| e.key.clone());
            (!chunk.is_empty()).then_some(chunk)
        })
    }

    /// Up to [`COMPACTION_CHUNK`] entries (and about [`COMPACTION_CHUNK_BYTES`]) after `after`,
    /// their deadlines in Unix milliseconds.
    fn read_chunk(state: &ServerState, after: Option<&[u8]>, epoch_unix_ms: u64) -> Vec<OwnedEntry> {
        let mut chunk = state.copy_chunk(after, COMPACTION_CHUNK, COMPACTION_CHUNK_BYTES);
        for e in &mut chunk {
            e.deadline = e.deadline.map(|ms| epoch_unix_ms + ms);
        }
        chunk
    }

    #[cfg(test)]
    mod tests {
        use super::super::super::ServerView;
        use super::*;
        use crate::command::KvSet;

        type Map = Vec<(Vec<u8>, Vec<u8>, Option<u64>)>;

        fn map(state: &ServerState) -> Map {
            state.entries().map(|e| (e.key.to_vec(), e.value.to_vec(), e.deadline)).collect()
        }

        /// [`Persist::open`] on a wall clock that keeps a fixed offset from `Instant`: the tests
        /// compare deadlines across a reopening to the millisecond, which two real clocks read by a
        /// thread the OS may pause between the readings cannot promise.
        fn open(dir: &Path, state: &mut ServerState) -> Persist {
            static START: std::sync::OnceLock<(Instant, SystemTime)> = std::sync::OnceLock::new();
            let (start, start_unix) = *START.get_or_init(|| (Instant::now(), SystemTime::now()));
            let now = Instant::now();
            let (journal, recovered) = Journal::open(dir, Durability::Always).unwrap();
            Persist::with_journal(journal, recovered, dir, state, now, start_unix + (now - start))
        }

        /// An empty durable state in a fresh directory named after `name`: the directory, its
        /// journal, and the state a server would share.
        fn fresh(name: &str) -> (std::path::PathBuf, Persist, Arc<Shared>) {
            let dir = std::env::temp_dir().join(format!("chp-persist-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let mut state = ServerState::new(Instant::now());
            let persist = open(&dir, &mut state);
            let shared = ServerView::serving("127.0.0.1", 5556, state).shared().clone();
            (dir, persist, shared)
        }

        /// The same keys and values, and deadlines equal to the millisecond give or take the
        /// rounding of their round trip through Unix milliseconds.
        fn assert_same_map(before: &Map, after: &Map) {
            assert_eq!(after.len(), before.len());
            for ((k1, v1, d1), (k2, v2, d2)) in before.iter().zip(after) {
                assert_eq!((k1, v1), (k2, v2));
                assert_eq!(d1.is_some(), d2.is_some());
                assert!(d1.zip(*d2).is_none_or(|(a, b)| a.abs_diff(b) <= 2), "{d1:?} {d2:?}");
            }
        }

        /// Applies and commits `n` updates over 300 keys (some with a ttl, some deletes).
        async fn write(persist: &mut Persist, shared: &Arc<Shared>, from: u64, n: u64) {
            for i in from..from + n {
                let mut msg =
                    KvMsg::new(format!("/k/{}", i % 300), if i % 11 == 0 { String::new() } else { format!("v{i}") });
                if i % 7 == 0 {
                    msg.properties.insert("ttl", "3600").unwrap();
                }
                let published = shared.lock().apply(KvSet(msg), Instant::now()).unwrap();
                persist.append(&shared.lock(), &[published]).unwrap();
                persist.commit(shared).await.unwrap();
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_background_compaction_while_updates_go_on_recovers_the_map_and_its_deadlines() {
            let (dir, mut persist, shared) = fresh("compaction");
            write(&mut persist, &shared, 1, 400).await;
            persist.compact_at = 0;
            write(&mut persist, &shared, 401, 1).await; // due: begins one
            assert!(persist.compacting.is_some(), "a compaction runs in the background");
            persist.compact_at = u64::MAX;
            write(&mut persist, &shared, 402, 200).await; // while it runs (or after)
            persist.finish().await;
            assert!(persist.compacting.is_none());
            let (before, sequence) = {
                let state = shared.lock();
                (map(&state), state.sequence())
            };
            drop(persist);

            let mut names: Vec<String> =
                std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            names.sort();
            assert_eq!(names, ["LOCK", &format!("log-{:020}.chp", 401), &format!("snapshot-{:020}.chp", 401)]);
            let epoch = shared.lock().epoch();
            let mut recovered = ServerState::new(epoch);
            let _persist = open(&dir, &mut recovered);
            assert_eq!(recovered.sequence(), sequence);
            assert_same_map(&before, &map(&recovered));
            let _ = std::fs::remove_dir_all(&dir);
        }

        /// A map of `n` keys (every third with a ttl) at sequence `sequence`.
        fn big_map(shared: &Shared, n: usize, sequence: u64) {
            let entries = (0..n).map(|i| crate::server::PeerEntry {
                key: Bytes::from(format!("/big/{i:08}")),
                value: Bytes::from(format!("value {i}")),
                ttl: (i % 3 == 0).then(|| Duration::from_secs(3600 + i as u64)),
            });
            shared.lock().load(entries, sequence, Instant::now());
        }

        #[test]
        fn the_map_is_read_a_chunk_at_a_time_with_the_lock_released_between_chunks() {
            let view = ServerView::serving("127.0.0.1", 5556, ServerState::new(Instant::now()));
            let shared = view.shared().clone();
            big_map(&shared, 3 * COMPACTION_CHUNK + 5, 7);
            let mut read = Vec::new();
            let mut chunks = 0;
            for chunk in map_chunks(&shared, 0) {
                assert!(!shared.is_locked(), "a chunk is handed over with the state unlocked");
                assert!(chunk.len() <= COMPACTION_CHUNK);
                read.extend(chunk.into_iter().map(|e| (e.key.to_vec(), e.value.to_vec(), e.deadline)));
                chunks += 1;
            }
            assert_eq!(chunks, 4);
            assert_eq!(read, map(&shared.lock()));
        }

        /// Prints how long a reader waits for the state at most while a reset writes a map of a
        /// million keys (100 B values), against how long the whole reset takes. Run with
        /// `cargo test --release -p zmtp-chp --lib longest_wait -- --ignored --nocapture`.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "prints timings; not a check"]
        async fn print_the_longest_wait_for_the_state_during_a_reset() {
            let (dir, mut persist, shared) = fresh("reset-wait");
            let value = Bytes::from(vec![b'v'; 100]);
            let entries = (0..1_000_000).map(|i| crate::server::PeerEntry {
                key: Bytes::from(format!("/big/{i:08}")),
                value: value.clone(),
                ttl: None,
            });
            shared.lock().load(entries, 1_000_000, Instant::now());
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let reader = std::thread::spawn({
                let (shared, done) = (shared.clone(), done.clone());
                move || {
                    let mut longest = Duration::ZERO;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let t0 = Instant::now();
                        drop(shared.lock());
                        longest = longest.max(t0.elapsed());
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    longest
                }
            });
            let t0 = Instant::now();
            persist.reset(&shared, 1).await.unwrap();
            let took = t0.elapsed();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            println!(
                "reset of 1M keys took {took:?}; longest wait for the state meanwhile {:?}",
                reader.join().unwrap()
            );
            drop(persist);
            let _ = std::fs::remove_dir_all(&dir);
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_reset_to_an_older_map_written_in_chunks_recovers_it_exactly() {
            let (dir, mut persist, shared) = fresh("reset");
            write(&mut persist, &shared, 1, 50).await; // our own map, at sequence 50
            // The peer's map: more keys than a chunk holds, at an older sequence.
            big_map(&shared, 2 * COMPACTION_CHUNK + 17, 20);
            persist.reset(&shared, 9).await.unwrap();
            let (before, epoch) = {
                let state = shared.lock();
                (map(&state), state.epoch())
            };
            drop(persist);

            let mut recovered = ServerState::new(epoch);
            let persist = open(&dir, &mut recovered);
            assert_eq!((recovered.sequence(), persist.epoch()), (20, 9));
            assert_same_map(&before, &map(&recovered));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
