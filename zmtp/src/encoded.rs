//! Messages encoded ahead of time: an [`EncodedBatch`] holds many messages already in ZMTP's wire
//! framing, which [`Socket::send_encoded`](crate::Socket::send_encoded) queues for one ROUTER
//! peer as a single item.
//!
//! Why: a server that streams many small messages to one peer (a key-value snapshot, a log replay)
//! pays more for each message's bookkeeping than for its bytes: a frame list allocated per message,
//! a reference count per frame taken on one thread and dropped on the writer's, the writer's encoding.
//! Encoding straight from the server's own data into one buffer costs a copy of the bytes and
//! nothing per message; the connection writes the buffer as it is. Nothing changes on the wire:
//! the peer receives the same messages, in the same order, as sends of them one by one would give.

use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{Error, Result};
use crate::message::Message;
use crate::wire::frame::{FLAG_LONG, FLAG_MORE, encode_header};

/// Messages in ZMTP 3.x framing, built with [`push`](Self::push) and sent to one ROUTER peer with
/// [`Socket::send_encoded`](crate::Socket::send_encoded).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> zmtp::Result<()> {
/// use zmtp::{EncodedBatch, Socket, SocketType};
/// let router = Socket::new(SocketType::Router);
/// let endpoint = router.bind("tcp://127.0.0.1:0").await?;
/// let dealer = Socket::new(SocketType::Dealer);
/// dealer.set_routing_id("reader");
/// dealer.connect(&endpoint).await?;
/// dealer.send("hello").await?; // the ROUTER learns the peer's routing id
/// router.recv().await?;
///
/// let mut batch = EncodedBatch::new();
/// for i in 0..100u32 {
///     batch.push(&[b"key", &i.to_be_bytes(), b"value"])?;
/// }
/// router.send_encoded(b"reader", &mut batch).await?;
/// assert!(batch.is_empty());
/// for i in 0..100u32 {
///     let msg = dealer.recv().await?;
///     assert_eq!(msg.len(), 3);
///     assert_eq!(msg[1], &i.to_be_bytes()[..]);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct EncodedBatch {
    buf: BytesMut,
    messages: usize,
    /// The capacity of the buffer the last send took: the next one starts that large.
    reserve: usize,
}

impl EncodedBatch {
    /// An empty batch; its buffer grows as messages are pushed.
    pub fn new() -> Self {
        EncodedBatch::default()
    }

    /// An empty batch with room for `bytes` of encoded messages (each frame takes its length plus
    /// a 2-byte header, 9 bytes above 255 bytes).
    pub fn with_capacity(bytes: usize) -> Self {
        EncodedBatch { buf: BytesMut::with_capacity(bytes), messages: 0, reserve: 0 }
    }

    /// Appends one message of `frames` (at least one: [`Error::EmptyMessage`] otherwise).
    pub fn push(&mut self, frames: &[&[u8]]) -> Result<()> {
        let Some((last, rest)) = frames.split_last() else {
            return Err(Error::EmptyMessage);
        };
        for frame in rest {
            self.push_frame(FLAG_MORE, frame);
        }
        self.push_frame(0, last);
        self.messages += 1;
        Ok(())
    }

    /// Appends a copy of `msg`.
    #[inline]
    pub fn push_message(&mut self, msg: &Message) -> Result<()> {
        let Some(last) = msg.len().checked_sub(1) else {
            return Err(Error::EmptyMessage);
        };
        for (i, frame) in msg.iter().enumerate() {
            self.push_frame(if i < last { FLAG_MORE } else { 0 }, frame);
        }
        self.messages += 1;
        Ok(())
    }

    /// The bytes `msg` takes once encoded (its frames and their headers).
    pub(crate) fn len_of(msg: &Message) -> usize {
        msg.iter().map(|frame| if frame.len() > 255 { 9 } else { 2 } + frame.len()).sum()
    }

    #[inline]
    fn push_frame(&mut self, flags: u8, frame: &[u8]) {
        // One comparison when the room is there (a batch sized ahead, or grown already): the
        // sender's encoded runs go through here frame by frame.
        let need = 9 + frame.len();
        if self.buf.capacity() - self.buf.len() < need {
            self.grow(need);
        }
        encode_header(flags, frame.len(), &mut self.buf);
        self.buf.extend_from_slice(frame);
    }

