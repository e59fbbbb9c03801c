//! ZMTP frames and their codec.
//!
//! Decoding is zero-copy: a frame body is split off the read buffer as `Bytes`. Declared sizes are
//! checked against the configured maximum and against `usize` *before* any buffering, and the decoder
//! never reserves more than [`READ_CHUNK`] at a time, so a peer that claims a huge frame costs only the
//! bytes it actually sends.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// More frames follow in this message.
pub const FLAG_MORE: u8 = 0x01;
/// The size field is 8 bytes.
pub const FLAG_LONG: u8 = 0x02;
/// The frame is a command, not message data.
pub const FLAG_COMMAND: u8 = 0x04;
/// The most the decoder reserves in one go while a large frame trickles in.
pub const READ_CHUNK: usize = 256 * 1024;
/// The least it reserves for a partial frame.
pub const MIN_RESERVE: usize = 8 * 1024;

/// One frame: a flags byte and a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// MORE and COMMAND bits (LONG and reserved bits are never stored).
    pub flags: u8,
    /// The frame body.
    pub body: Bytes,
}

impl Frame {
    /// A message frame.
    pub fn message(body: impl Into<Bytes>, more: bool) -> Self {
        Frame { flags: if more { FLAG_MORE } else { 0 }, body: body.into() }
    }

    /// A command frame.
    pub fn command(body: impl Into<Bytes>) -> Self {
        Frame { flags: FLAG_COMMAND, body: body.into() }
    }

    /// Whether more frames follow.
    pub fn more(&self) -> bool {
        self.flags & FLAG_MORE != 0
    }

    /// Whether this is a command frame.
    pub fn is_command(&self) -> bool {
        self.flags & FLAG_COMMAND != 0
    }
}

/// Why a frame could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The declared size exceeds the configured maximum (MAXMSGSIZE).
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// Declared size.
        size: u64,
        /// Configured maximum.
        max: u64,
    },
    /// The declared size cannot be addressed on this platform (32-bit targets) or exceeds 2^63-1.
    #[error("frame size {0} cannot be represented on this platform")]
    SizeOverflow(u64),
}

/// Encodes a frame header (flags and size) for a body of `len` bytes.
#[inline]
pub fn encode_header(flags: u8, len: usize, out: &mut BytesMut) {
    if len > 255 {
        out.put_u8((flags & !FLAG_LONG) | FLAG_LONG);
        out.put_u64(len as u64);
    } else {
        out.put_u8(flags & !FLAG_LONG);
        out.put_u8(len as u8);
    }
}

/// The ZMTP 3.x frame codec.
#[derive(Clone, Debug, Default)]
pub struct FrameCodec {
    max_frame_size: Option<u64>,
}

impl FrameCodec {
    /// A codec that refuses frames larger than `max_frame_size` bytes (`None`: no limit beyond `usize`).
    pub fn new(max_frame_size: Option<u64>) -> Self {
        FrameCodec { max_frame_size }
    }

    /// Parses a header at the start of `src`: `(flags, header length, body length)`, or `None` if the
    /// header is not complete yet.
    fn header(&self, src: &[u8]) -> Result<Option<(u8, usize, usize)>, FrameError> {
        let Some(&flags) = src.first() else {
            return Ok(None);
        };
        let (header_len, size) = if flags & FLAG_LONG != 0 {
            let Some(bytes) = src.get(1..9) else {
                return Ok(None);
            };
            (9, u64::from_be_bytes(bytes.try_into().expect("8 bytes")))
        } else {
            let Some(&size) = src.get(1) else {
                return Ok(None);
            };
            (2, size as u64)
        };
        if let Some(max) = self.max_frame_size
            && size > max
        {
            return Err(FrameError::TooLarge { size, max });
        }
        if size > i64::MAX as u64 {
            return Err(FrameError::SizeOverflow(size));
        }
        let Some(len) = usize::try_from(size).ok().filter(|len| len.checked_add(header_len).is_some()) else {
            return Err(FrameError::SizeOverflow(size));
        };
        Ok(Some((flags & (FLAG_MORE | FLAG_COMMAND), header_len, len)))
    }

