//! What the durable journal costs: appends of 100-byte values under `Durability::Always` with
//! group commits of 1, 64 and 1024 updates, then recovery of the map from the log and, after a
//! compaction, from the snapshot.
//!
//! ```text
//! cargo run --release -p zmtp-chp --example journal_bench [UPDATES] [SECONDS_PER_RUN] [DIR]
//! ```
//!
//! UPDATES (default 1,000,000) go to as many distinct keys. A run stops early after
//! SECONDS_PER_RUN (default 20): one fsync per update takes about as long as the disk's flush,
//! which would make a million of them an hour on a slow disk. DIR (default: the temp dir) should
//! be on the disk being measured.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chp::KvMsg;
use chp::durable::{Durability, Journal, Update};

fn main() {
    let mut args = std::env::args().skip(1);
    let updates: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("UPDATES: a number"));
    let budget = Duration::from_secs(args.next().map_or(20, |a| a.parse().expect("SECONDS_PER_RUN: a number")));
    let root = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = root.join(format!("chp-journal-bench-{}", std::process::id()));
    let value = vec![b'v'; 100];

    println!("{updates} updates of {} B values, Durability::Always, in {}", value.len(), root.display());
    for batch in [1, 64, 1024] {
        let _ = std::fs::remove_dir_all(&dir);
        let (mut journal, _) = Journal::open(&dir, Durability::Always).expect("open");
        let start = Instant::now();
        let mut written = 0;
        while written < updates && start.elapsed() < budget {
            for _ in 0..batch.min(updates - written) {
                written += 1;
                journal.append(&update(written, &value)).expect("append");
            }
            journal.commit().expect("commit");
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "batch {batch:>4}: {written:>8} updates in {secs:6.2} s: {:>9.0} updates/s, {:>6.0} fsyncs/s, log {:.1} B/update",
            written as f64 / secs,
            journal.sync_count() as f64 / secs,
            journal.log_bytes() as f64 / written as f64,
        );
    }

    // The last run's directory: replay its log, compact, and recover from the snapshot.
    let (start, (mut journal, recovered)) = (Instant::now(), open(&dir));
    println!(
        "recovery from the log: {} updates, {} keys in {:.2} s",
        recovered.updates_replayed,
        recovered.entries.len(),
        start.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    journal.compact(recovered.sequence, recovered.entries.iter()).expect("compact");
    println!("compaction: {:.2} s", start.elapsed().as_secs_f64());
    drop((journal, recovered));
    let (start, (_, recovered)) = (Instant::now(), open(&dir));
    let keys = recovered.entries.len() as f64;
    println!(
        "recovery from the snapshot: {} keys in {:.2} s, {:.1} B/key on disk ({} B of key and value)",
        recovered.entries.len(),
        start.elapsed().as_secs_f64(),
        dir_bytes(&dir) as f64 / keys,
        recovered.entries.payload_bytes() as f64 / keys,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn update(sequence: u64, value: &[u8]) -> Update {
    let mut msg = KvMsg::new(format!("/bench/{sequence:08}"), value.to_vec());
    msg.sequence = sequence;
    Update { msg, deadline: None }
}

fn open(dir: &Path) -> (Journal, chp::durable::Recovered) {
    Journal::open(dir, Durability::Always).expect("recover")
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).expect("read dir").map(|e| e.expect("entry").metadata().expect("metadata").len()).sum()
}
