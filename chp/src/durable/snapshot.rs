//! The snapshot file: the whole map at one sequence, as records.
//!
//! | Record | Payload, integers little-endian |
//! |---|---|
//! | start (once, first) | kind = 2, sequence u64 |
//! | entry (per key) | kind = 3, deadline u64 (Unix ms, 0 = none), key length u16, key, value (rest, non-empty) |
//! | end (once, last) | kind = 4, number of entries u64 |
//!
//! The end record is what tells a complete snapshot from one cut short: the journal only ever
//! renames a snapshot into place after it is whole and fsynced, so a reader that finds it short
//! or damaged is looking at a bad disk (or a hand edit), and refuses it.

use std::io::{self, Read, Write};

use super::Corruption;
use super::fields::{Fields, kind};
use super::record::{ReadError, RecordReader, push_record};
use crate::kvmsg;
use crate::store::{Entry, OwnedEntry, Store};

/// Records are gathered into chunks of about this size before each write.
const WRITE_CHUNK: usize = 1 << 20;

/// Why a snapshot could not be written.
#[derive(Debug)]
pub(crate) enum WriteError {
    Io(io::Error),
    /// An entry the reader would refuse.
    Unwritable(Corruption),
}

/// Writes the snapshot of `source` at `sequence` to `out` (the caller fsyncs). Deadlines are
/// Unix milliseconds.
pub(crate) fn write(out: impl Write, sequence: u64, source: impl Source) -> Result<(), WriteError> {
    let mut writer = Writer::start(out, sequence)?;
    source.write_into(&mut writer)?;
    writer.finish()
}

/// What a snapshot is written from: the whole map, in key order.
pub(crate) trait Source {
    /// Adds every entry to `writer`.
    fn write_into<W: Write>(self, writer: &mut Writer<W>) -> Result<(), WriteError>;
}

/// Entries borrowed from a map that stays unchanged while the snapshot is written.
pub(crate) struct Entries<I>(pub(crate) I);

impl<'a, I: IntoIterator<Item = Entry<'a>>> Source for Entries<I> {
    fn write_into<W: Write>(self, writer: &mut Writer<W>) -> Result<(), WriteError> {
        self.0.into_iter().try_for_each(|entry| writer.entry(entry))
    }
}

/// Entries copied out of a map a chunk at a time (each chunk under a short lock of the map, so
/// that the map stays in use while the snapshot is written).
pub(crate) struct Chunks<I>(pub(crate) I);

impl<I: IntoIterator<Item = Vec<OwnedEntry>>> Source for Chunks<I> {
    fn write_into<W: Write>(self, writer: &mut Writer<W>) -> Result<(), WriteError> {
        for chunk in self.0 {
            for e in &chunk {
                writer.entry(Entry { key: &e.key, value: &e.value, deadline: e.deadline })?;
            }
        }
        Ok(())
    }
}

/// A snapshot written entry by entry (see [`Source`]).
pub(crate) struct Writer<W: Write> {
    out: W,
    chunk: Vec<u8>,
    count: u64,
}

fn unwritable(why: Corruption) -> WriteError {
    WriteError::Unwritable(why)
}

impl<W: Write> Writer<W> {
    /// Starts the snapshot at `sequence`.
    pub(crate) fn start(out: W, sequence: u64) -> Result<Self, WriteError> {
        let mut chunk = Vec::with_capacity(WRITE_CHUNK + 64 * 1024);
        push_record(&mut chunk, |p| {
            p.push(kind::SNAPSHOT_START);
            p.extend_from_slice(&sequence.to_le_bytes());
        })
        .map_err(|len| unwritable(Corruption::TooLong(len)))?;
        Ok(Writer { out, chunk, count: 0 })
    }

    /// Adds one entry (deadline in Unix milliseconds).
    pub(crate) fn entry(&mut self, entry: Entry<'_>) -> Result<(), WriteError> {
        kvmsg::check_key(entry.key).map_err(|e| unwritable(Corruption::InvalidField(e)))?;
        if entry.value.is_empty() {
            return Err(unwritable(Corruption::EmptyValue));
        }
        push_record(&mut self.chunk, |p| {
            p.push(kind::SNAPSHOT_ENTRY);
            p.extend_from_slice(&entry.deadline.unwrap_or(0).to_le_bytes());
            p.extend_from_slice(&(entry.key.len() as u16).to_le_bytes());
            p.extend_from_slice(entry.key);
            p.extend_from_slice(entry.value);
        })
        .map_err(|len| unwritable(Corruption::TooLong(len)))?;
        self.count += 1;
        if self.chunk.len() >= WRITE_CHUNK {
            self.out.write_all(&self.chunk).map_err(WriteError::Io)?;
            self.chunk.clear();
        }
        Ok(())
    }

    /// Ends the snapshot and flushes it (the caller fsyncs).
    pub(crate) fn finish(mut self) -> Result<(), WriteError> {
        let count = self.count;
        push_record(&mut self.chunk, |p| {
            p.push(kind::SNAPSHOT_END);
            p.extend_from_slice(&count.to_le_bytes());
        })
        .map_err(|len| unwritable(Corruption::TooLong(len)))?;
        self.out.write_all(&self.chunk).map_err(WriteError::Io)?;
        self.out.flush().map_err(WriteError::Io)
    }
}

/// A snapshot read back.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) sequence: u64,
    /// Deadlines in Unix milliseconds.
    pub(crate) store: Store,
}

