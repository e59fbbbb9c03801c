//! Writing a message straight to its connection from the sender's task.
//!
//! A message normally reaches the wire in two hops: the sender queues it in the peer's pipe and
//! wakes the connection's writer task, which encodes and writes it. When the writer is parked with
//! nothing queued, that hop is pure latency (the writer's wake-up, its poll, the drain), so the pipe
//! lets the sender write a small message itself, under the pipe's lock, with one vectored write
//! (ZMQ's own request-reply round trip is then one task hop shorter on each side). What the socket
//! did not take (a full socket buffer) goes back to the writer as the queue's first item.

use std::io::IoSlice;

use bytes::{Bytes, BytesMut};

use crate::message::Message;
use crate::wire::frame::{FLAG_LONG, FLAG_MORE, encode_header};

/// A connection's stream, writable from any task without waiting (tcp and ipc; not inproc, and
/// not under CURVE, whose encoder belongs to the writer task).
pub(crate) trait DirectWrite: Send + Sync + std::fmt::Debug {
    /// One non-blocking vectored write; `WouldBlock` when the socket buffer is full.
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize>;
    /// One non-blocking write of one buffer.
    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize>;
}

/// The largest message (payload bytes) written directly: small enough that the write is short, as
/// it happens under the socket's and the pipe's locks.
pub(crate) const MAX_BYTES: usize = 16 * 1024;
/// The most frames a message written directly may have (one header and one slice each).
const MAX_FRAMES: usize = 8;
/// A frame header's largest size: flags and an 8-byte length.
const HEADER_MAX: usize = 9;
/// A message whose encoding fits this is copied into one buffer on the stack and written with one
/// `send`: a `writev` of its header and payload slices takes a longer way through the kernel
/// (about 5% of a loopback round trip's time).
const COPY_MAX: usize = 512;

/// Whether `msg` may be written directly.
pub(crate) fn fits(msg: &Message) -> bool {
    (1..=MAX_FRAMES).contains(&msg.len()) && msg.byte_len() <= MAX_BYTES
}

/// What a direct write did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// All of it.
    Whole,
    /// Only this much of its encoding: the rest must be written before anything else.
    Part(usize),
    /// Nothing (the socket buffer was full, or the write failed: the writer will meet the error).
    Nothing,
}

/// Writes `msg` (which [`fits`]) in ZMTP framing with one write.
pub(crate) fn write(to: &dyn DirectWrite, msg: &Message) -> Written {
    let total: usize = msg.iter().map(|frame| header_len(frame.len()) + frame.len()).sum();
    let result = match total <= COPY_MAX {
        true => write_copied(to, msg, total),
        false => write_vectored(to, msg),
    };
    match result {
        Ok(n) if n == total => Written::Whole,
        Ok(0) | Err(_) => Written::Nothing,
        Ok(n) => Written::Part(n),
    }
}

/// The message copied into one buffer on the stack (`total` bytes), written with one `send`.
fn write_copied(to: &dyn DirectWrite, msg: &Message, total: usize) -> std::io::Result<usize> {
    let mut copy = [0u8; COPY_MAX];
    let mut at = 0;
    let last = msg.len() - 1;
    for (i, frame) in msg.iter().enumerate() {
        let mut header = [0u8; HEADER_MAX];
        let n = encode_header_into(if i < last { FLAG_MORE } else { 0 }, frame.len(), &mut header);
        copy[at..at + n].copy_from_slice(&header[..n]);
        copy[at + n..at + n + frame.len()].copy_from_slice(frame);
        at += n + frame.len();
    }
    to.try_write(&copy[..total])
}

/// The message as header and payload slices, written with one `writev`.
fn write_vectored(to: &dyn DirectWrite, msg: &Message) -> std::io::Result<usize> {
    let mut headers = [[0u8; HEADER_MAX]; MAX_FRAMES];
    let mut header_lens = [0usize; MAX_FRAMES];
    let last = msg.len() - 1;
    for (i, frame) in msg.iter().enumerate() {
        header_lens[i] = encode_header_into(if i < last { FLAG_MORE } else { 0 }, frame.len(), &mut headers[i]);
    }
    let mut slices = [IoSlice::new(&[]); 2 * MAX_FRAMES];
    for (i, frame) in msg.iter().enumerate() {
        slices[2 * i] = IoSlice::new(&headers[i][..header_lens[i]]);
        slices[2 * i + 1] = IoSlice::new(frame);
    }
    to.try_write_vectored(&slices[..2 * msg.len()])
}

