//! The 64-byte ZMTP 3.x greeting: building ours and parsing the peer's as its bytes arrive.
//!
//! The peer's greeting is checked in the stages libzmq uses, so a ZMTP 1.0/2.0 peer (which stops
//! after 10 or 11 bytes and waits) is refused at once instead of hanging until the handshake timeout.

use alloc::{string::String, vec::Vec};
use core::fmt;

/// Length of a ZMTP 3.x greeting.
pub const GREETING_LEN: usize = 64;

/// A security mechanism as named in the greeting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// No security (RFC 23 §NULL).
    Null,
    /// Clear-text user name and password (RFC 24).
    Plain,
    /// CurveZMQ (RFC 25/26).
    Curve,
}

impl Mechanism {
    /// The ASCII name as it appears in the greeting.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Null => "NULL",
            Mechanism::Plain => "PLAIN",
            Mechanism::Curve => "CURVE",
        }
    }

    fn field(self) -> [u8; 20] {
        let mut field = [0u8; 20];
        let name = self.name().as_bytes();
        field[..name.len()].copy_from_slice(name);
        field
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a greeting says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Greeting {
    /// Major version; 3 for everything this stack speaks.
    pub major: u8,
    /// Minor version: 0 for ZMTP 3.0, 1 for ZMTP 3.1.
    pub minor: u8,
    /// The 20-byte mechanism field, NUL padded.
    pub mechanism: [u8; 20],
    /// The as-server bit (libzmq always sends 0 and never reads it).
    pub as_server: bool,
}

impl Greeting {
    /// Our greeting: ZMTP 3.1 with the given mechanism.
    pub fn new(mechanism: Mechanism, as_server: bool) -> Self {
        Greeting { major: 3, minor: 1, mechanism: mechanism.field(), as_server }
    }

    /// The 64 bytes on the wire.
    pub fn encode(&self) -> [u8; GREETING_LEN] {
        let mut out = [0u8; GREETING_LEN];
        out[0] = 0xFF;
        // Padding (1..=8) is meaningless; libzmq writes 1 as a u64 BE there and so do we.
        out[8] = 1;
        out[9] = 0x7F;
        out[10] = self.major;
        out[11] = self.minor;
        out[12..32].copy_from_slice(&self.mechanism);
        out[32] = self.as_server as u8;
        out
    }

    /// The mechanism the peer asked for, if it is one we know.
    pub fn mechanism(&self) -> Option<Mechanism> {
        [Mechanism::Null, Mechanism::Plain, Mechanism::Curve].into_iter().find(|m| m.field() == self.mechanism)
    }

    /// The mechanism field as printable text, for error messages.
    pub fn mechanism_text(&self) -> String {
        let end = self.mechanism.iter().position(|&b| b == 0).unwrap_or(20);
        String::from_utf8_lossy(&self.mechanism[..end]).into_owned()
    }

    /// Checks that the peer's greeting can talk to ours (version and mechanism).
    pub fn check_peer(&self, ours: Mechanism) -> Result<(), GreetingError> {
        if self.mechanism != ours.field() {
            return Err(GreetingError::MechanismMismatch { ours, theirs: self.mechanism_text() });
        }
        Ok(())
    }
}

/// Why a peer's greeting was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GreetingError {
    /// Byte 0 is not 0xFF or byte 9 has bit 0 clear: a ZMTP/1.0 peer or not ZMTP at all.
    #[error("peer is not speaking ZMTP 3 (signature bytes {first:#04x}..{last:#04x})")]
    BadSignature {
        /// Byte 0 as received.
        first: u8,
        /// Byte 9 as received.
        last: u8,
    },
    /// Major version below 3 (ZMTP 1.0/2.0), which this stack does not speak.
    #[error("peer speaks ZMTP revision {major}, only ZMTP 3.x is supported")]
    UnsupportedVersion {
        /// The revision byte the peer sent.
        major: u8,
    },
    /// The peer asked for another security mechanism.
    #[error("security mechanism mismatch: we use {ours}, peer asked for {theirs:?}")]
    MechanismMismatch {
        /// Ours.
        ours: Mechanism,
        /// The peer's, as text.
        theirs: String,
    },
}

/// Parses a peer's greeting incrementally, refusing it as early as the bytes allow.
#[derive(Debug, Default)]
pub struct GreetingDecoder {
    buf: Vec<u8>,
}

