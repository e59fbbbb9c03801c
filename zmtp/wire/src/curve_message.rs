//! The per-message box of a CURVE session: NaCl's `crypto_box_afternm` (XSalsa20 + Poly1305 under
//! the session's precomputed key), built from its primitives so that the MAC can be chosen by
//! length — measured, not assumed:
//!
//! - RustCrypto's `poly1305` picks its AVX2 backend at run time, which costs ~1.3 µs per message
//!   before the first byte here (its setup, and intrinsics it cannot inline without the target
//!   feature at build time): 1,353 ns for a 64 B tag against 69 ns for `orion`'s portable one, but
//!   19.9 µs against 53.6 µs for 64 KiB (thin LTO, this machine's EPYC).
//! - So tags under [`LARGE`] bytes go through `orion`, longer ones through `poly1305`. Both compute
//!   the same function; the tests hold the result to `crypto_box`'s own seal byte for byte.
//!
//! - XSalsa20 four blocks at a time ([`crate::salsa_lanes`]): 124 µs for 64 KiB with the `salsa20`
//!   crate's one block at a time.
//!
//! Session keys are zeroized when dropped.

use crypto_box::{PublicKey, SecretKey};
use curve25519_dalek::montgomery::MontgomeryPoint;
use orion::hazardous::mac::poly1305 as orion_poly1305;
use poly1305::universal_hash::KeyInit;
use salsa20::cipher::consts::U10;
use salsa20::cipher::generic_array::GenericArray;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::salsa_lanes::XSalsaBox;

/// Bytes from which a tag goes through RustCrypto's `poly1305` (see the module docs: the two
/// measured cross near 2.4 KiB).
const LARGE: usize = 2048;

/// A Poly1305 tag.
pub(crate) type Tag = [u8; 16];

/// The key a session's messages are boxed under: X25519 of the two transient keys, through
/// HSalsa20 (libsodium's `crypto_box_beforenm`).
pub(crate) struct MessageKey(Zeroizing<[u8; 32]>);

impl MessageKey {
    pub(crate) fn new(peer: &PublicKey, ours: &SecretKey) -> MessageKey {
        let shared = Zeroizing::new(MontgomeryPoint(*peer.as_bytes()) * ours.to_scalar());
        let key = salsa20::hsalsa::<U10>(GenericArray::from_slice(&shared.0), &GenericArray::default());
        MessageKey(Zeroizing::new(key.into()))
    }

    /// The key for the boxes whose nonces start with `prefix`: one direction of a session
    /// ("CurveZMQMESSAGEC" from the client, "CurveZMQMESSAGES" from the server).
    pub(crate) fn directed(&self, prefix: &[u8; 16]) -> DirectedKey {
        DirectedKey(crate::salsa_lanes::subkey(&self.0, prefix))
    }

    /// Encrypts `buf` in place and returns its tag.
    #[cfg(test)]
    fn seal(&self, nonce: &[u8; 24], buf: &mut [u8]) -> Tag {
        let (prefix, counter) = nonce.split_at(16);
        self.directed(prefix.try_into().unwrap()).seal(counter.try_into().unwrap(), buf)
    }

    /// Checks `tag` over `buf` (in constant time) and decrypts `buf` in place; `Err` leaves it as
    /// it was.
    #[cfg(test)]
    fn open(&self, nonce: &[u8; 24], buf: &mut [u8], expected: &Tag) -> Result<(), ()> {
        let (prefix, counter) = nonce.split_at(16);
        self.directed(prefix.try_into().unwrap()).open(counter.try_into().unwrap(), buf, expected)
    }

    /// The stream for one nonce, and the one-time MAC key its first 32 bytes make.
    #[cfg(test)]
    fn stream(&self, nonce: &[u8; 24], len: usize) -> (XSalsaBox, Zeroizing<[u8; 32]>) {
        XSalsaBox::new(&self.0, nonce, len)
    }
}

/// A session key for one direction's boxes. XSalsa20 first derives a key from the session key and
/// the nonce's first 16 bytes (HSalsa20), which in a CURVE MESSAGE are the same for every message
/// one way: that step is taken once here instead of once per message (it was 13% of a 64-byte
/// message's CPU on each side). Only the last 8 bytes, the message's counter, vary.
pub(crate) struct DirectedKey(Zeroizing<[u8; 32]>);

impl DirectedKey {
    /// The stream for the nonce that ends in `counter`, and the one-time MAC key its first 32
    /// bytes make.
    fn stream(&self, counter: &[u8; 8], len: usize) -> (XSalsaBox, Zeroizing<[u8; 32]>) {
        XSalsaBox::from_subkey(&self.0, counter, len)
    }