/// A frame header's size for a payload of `len` bytes.
fn header_len(len: usize) -> usize {
    if len > 255 { 9 } else { 2 }
}

/// What is left of `msg`'s encoding after its first `written` bytes went out.
pub(crate) fn tail(msg: &Message, written: usize) -> Bytes {
    let mut buf = BytesMut::with_capacity(msg.byte_len() + HEADER_MAX * msg.len());
    let last = msg.len() - 1;
    for (i, frame) in msg.iter().enumerate() {
        encode_header(if i < last { FLAG_MORE } else { 0 }, frame.len(), &mut buf);
        buf.extend_from_slice(frame);
    }
    buf.split_off(written).freeze()
}

/// A frame header in `out`; its length.
fn encode_header_into(flags: u8, len: usize, out: &mut [u8; HEADER_MAX]) -> usize {
    if len > 255 {
        out[0] = flags | FLAG_LONG;
        out[1..9].copy_from_slice(&(len as u64).to_be_bytes());
        9
    } else {
        out[0] = flags & !FLAG_LONG;
        out[1] = len as u8;
        2
    }
}

/// A stream for tests that takes at most so many bytes and keeps them.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Capped {
    room: usize,
    took: std::sync::Mutex<Vec<u8>>,
}

#[cfg(test)]
impl Capped {
    pub fn new(room: usize) -> Capped {
        Capped { room, took: Default::default() }
    }

    /// What it took so far.
    pub fn took(&self) -> Vec<u8> {
        self.took.lock().unwrap().clone()
    }
}

#[cfg(test)]
impl DirectWrite for Capped {
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        let mut took = self.took.lock().unwrap();
        let before = took.len();
        for b in bufs {
            let n = b.len().min(self.room - took.len());
            took.extend_from_slice(&b[..n]);
        }
        match took.len() - before {
            0 => Err(std::io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }
    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        self.try_write_vectored(&[IoSlice::new(buf)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(msg: &Message) -> Vec<u8> {
        tail(msg, 0).to_vec()
    }

    #[test]
    fn a_direct_write_is_the_writers_framing_and_a_partial_one_leaves_the_exact_rest() {
        // Copied into one buffer, and (over COPY_MAX) written as slices.
        for last in [300, 3_000] {
            one_message_written_directly(Message::from(vec![
                Bytes::from_static(b"id"),
                Bytes::new(),
                Bytes::from(vec![7u8; last]),
            ]));
        }
    }

    fn one_message_written_directly(msg: Message) {
        let whole = encoded(&msg);
        assert_eq!(&whole[..4], &[FLAG_MORE, 2, b'i', b'd']);
        let mut expected = BytesMut::new();
        for (i, frame) in msg.iter().enumerate() {
            encode_header(if i + 1 < msg.len() { FLAG_MORE } else { 0 }, frame.len(), &mut expected);
            expected.extend_from_slice(frame);
        }
        assert_eq!(whole, expected, "the writer's framing");
        for room in [10_000, whole.len()] {
            let to = Capped::new(room);
            assert_eq!(write(&to, &msg), Written::Whole);
            assert_eq!(to.took(), whole);
        }
        for room in [1, 3, 5, 100] {
            let to = Capped::new(room);
            assert_eq!(write(&to, &msg), Written::Part(room));
            let mut out = to.took();
            out.extend_from_slice(&tail(&msg, room));
            assert_eq!(out, whole, "room {room}");
        }
        let full = Capped::new(0);
        assert_eq!(write(&full, &msg), Written::Nothing);
    }

    #[test]
    fn large_or_many_framed_messages_go_through_the_writer() {
        assert!(fits(&Message::single(vec![0u8; MAX_BYTES])));
        assert!(!fits(&Message::single(vec![0u8; MAX_BYTES + 1])));
        assert!(!fits(&Message::from(vec![Bytes::new(); MAX_FRAMES + 1])));
        assert!(!fits(&Message::new()), "no frames: nothing to write");
    }
}
