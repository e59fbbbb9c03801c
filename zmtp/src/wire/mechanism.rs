//! One interface over the security handshakes (NULL, PLAIN, CURVE): the engine sends what a step says,
//! feeds back each command the peer sends, and asks the authenticator when a step says so.

use bytes::Bytes;

use super::command::Command;
use super::curve::{CurveCipher, CurveClient, CurveServer};
use super::greeting::Mechanism;
use super::metadata::Metadata;
use super::null::{HandshakeError, NullHandshake, PeerInfo, ready_metadata};
use super::plain::{PlainClient, PlainServer};
use super::socket_type::SocketType;
use super::zap::{ZapReply, ZapRequest};

/// What the engine should do next.
#[derive(Debug)]
pub enum Step {
    /// Send these command bodies, then wait for the peer's next command.
    Send(Vec<Bytes>),
    /// Ask the authenticator, then call [`Handshake::on_auth`] with its reply.
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
                Err(HandshakeError::UnexpectedCommand("authentication on a client".into()))
            }
        }
    }
}
