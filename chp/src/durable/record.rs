//! The frame around every record of every journal file: `[length u32 LE][CRC-32 u32 LE][payload]`.
//!
//! The length says where the next record starts, the checksum says whether this one is what was
//! written. A reader trusts neither before checking it: a length past [`MAX_RECORD_LEN`] or past
//! the end of the file is refused before anything is allocated for it, so a corrupt length field
//! costs nothing.

use std::io::{self, Read};

use super::Corruption;

/// Longest payload of one record. Values are bounded by the server's `max_value_len` (1 MiB by
/// default); the bound here is what keeps a corrupt length field from allocating gigabytes.
pub const MAX_RECORD_LEN: usize = 16 << 20;

/// Bytes before each payload: length and checksum.
pub(crate) const HEADER_LEN: usize = 8;

/// Appends one record to `out`: the payload is written by `payload` straight into `out` (no copy),
/// then its length and checksum are filled in. Fails, leaving `out` as it was, if the payload is
/// longer than [`MAX_RECORD_LEN`].
pub(crate) fn push_record(out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) -> Result<(), usize> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    payload(out);
    let len = out.len() - start - HEADER_LEN;
    if len > MAX_RECORD_LEN {
        out.truncate(start);
        return Err(len);
    }
    let crc = super::crc::crc32(&out[start + HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    out[start + 4..start + HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Why [`RecordReader::next_record`] stopped short of a record.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The bytes are there but are not a record.
    Corrupt(Corruption),
    /// Reading them failed.
    Io(io::Error),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Reads records one by one from `len` bytes of `inner`, reusing one buffer.
pub(crate) struct RecordReader<R> {
    inner: R,
    remaining: u64,
    /// End of the last good record: where a torn tail starts.
    good_len: u64,
    payload: Vec<u8>,
}

impl<R: Read> RecordReader<R> {
    /// A reader of the `len` bytes `inner` holds.
    pub(crate) fn new(inner: R, len: u64) -> Self {
        RecordReader { inner, remaining: len, good_len: 0, payload: Vec::new() }
    }

    /// Bytes of whole, valid records read so far.
    pub(crate) fn good_len(&self) -> u64 {
        self.good_len
    }

    /// The next payload; `Ok(None)` at the end of the bytes. After an error the reader is spent.
    pub(crate) fn next_record(&mut self) -> Result<Option<&[u8]>, ReadError> {
        if self.remaining == 0 {
            return Ok(None);
        }
        if self.remaining < HEADER_LEN as u64 {
            return Err(ReadError::Corrupt(Corruption::Torn));
        }
        let mut header = [0; HEADER_LEN];
        self.inner.read_exact(&mut header)?;
        self.remaining -= HEADER_LEN as u64;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if len > MAX_RECORD_LEN {
            return Err(ReadError::Corrupt(Corruption::TooLong(len)));
        }
        if len as u64 > self.remaining {
            return Err(ReadError::Corrupt(Corruption::Torn));
        }
        // Bounded twice over: by MAX_RECORD_LEN and by the bytes actually left in the file.
        self.payload.resize(len, 0);
        self.inner.read_exact(&mut self.payload)?;
        self.remaining -= len as u64;
        if super::crc::crc32(&self.payload) != crc {
            return Err(ReadError::Corrupt(Corruption::Checksum));
        }
        self.good_len += (HEADER_LEN + len) as u64;
        Ok(Some(&self.payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(bytes: &[u8]) -> (Vec<Vec<u8>>, Option<Corruption>, u64) {
        let mut reader = RecordReader::new(bytes, bytes.len() as u64);
        let mut out = Vec::new();
        loop {
            match reader.next_record() {
                Ok(Some(p)) => out.push(p.to_vec()),
                Ok(None) => return (out, None, reader.good_len()),
                Err(ReadError::Corrupt(c)) => return (out, Some(c), reader.good_len()),
                Err(ReadError::Io(e)) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn frames_round_trip_and_cut_at_the_first_bad_byte() {
        let mut file = Vec::new();
        push_record(&mut file, |p| p.extend_from_slice(b"one")).unwrap();
        push_record(&mut file, |_| {}).unwrap();
        push_record(&mut file, |p| p.extend_from_slice(b"three")).unwrap();
        assert_eq!(file.len(), 3 * HEADER_LEN + 8);
        assert_eq!(records(&file), (vec![b"one".to_vec(), vec![], b"three".to_vec()], None, file.len() as u64));

        let (ok, why, good) = records(&file[..file.len() - 1]);
        assert_eq!((ok.len(), why, good), (2, Some(Corruption::Torn), 19));
        let mut flipped = file.clone();
        flipped[HEADER_LEN] ^= 1;
        assert_eq!(records(&flipped), (vec![], Some(Corruption::Checksum), 0));
    }

    #[test]
    fn a_huge_length_is_refused_before_allocating() {
        let mut file = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        file.extend_from_slice(&[0; 64]);
        assert_eq!(records(&file).1, Some(Corruption::TooLong(u32::MAX as usize)));
        // Within the bound but past the end of the file: torn, still nothing allocated.
        let file = [0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3];
        assert_eq!(records(&file).1, Some(Corruption::Torn));
    }

    #[test]
    fn an_oversized_payload_is_refused_and_leaves_the_buffer_as_it_was() {
        let mut out = b"kept".to_vec();
        assert_eq!(push_record(&mut out, |p| p.resize(p.len() + MAX_RECORD_LEN + 1, 0)), Err(MAX_RECORD_LEN + 1));
        assert_eq!(out, b"kept");
    }
}
