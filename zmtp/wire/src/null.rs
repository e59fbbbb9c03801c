//! The NULL mechanism handshake as a state machine (RFC 23 §NULL).
//!
//! libzmq is symmetric here: both sides send READY straight after the greeting, and the handshake is
//! complete once READY has been both sent and received. Any other command during the handshake, an
//! ERROR, bad metadata or an incompatible peer socket type fails it with a typed error.

use alloc::{format, vec, vec::Vec};
use bytes::Bytes;

use super::command::Command;
use super::greeting::Mechanism;
use super::handshake::{HandshakeConfig, Step, authenticated, refuse};
use super::handshake::{HandshakeError, PeerInfo};
use super::zap::ZapReply;

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
            return Err(HandshakeError::Misuse("an authenticator reply with no peer awaiting one"));
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
    use crate::SocketType;
    use crate::handshake::ready_metadata;
    use crate::metadata::Metadata;
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
    fn an_authenticator_reply_nobody_awaits_is_our_misuse_not_the_peers() {
        let mut hs = NullHandshake::new(config(SocketType::Sub, b"", false));
        let err = hs.on_auth(crate::ZapReply::allow("")).unwrap_err();
        assert!(matches!(err, HandshakeError::Misuse(_)), "{err:?}");
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
