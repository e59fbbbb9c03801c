//! The PLAIN mechanism (RFC 24): user name and password in clear, checked by the authenticator.
//!
//! ```text
//! C→S HELLO    05 'HELLO' ulen username plen password
//! S→C WELCOME  07 'WELCOME'
//! C→S INITIATE 08 'INITIATE' metadata
//! S→C READY    05 'READY' metadata
//! ```

use alloc::{string::ToString, vec};
use bytes::{BufMut, Bytes, BytesMut};

#[cfg(test)]
use super::command::Command;
use super::command::split_name;
use super::greeting::Mechanism;
use super::handshake::{
    HandshakeConfig, HandshakeError, PeerInfo, Step, authenticated, peer_error, refuse, unexpected,
};
use super::metadata::Metadata;
use super::zap::ZapReply;

fn command(name: &[u8], data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(1 + name.len() + data.len());
    out.put_u8(name.len() as u8);
    out.put_slice(name);
    out.put_slice(data);
    out.freeze()
}

#[derive(Debug, PartialEq, Eq)]
enum ClientState {
    Welcome,
    Ready,
}

/// PLAIN client state.
#[derive(Debug)]
pub struct PlainClient {
    config: HandshakeConfig,
    username: Bytes,
    password: Bytes,
    state: ClientState,
}

impl PlainClient {
    /// A client presenting these credentials (each at most 255 bytes; longer ones are cut).
    pub fn new(config: HandshakeConfig, username: Bytes, password: Bytes) -> Self {
        PlainClient { config, username, password, state: ClientState::Welcome }
    }

    /// HELLO.
    pub fn start(&mut self) -> Bytes {
        let user = &self.username[..self.username.len().min(255)];
        let pass = &self.password[..self.password.len().min(255)];
        let mut data = BytesMut::with_capacity(2 + user.len() + pass.len());
        data.put_u8(user.len() as u8);
        data.put_slice(user);
        data.put_u8(pass.len() as u8);
        data.put_slice(pass);
        command(b"HELLO", &data)
    }

