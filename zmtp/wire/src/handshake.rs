//! What every security mechanism's handshake shares: the steps it asks the engine to take, our side's
//! configuration, what it learns about the peer, why it fails, and the READY/ERROR pieces all three
//! mechanisms use. The mechanisms (`null.rs`, `plain.rs`, `curve.rs`) build on this; `mechanism.rs`
//! puts one interface over them.

use alloc::{string::String, string::ToString, vec, vec::Vec};
use bytes::Bytes;

use super::command::{Command, CommandError, error_reason};
use super::curve_crypto::{CurveCipher, CurveError};
use super::greeting::Mechanism;
use super::metadata::{Metadata, MetadataError};
use super::socket_type::SocketType;
use super::zap::{ZapReply, ZapRequest};

/// What we learned about the peer during the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's socket type (`None` if it sent no `Socket-Type`, which libzmq accepts).
    pub socket_type: Option<SocketType>,
    /// The peer's `Identity` property, empty if absent.
    pub identity: Bytes,
    /// Every property the peer sent.
    pub metadata: Metadata,
    /// The user id the authenticator gave this peer.
    pub user_id: Option<String>,
    /// Properties the authenticator attached to this peer.
    pub zap_metadata: Metadata,
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// A command the peer sent that has no place at this point of the handshake.
    #[error("unexpected {0} command during the handshake")]
    UnexpectedCommand(String),
    /// Our side drove the handshake wrongly — an authenticator's reply fed to a client, or when
    /// no peer awaits one: a bug in the caller, not the peer's doing.
    #[error("handshake misused: {0}")]
    Misuse(&'static str),
    /// A message frame before the handshake completed.
    #[error("message frame received before the handshake completed")]
    UnexpectedMessage,
    /// A malformed command.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// A handshake command whose fields do not parse.
    #[error("malformed handshake command: {0}")]
    Malformed(&'static str),
    /// Metadata that does not parse.
    #[error("bad metadata: {0}")]
    Metadata(#[from] MetadataError),
    /// The authenticator refused the peer (ZAP status 300/400/500), or none is configured where one is needed.
    #[error("authentication failed ({status}): {reason}")]
    AuthFailed {
        /// ZAP status code.
        status: u16,
        /// The authenticator's reason.
        reason: String,
    },
    /// A CURVE handshake failure.
    #[error(transparent)]
    Curve(#[from] CurveError),
}

/// The longest `Identity` (routing id) ZMTP allows.
pub const MAX_IDENTITY: usize = 255;

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
        // ZMTP (RFC 23/37) caps the Identity at 255 bytes, as libzmq caps ZMQ_ROUTING_ID. Enforced
        // on what a peer announces too: a ROUTER hashes and compares the id on every message it
        // routes, so a megabyte id would make each 3-byte heartbeat cost a megabyte of work.
        if identity.len() > MAX_IDENTITY {
            return Err(HandshakeError::Malformed("Identity longer than 255 bytes"));
        }
        Ok(PeerInfo { socket_type, identity, metadata, user_id: None, zap_metadata: Metadata::new() })
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

/// What the engine should do next.
#[derive(Debug)]
pub enum Step {
    /// Send these command bodies, then wait for the peer's next command.
    Send(Vec<Bytes>),
    /// Ask the authenticator, then call [`Handshake::on_auth`](crate::Handshake::on_auth) with its reply.
    Authenticate(ZapRequest),
    /// Send these command bodies; the handshake is then complete.
    Done {
        /// Commands still to send.
        send: Vec<Bytes>,
        /// What we learned about the peer.
        peer: PeerInfo,
        /// CURVE: the keys for MESSAGE encryption.
        cipher: Option<CurveCipher>,
    },
    /// Send these (an ERROR, or nothing for a silent close), then fail with `error`.
    Refuse {
        /// Commands to send before closing.
        send: Vec<Bytes>,
        /// Why.
        error: HandshakeError,
    },
}

/// What every mechanism needs to know about our side of the connection.
#[derive(Clone, Debug)]
pub struct HandshakeConfig {
    /// Our socket type.
    pub socket_type: SocketType,
    /// Our routing id, announced in READY by REQ/DEALER/ROUTER.
    pub routing_id: Bytes,
    /// ZAP domain for authentication requests.
    pub zap_domain: String,
    /// The peer's IP address, for authentication requests.
    pub peer_address: String,
    /// Whether a server-side handshake asks the authenticator (NULL only does when this is set).
    pub authenticate: bool,
}

impl HandshakeConfig {
    /// A configuration for a socket of this type: no routing id, no ZAP domain or peer address, no
    /// authentication (set the public fields for more).
    pub fn new(socket_type: SocketType) -> Self {
        HandshakeConfig {
            socket_type,
            routing_id: Bytes::new(),
            zap_domain: String::new(),
            peer_address: String::new(),
            authenticate: false,
        }
    }

    /// Our READY / INITIATE metadata.
    pub fn metadata(&self) -> Metadata {
        ready_metadata(self.socket_type, &self.routing_id)
    }

    pub(crate) fn zap_request(
        &self,
        mechanism: Mechanism,
        peer_routing_id: Bytes,
        credentials: Vec<Bytes>,
    ) -> ZapRequest {
        ZapRequest {
            domain: self.zap_domain.clone(),
            address: self.peer_address.clone(),
            routing_id: peer_routing_id,
            mechanism,
            credentials,
        }
    }
}

/// Turns a refusing ZAP reply into the step libzmq takes: ERROR with the status, or a silent close for 300.
pub(crate) fn refuse(reply: &ZapReply) -> Step {
    let send = if reply.status_code == 300 {
        vec![]
    } else {
        vec![Command::Error(Bytes::from(reply.status_code.to_string())).body()]
    };
    Step::Refuse {
        send,
        error: HandshakeError::AuthFailed { status: reply.status_code, reason: reply.status_text.clone() },
    }
}

/// Attaches a successful ZAP reply's user id and metadata to the peer.
pub(crate) fn authenticated(mut peer: PeerInfo, reply: Option<ZapReply>) -> PeerInfo {
    if let Some(reply) = reply {
        peer.user_id = Some(reply.user_id).filter(|u| !u.is_empty());
        peer.zap_metadata = reply.metadata;
    }
    peer
}

/// ERROR from the peer: the handshake failed there.
pub(crate) fn peer_error(data: &Bytes) -> HandshakeError {
    HandshakeError::PeerError(error_reason(data))
}

/// A command that has no place at this point of the handshake (its name, cut to 32 bytes).
pub(crate) fn unexpected(name: &[u8]) -> HandshakeError {
    HandshakeError::UnexpectedCommand(String::from_utf8_lossy(&name[..name.len().min(32)]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_over_255_bytes_is_refused() {
        let announce = |len: usize| {
            let mut md = Metadata::new();
            md.insert("Socket-Type", "DEALER");
            md.insert("Identity", vec![b'x'; len]);
            PeerInfo::from_ready(SocketType::Router, md)
        };
        assert_eq!(announce(MAX_IDENTITY).unwrap().identity.len(), 255);
        assert!(matches!(announce(MAX_IDENTITY + 1), Err(HandshakeError::Malformed(_))));
        assert!(matches!(announce(1 << 24), Err(HandshakeError::Malformed(_))));
    }
}
