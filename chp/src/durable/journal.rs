//! The journal: appends and commits updates to the log, and compacts the log into a snapshot.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::files;
use super::recovery::{Recovered, recover};
use super::snapshot::{self, Chunks, Entries, Source};
use super::{Durability, JournalError, Update};
use crate::store::{Entry, OwnedEntry};

/// The server's map on disk: a snapshot and a log of the updates after it (see the
/// [module docs](super)). Synchronous and socket-free; the caller owns the clock.
///
/// ```
/// use chp::KvMsg;
/// use chp::durable::{Durability, Journal, Update};
///
/// let dir = std::env::temp_dir().join(format!("chp-journal-doc-{}", std::process::id()));
/// let (mut journal, recovered) = Journal::open(&dir, Durability::Always).unwrap();
/// assert_eq!(recovered.sequence, 0);
/// let mut msg = KvMsg::new("/a", "1");
/// msg.sequence = 1;
/// journal.append(&Update { msg, deadline: None }).unwrap();
/// journal.commit().unwrap(); // one fsync for everything appended since the last commit
/// drop(journal);
///
/// let (_, recovered) = Journal::open(&dir, Durability::Always).unwrap();
/// assert_eq!((recovered.sequence, recovered.entries.get(b"/a").unwrap().value), (1, &b"1"[..]));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct Journal {
    /// The directory's lock, held while the journal is open (and while a compaction it began
    /// runs: a second journal must not open the directory under it).
    lock: Arc<DirLock>,
    /// See [`Journal::epoch`].
    epoch: u64,
    dir: PathBuf,
    durability: Durability,
    log: File,
    /// Sequence of the snapshot the log continues (names both files).
    base: u64,
    /// Bytes written to the log (not counting `pending`).
    log_len: u64,
    /// Records appended, not yet written.
    pending: Vec<u8>,
    /// The last sequence appended or recovered.
    sequence: u64,
    /// Written but not fsynced.
    unsynced: bool,
    last_sync: Option<Instant>,
    syncs: u64,
    /// A write or fsync failed: what is on disk is unknown.
    broken: bool,
}

/// The name of the lock file in a journal's directory.
pub const LOCK_FILE: &str = "LOCK";

/// Creates `dir` and takes its lock file ([`LOCK_FILE`]) for as long as the returned file is
/// open: a second journal on the same directory, in this process or another, would interleave its
/// records and compactions with ours. The OS drops the lock when the process dies (SIGKILL
/// included), so a crash leaves no stale lock to clear by hand.
fn lock(dir: &Path) -> Result<DirLock, JournalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| JournalError::Io { path, source }
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io(&path))?;
    match file.try_lock() {
        Ok(()) => Ok(DirLock(file)),
        Err(fs::TryLockError::WouldBlock) => Err(JournalError::Locked { dir: dir.to_path_buf() }),
        Err(fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {
            tracing::warn!(dir = %dir.display(), "file locks are not supported here: nothing stops a second server on this directory");
            Ok(DirLock(file))
        }
        Err(fs::TryLockError::Error(e)) => Err(io(&path)(e)),
    }
}

/// A directory's lock file, locked; unlocked explicitly when dropped. Closing our descriptor is
/// not enough: a child process this process forks (a test's `Command`, a user's) shares the
/// descriptor until its `exec`, and the lock belongs to the open file, so it would outlive our
/// close by that window and refuse a journal reopened at once (seen in CI).
#[derive(Debug)]
struct DirLock(File);

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// How far [`Journal::compact_through`] goes: each step is a point a crash can stop at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum CompactStep {
    /// The new snapshot is written and fsynced under its temporary name.
    WriteTemp,
    /// It has its real name, and the directory is fsynced.
    Rename,
    /// The new, empty log exists and the journal appends to it.
    NewLog,
    /// The old snapshot is gone.
    RemoveOldSnapshot,
    /// The old log is gone: done.
    RemoveOldLog,
}

