//! CURVE client fed fuzzed WELCOME/READY/ERROR commands after a genuine HELLO.
#![no_main]
use libfuzzer_sys::fuzz_target;
use zmtp_wire::curve::{CurveClient, KeyPair};
use zmtp_wire::{SocketType, Step};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let server = KeyPair::from_secret_bytes([7; 32]);
    let mut client = CurveClient::new(
        common::config(SocketType::Dealer, false),
        KeyPair::from_secret_bytes([9; 32]),
        server.public(),
        &mut common::rng(),
    );
    let _ = client.start();
    for body in common::bodies(data) {
        match client.on_command(body) {
            Ok(Step::Send(_)) => {}
            _ => return,
        }
    }
});