    /// Splits the next whole frame off the front of `src`, or returns `None` (having reserved room for
    /// more, bounded by what has arrived) until one is there. The same contract as tokio-util's
    /// `Decoder::decode`.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let Some((flags, header_len, len)) = self.header(src)? else {
            return Ok(None);
        };
        let total = header_len + len;
        if src.len() < total {
            // A frame of at most READ_CHUNK is reserved whole at once (no re-copying as it arrives; a
            // busy connection's read buffer is that large anyway). Beyond that, grow with what has
            // actually arrived, never with what the peer claims: announcing a huge frame and sending
            // ten bytes costs ten bytes plus a small constant.
            let missing = total - src.len();
            let grow = if total <= READ_CHUNK { missing } else { missing.min(src.len().max(MIN_RESERVE)) };
            src.reserve(grow.min(READ_CHUNK));
            return Ok(None);
        }
        src.advance(header_len);
        // An empty frame (a delimiter, an empty UUID or property frame) shares nothing: slicing
        // it from the buffer would cost an atomic reference count, taken and dropped by
        // different threads, for no bytes.
        let body = match len {
            0 => Bytes::new(),
            _ => src.split_to(len).freeze(),
        };
        Ok(Some(Frame { flags, body }))
    }

    /// Appends a frame (header and body) to `dst`.
    pub fn encode(&mut self, frame: Frame, dst: &mut BytesMut) {
        dst.reserve(9 + frame.body.len());
        encode_header(frame.flags, frame.body.len(), dst);
        dst.extend_from_slice(&frame.body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(codec: &mut FrameCodec, bytes: &[u8]) -> Vec<Frame> {
        let mut buf = BytesMut::from(bytes);
        let mut out = vec![];
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            out.push(f);
        }
        out
    }

    #[test]
    fn alol_example() {
        let frames = decode_all(&mut FrameCodec::default(), &[0x00, 0x04, b'A', b'L', b'O', b'L']);
        assert_eq!(frames, vec![Frame::message(&b"ALOL"[..], false)]);
        let mut out = BytesMut::new();
        FrameCodec::default().encode(Frame::message(&b"ALOL"[..], false), &mut out);
        assert_eq!(&out[..], &[0x00, 0x04, b'A', b'L', b'O', b'L']);
    }

    #[test]
    fn long_flag_set_iff_over_255() {
        for (len, header) in [(255usize, 2usize), (256, 9)] {
            let mut out = BytesMut::new();
            FrameCodec::default().encode(Frame::message(vec![7u8; len], true), &mut out);
            assert_eq!(out.len(), header + len);
            assert_eq!(out[0] & FLAG_LONG != 0, len > 255);
            assert_eq!(decode_all(&mut FrameCodec::default(), &out)[0].body.len(), len);
        }
    }

    #[test]
    fn accepts_long_form_for_small_sizes_and_ignores_reserved_bits() {
        let mut bytes = vec![0xF8 | FLAG_LONG | FLAG_MORE];
        bytes.extend_from_slice(&3u64.to_be_bytes());
        bytes.extend_from_slice(b"abc");
        let f = &decode_all(&mut FrameCodec::default(), &bytes)[0];
        assert_eq!(f.flags, FLAG_MORE);
        assert_eq!(&f.body[..], b"abc");
    }

    #[test]
    fn waits_for_whole_frame_in_any_chunking() {
        let mut wire = BytesMut::new();
        let frames = vec![
            Frame::message(&b""[..], true),
            Frame::message(vec![1u8; 300], true),
            Frame::command(&b"\x04PING\x00\x00"[..]),
            Frame::message(&b"x"[..], false),
        ];
        for f in &frames {
            FrameCodec::default().encode(f.clone(), &mut wire);
        }
        for chunk in [1, 2, 3, 7, 100, 1000] {
            let mut codec = FrameCodec::default();
            let mut buf = BytesMut::new();
            let mut got = vec![];
            for piece in wire.chunks(chunk) {
                buf.extend_from_slice(piece);
                while let Some(f) = codec.decode(&mut buf).unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, frames);
        }
    }

    #[test]
    fn huge_declared_size_is_refused_before_buffering() {
        let mut bytes = vec![FLAG_LONG];
        bytes.extend_from_slice(&(1u64 << 63).to_be_bytes());
        let mut buf = BytesMut::from(&bytes[..]);
        assert!(matches!(FrameCodec::default().decode(&mut buf), Err(FrameError::SizeOverflow(_))));
    }

    #[test]
    fn max_frame_size_is_checked_on_the_header() {
        let mut buf = BytesMut::from(&[0x00, 200][..]);
        let err = FrameCodec::new(Some(100)).decode(&mut buf).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { size: 200, max: 100 }));
    }

    #[test]
    fn claimed_size_does_not_drive_allocation() {
        let mut bytes = vec![FLAG_LONG];
        bytes.extend_from_slice(&(1u64 << 40).to_be_bytes());
        let mut buf = BytesMut::from(&bytes[..]);
        let result = FrameCodec::default().decode(&mut buf);
        if cfg!(target_pointer_width = "64") {
            assert!(result.unwrap().is_none());
            assert!(buf.capacity() <= 2 * MIN_RESERVE, "reserved {}", buf.capacity());
        } else {
            assert!(matches!(result, Err(FrameError::SizeOverflow(_))));
        }
    }
}
