//! 6/PPP command and envelope parsing on arbitrary multipart messages.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ppp::{Command, Envelope};

#[path = "multipart.rs"]
mod multipart;

fuzz_target!(|data: &[u8]| {
    let msg = multipart::message(data);
    if let Ok(cmd) = Command::parse(&msg) {
        assert_eq!(Command::parse(&cmd.message()).ok(), Some(cmd), "commands round-trip");
    }
    if let Some(first) = msg.first() {
        let _ = Command::from_frame(first);
    }
    let _ = Envelope::check(&msg, 1);
    if let Ok((envelope, content)) = Envelope::split(msg) {
        let _ = envelope.wrap(content);
    }
});