impl Journal {
    /// A second descriptor for the lock file (what a forked child holds until its exec).
    #[cfg(test)]
    pub(crate) fn lock_file_copy(&self) -> File {
        self.lock.0.try_clone().expect("dup")
    }

    /// Opens (creating if need be) the journal in `dir` and recovers its map: the newest snapshot,
    /// then every valid log record after it. A torn or damaged tail of the log is cut off (see
    /// [`Recovered::truncated_bytes`]); a damaged snapshot is an error. Leftovers of an
    /// interrupted [`compact`](Self::compact) are removed.
    ///
    /// One process at a time: two journals on one directory would corrupt each other.
    pub fn open(dir: impl AsRef<Path>, durability: Durability) -> Result<(Journal, Recovered), JournalError> {
        let dir = dir.as_ref().to_path_buf();
        let lock = lock(&dir)?;
        let opened = recover(&dir)?;
        let epoch = files::read_epoch(&dir)?;
        let journal = Journal {
            lock: Arc::new(lock),
            epoch,
            dir,
            durability,
            log: opened.log,
            base: opened.base,
            log_len: opened.log_len,
            pending: Vec::new(),
            sequence: opened.recovered.sequence,
            unsynced: false,
            last_sync: None,
            syncs: 0,
            broken: false,
        };
        Ok((journal, opened.recovered))
    }

    /// Adds `update` to the next commit (nothing is written yet). Its sequence must be above the
    /// last one appended or recovered.
    pub fn append(&mut self, update: &Update) -> Result<(), JournalError> {
        self.usable()?;
        if update.msg.sequence <= self.sequence {
            return Err(JournalError::SequenceNotIncreasing { last: self.sequence, got: update.msg.sequence });
        }
        update.encode(&mut self.pending)?;
        self.sequence = update.msg.sequence;
        Ok(())
    }

    /// Writes what was appended and, under [`Durability::Always`], fsyncs it before returning.
    pub fn commit(&mut self) -> Result<(), JournalError> {
        self.write_pending()?;
        if self.durability == Durability::Always && self.unsynced {
            self.sync_log()?;
        }
        Ok(())
    }

    /// Writes what was appended and fsyncs it, whatever the durability (before a shutdown).
    pub fn sync(&mut self) -> Result<(), JournalError> {
        self.write_pending()?;
        if self.unsynced {
            self.sync_log()?;
        }
        Ok(())
    }

    /// Under [`Durability::Interval`]: whether committed records wait for an fsync and the last
    /// one was at least an interval before `now`.
    pub fn needs_sync(&self, now: Instant) -> bool {
        match self.durability {
            Durability::Interval(interval) => {
                self.unsynced && self.last_sync.is_none_or(|at| now.saturating_duration_since(at) >= interval)
            }
            Durability::Always | Durability::Never => false,
        }
    }

    /// Fsyncs if [`needs_sync`](Self::needs_sync); returns whether it did. Call it at least once
    /// per interval.
    pub fn tick(&mut self, now: Instant) -> Result<bool, JournalError> {
        if !self.needs_sync(now) {
            return Ok(false);
        }
        self.sync_log()?;
        self.last_sync = Some(now);
        Ok(true)
    }

