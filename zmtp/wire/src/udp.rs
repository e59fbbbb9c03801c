//! RADIO/DISH over `udp://` (RFC 48; libzmq's udp_engine.cpp): one message per datagram, with no
//! greeting, handshake or framing — `group_len(u8) group body`. A RADIO sends, a DISH receives every
//! datagram and keeps its joined groups' (no JOIN travels over UDP).

use bytes::{BufMut, Bytes, BytesMut};

/// The largest datagram libzmq sends or reads (`MAX_UDP_MSG`): a bigger one is cut short by its
/// receive buffer, and would overrun its send buffer, so we send none.
pub const MAX_DATAGRAM: usize = 8192;

/// Why a datagram was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DatagramError {
    /// An empty datagram: not even a group length.
    #[error("an empty datagram")]
    Empty,
    /// The group length runs past the datagram.
    #[error("a group of {group} bytes in a datagram of {len}")]
    Truncated {
        /// The group length the datagram announces.
        group: usize,
        /// The datagram's length.
        len: usize,
    },
    /// Group and body do not fit in [`MAX_DATAGRAM`] (or the group in 255 bytes).
    #[error("a message of {0} bytes does not fit in a datagram")]
    TooLarge(usize),
}

/// Splits a received datagram into its group and body, both slices of it.
pub fn decode(datagram: &Bytes) -> Result<(Bytes, Bytes), DatagramError> {
    let group_len = *datagram.first().ok_or(DatagramError::Empty)? as usize;
    if datagram.len() < 1 + group_len {
        return Err(DatagramError::Truncated { group: group_len, len: datagram.len() });
    }
    Ok((datagram.slice(1..1 + group_len), datagram.slice(1 + group_len..)))
}

/// Writes the datagram of a message to `group` (at most 255 bytes) into `out`.
pub fn encode(group: &[u8], body: &[u8], out: &mut BytesMut) -> Result<(), DatagramError> {
    let len = 1 + group.len() + body.len();
    if group.len() > 255 || len > MAX_DATAGRAM {
        return Err(DatagramError::TooLarge(len));
    }
    out.reserve(len);
    out.put_u8(group.len() as u8);
    out.put_slice(group);
    out.put_slice(body);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_is_group_length_group_body() {
        let mut out = BytesMut::new();
        encode(b"weather", b"sunny", &mut out).unwrap();
        assert_eq!(&out[..], b"\x07weathersunny");
        let (group, body) = decode(&out.freeze()).unwrap();
        assert_eq!((&group[..], &body[..]), (&b"weather"[..], &b"sunny"[..]));
        let (group, body) = decode(&Bytes::from_static(b"\x00")).unwrap();
        assert!(group.is_empty() && body.is_empty());
    }

    #[test]
    fn bad_datagrams_are_typed() {
        assert_eq!(decode(&Bytes::new()), Err(DatagramError::Empty));
        assert_eq!(decode(&Bytes::from_static(b"\x05ab")), Err(DatagramError::Truncated { group: 5, len: 3 }));
        let mut out = BytesMut::new();
        assert_eq!(encode(&[b'g'; 256], b"", &mut out), Err(DatagramError::TooLarge(257)));
        assert_eq!(encode(b"g", &[0; MAX_DATAGRAM], &mut out), Err(DatagramError::TooLarge(MAX_DATAGRAM + 2)));
        assert!(out.is_empty(), "nothing written for a refused message");
    }
}
