//! CURVE's cryptography (CurveZMQ, RFC 26): long-term key pairs, the boxes the handshake is built of,
//! and the per-connection MESSAGE cipher on the hot path. The handshakes themselves are in
//! `curve.rs`.
//!
//! Every box is NaCl `crypto_box` (X25519 + XSalsa20-Poly1305, tag first). Secrets are zeroized on
//! drop.

use alloc::{string::String, vec::Vec};
use bytes::{BufMut, BytesMut};
use crypto_box::aead::Aead;
use crypto_box::aead::generic_array::GenericArray;
use crypto_box::{PublicKey, SalsaBox, SecretKey};
use rand_core::CryptoRngCore;

use super::curve_message::{DirectedKey, MessageKey};
use super::frame::{FLAG_COMMAND, FLAG_MORE, Frame, encode_header};

/// Length of a CURVE key.
pub const KEY_LEN: usize = 32;
/// Length of a box's authentication tag.
pub(super) const TAG: usize = 16;
const MESSAGE_MIN: usize = 33;

/// Why a CURVE handshake or MESSAGE was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CurveError {
    /// A command of the wrong size.
    #[error("CURVE {command} of {len} bytes (expected {expected})")]
    BadLength {
        /// Which command.
        command: &'static str,
        /// Its length.
        len: usize,
        /// What was expected.
        expected: &'static str,
    },
    /// HELLO with a version other than 1.0.
    #[error("CURVE version {0}.{1} is not supported")]
    BadVersion(u8, u8),
    /// A box that does not open: wrong keys or tampering.
    #[error("CURVE {0} box does not decrypt (wrong key or tampered)")]
    Decrypt(&'static str),
    /// INITIATE's cookie is not the one we issued on this connection.
    #[error("CURVE cookie does not match this connection")]
    BadCookie,
    /// The vouch names another transient key or another server.
    #[error("CURVE vouch does not match the client's transient key and our public key")]
    VouchMismatch,
    /// A MESSAGE nonce that does not increase (replay or reordering).
    #[error("CURVE MESSAGE nonce {got} is not above the last one ({last})")]
    NonceReplay {
        /// The nonce received.
        got: u64,
        /// The last accepted nonce.
        last: u64,
    },
    /// A data frame that is not a MESSAGE command.
    #[error("expected a CURVE MESSAGE")]
    NotMessage,
    /// 2^64 messages sent on one connection.
    #[error("CURVE nonce counter exhausted")]
    NonceExhausted,
}

pub(super) fn nonce(prefix: &[u8], tail: &[u8]) -> GenericArray<u8, crypto_box::aead::consts::U24> {
    debug_assert_eq!(prefix.len() + tail.len(), 24);
    let mut n = [0u8; 24];
    n[..prefix.len()].copy_from_slice(prefix);
    n[prefix.len()..].copy_from_slice(tail);
    n.into()
}

pub(super) fn seal(key: &SalsaBox, prefix: &[u8], tail: &[u8], plain: &[u8]) -> Vec<u8> {
    key.encrypt(&nonce(prefix, tail), plain).expect("crypto_box encryption of a bounded buffer")
}

pub(super) fn open(
    key: &SalsaBox,
    prefix: &[u8],
    tail: &[u8],
    cipher: &[u8],
    stage: &'static str,
) -> Result<Vec<u8>, CurveError> {
    key.decrypt(&nonce(prefix, tail), cipher).map_err(|_| CurveError::Decrypt(stage))
}

pub(super) fn random<const N: usize>(rng: &mut impl CryptoRngCore) -> [u8; N] {
    let mut b = [0u8; N];
    rng.fill_bytes(&mut b);
    b
}

pub(super) fn public_key(bytes: &[u8]) -> PublicKey {
    PublicKey::from(<[u8; KEY_LEN]>::try_from(bytes).expect("32-byte slice"))
}

/// A long-term CURVE key pair. The secret half is zeroized when dropped.
///
/// ```
/// let pair = zmtp_wire::KeyPair::generate();
/// let text = pair.public_z85();
/// assert_eq!(text.len(), 40);
/// let again = zmtp_wire::KeyPair::from_secret_z85(&pair.secret_z85()).unwrap();
/// assert_eq!(again.public_z85(), text);
/// ```
#[derive(Clone)]
pub struct KeyPair {
    pub(super) secret: SecretKey,
    pub(super) public: PublicKey,
}

impl core::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KeyPair {{ public: {}, secret: <hidden> }}", self.public_z85())
    }
}

impl KeyPair {
    /// A fresh key pair from the operating system's random number generator (feature `std`).
    #[cfg(feature = "std")]
    pub fn generate() -> KeyPair {
        Self::generate_with(&mut rand_core::OsRng)
    }

    /// A fresh key pair from the given cryptographically secure generator (what `no_std` users call,
    /// with their platform's hardware RNG).
    pub fn generate_with(rng: &mut impl CryptoRngCore) -> KeyPair {
        Self::from_secret(SecretKey::generate(rng))
    }

    fn from_secret(secret: SecretKey) -> KeyPair {
        let public = secret.public_key();
        KeyPair { secret, public }
    }

    /// The pair of a 32-byte secret key.
    pub fn from_secret_bytes(secret: [u8; KEY_LEN]) -> KeyPair {
        Self::from_secret(SecretKey::from(secret))
    }

    /// The pair of a Z85-encoded secret key (40 characters).
    pub fn from_secret_z85(secret: &str) -> Result<KeyPair, super::z85::Z85Error> {
        let bytes = decode_key(secret)?;
        Ok(Self::from_secret_bytes(bytes))
    }

