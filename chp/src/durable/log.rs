//! The log file: update records (see [`Update`]) after the snapshot of the same name, each
//! sequence above the one before. Recovery replays it up to the first record that is torn, damaged
//! or out of order: everything before that point was written whole, nothing after it can be
//! trusted (a crash tears only the tail; a bad record in the middle cuts what follows too).

use std::collections::VecDeque;
use std::io::{self, Read};

use super::Corruption;
use super::record::{ReadError, RecordReader};
use super::update::Update;
use crate::store::Store;
use crate::uuid::Uuid;

/// How many of the last updates' UUIDs a replay keeps ([`Replayed::recent_uuids`]): 1 MiB at most.
pub(crate) const RECENT_UUIDS: usize = 1 << 16;

/// What replaying a log did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// The UUIDs of the last updates replayed (at most [`RECENT_UUIDS`]), oldest first.
    pub(crate) recent_uuids: VecDeque<Uuid>,
    /// The last sequence applied (the starting one if none was).
    pub(crate) last_sequence: u64,
    /// Updates applied.
    pub(crate) updates: u64,
    /// Bytes of valid records: the log's length once its bad tail is cut.
    pub(crate) good_len: u64,
    /// Why replay stopped before the end, if it did.
    pub(crate) stopped: Option<Corruption>,
}

/// Applies the `len` bytes of log in `inner` to `store` (deadlines in Unix milliseconds), each
/// update's sequence above the one before, the first above `after`.
pub(crate) fn replay(inner: impl Read, len: u64, after: u64, store: &mut Store) -> io::Result<Replayed> {
    let mut reader = RecordReader::new(inner, len);
    let mut replayed =
        Replayed { recent_uuids: VecDeque::new(), last_sequence: after, updates: 0, good_len: 0, stopped: None };
    loop {
        let good_len = reader.good_len();
        let update = match reader.next_record() {
            Ok(Some(payload)) => Update::decode(payload).and_then(|u| in_order(u, replayed.last_sequence)),
            Ok(None) => Ok(None),
            Err(ReadError::Corrupt(why)) => Err(why),
            Err(ReadError::Io(e)) => return Err(e),
        };
        match update {
            Ok(Some(update)) => {
                apply(&update, store);
                if let Some(uuid) = update.msg.uuid {
                    if replayed.recent_uuids.len() == RECENT_UUIDS {
                        replayed.recent_uuids.pop_front();
                    }
                    replayed.recent_uuids.push_back(uuid);
                }
                replayed.last_sequence = update.msg.sequence;
                replayed.updates += 1;
            }
            Ok(None) => break,
            Err(why) => {
                replayed.stopped = Some(why);
                replayed.good_len = good_len;
                return Ok(replayed);
            }
        }
    }
    replayed.good_len = reader.good_len();
    Ok(replayed)
}

fn in_order(update: Update, previous: u64) -> Result<Option<Update>, Corruption> {
    match update.msg.sequence {
        got if got > previous => Ok(Some(update)),
        got => Err(Corruption::SequenceNotIncreasing { previous, got }),
    }
}

fn apply(update: &Update, store: &mut Store) {
    let msg = &update.msg;
    if msg.is_delete() {
        store.remove(&msg.key);
    } else {
        store.insert(&msg.key, &msg.body, update.deadline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvmsg::KvMsg;

    fn log_of(updates: &[(u64, &str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (sequence, key, value) in updates {
            let mut msg = KvMsg::new(key.to_string(), value.to_string());
            msg.sequence = *sequence;
            Update { msg, deadline: None }.encode(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn applies_sets_and_deletes_in_order() {
        let log = log_of(&[(5, "/a", "1"), (6, "/b", "2"), (7, "/a", "")]);
        let mut store = Store::new();
        let replayed = replay(&log[..], log.len() as u64, 4, &mut store).unwrap();
        assert_eq!(
            replayed,
            Replayed {
                recent_uuids: VecDeque::new(),
                last_sequence: 7,
                updates: 3,
                good_len: log.len() as u64,
                stopped: None
            }
        );
        assert_eq!((store.len(), store.get(b"/b").unwrap().value), (1, &b"2"[..]));
    }

    #[test]
    fn stops_at_a_sequence_that_does_not_increase() {
        let log = log_of(&[(5, "/a", "1"), (5, "/b", "2"), (6, "/c", "3")]);
        let first = log_of(&[(5, "/a", "1")]).len() as u64;
        let mut store = Store::new();
        let replayed = replay(&log[..], log.len() as u64, 4, &mut store).unwrap();
        assert_eq!(replayed.stopped, Some(Corruption::SequenceNotIncreasing { previous: 5, got: 5 }));
        assert_eq!((replayed.updates, replayed.good_len, store.len()), (1, first, 1));
        // The first record must follow the snapshot too.
        let replayed = replay(&log[..], log.len() as u64, 5, &mut Store::new()).unwrap();
        assert_eq!((replayed.updates, replayed.good_len), (0, 0));
    }
}