impl GreetingDecoder {
    /// A decoder that has seen nothing yet.
    pub fn new() -> Self {
        GreetingDecoder { buf: Vec::with_capacity(GREETING_LEN) }
    }

    /// How many more bytes are needed before the greeting is complete.
    pub fn remaining(&self) -> usize {
        GREETING_LEN - self.buf.len()
    }

    /// Feeds bytes; consumes at most [`remaining`](Self::remaining) of them and returns how many were
    /// used, plus the greeting once all 64 bytes are in.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(usize, Option<Greeting>), GreetingError> {
        let used = bytes.len().min(self.remaining());
        self.buf.extend_from_slice(&bytes[..used]);
        let b = &self.buf;
        // A first byte other than 0xFF is ZMTP/1.0: refuse it without waiting for ten bytes.
        if b.first().is_some_and(|&first| first != 0xFF) || (b.len() >= 10 && b[9] & 1 == 0) {
            return Err(GreetingError::BadSignature { first: b[0], last: b.get(9).copied().unwrap_or(0) });
        }
        if b.len() >= 11 && b[10] < 3 {
            return Err(GreetingError::UnsupportedVersion { major: b[10] });
        }
        if b.len() < GREETING_LEN {
            return Ok((used, None));
        }
        let mut mechanism = [0u8; 20];
        mechanism.copy_from_slice(&b[12..32]);
        Ok((used, Some(Greeting { major: b[10], minor: b[11], mechanism, as_server: b[32] == 1 })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_libzmq_layout() {
        let g = Greeting::new(Mechanism::Null, false).encode();
        assert_eq!(g[0], 0xFF);
        assert_eq!(g[9], 0x7F);
        assert_eq!(&g[10..12], &[3, 1]);
        assert_eq!(&g[12..16], b"NULL");
        assert!(g[16..].iter().all(|&b| b == 0));
    }

    #[test]
    fn parses_in_arbitrary_chunks() {
        let bytes = Greeting::new(Mechanism::Plain, true).encode();
        for chunk in 1..=64 {
            let mut d = GreetingDecoder::new();
            let mut got = None;
            for piece in bytes.chunks(chunk) {
                let (used, g) = d.feed(piece).unwrap();
                assert_eq!(used, piece.len());
                got = g;
            }
            let g = got.expect("complete");
            assert_eq!((g.major, g.minor), (3, 1));
            assert_eq!(g.mechanism(), Some(Mechanism::Plain));
            assert!(g.as_server);
        }
    }

    #[test]
    fn padding_is_not_validated() {
        let mut bytes = Greeting::new(Mechanism::Null, false).encode();
        bytes[1..9].copy_from_slice(&[0xAB; 8]);
        bytes[9] = 0x01; // libzmq only checks bit 0
        let (_, g) = GreetingDecoder::new().feed(&bytes).unwrap();
        assert!(g.is_some());
    }

    #[test]
    fn refuses_zmtp1_at_first_byte() {
        let err = GreetingDecoder::new().feed(&[0x05]).unwrap_err();
        assert!(matches!(err, GreetingError::BadSignature { first: 5, .. }));
    }

    #[test]
    fn refuses_revision_1_and_2_after_11_bytes() {
        for rev in [1u8, 2] {
            let mut bytes = [0u8; 11];
            bytes[0] = 0xFF;
            bytes[9] = 0x7F;
            bytes[10] = rev;
            let err = GreetingDecoder::new().feed(&bytes).unwrap_err();
            assert_eq!(err, GreetingError::UnsupportedVersion { major: rev });
        }
    }

    #[test]
    fn mechanism_mismatch_is_typed() {
        let peer = Greeting::new(Mechanism::Curve, false);
        let err = peer.check_peer(Mechanism::Null).unwrap_err();
        assert_eq!(err, GreetingError::MechanismMismatch { ours: Mechanism::Null, theirs: "CURVE".into() });
    }

    #[test]
    fn accepts_zmtp_3_0_and_later_minors() {
        for minor in [0u8, 1, 2] {
            let mut bytes = Greeting::new(Mechanism::Null, false).encode();
            bytes[11] = minor;
            let (_, g) = GreetingDecoder::new().feed(&bytes).unwrap();
            assert_eq!(g.unwrap().minor, minor);
        }
    }
}