    /// Replaces snapshot and log with a snapshot of `entries`, the whole map at `sequence`
    /// (deadlines in Unix milliseconds), and an empty log. `sequence` must cover every update
    /// appended; what was appended and not committed is written and fsynced first.
    ///
    /// Crash-safe at every step: until the new snapshot's rename is on disk, recovery finds the
    /// old snapshot and the (fsynced) log, which hold the same map; after it, the new snapshot,
    /// and it finishes the clean-up. If this fails after the rename, the journal is
    /// [`Broken`](JournalError::Broken) and must be reopened.
    pub fn compact<'a>(
        &mut self,
        sequence: u64,
        entries: impl IntoIterator<Item = Entry<'a>>,
    ) -> Result<(), JournalError> {
        self.compact_through(sequence, Entries(entries), CompactStep::RemoveOldLog)
    }

    /// Replaces everything with a snapshot of `entries` at `sequence`, which may be below what
    /// was appended: for a server that takes its peer's map in place of its own. What was
    /// appended and not committed is dropped. At or above the last sequence this is
    /// [`compact`](Self::compact), crash-safe at every step; below it the old files are removed
    /// first (recovery takes the newest snapshot, which would be the old one), so a crash in the
    /// middle can leave an empty journal at sequence 0 — for a server copying its peer's map,
    /// which the peer still holds, no worse than the copy it was replacing.
    pub fn reset<'a>(
        &mut self,
        sequence: u64,
        entries: impl IntoIterator<Item = Entry<'a>>,
    ) -> Result<(), JournalError> {
        self.reset_from(sequence, Entries(entries))
    }

    /// [`reset`](Self::reset) from `chunks` of the map in key order, each copied out when the
    /// writer asks for it: a caller that locks its map only while it copies a chunk keeps the map
    /// in use while the snapshot is written and fsynced. The map must not change in between (the
    /// snapshot would not be the map at `sequence`).
    pub fn reset_chunks(
        &mut self,
        sequence: u64,
        chunks: impl IntoIterator<Item = Vec<OwnedEntry>>,
    ) -> Result<(), JournalError> {
        self.reset_from(sequence, Chunks(chunks))
    }

    fn reset_from(&mut self, sequence: u64, source: impl Source) -> Result<(), JournalError> {
        self.usable()?;
        self.pending.clear();
        if sequence < self.sequence {
            let io = |path: &Path| {
                let path = path.to_path_buf();
                move |source| JournalError::Io { path, source }
            };
            // Logs first: a log whose snapshot is gone stops recovery (MissingSnapshot); a snapshot
            // whose log is gone is a map at that snapshot's sequence.
            let listing = files::list(&self.dir).map_err(io(&self.dir))?;
            for s in listing.logs {
                let path = files::log_path(&self.dir, s);
                files::remove(&path).map_err(io(&path))?;
            }
            files::sync_dir(&self.dir).map_err(io(&self.dir))?;
            for s in listing.snapshots {
                let path = files::snapshot_path(&self.dir, s);
                files::remove(&path).map_err(io(&path))?;
            }
            files::sync_dir(&self.dir).map_err(io(&self.dir))?;
            // Nothing is on disk now: the snapshot below starts from scratch.
            (self.sequence, self.base, self.unsynced) = (sequence, u64::MAX, false);
            let result = self.compact_through(sequence, source, CompactStep::RemoveOldLog);
            // Appending to the old log's (removed) file would lose updates.
            self.broken |= result.is_err();
            return result;
        }
        self.compact_through(sequence, source, CompactStep::RemoveOldLog)
    }

    /// The epoch stored beside the map (0 if none was): a pair server's count of promotions, so
    /// two servers' journals can be ordered (see `server::ha`).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Stores `epoch` durably (temp file, fsync, rename, directory fsync) before returning.
    pub fn set_epoch(&mut self, epoch: u64) -> Result<(), JournalError> {
        self.usable()?;
        files::write_epoch(&self.dir, epoch)?;
        self.epoch = epoch;
        Ok(())
    }

    /// [`compact`](Self::compact) up to and including `last`: the tests stop here to leave the
    /// files as a crash after that step would.
    pub(crate) fn compact_through(
        &mut self,
        sequence: u64,
        source: impl Source,
        last: CompactStep,
    ) -> Result<(), JournalError> {
        self.usable()?;
        if sequence < self.sequence {
            return Err(JournalError::CompactBehind { snapshot: sequence, appended: self.sequence });
        }
        // The old snapshot and log must hold the map at `sequence` until the new snapshot is in.
        self.sync()?;
        let temp = files::temp_path(&self.dir, sequence);
        write_snapshot(&temp, sequence, source)?;
        if last == CompactStep::WriteTemp {
            return Ok(());
        }
        let snapshot = files::snapshot_path(&self.dir, sequence);
        fs::rename(&temp, &snapshot).map_err(|source| JournalError::Io { path: temp.clone(), source })?;
        self.sequence = sequence;
        let old = self.base;
        if let Err(e) = self.switch_log(sequence, last) {
            // The new snapshot may be what recovery finds: appending to the old log would lose
            // updates.
            self.broken = true;
            return Err(e);
        }
        if last <= CompactStep::NewLog || old == sequence {
            return Ok(());
        }
        remove_superseded(&self.dir, sequence, last)
    }

    /// Starts a compaction that lets appends go on while it runs: the log is fsynced and a new
    /// one started at the last sequence `S` (what is appended from now on goes there), and the
    /// returned [`Compaction`] writes the snapshot at `S` — from the map read a chunk at a time,
    /// each key at `S` or later — wherever the caller runs it, then retires the files it
    /// supersedes. `None` when nothing was appended since the last compaction.
    ///
    /// Crash-safe at every step: until the snapshot is renamed into place, recovery replays the
    /// old snapshot, the old log and the new one in turn; after, the new snapshot and the new
    /// log. A fuzzy snapshot is exact once the new log is replayed on it: every update after `S`
    /// is in the log, in order, and each key's last one wins.
    pub fn begin_compaction(&mut self) -> Result<Option<Compaction>, JournalError> {
        self.usable()?;
        if self.sequence == self.base {
            return Ok(None);
        }
        // The old log must hold everything up to `S` before a log after `S` exists.
        self.sync()?;
        let sequence = self.sequence;
        let log = create_log(&files::log_path(&self.dir, sequence))?;
        if let Err(source) = files::sync_dir(&self.dir) {
            // The new log's name may not be durable: appending to it could lose updates.
            self.broken = true;
            return Err(JournalError::Io { path: self.dir.clone(), source });
        }
        (self.log, self.base, self.log_len, self.unsynced) = (log, sequence, 0, false);
        Ok(Some(Compaction { dir: self.dir.clone(), sequence, _lock: self.lock.clone() }))
    }

    /// After the new snapshot's rename: makes it durable, then starts its log (unless the
    /// sequence did not move: the rename replaced the snapshot, and the log is empty).
    fn switch_log(&mut self, sequence: u64, last: CompactStep) -> Result<(), JournalError> {
        let dir_error = |source| JournalError::Io { path: self.dir.clone(), source };
        files::sync_dir(&self.dir).map_err(dir_error)?;
        if last == CompactStep::Rename || sequence == self.base {
            return Ok(());
        }
        let log = create_log(&files::log_path(&self.dir, sequence))?;
        files::sync_dir(&self.dir).map_err(dir_error)?;
        (self.log, self.base, self.log_len, self.unsynced) = (log, sequence, 0, false);
        Ok(())
    }

    /// Bytes in the log (appended ones included): how much a restart would replay, and so when
    /// to [`compact`](Self::compact).
    pub fn log_bytes(&self) -> u64 {
        self.log_len + self.pending.len() as u64
    }

    /// The last sequence appended or recovered.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Fsyncs of the log so far (compaction's own not counted).
    pub fn sync_count(&self) -> u64 {
        self.syncs
    }

    fn usable(&self) -> Result<(), JournalError> {
        if self.broken { Err(JournalError::Broken) } else { Ok(()) }
    }

    fn write_pending(&mut self) -> Result<(), JournalError> {
        self.usable()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        if let Err(source) = self.log.write_all(&self.pending) {
            // Part of it may be in the file: appending after that would be unreadable.
            self.broken = true;
            return Err(self.log_error(source));
        }
        self.log_len += self.pending.len() as u64;
        self.pending.clear();
        self.unsynced = true;
        Ok(())
    }

    fn sync_log(&mut self) -> Result<(), JournalError> {
        if let Err(source) = self.log.sync_data() {
            // After a failed fsync the kernel may have dropped the dirty pages and forgotten the
            // error: retrying would report success for data that is gone.
            self.broken = true;
            return Err(self.log_error(source));
        }
        self.unsynced = false;
        self.syncs += 1;
        Ok(())
    }

    fn log_error(&self, source: io::Error) -> JournalError {
        JournalError::Io { path: files::log_path(&self.dir, self.base), source }
    }
}

