//! RADIO/DISH datagrams (udp://): whatever decodes re-encodes to the same bytes, and nothing panics
//! or reads past the datagram.
#![no_main]
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use zmtp_wire::udp;

fuzz_target!(|data: &[u8]| {
    let datagram = Bytes::copy_from_slice(data);
    if let Ok((group, body)) = udp::decode(&datagram) {
        assert_eq!(1 + group.len() + body.len(), data.len());
        let mut out = BytesMut::new();
        match udp::encode(&group, &body, &mut out) {
            Ok(()) => assert_eq!(&out[..], data),
            Err(_) => assert!(data.len() > udp::MAX_DATAGRAM, "only an oversized datagram fails to re-encode"),
        }
    }
});
