//! One interface over the security handshakes (NULL, PLAIN, CURVE): the engine sends what a step says,
//! feeds back each command the peer sends, and asks the authenticator when a step says so.

use alloc::{boxed::Box, vec, vec::Vec};
use bytes::Bytes;

use super::curve::{CurveClient, CurveServer};
use super::greeting::Mechanism;
use super::handshake::HandshakeError;
pub use super::handshake::{HandshakeConfig, Step};
use super::null::NullHandshake;
use super::plain::{PlainClient, PlainServer};
use super::zap::ZapReply;

/// A handshake in progress, for any mechanism and role.
#[derive(Debug)]
pub enum Handshake {
    /// NULL (optionally authenticated by address).
    Null(NullHandshake),
    /// PLAIN client.
    PlainClient(PlainClient),
    /// PLAIN server.
    PlainServer(PlainServer),
    /// CURVE client.
    CurveClient(Box<CurveClient>),
    /// CURVE server.
    CurveServer(Box<CurveServer>),
}

impl Handshake {
    /// The mechanism named in our greeting.
    pub fn mechanism(&self) -> Mechanism {
        match self {
            Handshake::Null(_) => Mechanism::Null,
            Handshake::PlainClient(_) | Handshake::PlainServer(_) => Mechanism::Plain,
            Handshake::CurveClient(_) | Handshake::CurveServer(_) => Mechanism::Curve,
        }
    }

    /// The as-server bit of our greeting.
    pub fn as_server(&self) -> bool {
        matches!(self, Handshake::PlainServer(_) | Handshake::CurveServer(_))
    }

    /// Commands to send right after the greeting.
    pub fn start(&mut self) -> Result<Vec<Bytes>, HandshakeError> {
        match self {
            Handshake::Null(h) => Ok(h.start()),
            Handshake::PlainClient(h) => Ok(vec![h.start()]),
            Handshake::PlainServer(_) | Handshake::CurveServer(_) => Ok(vec![]),
            Handshake::CurveClient(h) => Ok(vec![h.start()?]),
        }
    }

    /// Feeds one command frame body from the peer.
    pub fn on_command(&mut self, body: Bytes) -> Result<Step, HandshakeError> {
        match self {
            Handshake::Null(h) => h.on_command(body),
            Handshake::PlainClient(h) => h.on_command(body),
            Handshake::PlainServer(h) => h.on_command(body),
            Handshake::CurveClient(h) => h.on_command(body),
            Handshake::CurveServer(h) => h.on_command(body),
        }
    }

    /// Feeds the authenticator's reply to an [`Step::Authenticate`].
    pub fn on_auth(&mut self, reply: ZapReply) -> Result<Step, HandshakeError> {
        match self {
            Handshake::Null(h) => h.on_auth(reply),
            Handshake::PlainServer(h) => h.on_auth(reply),
            Handshake::CurveServer(h) => h.on_auth(reply),
            Handshake::PlainClient(_) | Handshake::CurveClient(_) => {
                Err(HandshakeError::Misuse("an authenticator reply fed to a client"))
            }
        }
    }
}