    /// WELCOME → INITIATE; READY → done; ERROR (either form, see [`LIBZMQ_ERROR_PREFIX`]) → failed.
    pub fn on_command(&mut self, body: Bytes) -> Result<Step, HandshakeError> {
        if let Some(data) = body.strip_prefix(LIBZMQ_ERROR_PREFIX) {
            return Err(peer_error(&Bytes::copy_from_slice(data)));
        }
        let (name, data) = split_name(&body)?;
        match (&self.state, &name[..]) {
            (_, b"ERROR") => Err(peer_error(&data)),
            (ClientState::Welcome, b"WELCOME") => {
                self.state = ClientState::Ready;
                let mut md = BytesMut::new();
                self.config.metadata().encode(&mut md);
                Ok(Step::Send(vec![command(b"INITIATE", &md)]))
            }
            (ClientState::Ready, b"READY") => {
                let peer = PeerInfo::from_ready(self.config.socket_type, Metadata::parse(&data)?)?;
                Ok(Step::Done { send: vec![], peer, cipher: None })
            }
            _ => Err(unexpected(&name)),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum ServerState {
    Hello,
    Authenticating,
    Initiate,
}

/// PLAIN server state.
#[derive(Debug)]
pub struct PlainServer {
    config: HandshakeConfig,
    state: ServerState,
    reply: Option<ZapReply>,
}

impl PlainServer {
    /// A server; every HELLO goes to the authenticator.
    pub fn new(config: HandshakeConfig) -> Self {
        PlainServer { config, state: ServerState::Hello, reply: None }
    }

    /// HELLO → authenticate; INITIATE → READY and done.
    pub fn on_command(&mut self, body: Bytes) -> Result<Step, HandshakeError> {
        let (name, data) = split_name(&body)?;
        match (&self.state, &name[..]) {
            (ServerState::Hello, b"HELLO") => {
                let user_len = *data.first().ok_or(HandshakeError::Malformed("HELLO without user name"))? as usize;
                let user = data.get(1..1 + user_len).ok_or(HandshakeError::Malformed("HELLO user name truncated"))?;
                let rest = &data[1 + user_len..];
                let pass_len = *rest.first().ok_or(HandshakeError::Malformed("HELLO without password"))? as usize;
                if rest.len() != 1 + pass_len {
                    return Err(HandshakeError::Malformed("HELLO password length mismatch"));
                }
                let credentials = vec![Bytes::copy_from_slice(user), Bytes::copy_from_slice(&rest[1..])];
                self.state = ServerState::Authenticating;
                Ok(Step::Authenticate(self.config.zap_request(Mechanism::Plain, Bytes::new(), credentials)))
            }
            (ServerState::Initiate, b"INITIATE") => {
                let peer = PeerInfo::from_ready(self.config.socket_type, Metadata::parse(&data)?)?;
                let mut md = BytesMut::new();
                self.config.metadata().encode(&mut md);
                let peer = authenticated(peer, self.reply.take());
                Ok(Step::Done { send: vec![command(b"READY", &md)], peer, cipher: None })
            }
            _ => Err(unexpected(&name)),
        }
    }

    /// The authenticator's verdict on HELLO.
    pub fn on_auth(&mut self, reply: ZapReply) -> Result<Step, HandshakeError> {
        if self.state != ServerState::Authenticating {
            return Err(HandshakeError::Misuse("an authenticator reply with no peer awaiting one"));
        }
        if !reply.is_allowed() {
            return Ok(match refuse(&reply) {
                // libzmq's PLAIN clients only recognise libzmq's own ERROR bytes: send those.
                Step::Refuse { send, error } if !send.is_empty() => {
                    Step::Refuse { send: vec![libzmq_error_body(reply.status_code)], error }
                }
                other => other,
            });
        }
        self.reply = Some(reply);
        self.state = ServerState::Initiate;
        Ok(Step::Send(vec![command(b"WELCOME", &[])]))
    }
}

/// How libzmq's PLAIN mechanism writes ERROR. Its source spells the prefix `"\x05ERROR"`, which C reads as
/// the single byte 0x5E followed by `RROR`, so on the wire a PLAIN ERROR is `5E 'RROR' len status` — not a
/// well-formed command. libzmq's PLAIN clients recognise only this form, so our PLAIN server sends it and
/// our PLAIN client accepts it as well as the RFC form.
pub const LIBZMQ_ERROR_PREFIX: &[u8] = b"\x5eRROR";

/// The PLAIN ERROR body for a status, byte for byte as libzmq 4.3 sends it.
pub fn libzmq_error_body(status: u16) -> Bytes {
    let status = status.to_string();
    let mut out = BytesMut::with_capacity(LIBZMQ_ERROR_PREFIX.len() + 1 + status.len());
    out.put_slice(LIBZMQ_ERROR_PREFIX);
    out.put_u8(status.len() as u8);
    out.put_slice(status.as_bytes());
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SocketType;

    fn config(t: SocketType) -> HandshakeConfig {
        HandshakeConfig {
            zap_domain: "global".into(),
            peer_address: "127.0.0.1".into(),
            authenticate: true,
            ..HandshakeConfig::new(t)
        }
    }

    #[test]
    fn full_exchange_with_exact_hello() {
        let mut client = PlainClient::new(config(SocketType::Dealer), "admin".into(), "secret".into());
        let mut server = PlainServer::new(config(SocketType::Router));
        let hello = client.start();
        assert_eq!(&hello[..], b"\x05HELLO\x05admin\x06secret");
        let Step::Authenticate(req) = server.on_command(hello).unwrap() else { panic!() };
        assert_eq!(req.credentials, vec![Bytes::from("admin"), Bytes::from("secret")]);
        assert_eq!(req.mechanism, Mechanism::Plain);
        let Step::Send(welcome) = server.on_auth(ZapReply::allow("admin")).unwrap() else { panic!() };
        assert_eq!(&welcome[0][..], b"\x07WELCOME");
        let Step::Send(initiate) = client.on_command(welcome[0].clone()).unwrap() else { panic!() };
        let Step::Done { send, peer, .. } = server.on_command(initiate[0].clone()).unwrap() else { panic!() };
        assert_eq!(peer.socket_type, Some(SocketType::Dealer));
        assert_eq!(peer.user_id.as_deref(), Some("admin"));
        let Step::Done { peer, .. } = client.on_command(send[0].clone()).unwrap() else { panic!() };
        assert_eq!(peer.socket_type, Some(SocketType::Router));
    }

    #[test]
    fn denied_and_malformed() {
        let mut server = PlainServer::new(config(SocketType::Rep));
        assert!(matches!(server.on_command(Bytes::from_static(b"\x05HELLO\x09ab")), Err(HandshakeError::Malformed(_))));
        let mut server = PlainServer::new(config(SocketType::Rep));
        server.on_command(Bytes::from_static(b"\x05HELLO\x01a\x01b")).unwrap();
        let Step::Refuse { send, error } = server.on_auth(ZapReply::deny("nope")).unwrap() else { panic!() };
        assert_eq!(&send[0][..], b"\x5eRROR\x03400", "libzmq's own PLAIN ERROR bytes");
        assert!(matches!(error, HandshakeError::AuthFailed { status: 400, .. }));
        let mut client = PlainClient::new(config(SocketType::Req), "a".into(), "b".into());
        client.start();
        assert!(matches!(client.on_command(send[0].clone()), Err(HandshakeError::PeerError(r)) if r == "400"));
        // The RFC form is accepted too.
        let mut client = PlainClient::new(config(SocketType::Req), "a".into(), "b".into());
        client.start();
        let rfc = Command::Error(Bytes::from_static(b"500")).body();
        assert!(matches!(client.on_command(rfc), Err(HandshakeError::PeerError(r)) if r == "500"));
    }
}
