//! How a socket names its peers internally: sequential ids it chooses itself (never a peer's
//! routing id), and maps keyed by them.

use std::collections::HashMap;

/// A peer of one socket (a connection, or a connect-side slot kept across reconnects).
pub(crate) type PeerId = u64;

/// Peer ids are sequential integers chosen by us, not by peers: a multiplicative hash is enough
/// and SipHash showed up at ~10% of the per-message cost.
#[derive(Default, Clone, Copy)]
pub(crate) struct PeerIdHasher(u64);

impl std::hash::Hasher for PeerIdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map keyed by peer id.
pub(crate) type PeerMap<V> = HashMap<PeerId, V, std::hash::BuildHasherDefault<PeerIdHasher>>;
