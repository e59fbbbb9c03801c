//! The NULL mechanism handshake as a state machine (RFC 23 §NULL).
//!
//! libzmq is symmetric here: both sides send READY straight after the greeting, and the handshake is
//! complete once READY has been both sent and received. Any other command during the handshake, an
//! ERROR, bad metadata or an incompatible peer socket type fails it with a typed error.

use bytes::Bytes;

use super::command::{Command, CommandError};
use super::curve::CurveError;
use super::greeting::Mechanism;
use super::mechanism::{HandshakeConfig, Step, authenticated, refuse};
use super::metadata::{Metadata, MetadataError};
use super::socket_type::SocketType;
use super::zap::ZapReply;

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

/// NULL handshake state.
#[derive(Debug)]
pub struct NullHandshake {
    config: HandshakeConfig,
    /// The peer's READY, held while the authenticator decides.
    pending: Option<PeerInfo>,
}

impl NullHandshake {
    /// A NULL handshake; with `config.authenticate` our READY waits for the authenticator's verdict.
    pub fn new(config: HandshakeConfig) -> Self {
        NullHandshake { config, pending: None }
    }

    fn ready(&self) -> Bytes {
        Command::Ready(self.config.metadata()).body()
    }

    /// Commands to send right after the greeting: READY, unless it must wait for authentication.
    pub fn start(&mut self) -> Vec<Bytes> {
        if self.config.authenticate { vec![] } else { vec![self.ready()] }
    }

    /// Feeds one command frame body from the peer.
    pub fn on_command(&mut self, body: Bytes) -> Result<Step, HandshakeError> {
        match Command::parse(body)? {
            Command::Ready(md) if self.pending.is_none() => {
                let peer = PeerInfo::from_ready(self.config.socket_type, md)?;
                if !self.config.authenticate {
                    return Ok(Step::Done { send: vec![], peer, cipher: None });
                }
                let request = self.config.zap_request(Mechanism::Null, peer.identity.clone(), vec![]);
                self.pending = Some(peer);
                Ok(Step::Authenticate(request))
            }
            Command::Error(reason) => Err(HandshakeError::PeerError(reason)),
            other => Err(HandshakeError::UnexpectedCommand(format!("{other:?}").chars().take(40).collect())),
        }
    }

    /// The authenticator's verdict on the peer.
    pub fn on_auth(&mut self, reply: ZapReply) -> Result<Step, HandshakeError> {
        let Some(peer) = self.pending.take() else {
            return Err(HandshakeError::UnexpectedCommand("ZAP reply".into()));
        };
        if !reply.is_allowed() {
            return Ok(refuse(&reply));
        }
        Ok(Step::Done { send: vec![self.ready()], peer: authenticated(peer, Some(reply)), cipher: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn config(t: SocketType, identity: &'static [u8], authenticate: bool) -> HandshakeConfig {
        HandshakeConfig {
            socket_type: t,
            routing_id: Bytes::from_static(identity),
            zap_domain: String::new(),
            peer_address: "10.0.0.1".into(),
            authenticate,
        }
    }

    fn done(step: Step) -> PeerInfo {
        match step {
            Step::Done { peer, .. } => peer,
            other => panic!("not done: {other:?}"),
        }
    }

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

    #[test]
    fn dealer_to_router_handshake() {
        let mut ours = NullHandshake::new(config(SocketType::Router, b"", false));
        let mut theirs = NullHandshake::new(config(SocketType::Dealer, b"abc", false));
        let their_ready = theirs.start().remove(0);
        assert_eq!(ours.start().len(), 1);
        let info = done(ours.on_command(their_ready).unwrap());
        assert_eq!(info.socket_type, Some(SocketType::Dealer));
        assert_eq!(info.identity, "abc");
    }

    #[test]
    fn wrong_peer_type_is_refused() {
        let mut ours = NullHandshake::new(config(SocketType::Pull, b"", false));
        let body = NullHandshake::new(config(SocketType::Pull, b"", false)).start().remove(0);
        assert_eq!(
            ours.on_command(body).unwrap_err(),
            HandshakeError::IncompatibleSocketType { ours: SocketType::Pull, peer: SocketType::Pull }
        );
    }

    #[test]
    fn error_and_other_commands_fail() {
        let mut hs = NullHandshake::new(config(SocketType::Sub, b"", false));
        let err = hs.on_command(Command::Error(Bytes::from_static(b"400")).body()).unwrap_err();
        assert_eq!(err, HandshakeError::PeerError(Bytes::from_static(b"400")));
        let err = hs.on_command(Command::Pong(Bytes::new()).body()).unwrap_err();
        assert!(matches!(err, HandshakeError::UnexpectedCommand(_)));
    }

    #[test]
    fn lowercase_socket_type_and_missing_type_accepted() {
        let mut hs = NullHandshake::new(config(SocketType::Sub, b"", false));
        let mut md = Metadata::new();
        md.insert("socket-type", "pub");
        assert_eq!(done(hs.on_command(Command::Ready(md).body()).unwrap()).socket_type, Some(SocketType::Pub));
        let mut hs = NullHandshake::new(config(SocketType::Sub, b"", false));
        assert_eq!(done(hs.on_command(Command::Ready(Metadata::new()).body()).unwrap()).socket_type, None);
    }

    #[test]
    fn authenticated_null_waits_for_the_verdict() {
        let mut hs = NullHandshake::new(config(SocketType::Rep, b"", true));
        assert!(hs.start().is_empty(), "READY waits for the authenticator");
        let ready = NullHandshake::new(config(SocketType::Req, b"", false)).start().remove(0);
        let Step::Authenticate(req) = hs.on_command(ready.clone()).unwrap() else { panic!() };
        assert_eq!((req.mechanism, req.address.as_str()), (Mechanism::Null, "10.0.0.1"));
        let Step::Done { send, peer, .. } = hs.on_auth(ZapReply::allow("u1")).unwrap() else { panic!() };
        assert_eq!(send.len(), 1);
        assert_eq!(peer.user_id.as_deref(), Some("u1"));
        let mut hs = NullHandshake::new(config(SocketType::Rep, b"", true));
        hs.on_command(ready).unwrap();
        assert!(matches!(hs.on_auth(ZapReply::deny("no")).unwrap(), Step::Refuse { .. }));
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
