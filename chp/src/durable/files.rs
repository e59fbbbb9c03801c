//! The data directory: which file is which, found by name.
//!
//! - `snapshot-<S>.chp`: the map at sequence `S` (20 digits, so names sort by sequence);
//! - `log-<S>.chp`: the updates after `S`;
//! - `snapshot-<S>.chp.tmp`: a snapshot being written, never read (renamed when whole, deleted
//!   when found at recovery: a crash interrupted it);
//! - `epoch`: a pair server's epoch (absent: 0), replaced whole by rename.
//!
//! Other files (other names, other digit counts) are left alone.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::JournalError;

const SNAPSHOT: &str = "snapshot-";
const LOG: &str = "log-";
const EXTENSION: &str = ".chp";
const TEMP: &str = ".tmp";

pub(crate) fn snapshot_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{SNAPSHOT}{sequence:020}{EXTENSION}"))
}

pub(crate) fn log_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{LOG}{sequence:020}{EXTENSION}"))
}

pub(crate) fn temp_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{SNAPSHOT}{sequence:020}{EXTENSION}{TEMP}"))
}

/// The journal's files in a directory, by sequence.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) snapshots: Vec<u64>,
    pub(crate) logs: Vec<u64>,
    pub(crate) temps: Vec<PathBuf>,
}

pub(crate) fn list(dir: &Path) -> io::Result<Listing> {
    let mut listing = Listing::default();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // Exactly the names this module makes: a hand-made `log-7.chp` is not `log-000…007.chp`.
        let sequence_of = |prefix: &str| {
            let digits = name.strip_prefix(prefix)?.strip_suffix(EXTENSION)?;
            if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse::<u64>().ok()
        };
        if let Some(sequence) = sequence_of(SNAPSHOT) {
            listing.snapshots.push(sequence);
        } else if let Some(sequence) = sequence_of(LOG) {
            listing.logs.push(sequence);
        } else if name.starts_with(SNAPSHOT) && name.ends_with(TEMP) {
            listing.temps.push(entry.path());
        }
    }
    Ok(listing)
}

/// Makes the directory's entries (created, renamed, removed files) durable: a file's own fsync
/// does not cover its name.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    if cfg!(unix) {
        File::open(dir)?.sync_all()
    } else {
        // Windows cannot open a directory as a file; NTFS journals its metadata itself.
        Ok(())
    }
}

/// Removes `path`; one already gone is fine (an earlier, interrupted cleanup).
pub(crate) fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The epoch file's name (see [`Journal::epoch`](super::Journal::epoch)).
pub(crate) const EPOCH: &str = "epoch";

/// The stored epoch: `[epoch u64 BE][CRC-32 of it, u32 BE]`; 0 when there is no file.
pub(crate) fn read_epoch(dir: &Path) -> Result<u64, JournalError> {
    let path = dir.join(EPOCH);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(JournalError::Io { path, source }),
    };
    let epoch = <[u8; 12]>::try_from(bytes.as_slice())
        .ok()
        .filter(|b| super::crc::crc32(&b[..8]).to_be_bytes() == b[8..])
        .map(|b| u64::from_be_bytes(b[..8].try_into().expect("8 bytes")));
    epoch.ok_or(JournalError::CorruptEpoch { path })
}

/// Writes the epoch file by temp file, fsync, rename and directory fsync: it is either the old
/// one or the new one after a crash.
pub(crate) fn write_epoch(dir: &Path, epoch: u64) -> Result<(), JournalError> {
    let (path, temp) = (dir.join(EPOCH), dir.join(format!("{EPOCH}.tmp")));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| JournalError::Io { path, source }
    };
    let mut bytes = epoch.to_be_bytes().to_vec();
    bytes.extend_from_slice(&super::crc::crc32(&bytes).to_be_bytes());
    let mut file = File::create(&temp).map_err(io(&temp))?;
    io::Write::write_all(&mut file, &bytes).map_err(io(&temp))?;
    file.sync_all().map_err(io(&temp))?;
    fs::rename(&temp, &path).map_err(io(&path))?;
    sync_dir(dir).map_err(io(dir))
}