    #[cold]
    fn grow(&mut self, need: usize) {
        if self.buf.capacity() == 0 {
            self.buf.reserve(std::mem::take(&mut self.reserve));
        }
        self.buf.reserve(need);
    }

    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.messages
    }

    /// Whether the batch holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    /// Bytes the batch's messages take on the wire (frame headers included).
    pub fn encoded_len(&self) -> usize {
        self.buf.len()
    }

    /// The batch's messages, decoded again (copies: for tests and logging, not the hot path).
    pub fn to_messages(&self) -> Vec<Message> {
        messages(&Bytes::copy_from_slice(&self.buf)).collect()
    }

    /// Empties the batch, keeping its buffer.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.messages = 0;
    }

    /// Takes the encoded bytes and the message count, leaving the batch empty. The whole buffer
    /// goes (not split off, which would leave its spare tail here, sharing the allocation): a
    /// queued batch holds its own allocation only, and the next batch starts in a buffer of its
    /// own, reserved as large as this one (so a stream of similar batches does not grow each by
    /// doubling).
    pub(crate) fn take(&mut self) -> (Bytes, usize) {
        let messages = std::mem::take(&mut self.messages);
        self.reserve = self.buf.capacity();
        (std::mem::take(&mut self.buf).freeze(), messages)
    }

    /// Puts back what [`take`](Self::take) took (nothing was pushed since). The bytes are their
    /// allocation's only handle, so they become the buffer again without a copy.
    pub(crate) fn restore(&mut self, bytes: Bytes, messages: usize) {
        debug_assert!(self.is_empty(), "pushed to between take and restore");
        self.buf = BytesMut::from(bytes);
        self.messages = messages;
    }
}

/// The frames of bytes an [`EncodedBatch`] made: each frame's `MORE` flag and the range of its body.
/// Stops at the first incomplete frame (there is none in a batch's bytes).
pub(crate) fn frames(encoded: &[u8]) -> impl Iterator<Item = (bool, Range<usize>)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let mut header = encoded.get(at..)?;
        let flags = header.try_get_u8().ok()?;
        let len = match flags & FLAG_LONG {
            0 => usize::from(header.try_get_u8().ok()?),
            _ => usize::try_from(header.try_get_u64().ok()?).ok()?,
        };
        let start = encoded.len() - header.len();
        let end = start.checked_add(len).filter(|&end| end <= encoded.len())?;
        at = end;
        Some((flags & FLAG_MORE != 0, start..end))
    })
}

/// The messages of bytes an [`EncodedBatch`] made, each frame a slice of `encoded`.
pub(crate) fn messages(encoded: &Bytes) -> impl Iterator<Item = Message> + '_ {
    let mut frames = frames(encoded);
    std::iter::from_fn(move || {
        let mut parts = Vec::new();
        for (more, body) in frames.by_ref() {
            parts.push(encoded.slice(body));
            if !more {
                return Some(Message::from(parts));
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frame::FrameCodec;

    #[test]
    fn a_batch_is_the_frames_a_codec_would_write() {
        let long = vec![7u8; 300];
        let mut batch = EncodedBatch::new();
        batch.push(&[b"k", b"", &long]).unwrap();
        batch.push_message(&Message::from(vec![Bytes::from_static(b"one")])).unwrap();
        assert_eq!(batch.push(&[]).unwrap_err().to_string(), Error::EmptyMessage.to_string());
        assert_eq!(batch.len(), 2);
        let (bytes, count) = batch.take();
        assert_eq!((count, batch.len(), batch.encoded_len()), (2, 0, 0));

        let mut wire = BytesMut::from(&bytes[..]);
        let mut codec = FrameCodec::default();
        let mut decoded = Vec::new();
        while let Some(frame) = codec.decode(&mut wire).unwrap() {
            decoded.push((frame.more(), frame.body.to_vec()));
        }
        let expected = [(true, b"k".to_vec()), (true, vec![]), (false, long.clone()), (false, b"one".to_vec())];
        assert_eq!(decoded, expected);
        let ranges: Vec<_> = frames(&bytes).map(|(more, r)| (more, bytes[r].to_vec())).collect();
        assert_eq!(ranges, expected);

        let msgs: Vec<Message> = messages(&bytes).collect();
        assert_eq!(msgs.len(), 2);
        assert_eq!((msgs[0].len(), &msgs[0][2][..]), (3, &long[..]));
        assert_eq!(&msgs[1][0][..], b"one");
    }

    #[test]
    fn a_batch_taken_and_restored_is_the_same_buffer() {
        let mut batch = EncodedBatch::with_capacity(1024);
        batch.push(&[b"abc"]).unwrap();
        let (bytes, count) = batch.take();
        let at = bytes.as_ptr();
        batch.restore(bytes, count);
        assert_eq!((batch.len(), batch.encoded_len()), (1, 5));
        assert_eq!(batch.buf.as_ptr(), at, "copied");
        batch.push(&[b"d"]).unwrap();
        assert_eq!(frames(&batch.buf).count(), 2);
    }

    #[test]
    fn a_cut_batch_yields_only_its_whole_frames() {
        let mut batch = EncodedBatch::new();
        batch.push(&[b"abc", b"defg"]).unwrap();
        let (bytes, _) = batch.take();
        for cut in 0..bytes.len() {
            let whole = frames(&bytes[..cut]).count();
            assert!(whole <= 1 + usize::from(cut == bytes.len()), "cut {cut}: {whole}");
        }
        assert_eq!(frames(&bytes[..5]).count(), 1);
    }
}
