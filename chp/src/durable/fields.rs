//! Reading a payload's fixed fields (little-endian integers, length-prefixed byte strings)
//! without ever indexing past its end: every short read is [`Corruption::Malformed`].

use super::Corruption;

/// Tags of the payload kinds, their first byte. A new layout gets a new tag, so a reader
/// never misreads an old file.
pub(crate) mod kind {
    /// A log record: one update.
    pub(crate) const UPDATE: u8 = 1;
    /// A snapshot's first record: its sequence.
    pub(crate) const SNAPSHOT_START: u8 = 2;
    /// One key of a snapshot.
    pub(crate) const SNAPSHOT_ENTRY: u8 = 3;
    /// A snapshot's last record: how many entries came before.
    pub(crate) const SNAPSHOT_END: u8 = 4;
}

/// A cursor over a payload.
pub(crate) struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    pub(crate) fn new(payload: &'a [u8]) -> Self {
        Fields(payload)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corruption> {
        if n > self.0.len() {
            return Err(Corruption::Malformed);
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Corruption> {
        Ok(self.bytes(N)?.try_into().expect("N bytes"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Corruption> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Corruption> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Corruption> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Corruption> {
        self.array().map(u64::from_le_bytes)
    }

    /// Whatever is left.
    pub(crate) fn rest(self) -> &'a [u8] {
        self.0
    }

    /// Fails unless nothing is left.
    pub(crate) fn end(self) -> Result<(), Corruption> {
        if self.0.is_empty() { Ok(()) } else { Err(Corruption::Malformed) }
    }
}
