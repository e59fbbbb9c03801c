//! What can go wrong: [`Corruption`] says what is wrong with bytes on disk, [`JournalError`] who
//! erred (the disk, the files, or the caller) so the caller can decide to retry, repair or stop.

use std::io;
use std::path::PathBuf;

use crate::kvmsg::KvMsgError;

/// Why bytes in a journal file are not a valid record. In the log's tail this is a crash's torn
/// write and is cut; in a snapshot it is an error ([`JournalError::CorruptSnapshot`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Corruption {
    /// The file ends inside a record.
    #[error("the file ends inside a record")]
    Torn,
    /// A length field larger than any record the journal writes.
    #[error("record length {0} is over the limit")]
    TooLong(usize),
    /// The payload is not what was written.
    #[error("checksum mismatch")]
    Checksum,
    /// A record of a kind that does not belong here.
    #[error("unexpected record kind {0}")]
    UnexpectedKind(u8),
    /// The record's fields do not add up to its length.
    #[error("fields do not fit the record")]
    Malformed,
    /// A key or the properties are not what a kvmsg may carry.
    #[error("invalid field: {0}")]
    InvalidField(KvMsgError),
    /// A snapshot entry with an empty value (an empty value means "deleted").
    #[error("snapshot entry with an empty value")]
    EmptyValue,
    /// An update whose sequence is not above the one before it.
    #[error("sequence {got} does not follow {previous}")]
    SequenceNotIncreasing {
        /// The sequence before it.
        previous: u64,
        /// The record's.
        got: u64,
    },
    /// A snapshot whose first record names another sequence than its file name.
    #[error("snapshot holds sequence {recorded}, its name says {named}")]
    SequenceMismatch {
        /// From the file name.
        named: u64,
        /// From the snapshot's first record.
        recorded: u64,
    },
    /// A snapshot whose last record counts another number of entries than it holds.
    #[error("snapshot holds {found} entries, its end record says {expected}")]
    EntryCount {
        /// From the end record.
        expected: u64,
        /// Entries read.
        found: u64,
    },
    /// A snapshot without its end record.
    #[error("snapshot has no end record")]
    MissingEnd,
    /// Records after a snapshot's end record.
    #[error("records after the snapshot's end")]
    AfterEnd,
    /// A log that does not continue the one before it: that one ended (was cut) at `expected`,
    /// this one starts after `log`. It and any later logs are dropped.
    #[error("the log after sequence {log} does not continue the one before, which ends at {expected}")]
    Gap {
        /// Where the log before ends.
        expected: u64,
        /// The sequence the dropped log is named by.
        log: u64,
    },
}

/// Why a [`Journal`](super::Journal) operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The file system refused (disk full, permissions, I/O error). After a failed write or fsync
    /// the journal is [`Broken`](JournalError::Broken).
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// The newest snapshot is damaged: recovery stops rather than serve a partial map. Restore
    /// the file from a backup or a peer; deleting it would silently lose every key it holds.
    #[error("snapshot {path} is corrupt at byte {offset}: {why}")]
    CorruptSnapshot {
        /// The snapshot file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong with it.
        why: Corruption,
    },
    /// A log continues a snapshot that is not there (deleted by hand?): replaying it onto an empty
    /// map would serve a wrong one.
    #[error("log {log} continues a snapshot that is missing")]
    MissingSnapshot {
        /// The orphaned log.
        log: PathBuf,
    },
    /// The caller appended an update whose sequence is not above the last one.
    #[error("update {got} appended after update {last}")]
    SequenceNotIncreasing {
        /// The last sequence appended (or recovered).
        last: u64,
        /// The one appended.
        got: u64,
    },
    /// The caller compacted at a sequence older than updates it had appended: the snapshot would
    /// not cover them, and the fresh log would not hold them.
    #[error("snapshot at sequence {snapshot} is behind appended update {appended}")]
    CompactBehind {
        /// The snapshot's sequence.
        snapshot: u64,
        /// The last sequence appended.
        appended: u64,
    },
    /// An update or entry the journal could not read back: a key or properties a kvmsg may not
    /// carry, an empty snapshot value, or more than the record limit.
    #[error("cannot journal this record: {0}")]
    Unwritable(Corruption),
    /// The epoch file is damaged (its checksum fails).
    #[error("{path} is corrupt")]
    CorruptEpoch {
        /// The file.
        path: PathBuf,
    },
    /// Another journal (another server, here or in another process) has the directory open.
    #[error("{dir} is in use by another server (its LOCK file is locked)")]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// An earlier write or fsync failed, so what is on disk is unknown (after a failed fsync the
    /// kernel may have dropped the pages). Reopen the journal: recovery finds what survived.
    #[error("an earlier write or fsync failed; reopen the journal")]
    Broken,
}
