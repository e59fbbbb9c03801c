//! CURVE MESSAGE decoding after a genuine handshake: fuzzed bodies, replays and reordering never panic,
//! and only strictly increasing nonces are accepted.
#![no_main]
use libfuzzer_sys::fuzz_target;
use zmtp_wire::curve::{CurveClient, CurveServer, KeyPair};
use zmtp_wire::{SocketType, Step, ZapReply};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let server_keys = KeyPair::from_secret_bytes([7; 32]);
    let mut client = CurveClient::new(
        common::config(SocketType::Dealer, false),
        KeyPair::from_secret_bytes([9; 32]),
        server_keys.public(),
        &mut common::rng(),
    );
    let mut server = CurveServer::new(common::config(SocketType::Router, true), server_keys, &mut common::rng());
    let Ok(Step::Send(welcome)) = server.on_command(client.start().unwrap()) else { panic!("hello") };
    let Ok(Step::Send(initiate)) = client.on_command(welcome[0].clone()) else { panic!("welcome") };
    let Ok(Step::Authenticate(_)) = server.on_command(initiate[0].clone()) else { panic!("initiate") };
    let Ok(Step::Done { cipher: Some(cipher), .. }) = server.on_auth(ZapReply::allow("")) else { panic!("auth") };
    let (_, mut decoder) = cipher.split();
    let mut last = 0u64;
    for body in common::bodies(data) {
        if let Ok(frame) = decoder.decode_frame(&body) {
            let nonce = u64::from_be_bytes(body[8..16].try_into().unwrap());
            assert!(nonce > last, "accepted a non-increasing nonce");
            last = nonce;
            let _ = frame.more();
        }
    }
});