/// Why a snapshot could not be read: the offset of the bad record, and what is wrong.
pub(crate) type ReadFailure = (u64, ReadError);

/// Reads a whole snapshot of `len` bytes from `inner`.
pub(crate) fn read(inner: impl Read, len: u64) -> Result<Loaded, ReadFailure> {
    let mut reader = RecordReader::new(inner, len);
    let sequence = match reader.next_record() {
        Ok(Some(payload)) => start(payload),
        Ok(None) => Err(Corruption::MissingEnd),
        Err(e) => return Err((0, e)),
    }
    .map_err(|why| (0, ReadError::Corrupt(why)))?;
    let mut store = Store::new();
    let mut found: u64 = 0;
    loop {
        let offset = reader.good_len();
        let payload = match reader.next_record() {
            Ok(Some(payload)) => payload,
            Ok(None) => return Err((offset, ReadError::Corrupt(Corruption::MissingEnd))),
            Err(e) => return Err((offset, e)),
        };
        match entry_or_end(payload).map_err(|why| (offset, ReadError::Corrupt(why)))? {
            Record::Entry(entry) => {
                store.insert(entry.key, entry.value, entry.deadline);
                found += 1;
            }
            Record::End { entries } if entries != found => {
                return Err((offset, ReadError::Corrupt(Corruption::EntryCount { expected: entries, found })));
            }
            Record::End { .. } => break,
        }
    }
    let offset = reader.good_len();
    match reader.next_record() {
        Ok(None) => Ok(Loaded { sequence, store }),
        Ok(Some(_)) => Err((offset, ReadError::Corrupt(Corruption::AfterEnd))),
        Err(e) => Err((offset, e)),
    }
}

fn start(payload: &[u8]) -> Result<u64, Corruption> {
    let mut fields = Fields::new(payload);
    match fields.u8()? {
        kind::SNAPSHOT_START => {}
        other => return Err(Corruption::UnexpectedKind(other)),
    }
    let sequence = fields.u64()?;
    fields.end()?;
    Ok(sequence)
}

enum Record<'a> {
    Entry(Entry<'a>),
    End { entries: u64 },
}

fn entry_or_end(payload: &[u8]) -> Result<Record<'_>, Corruption> {
    let mut fields = Fields::new(payload);
    match fields.u8()? {
        kind::SNAPSHOT_ENTRY => {
            let deadline = fields.u64()?;
            let key_len = fields.u16()?;
            let key = fields.bytes(usize::from(key_len))?;
            kvmsg::check_key(key).map_err(Corruption::InvalidField)?;
            let value = fields.rest();
            if value.is_empty() {
                return Err(Corruption::EmptyValue);
            }
            Ok(Record::Entry(Entry { key, value, deadline: (deadline != 0).then_some(deadline) }))
        }
        kind::SNAPSHOT_END => {
            let entries = fields.u64()?;
            fields.end()?;
            Ok(Record::End { entries })
        }
        other => Err(Corruption::UnexpectedKind(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot_of(pairs: &[(&str, &str, Option<u64>)]) -> Vec<u8> {
        let entries = pairs.iter().map(|(k, v, d)| Entry { key: k.as_bytes(), value: v.as_bytes(), deadline: *d });
        let mut out = Vec::new();
        write(&mut out, 42, Entries(entries)).unwrap();
        out
    }

    fn corruption(bytes: &[u8]) -> Corruption {
        match read(bytes, bytes.len() as u64) {
            Err((_, ReadError::Corrupt(why))) => why,
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn round_trips_with_deadlines() {
        let bytes = snapshot_of(&[("/a", "1", None), ("/b", "2", Some(1_700_000_000_000))]);
        let loaded = read(&bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(loaded.sequence, 42);
        let entries: Vec<_> = loaded.store.iter().map(|e| (e.key.to_vec(), e.value.to_vec(), e.deadline)).collect();
        assert_eq!(
            entries,
            [(b"/a".to_vec(), b"1".to_vec(), None), (b"/b".to_vec(), b"2".to_vec(), Some(1_700_000_000_000))]
        );
        let empty = snapshot_of(&[]);
        assert_eq!(read(&empty[..], empty.len() as u64).unwrap().store.len(), 0);
    }

    #[test]
    fn any_cut_or_flipped_bit_is_refused() {
        let bytes = snapshot_of(&[("/a", "1", None), ("/b", "2", Some(7))]);
        for cut in 0..bytes.len() {
            assert!(read(&bytes[..cut], cut as u64).is_err(), "cut at {cut}");
        }
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(read(&flipped[..], flipped.len() as u64).is_err(), "bit {bit}");
        }
        let mut twice = bytes.clone();
        twice.extend_from_slice(&bytes);
        assert_eq!(corruption(&twice), Corruption::AfterEnd);
    }

    #[test]
    fn refuses_entries_it_could_not_read_back() {
        let empty_value = [Entry { key: b"/a", value: b"", deadline: None }];
        assert!(matches!(
            write(Vec::new(), 1, Entries(empty_value)),
            Err(WriteError::Unwritable(Corruption::EmptyValue))
        ));
        let long_key = vec![b'k'; kvmsg::MAX_KEY_LEN + 1];
        let entry = [Entry { key: &long_key, value: b"v", deadline: None }];
        assert!(matches!(
            write(Vec::new(), 1, Entries(entry)),
            Err(WriteError::Unwritable(Corruption::InvalidField(_)))
        ));
    }
}
