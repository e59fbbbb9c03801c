//! Shared by the handshake targets: split fuzz input into command bodies (u8 length prefix each).
use bytes::Bytes;
use zmtp_wire::{HandshakeConfig, SocketType};

pub fn bodies(mut data: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = data.split_first() {
        let len = (len as usize).min(rest.len());
        out.push(Bytes::copy_from_slice(&rest[..len]));
        data = &rest[len..];
    }
    out
}

/// CURVE's randomness, seeded: a crash found by the fuzzer replays byte for byte.
#[allow(dead_code)]
pub fn rng() -> rand::rngs::StdRng {
    rand::SeedableRng::seed_from_u64(0x5eed)
}

#[allow(dead_code)]
pub fn config(socket_type: SocketType, authenticate: bool) -> HandshakeConfig {
    HandshakeConfig {
        socket_type,
        routing_id: Bytes::from_static(b"fuzz"),
        zap_domain: String::new(),
        peer_address: "127.0.0.1".into(),
        authenticate,
    }
}
