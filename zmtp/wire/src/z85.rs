//! Z85 (RFC 32): the text form of CURVE keys (32 bytes ↔ 40 characters).

use alloc::{string::String, vec::Vec};

const ALPHABET: &[u8; 85] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Why a Z85 string or input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Z85Error {
    /// Encoding needs a multiple of 4 bytes, decoding a multiple of 5 characters.
    #[error("Z85 length {0} is not a multiple of {1}")]
    BadLength(usize, usize),
    /// A character outside the Z85 alphabet.
    #[error("invalid Z85 character {0:?}")]
    BadChar(char),
    /// A 5-character group whose value does not fit 32 bits.
    #[error("Z85 group out of range")]
    Overflow,
    /// A CURVE key of the wrong length (a key is 32 bytes: 40 Z85 characters).
    #[error("a CURVE key is 40 Z85 characters, this one has {0}")]
    KeyLength(usize),
}

/// Encodes bytes (length a multiple of 4): `86 4F D2 6F B5 59 F7 5B` is `HelloWorld` (the
/// spec's example, checked in this module's tests).
pub fn encode(data: &[u8]) -> Result<String, Z85Error> {
    if !data.len().is_multiple_of(4) {
        return Err(Z85Error::BadLength(data.len(), 4));
    }
    let mut out = String::with_capacity(data.len() * 5 / 4);
    for chunk in data.chunks(4) {
        let mut value = u32::from_be_bytes(chunk.try_into().expect("4 bytes"));
        let mut group = [0u8; 5];
        for slot in group.iter_mut().rev() {
            *slot = ALPHABET[(value % 85) as usize];
            value /= 85;
        }
        out.extend(group.iter().map(|&c| c as char));
    }
    Ok(out)
}

/// Decodes a Z85 string (length a multiple of 5).
pub fn decode(text: &str) -> Result<Vec<u8>, Z85Error> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(5) {
        return Err(Z85Error::BadLength(bytes.len(), 5));
    }
    let mut out = Vec::with_capacity(bytes.len() * 4 / 5);
    for group in bytes.chunks(5) {
        let mut value: u64 = 0;
        for &c in group {
            let digit = ALPHABET.iter().position(|&a| a == c).ok_or(Z85Error::BadChar(c as char))?;
            value = value * 85 + digit as u64;
        }
        let value = u32::try_from(value).map_err(|_| Z85Error::Overflow)?;
        out.extend_from_slice(&value.to_be_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc32_example_and_round_trip() {
        let hello = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B];
        assert_eq!(encode(&hello).unwrap(), "HelloWorld");
        assert_eq!(decode("HelloWorld").unwrap(), hello);
        let key: Vec<u8> = (0..32).collect();
        assert_eq!(decode(&encode(&key).unwrap()).unwrap(), key);
    }

    #[test]
    fn bad_input_is_typed() {
        assert_eq!(encode(&[1, 2, 3]), Err(Z85Error::BadLength(3, 4)));
        assert_eq!(decode("abcd"), Err(Z85Error::BadLength(4, 5)));
        assert_eq!(decode("abcd~"), Err(Z85Error::BadChar('~')));
        assert_eq!(decode("#####"), Err(Z85Error::Overflow));
    }
}
