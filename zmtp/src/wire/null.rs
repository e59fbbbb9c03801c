//! The NULL mechanism handshake as a state machine (RFC 23 §NULL).
//!
//! libzmq is symmetric here: both sides send READY straight after the greeting, and the handshake is
//! complete once READY has been both sent and received. Any other command during the handshake, an
//! ERROR, bad metadata or an incompatible peer socket type fails it with a typed error.

use bytes::Bytes;

use super::command::{Command, CommandError};
use super::metadata::Metadata;
use super::socket_type::SocketType;

/// What we learned about the peer during the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's socket type (`None` if it sent no `Socket-Type`, which libzmq accepts).
    pub socket_type: Option<SocketType>,
    /// The peer's `Identity` property, empty if absent.
    pub identity: Bytes,
    /// Every property the peer sent.
    pub metadata: Metadata,
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The peer sent ERROR (e.g. an authentication failure), with its reason.
    #[error("peer refused the handshake: {}", String::from_utf8_lossy(.0))]
    PeerError(Bytes),
    /// The peer's socket type cannot talk to ours.
    #[error("peer socket type {peer} is not compatible with {ours}")]
    IncompatibleSocketType {
        /// Our type.
        ours: SocketType,
        /// The peer's type.
        peer: SocketType,
    },
    /// `Socket-Type` is not a known type name.
    #[error("peer sent unknown socket type {0:?}")]
    UnknownSocketType(String),
    /// A command that has no place at this point of the handshake.
    #[error("unexpected {0} command during the handshake")]
    UnexpectedCommand(String),
    /// A message frame before the handshake completed.
    #[error("message frame received before the handshake completed")]
    UnexpectedMessage,
    /// A malformed command.
    #[error(transparent)]
    Command(#[from] CommandError),
}

impl PeerInfo {
    /// Reads the peer's READY metadata and checks the socket type against ours.
    pub fn from_ready(ours: SocketType, metadata: Metadata) -> Result<PeerInfo, HandshakeError> {
        let socket_type = match metadata.get("Socket-Type") {
            None => None,
            Some(name) => {
                let name = String::from_utf8_lossy(name);
                let peer: SocketType =
                    name.parse().map_err(|_| HandshakeError::UnknownSocketType(name.into_owned()))?;
                if !ours.accepts(peer) {
                    return Err(HandshakeError::IncompatibleSocketType { ours, peer });
                }
                Some(peer)
            }
        };
        let identity = metadata.get("Identity").cloned().unwrap_or_default();
        Ok(PeerInfo { socket_type, identity, metadata })
    }
}

/// Our READY metadata for a socket: `Socket-Type`, then `Identity` for REQ/DEALER/ROUTER.
pub fn ready_metadata(ours: SocketType, identity: &Bytes) -> Metadata {
    let mut md = Metadata::new();
    md.insert("Socket-Type", ours.as_str());
    if ours.sends_identity() {
        md.insert("Identity", identity.clone());
    }
    md
}

/// NULL handshake state.
#[derive(Debug)]
pub struct NullHandshake {
    ours: SocketType,
    ready: Metadata,
    sent_ready: bool,
}

impl NullHandshake {
    /// A handshake for a socket of type `ours` announcing `identity` (used only by REQ/DEALER/ROUTER).
    pub fn new(ours: SocketType, identity: Bytes) -> Self {
        NullHandshake { ours, ready: ready_metadata(ours, &identity), sent_ready: false }
    }

    /// The command to send right after the greeting.
    pub fn start(&mut self) -> Command {
        self.sent_ready = true;
        Command::Ready(self.ready.clone())
    }

    /// Feeds one command frame body from the peer; `Ok(info)` completes the handshake.
    pub fn on_command(&mut self, body: Bytes) -> Result<PeerInfo, HandshakeError> {
        debug_assert!(self.sent_ready, "start() first");
        match Command::parse(body)? {
            Command::Ready(md) => PeerInfo::from_ready(self.ours, md),
            Command::Error(reason) => Err(HandshakeError::PeerError(reason)),
            other => Err(HandshakeError::UnexpectedCommand(format!("{other:?}").chars().take(40).collect())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn dealer_to_router_handshake() {
        let mut ours = NullHandshake::new(SocketType::Router, Bytes::new());
        let mut theirs = NullHandshake::new(SocketType::Dealer, Bytes::from_static(b"abc"));
        let their_ready = theirs.start().body();
        let _ = ours.start();
        let info = ours.on_command(their_ready).unwrap();
        assert_eq!(info.socket_type, Some(SocketType::Dealer));
        assert_eq!(info.identity, "abc");
    }

    #[test]
    fn wrong_peer_type_is_refused() {
        let mut ours = NullHandshake::new(SocketType::Pull, Bytes::new());
        let _ = ours.start();
        let body = NullHandshake::new(SocketType::Pull, Bytes::new()).start().body();
        assert_eq!(
            ours.on_command(body),
            Err(HandshakeError::IncompatibleSocketType { ours: SocketType::Pull, peer: SocketType::Pull })
        );
    }

    #[test]
    fn error_and_other_commands_fail() {
        let mut hs = NullHandshake::new(SocketType::Sub, Bytes::new());
        let _ = hs.start();
        let err = hs.on_command(Command::Error(Bytes::from_static(b"400")).body()).unwrap_err();
        assert_eq!(err, HandshakeError::PeerError(Bytes::from_static(b"400")));
        let err = hs.on_command(Command::Pong(Bytes::new()).body()).unwrap_err();
        assert!(matches!(err, HandshakeError::UnexpectedCommand(_)));
    }

    #[test]
    fn lowercase_socket_type_and_missing_type_accepted() {
        let mut hs = NullHandshake::new(SocketType::Sub, Bytes::new());
        let _ = hs.start();
        let mut md = Metadata::new();
        md.insert("socket-type", "pub");
        let info = hs.on_command(Command::Ready(md).body()).unwrap();
        assert_eq!(info.socket_type, Some(SocketType::Pub));
        let info = hs.on_command(Command::Ready(Metadata::new()).body()).unwrap();
        assert_eq!(info.socket_type, None);
    }

    #[test]
    fn ready_metadata_casing_and_identity_rules() {
        let mut out = BytesMut::new();
        ready_metadata(SocketType::Pub, &Bytes::from_static(b"x")).encode(&mut out);
        assert_eq!(&out[..], b"\x0bSocket-Type\x00\x00\x00\x03PUB");
        let md = ready_metadata(SocketType::Dealer, &Bytes::new());
        assert_eq!(md.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["Socket-Type", "Identity"]);
    }
}