    /// Encrypts `buf` in place and returns its tag.
    pub(crate) fn seal(&self, counter: &[u8; 8], buf: &mut [u8]) -> Tag {
        let (mut stream, mac_key) = self.stream(counter, buf.len());
        stream.apply(buf);
        tag(&mac_key, buf)
    }

    /// Checks `tag` over `buf` (in constant time) and decrypts `buf` in place; `Err` leaves it as
    /// it was.
    pub(crate) fn open(&self, counter: &[u8; 8], buf: &mut [u8], expected: &Tag) -> Result<(), ()> {
        let (mut stream, mac_key) = self.stream(counter, buf.len());
        if !bool::from(tag(&mac_key, buf).ct_eq(expected)) {
            return Err(());
        }
        stream.apply(buf);
        Ok(())
    }
}

/// Poly1305 of `data` under a one-time key, by whichever implementation is faster at its length.
fn tag(key: &[u8; 32], data: &[u8]) -> Tag {
    if data.len() >= LARGE {
        poly1305::Poly1305::new(poly1305::Key::from_slice(key)).compute_unpadded(data).into()
    } else {
        let key = orion_poly1305::OneTimeKey::from_slice(key).expect("32 bytes");
        let tag = orion_poly1305::Poly1305::poly1305(&key, data).expect("a tag of any length");
        tag.unprotected_as_bytes().try_into().expect("16 bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crypto_box::SalsaBox;
    use crypto_box::aead::AeadInPlace;
    use rand::{Rng, RngCore, SeedableRng};

    /// The same bytes and tag as `crypto_box` (the reference construction), at lengths on both
    /// sides of [`LARGE`], and a tampered byte anywhere refused.
    #[test]
    fn matches_crypto_box_and_refuses_tampering() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for len in [0, 1, 15, 16, 17, 63, 64, 65, 1000, LARGE - 1, LARGE, LARGE + 1, 65536, 100_003] {
            let (a, b) = (SecretKey::from_bytes(rng.r#gen()), SecretKey::from_bytes(rng.r#gen()));
            let reference = SalsaBox::new(&b.public_key(), &a);
            let ours = MessageKey::new(&b.public_key(), &a);
            let theirs_too = MessageKey::new(&a.public_key(), &b);
            let mut nonce = [0u8; 24];
            rng.fill_bytes(&mut nonce);
            let mut plain = vec![0u8; len];
            rng.fill_bytes(&mut plain);

            let mut expected = plain.clone();
            let expected_tag =
                reference.encrypt_in_place_detached(GenericArray::from_slice(&nonce), b"", &mut expected).unwrap();
            let mut sealed = plain.clone();
            let tag = ours.seal(&nonce, &mut sealed);
            assert_eq!((sealed.as_slice(), &tag[..]), (expected.as_slice(), &expected_tag[..]), "length {len}");

            let mut opened = sealed.clone();
            theirs_too.open(&nonce, &mut opened, &tag).expect("the other end opens it");
            assert_eq!(opened, plain);
            if len > 0 {
                let at = rng.gen_range(0..len);
                let mut tampered = sealed.clone();
                tampered[at] ^= 1;
                assert!(theirs_too.open(&nonce, &mut tampered, &tag).is_err(), "length {len}, byte {at}");
                assert_eq!(tampered[at], sealed[at] ^ 1, "a refused box is left as it was");
            }
            let mut bad_tag = tag;
            bad_tag[0] ^= 0x80;
            assert!(theirs_too.open(&nonce, &mut sealed.clone(), &bad_tag).is_err());
        }
    }
}

#[cfg(test)]
mod timing {
    use super::*;

    /// Prints what one 64 KiB box costs, stream and tag apart (not an assertion):
    /// `cargo test --release -p zmtp-wire --lib timing -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_timing() {
        let key = MessageKey(Zeroizing::new([7u8; 32]));
        let (nonce, mut buf, n) = ([3u8; 24], vec![0u8; 65536], 2000);
        let t = std::time::Instant::now();
        for _ in 0..n {
            key.stream(&nonce, buf.len()).0.apply(&mut buf);
        }
        println!("xsalsa20 64 KiB: {:?}", t.elapsed() / n);
        let t = std::time::Instant::now();
        for _ in 0..n {
            core::hint::black_box(tag(&[5u8; 32], &buf));
        }
        println!("poly1305 64 KiB: {:?}", t.elapsed() / n);
    }
}