/// A compaction started by [`Journal::begin_compaction`]: writes the snapshot while the journal
/// goes on appending. Blocking (file writes and fsyncs); run it off the async threads.
#[derive(Debug)]
#[must_use = "a compaction does nothing until finished"]
pub struct Compaction {
    dir: PathBuf,
    sequence: u64,
    _lock: Arc<DirLock>,
}

impl Compaction {
    /// The snapshot's sequence `S`.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Writes the snapshot from `chunks` — the whole map in key order, read after `S` — fsyncs
    /// it, renames it into place and removes the snapshots and logs it supersedes. A failure
    /// leaves the journal as it was (the next compaction tries again); the files it leaves are
    /// removed at the next open.
    pub fn finish(self, chunks: impl IntoIterator<Item = Vec<OwnedEntry>>) -> Result<(), JournalError> {
        self.finish_through(chunks, CompactStep::RemoveOldLog)
    }

    /// [`finish`](Self::finish) up to and including `last` (the tests' crash points).
    pub(crate) fn finish_through(
        self,
        chunks: impl IntoIterator<Item = Vec<OwnedEntry>>,
        last: CompactStep,
    ) -> Result<(), JournalError> {
        let temp = files::temp_path(&self.dir, self.sequence);
        write_snapshot(&temp, self.sequence, Chunks(chunks))?;
        if last == CompactStep::WriteTemp {
            return Ok(());
        }
        let snapshot = files::snapshot_path(&self.dir, self.sequence);
        fs::rename(&temp, &snapshot).map_err(|source| JournalError::Io { path: temp.clone(), source })?;
        files::sync_dir(&self.dir).map_err(|source| JournalError::Io { path: self.dir.clone(), source })?;
        if last <= CompactStep::NewLog {
            return Ok(());
        }
        remove_superseded(&self.dir, self.sequence, last)
    }
}

