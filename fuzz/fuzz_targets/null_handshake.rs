//! NULL handshake (with and without authentication) fed arbitrary commands.
#![no_main]
use libfuzzer_sys::fuzz_target;
use zmtp_wire::{Handshake, NullHandshake, SocketType, Step, ZapReply};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut hs = Handshake::Null(NullHandshake::new(common::config(SocketType::Router, mode & 1 == 1)));
    let _ = hs.start();
    for body in common::bodies(rest) {
        match hs.on_command(body) {
            Ok(Step::Authenticate(_)) => {
                let _ = hs.on_auth(if mode & 2 == 2 { ZapReply::allow("u") } else { ZapReply::deny("no") });
                return;
            }
            Ok(Step::Send(_)) => {}
            Ok(_) | Err(_) => return,
        }
    }
});
