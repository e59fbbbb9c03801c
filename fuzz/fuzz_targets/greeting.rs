//! The greeting decoder, fed in chunks whose sizes come from the input.
#![no_main]
use libfuzzer_sys::fuzz_target;
use zmtp_wire::GreetingDecoder;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, bytes)) = data.split_first() else { return };
    let chunk = (chunk as usize % 16) + 1;
    let mut decoder = GreetingDecoder::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let piece = &rest[..chunk.min(rest.len())];
        match decoder.feed(piece) {
            Ok((used, done)) => {
                assert!(used <= piece.len());
                rest = &rest[used..];
                if let Some(g) = done {
                    let _ = g.mechanism();
                    let _ = g.mechanism_text();
                    return;
                }
                if used == 0 {
                    return;
                }
            }
            Err(_) => return,
        }
    }
});
