//! Metadata properties carried by READY (and PLAIN/CURVE INITIATE): `name_len(u8) name value_len(u32 BE) value`.
//!
//! Names are matched case-insensitively on input (RFC 23) but written exactly as given, because libzmq
//! compares `Socket-Type` and `Identity` case-sensitively.

use alloc::{string::String, vec::Vec};
use bytes::{BufMut, Bytes, BytesMut};

/// The largest value length the wire allows.
pub const MAX_VALUE_LEN: usize = 0x7FFF_FFFF;

/// An ordered list of metadata properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    properties: Vec<(String, Bytes)>,
}

/// Why a metadata block was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// The block ended inside a property.
    #[error("metadata truncated at byte {0}")]
    Truncated(usize),
    /// A property name is empty or has characters outside `A-Za-z0-9-_.+`.
    #[error("invalid metadata property name {0:?}")]
    BadName(String),
    /// A value length over 2^31-1.
    #[error("metadata value of {0} bytes is too long")]
    ValueTooLong(u32),
}

fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&c| c.is_ascii_alphanumeric() || b"-_.+".contains(&c))
}

impl Metadata {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a property (names are written exactly as given).
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<Bytes>) -> &mut Self {
        self.properties.push((name.into(), value.into()));
        self
    }

    /// The first property with this name, compared case-insensitively.
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.properties.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    /// All properties in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Bytes)> {
        self.properties.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Parses a metadata block.
    pub fn parse(mut data: &[u8]) -> Result<Self, MetadataError> {
        let total = data.len();
        let mut properties = Vec::new();
        while !data.is_empty() {
            let at = total - data.len();
            let name_len = data[0] as usize;
            let name = data.get(1..1 + name_len).ok_or(MetadataError::Truncated(at))?;
            if !valid_name(name) {
                return Err(MetadataError::BadName(String::from_utf8_lossy(name).into_owned()));
            }
            let rest = &data[1 + name_len..];
            let len_bytes: [u8; 4] = rest.get(..4).ok_or(MetadataError::Truncated(at))?.try_into().expect("4 bytes");
            let value_len = u32::from_be_bytes(len_bytes);
            if value_len as usize > MAX_VALUE_LEN {
                return Err(MetadataError::ValueTooLong(value_len));
            }
            let value = rest.get(4..4 + value_len as usize).ok_or(MetadataError::Truncated(at))?;
            properties
                .push((String::from_utf8(name.to_vec()).expect("validated ASCII"), Bytes::copy_from_slice(value)));
            data = &rest[4 + value_len as usize..];
        }
        Ok(Metadata { properties })
    }

    /// Encoded length in bytes.
    pub fn encoded_len(&self) -> usize {
        self.properties.iter().map(|(n, v)| 1 + n.len() + 4 + v.len()).sum()
    }

    /// Appends the encoded block to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        for (name, value) in &self.properties {
            debug_assert!(name.len() <= 255 && valid_name(name.as_bytes()));
            out.put_u8(name.len() as u8);
            out.put_slice(name.as_bytes());
            out.put_u32(value.len() as u32);
            out.put_slice(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_case_insensitive_lookup() {
        let mut md = Metadata::new();
        md.insert("Socket-Type", "DEALER").insert("Identity", "");
        let mut out = BytesMut::new();
        md.encode(&mut out);
        assert_eq!(out.len(), md.encoded_len());
        let back = Metadata::parse(&out).unwrap();
        assert_eq!(back, md);
        assert_eq!(back.get("socket-type").unwrap(), "DEALER");
        assert_eq!(back.get("IDENTITY").unwrap(), "");
    }

    #[test]
    fn truncation_and_bad_names_are_typed() {
        assert_eq!(Metadata::parse(&[5, b'a']), Err(MetadataError::Truncated(0)));
        assert_eq!(Metadata::parse(&[1, b'a', 0, 0, 0, 9, b'x']), Err(MetadataError::Truncated(0)));
        assert!(matches!(Metadata::parse(&[0, 0, 0, 0, 0]), Err(MetadataError::BadName(_))));
        assert!(matches!(Metadata::parse(&[1, b' ', 0, 0, 0, 0]), Err(MetadataError::BadName(_))));
        assert_eq!(Metadata::parse(&[1, b'a', 0x80, 0, 0, 0]), Err(MetadataError::ValueTooLong(0x8000_0000)));
    }
}