/// Removes the snapshots, then the logs, older than the snapshot at `sequence` (up to `last`).
/// Failures here leave stale files that the next open removes, nothing worse.
fn remove_superseded(dir: &Path, sequence: u64, last: CompactStep) -> Result<(), JournalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| JournalError::Io { path, source }
    };
    let listing = files::list(dir).map_err(io(dir))?;
    for s in listing.snapshots.into_iter().filter(|&s| s < sequence) {
        let path = files::snapshot_path(dir, s);
        files::remove(&path).map_err(io(&path))?;
    }
    if last == CompactStep::RemoveOldSnapshot {
        return Ok(());
    }
    for s in listing.logs.into_iter().filter(|&s| s < sequence) {
        let path = files::log_path(dir, s);
        files::remove(&path).map_err(io(&path))?;
    }
    files::sync_dir(dir).map_err(io(dir))
}

/// Writes the snapshot to `path` (a temporary name) and fsyncs it; removes what it wrote if
/// that fails.
fn write_snapshot(path: &Path, sequence: u64, source: impl Source) -> Result<(), JournalError> {
    let io = |source| JournalError::Io { path: path.to_path_buf(), source };
    let written = File::create(path).map_err(io).and_then(|file| {
        snapshot::write(&file, sequence, source).map_err(|e| match e {
            snapshot::WriteError::Io(source) => io(source),
            snapshot::WriteError::Unwritable(why) => JournalError::Unwritable(why),
        })?;
        file.sync_all().map_err(io)
    });
    if written.is_err() {
        let _ = files::remove(path);
    }
    written
}

/// Creates an empty log at `path`, durable (its directory entry aside).
fn create_log(path: &Path) -> Result<File, JournalError> {
    let io = |source| JournalError::Io { path: path.to_path_buf(), source };
    let log = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).map_err(io)?;
    log.sync_all().map_err(io)?;
    Ok(log)
}
