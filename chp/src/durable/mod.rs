//! The server's map on disk, so a restart does not lose it: a snapshot of the whole map and an
//! append-only log of the updates since. Synchronous, socket-free, runtime-free: the server calls
//! it from wherever it applies updates.
//!
//! ## Files
//!
//! In the data directory (see `files.rs` for the names):
//!
//! - `snapshot-S.chp`: the map at sequence `S`: every key, its value and its deadline;
//! - `log-S.chp`: every update after `S`, in sequence order: sequence, key, value (empty =
//!   delete), UUID and properties (all a KVPUB needs to be published again) and deadline;
//! - `epoch`: a pair server's epoch ([`Journal::epoch`]), 8 bytes and a CRC-32, replaced whole;
//! - `LOCK` ([`LOCK_FILE`]): empty, locked while a journal has the directory open, so a second
//!   server on the same directory is refused ([`JournalError::Locked`]) instead of interleaving
//!   its writes with the first's. The OS releases it when the process dies, SIGKILL included.
//!
//! Every record in both is framed as `[length u32 LE][CRC-32 u32 LE][payload]`, the payload
//! starting with a kind byte (a future layout is a new kind, never a silent misreading). Deadlines
//! are absolute wall-clock Unix milliseconds, not the relative `ttl` property: a key set with
//! `ttl=60` a minute before a restart expires right after it, not a minute later.
//!
//! ## Recovery
//!
//! [`Journal::open`] loads the newest snapshot and replays the log's records with increasing
//! sequences above it. The first record that is torn (a crash mid-write), fails its checksum, or
//! does not increase the sequence ends the log: the file is cut there and the cut counted in
//! [`Recovered::truncated_bytes`]. A damaged snapshot is an error, never an empty map. Keys whose
//! deadline passed while the server was down come back with that deadline, for the server to
//! expire (and publish the delete) at once.
//!
//! No content makes recovery panic or allocate more than [`MAX_RECORD_LEN`] (or the file's size,
//! if smaller) for one record; the `chp_journal` fuzz target holds it to that.
//!
//! ## Compaction
//!
//! [`Journal::compact`] writes the map as a new snapshot and starts an empty log, with the map
//! held still meanwhile; [`Journal::begin_compaction`] starts the log first and hands back a
//! [`Compaction`] that writes the snapshot from the map a chunk at a time while updates go on
//! (the server's way: a million-key map is a second of writing and fsyncing it does not stop
//! for). Their docs say why a crash at any point recovers the same map. The caller decides when,
//! from [`Journal::log_bytes`] (replay time grows with the log, snapshot time with the map).
//!
//! ## Durability
//!
//! [`Durability`] says when the log is fsynced, and what a power failure loses in each mode.

mod crc;
mod durability;
mod error;
mod fields;
mod files;
mod journal;
pub(crate) mod log;
pub(crate) mod record;
mod recovery;
pub(crate) mod snapshot;
#[cfg(test)]
mod tests;
mod update;

pub use crate::store::OwnedEntry;
pub use durability::Durability;
pub use error::{Corruption, JournalError};
pub use journal::{Compaction, Journal, LOCK_FILE};
pub use record::MAX_RECORD_LEN;
pub use recovery::Recovered;
pub use update::{Update, unix_millis};
