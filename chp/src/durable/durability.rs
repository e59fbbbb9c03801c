//! When the log is fsynced, and so what a power failure can take.

use std::time::Duration;

/// When [`Journal`](super::Journal) fsyncs its log. Every mode hands each commit to the OS at
/// once, so a *process* crash loses nothing committed; they differ on a *power failure* (or a
/// kernel crash), which loses what the OS had not yet written to the disk.
///
/// Whatever the mode, [`compact`](super::Journal::compact) fsyncs every file it writes: a
/// snapshot that replaces the log must be on disk before the log goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// [`commit`](super::Journal::commit) returns once the records are on disk: one fsync per
    /// commit, however many updates were appended before it (group commit). Loses nothing
    /// committed; publish an update only after its commit and no client ever sees one that a
    /// restart forgets.
    Always,
    /// [`commit`](super::Journal::commit) writes; [`tick`](super::Journal::tick) fsyncs at most
    /// once per interval, when there is something to sync. Loses the updates committed in the last
    /// interval (plus however late the caller ticks).
    Interval(Duration),
    /// Never fsyncs the log; the OS writes it back when it likes (Linux: within about 30 s by
    /// default). Loses whatever the OS had not written back.
    Never,
}
