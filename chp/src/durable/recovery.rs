//! Opening a data directory: the newest snapshot, the log after it (its torn tail cut), and the
//! leftovers of an interrupted compaction cleaned away.
//!
//! Which files count follows from the order [`compact`](super::Journal::compact) works in: a
//! snapshot is renamed into place only once whole and fsynced, and its log is created only after
//! that. So the newest `snapshot-S` is the map at `S`, `log-S` (if there) holds the updates after
//! it, anything older is superseded, and a log newer than every snapshot means a snapshot was lost.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;

use super::files::{self, Listing};
use super::log::replay;
use super::record::ReadError;
use super::snapshot;
use super::{Corruption, JournalError};
use crate::store::Store;
use crate::uuid::Uuid;

/// What [`Journal::open`](super::Journal::open) found.
#[derive(Debug)]
#[non_exhaustive]
pub struct Recovered {
    /// The last sequence: the last update replayed, or the snapshot's (0 for a new directory).
    /// The next update must be above it.
    pub sequence: u64,
    /// The map, in key order, each deadline in Unix milliseconds. Keys whose deadline has already
    /// passed are **kept** with it: the server expires them as it would have had it kept running,
    /// publishing (and journaling) a delete with a new sequence, so clients hear of it.
    pub entries: Store,
    /// Log records applied on top of the snapshot.
    pub updates_replayed: u64,
    /// Bytes cut from the end of the log: a write torn by a crash, or damage. Nonzero is worth a
    /// warning; [`tail_corruption`](Self::tail_corruption) says what was found there.
    pub truncated_bytes: u64,
    /// What was wrong at the start of the cut tail.
    pub tail_corruption: Option<Corruption>,
    /// The UUIDs of the last updates replayed from the log (up to 65,536), oldest first. A pair
    /// server remembers them as published, so that a client retransmitting a write confirmed just
    /// before a crash does not have it applied twice. Updates already compacted into the snapshot
    /// carry none.
    pub recent_uuids: Vec<Uuid>,
}

/// The directory's state, ready for appending.
pub(crate) struct Opened {
    pub(crate) log: File,
    pub(crate) log_len: u64,
    /// The snapshot's sequence, which names the log.
    pub(crate) base: u64,
    pub(crate) recovered: Recovered,
}

pub(crate) fn recover(dir: &Path) -> Result<Opened, JournalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| JournalError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let listing = files::list(dir).map_err(io(dir))?;
    let base = listing.snapshots.iter().copied().max().unwrap_or(0);
    if let Some(&orphan) = listing.logs.iter().find(|&&log| log > base) {
        return Err(JournalError::MissingSnapshot { log: files::log_path(dir, orphan) });
    }
    let mut entries = if listing.snapshots.is_empty() {
        Store::new()
    } else {
        load_snapshot(&files::snapshot_path(dir, base), base)?
    };

    let log_path = files::log_path(dir, base);
    let log_existed = listing.logs.contains(&base);
    let mut log = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&log_path)
        .map_err(io(&log_path))?;
    let len = log.metadata().map_err(io(&log_path))?.len();
    let replayed = replay(BufReader::new(&log), len, base, &mut entries).map_err(io(&log_path))?;
    if replayed.good_len < len {
        // Cut before appending: new records after a torn one would never be read back.
        log.set_len(replayed.good_len).map_err(io(&log_path))?;
        log.sync_all().map_err(io(&log_path))?;
    }
    log.seek(SeekFrom::Start(replayed.good_len)).map_err(io(&log_path))?;

    if remove_superseded(dir, base, &listing)? || !log_existed {
        files::sync_dir(dir).map_err(io(dir))?;
    }
    Ok(Opened {
        log,
        log_len: replayed.good_len,
        base,
        recovered: Recovered {
            sequence: replayed.last_sequence,
            entries,
            updates_replayed: replayed.updates,
            truncated_bytes: len - replayed.good_len,
            tail_corruption: replayed.stopped,
            recent_uuids: replayed.recent_uuids.into(),
        },
    })
}

fn load_snapshot(path: &Path, named: u64) -> Result<Store, JournalError> {
    let io = |source| JournalError::Io { path: path.to_path_buf(), source };
    let corrupt = |offset, why| JournalError::CorruptSnapshot { path: path.to_path_buf(), offset, why };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let loaded = snapshot::read(BufReader::new(file), len).map_err(|(offset, e)| match e {
        ReadError::Corrupt(why) => corrupt(offset, why),
        ReadError::Io(e) => io(e),
    })?;
    if loaded.sequence != named {
        return Err(corrupt(0, Corruption::SequenceMismatch { named, recorded: loaded.sequence }));
    }
    Ok(loaded.store)
}

/// Removes older snapshots and logs, and unfinished snapshots: what an interrupted compaction
/// left. Returns whether anything was removed.
fn remove_superseded(dir: &Path, base: u64, listing: &Listing) -> Result<bool, JournalError> {
    let older = |sequences: &[u64]| sequences.iter().copied().filter(|&s| s < base).collect::<Vec<_>>();
    let paths = (older(&listing.snapshots).into_iter().map(|s| files::snapshot_path(dir, s)))
        .chain(older(&listing.logs).into_iter().map(|s| files::log_path(dir, s)))
        .chain(listing.temps.iter().cloned())
        .collect::<Vec<_>>();
    for path in &paths {
        files::remove(path).map_err(|source| JournalError::Io { path: path.clone(), source })?;
    }
    Ok(!paths.is_empty())
}
