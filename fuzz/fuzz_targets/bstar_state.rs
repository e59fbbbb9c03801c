//! Binary Star state messages: decoding never panics, and what decodes drives the FSM without panicking.
#![no_main]
use bstar::fsm::{Event, transition};
use bstar::{State, codec};
use libfuzzer_sys::fuzz_target;

#[path = "multipart.rs"]
mod multipart;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let msg = multipart::message(rest);
    if let Ok(peer) = codec::decode(&msg) {
        assert_eq!(codec::decode(&codec::encode(peer)).ok(), Some(peer));
        for ours in [State::Primary, State::Backup, State::Active, State::Passive] {
            let _ = transition(ours, Event::from_peer(peer), flags & 1 == 1);
        }
    }
});
