//! PLAIN server and client fed arbitrary commands.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zmtp_wire::plain::{PlainClient, PlainServer};
use zmtp_wire::{Handshake, SocketType, Step, ZapReply};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut hs = if mode & 1 == 0 {
        Handshake::PlainServer(PlainServer::new(common::config(SocketType::Rep, true)))
    } else {
        Handshake::PlainClient(PlainClient::new(
            common::config(SocketType::Req, false),
            Bytes::from("u"),
            Bytes::from("p"),
        ))
    };
    let _ = hs.start();
    for body in common::bodies(rest) {
        match hs.on_command(body) {
            Ok(Step::Authenticate(req)) => {
                assert_eq!(req.credentials.len(), 2);
                let reply = if mode & 2 == 2 { ZapReply::allow("u") } else { ZapReply::deny("no") };
                if !matches!(hs.on_auth(reply), Ok(Step::Send(_))) {
                    return;
                }
            }
            Ok(Step::Send(_)) => {}
            Ok(_) | Err(_) => return,
        }
    }
});
