//! The frame codec under arbitrary chunking and limits: never panics, its buffer grows with the bytes that
//! arrived (or holds one frame of at most READ_CHUNK), never with sizes the peer claims; every decoded
//! frame respects the limit.
#![no_main]
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use zmtp_wire::FrameCodec;
use zmtp_wire::frame::{MIN_RESERVE, READ_CHUNK};

fuzz_target!(|data: &[u8]| {
    let Some((&[chunk, limit], bytes)) = data.split_first_chunk::<2>() else { return };
    let chunk = (chunk as usize % 64) + 1;
    let max = if limit == 0 { None } else { Some(limit as u64 * 16) };
    let mut codec = FrameCodec::new(max);
    let mut buf = BytesMut::new();
    for piece in bytes.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Some(max) = max {
                        assert!(frame.body.len() as u64 <= max);
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        // Either proportional to what arrived, or one frame of at most READ_CHUNK reserved whole.
        assert!(
            buf.capacity() <= 4 * bytes.len() + 4 * MIN_RESERVE + 2 * READ_CHUNK,
            "capacity {} for {} input bytes",
            buf.capacity(),
            bytes.len()
        );
    }
});
