//! Command and metadata parsing; whatever parses re-encodes to something that parses the same way.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zmtp_wire::{Command, Metadata};

fuzz_target!(|data: &[u8]| {
    if let Ok(md) = Metadata::parse(data) {
        let mut out = bytes::BytesMut::new();
        md.encode(&mut out);
        assert_eq!(Metadata::parse(&out).unwrap(), md);
    }
    if let Ok(cmd) = Command::parse(Bytes::copy_from_slice(data)) {
        let again = Command::parse(cmd.body()).expect("re-encoded command parses");
        match (&cmd, &again) {
            // PING/PONG contexts are cut to 16 bytes and ERROR reasons to 255 when encoded.
            (Command::Ping { .. }, Command::Ping { .. })
            | (Command::Pong(_), Command::Pong(_))
            | (Command::Error(_), Command::Error(_)) => {}
            _ => assert_eq!(cmd, again),
        }
    }
});
