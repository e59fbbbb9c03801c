//! The 16-byte UUID of a kvmsg: random (RFC 4122 version 4) when we make one, any 16 bytes on input.
//!
//! Kept in-crate: the `uuid` crate pulls wasm-only dependencies into the graph for no gain here.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// A kvmsg UUID.
///
/// ```
/// let a = chp::Uuid::new_v4();
/// assert_ne!(a, chp::Uuid::new_v4());
/// assert_eq!(chp::Uuid::from_slice(a.as_bytes()), Some(a));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uuid([u8; 16]);

impl Uuid {
    /// A random (version 4, RFC 4122 variant) UUID from the OS-seeded thread RNG.
    pub fn new_v4() -> Uuid {
        let mut b: [u8; 16] = rand::random();
        b[6] = (b[6] & 0x0F) | 0x40;
        b[8] = (b[8] & 0x3F) | 0x80;
        Uuid(b)
    }

    /// The UUID in these 16 bytes (`None` for any other length).
    pub fn from_slice(bytes: &[u8]) -> Option<Uuid> {
        bytes.try_into().ok().map(Uuid)
    }

    /// The 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

/// A map keyed by UUIDs this process made (random already): hashed by folding their bytes, not
/// by SipHash (hashing the UUID of every echoed update was ~3% of a publishing client's CPU).
/// Only for maps whose keys we insert: lookups of a peer's UUIDs cost no more than any lookup,
/// but a map filled with keys a peer chose could be flooded.
pub(crate) type UuidMap<V> = HashMap<Uuid, V, BuildHasherDefault<UuidHasher>>;

/// See [`UuidMap`].
#[derive(Default)]
pub(crate) struct UuidHasher(u64);

impl Hasher for UuidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_and_variant_bits() {
        let u = Uuid::new_v4();
        assert_eq!(u.as_bytes()[6] >> 4, 4);
        assert_eq!(u.as_bytes()[8] >> 6, 0b10);
        assert_eq!(u.to_string().len(), 36);
        assert_eq!(Uuid::from_slice(&[0; 15]), None);
    }
}
