//! The `zmtp` CLI's message parser and printer (the bin's own `frames.rs`, compiled in here): any
//! argument or stdin line either parses or is refused with a message, every format prints what
//! parsed, and the hex form reads back as the same frames.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../zmtp/src/bin/zmtp/frames.rs"]
#[allow(dead_code)]
mod frames;

use frames::{Format, Framing, format_message, parse_message};

fuzz_target!(|input: (Vec<u8>, bool, bool, bool, u8)| {
    let (raw, hex, router, single, d) = input;
    let delimiter = ["|", ",", "::"][usize::from(d) % 3].to_owned();
    let framing = Framing { delimiter: delimiter.clone(), hex, router, single };
    let Ok(msg) = parse_message(&raw, &framing) else { return };
    for format in [Format::Auto, Format::Text, Format::Json] {
        let _ = format_message(&msg, format, &delimiter, false);
        let _ = format_message(&msg, format, &delimiter, true);
        // A draft type's single frame prints with no delimiter to avoid.
        let _ = format_message(&msg, format, "", false);
    }
    let line = format_message(&msg, Format::Hex, &delimiter, false);
    let back = parse_message(line.as_bytes(), &Framing { delimiter, hex: true, router: false, single: false })
        .unwrap_or_else(|e| panic!("the hex form {line:?} does not read back: {e}"));
    assert_eq!(back, msg);
});
