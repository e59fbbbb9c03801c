//! CURVE server: a real client's HELLO/INITIATE with fuzzed mutations, or raw fuzzed commands.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zmtp_wire::curve::{CurveClient, CurveServer, KeyPair};
use zmtp_wire::{Handshake, SocketType, Step, ZapReply};

#[path = "common.rs"]
mod common;

fn keys() -> (KeyPair, KeyPair) {
    (KeyPair::from_secret_bytes([7; 32]), KeyPair::from_secret_bytes([9; 32]))
}

/// XORs fuzz bytes into a command at fuzz-chosen offsets.
fn mutate(body: &Bytes, edits: &[u8]) -> Bytes {
    let mut b = body.to_vec();
    for pair in edits.chunks(2) {
        if let [at, x] = pair {
            let len = b.len();
            if len > 0 {
                b[*at as usize * len / 256] ^= x;
            }
        }
    }
    Bytes::from(b)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (server_keys, client_keys) = keys();
    let mut server = Handshake::CurveServer(Box::new(CurveServer::new(
        common::config(SocketType::Router, true),
        server_keys.clone(),
        &mut common::rng(),
    )));
    if mode & 1 == 0 {
        for body in common::bodies(rest) {
            match server.on_command(body) {
                Ok(Step::Send(_)) => {}
                Ok(Step::Authenticate(_)) => {
                    let _ = server.on_auth(ZapReply::allow(""));
                    return;
                }
                _ => return,
            }
        }
        return;
    }
    // Structured: a genuine exchange where the fuzzer flips bytes in HELLO or INITIATE.
    let (hello_edits, initiate_edits) = rest.split_at(rest.len() / 2);
    let mut client = CurveClient::new(
        common::config(SocketType::Dealer, false),
        client_keys,
        server_keys.public(),
        &mut common::rng(),
    );
    let hello = mutate(&client.start().unwrap(), hello_edits);
    let Ok(Step::Send(welcome)) = server.on_command(hello) else { return };
    let Ok(Step::Send(initiate)) = client.on_command(welcome[0].clone()) else { return };
    match server.on_command(mutate(&initiate[0], initiate_edits)) {
        Ok(Step::Authenticate(_)) => {
            let _ = server.on_auth(ZapReply::allow(""));
        }
        _ => {}
    }
});
