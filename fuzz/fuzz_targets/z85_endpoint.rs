//! Z85 decoding and endpoint parsing of arbitrary strings.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(bytes) = zmtp_wire::z85::decode(text) {
        assert_eq!(zmtp_wire::z85::encode(&bytes).unwrap(), text);
    }
    if let Ok(ep) = text.parse::<zmtp::transport::Endpoint>() {
        let _ = ep.to_string();
    }
});
