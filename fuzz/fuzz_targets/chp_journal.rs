//! Recovery of chp's durable journal from arbitrary bytes: a log, a snapshot, and records with
//! valid framing (so the payload decoders are reached, not just the checksum). Nothing panics;
//! recovery cuts a log at a point from which replaying the cut log gives the same map; a snapshot
//! that reads back writes back to the same bytes' meaning.
#![no_main]
use arbitrary::Arbitrary;
use chp::fuzzing::{journal_record, read_journal_snapshot, replay_journal_log, write_journal_snapshot};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    log: Vec<u8>,
    snapshot: Vec<u8>,
    /// Payloads framed with a correct length and checksum.
    records: Vec<Vec<u8>>,
    /// Whether `records` make a snapshot (else a log).
    records_are_snapshot: bool,
    after: u8,
}

fn check_log(bytes: &[u8], after: u64) {
    let replayed = replay_journal_log(bytes, after);
    assert!(replayed.good_len <= bytes.len() as u64);
    assert!(replayed.last_sequence >= after);
    assert_eq!(replayed.updates == 0, replayed.last_sequence == after);
    // Recovery truncates the file to good_len: the next recovery must find the same, and no more.
    let again = replay_journal_log(&bytes[..replayed.good_len as usize], after);
    assert_eq!(again, replayed);
}

fn check_snapshot(bytes: &[u8]) {
    if let Some((sequence, entries)) = read_journal_snapshot(bytes) {
        let written = write_journal_snapshot(sequence, &entries);
        assert_eq!(read_journal_snapshot(&written), Some((sequence, entries)));
    }
}

fuzz_target!(|input: Input| {
    let after = u64::from(input.after);
    check_log(&input.log, after);
    check_snapshot(&input.snapshot);
    let framed: Vec<u8> = input.records.iter().take(64).flat_map(|p| journal_record(p)).collect();
    if input.records_are_snapshot {
        check_snapshot(&framed);
    } else {
        check_log(&framed, after);
    }
});
