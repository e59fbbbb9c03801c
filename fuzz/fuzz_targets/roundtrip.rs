//! Encode arbitrary structured frames, decode them back (in fuzz-chosen chunks), compare.
#![no_main]
use arbitrary::Arbitrary;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use zmtp_wire::{Frame, FrameCodec};

#[derive(Arbitrary, Debug)]
struct Input {
    frames: Vec<(bool, bool, Vec<u8>)>,
    chunk: u8,
}

fuzz_target!(|input: Input| {
    let frames: Vec<Frame> = input
        .frames
        .into_iter()
        .map(|(command, more, body)| if command { Frame::command(body) } else { Frame::message(body, more) })
        .collect();
    let mut wire = BytesMut::new();
    let mut codec = FrameCodec::default();
    for f in &frames {
        codec.encode(f.clone(), &mut wire);
    }
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for piece in wire.chunks(input.chunk as usize + 1) {
        buf.extend_from_slice(piece);
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            got.push(f);
        }
    }
    assert_eq!(got, frames);
});