    /// The public key.
    pub fn public(&self) -> [u8; KEY_LEN] {
        *self.public.as_bytes()
    }

    /// The public key in Z85.
    pub fn public_z85(&self) -> String {
        super::z85::encode(self.public.as_bytes()).expect("32 bytes")
    }

    /// The secret key in Z85 (handle with care).
    pub fn secret_z85(&self) -> String {
        super::z85::encode(&self.secret.to_bytes()).expect("32 bytes")
    }
}

/// Reads a key pair from its Z85 secret key (40 characters), as `zmq_curve_keypair` prints it:
/// what command-line tools take for `--curve-server SECRET`.
impl core::str::FromStr for KeyPair {
    type Err = super::z85::Z85Error;

    fn from_str(secret: &str) -> Result<KeyPair, Self::Err> {
        KeyPair::from_secret_z85(secret)
    }
}

/// Decodes a 40-character Z85 key.
///
/// ```
/// use zmtp_wire::curve::decode_key;
/// let short = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf"; // 39 characters
/// assert_eq!(decode_key(short).unwrap_err().to_string(), "a CURVE key is 40 Z85 characters, this one has 39");
/// ```
pub fn decode_key(text: &str) -> Result<[u8; KEY_LEN], super::z85::Z85Error> {
    let chars = text.chars().count();
    if chars != KEY_LEN * 5 / 4 {
        return Err(super::z85::Z85Error::KeyLength(chars));
    }
    let bytes = super::z85::decode(text)?;
    bytes.try_into().map_err(|v: Vec<u8>| super::z85::Z85Error::KeyLength(v.len() * 5 / 4))
}

/// The established session: encrypts and decrypts MESSAGE commands with per-direction nonces.
pub struct CurveCipher {
    encoder: CurveEncoder,
    decoder: CurveDecoder,
}

impl core::fmt::Debug for CurveCipher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CurveCipher")
    }
}

impl CurveCipher {
    /// The session between the peer's transient public key and our transient secret key.
    pub(super) fn new(
        peer: &PublicKey,
        ours: &SecretKey,
        client: bool,
        send_nonce: u64,
        last_recv: u64,
    ) -> CurveCipher {
        let (send, recv): (&'static [u8; 16], &'static [u8; 16]) = if client {
            (b"CurveZMQMESSAGEC", b"CurveZMQMESSAGES")
        } else {
            (b"CurveZMQMESSAGES", b"CurveZMQMESSAGEC")
        };
        let session = MessageKey::new(peer, ours);
        CurveCipher {
            encoder: CurveEncoder { session: session.directed(send), next: send_nonce },
            decoder: CurveDecoder { session: session.directed(recv), last: last_recv },
        }
    }

    /// The two directions, for a reader and a writer that run independently.
    pub fn split(self) -> (CurveEncoder, CurveDecoder) {
        (self.encoder, self.decoder)
    }
}

/// The sending half of a CURVE session.
pub struct CurveEncoder {
    /// The session key for this direction's nonce prefix.
    session: DirectedKey,
    next: u64,
}

impl CurveEncoder {
    /// Appends one frame as an encrypted MESSAGE (a plain outer data frame, as libzmq expects).
    pub fn encode_frame(
        &mut self,
        more: bool,
        command: bool,
        payload: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), CurveError> {
        let nonce_value = self.next;
        self.next = self.next.checked_add(1).ok_or(CurveError::NonceExhausted)?;
        let body_len = 8 + 8 + TAG + 1 + payload.len();
        out.reserve(9 + body_len);
        encode_header(0, body_len, out);
        out.put_slice(b"\x07MESSAGE");
        out.put_u64(nonce_value);
        let tag_at = out.len();
        out.put_bytes(0, TAG);
        out.put_u8((more as u8) | ((command as u8) << 1));
        out.put_slice(payload);
        let tag = self.session.seal(&nonce_value.to_be_bytes(), &mut out[tag_at + TAG..]);
        out[tag_at..tag_at + TAG].copy_from_slice(&tag);
        Ok(())
    }
}

/// The receiving half of a CURVE session.
pub struct CurveDecoder {
    /// The session key for this direction's nonce prefix.
    session: DirectedKey,
    last: u64,
}

impl CurveDecoder {
    /// Opens one MESSAGE frame body into the frame it carries.
    pub fn decode_frame(&mut self, body: &[u8]) -> Result<Frame, CurveError> {
        if !body.starts_with(b"\x07MESSAGE") {
            return Err(CurveError::NotMessage);
        }
        if body.len() < MESSAGE_MIN {
            return Err(CurveError::BadLength { command: "MESSAGE", len: body.len(), expected: ">= 33" });
        }
        let got = u64::from_be_bytes(body[8..16].try_into().expect("8 bytes"));
        if got <= self.last {
            return Err(CurveError::NonceReplay { got, last: self.last });
        }
        let tag: [u8; TAG] = body[16..16 + TAG].try_into().expect("a 16-byte tag");
        let mut plain = BytesMut::from(&body[16 + TAG..]);
        self.session.open(&got.to_be_bytes(), &mut plain, &tag).map_err(|_| CurveError::Decrypt("MESSAGE"))?;
        self.last = got;
        let inner = plain[0];
        let payload = plain.split_off(1).freeze();
        let flags = if inner & 1 != 0 { FLAG_MORE } else { 0 } | if inner & 2 != 0 { FLAG_COMMAND } else { 0 };
        Ok(Frame { flags, body: payload })
    }
}
