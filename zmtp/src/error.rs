//! The error type of the public API.

use std::io;

use crate::wire::{CommandError, CurveError, FrameError, GreetingError, HandshakeError, SocketType};

/// Errors returned by sockets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The endpoint string could not be parsed.
    #[error("invalid endpoint {0:?}: {1}")]
    InvalidEndpoint(String, &'static str),
    /// The transport is not supported.
    #[error("unsupported transport in {0:?}")]
    UnsupportedTransport(String),
    /// An I/O error from bind/connect or the network.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The inproc name is already bound.
    #[error("inproc endpoint {0:?} is already bound")]
    AddressInUse(String),
    /// `unbind`/`disconnect` named an endpoint this socket does not have.
    #[error("endpoint {0:?} is not bound/connected on this socket")]
    EndpointNotFound(String),
    /// The operation is not allowed for this socket type (e.g. `send` on SUB).
    #[error("operation not supported by {0} sockets")]
    NotSupported(SocketType),
    /// REQ/REP alternation violated (libzmq EFSM).
    #[error("operation not allowed in the socket's current state (REQ/REP alternation)")]
    InvalidState,
    /// ROUTER_MANDATORY: the routing id is not connected (libzmq EHOSTUNREACH).
    #[error("peer {0:?} is not connected")]
    HostUnreachable(bytes::Bytes),
    /// A message with no frames, or a ROUTER message with no routing id frame.
    #[error("message has no frames")]
    EmptyMessage,
    /// A non-blocking operation could not complete now (libzmq EAGAIN).
    #[error("operation would block")]
    WouldBlock,
    /// The socket was closed.
    #[error("socket closed")]
    Closed,
    /// An option value that cannot be used (e.g. a routing id over 255 bytes).
    #[error("invalid option value: {0}")]
    InvalidOption(&'static str),
    /// A CURVE key that is not 40 characters of Z85.
    #[error("invalid CURVE key: {0}")]
    InvalidKey(#[from] crate::wire::z85::Z85Error),
    /// The transport does not carry this socket type (libzmq ENOCOMPATPROTO): `udp://` is for a
    /// DISH's bind and a RADIO's connect only, and a STREAM has no `inproc://`.
    #[error(
        "{0} cannot be used by a {1} socket this way (udp:// is a DISH's bind and a RADIO's connect; a STREAM is tcp:// and ipc:// only)"
    )]
    IncompatibleTransport(String, SocketType),
    /// An argument the operation cannot take (libzmq EINVAL): several frames to a draft socket
    /// type, a group over 255 bytes, joining a group twice or leaving one not joined.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
}

/// Shorthand for `Result<T, zmtp::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a connection ended. Protocol errors stop reconnection; the rest reconnect.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// Network failure.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// Bad greeting.
    #[error("greeting: {0}")]
    Greeting(#[from] GreetingError),
    /// Bad frame.
    #[error("frame: {0}")]
    Frame(FrameError),
    /// Bad command.
    #[error("command: {0}")]
    Command(#[from] CommandError),
    /// Handshake failure.
    #[error("handshake: {0}")]
    Handshake(#[from] HandshakeError),
    /// A CURVE MESSAGE that does not decrypt, or a replayed nonce.
    #[error("curve: {0}")]
    Curve(CurveError),
    /// Handshake did not complete within HANDSHAKE_IVL.
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// No traffic within HEARTBEAT_TIMEOUT after a PING, or within the peer's TTL.
    #[error("heartbeat timed out")]
    HeartbeatTimeout,
    /// Our socket's own rules turned the peer away (PAIR already connected, duplicate ROUTER
    /// identity): local policy, not a fault of the peer.
    #[error("peer refused by the socket: {0}")]
    Refused(Refusal),
    /// The peer broke the protocol in a way no decoder names (an inproc peer that writes after
    /// the handshake).
    #[error("peer broke the protocol: {0}")]
    PeerViolation(&'static str),
    /// The peer closed the connection.
    #[error("peer closed the connection")]
    PeerClosed,
    /// Our socket is closing.
    #[error("socket closed")]
    SocketClosed,
    /// The peer went over one of the per-peer limits (frames per message, subscriptions).
    #[error("limit: {0}")]
    Limit(#[from] LimitError),
}

/// Which of our socket's rules turned a peer away ([`ConnectionError::Refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// A PAIR socket takes one peer at a time.
    #[error("PAIR socket already has a peer")]
    PairTaken,
    /// A ROUTER already has a peer with this routing id (and ROUTER_HANDOVER is off).
    #[error("duplicate routing id")]
    DuplicateRoutingId,
}

/// A per-peer limit a peer went over; the connection is closed (and, like other protocol errors,
/// not reconnected).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// A message with more frames than `max_frames` (`Socket::set_max_frames`).
    #[error("a message of more than {limit} frames")]
    Frames {
        /// The limit.
        limit: usize,
    },
    /// More distinct subscriptions than `max_subscriptions` (`Socket::set_max_subscriptions`).
    #[error("more than {limit} subscriptions")]
    Subscriptions {
        /// The limit.
        limit: usize,
    },
    /// Subscription prefixes totalling more than `max_subscription_bytes` bytes.
    #[error("subscriptions of more than {limit} bytes in all")]
    SubscriptionBytes {
        /// The limit.
        limit: usize,
    },
}

impl From<FrameError> for ConnectionError {
    fn from(e: FrameError) -> Self {
        ConnectionError::Frame(e)
    }
}

impl ConnectionError {
    /// The peer went away (closed, reset, broken pipe), as opposed to being refused or breaking
    /// the protocol. During a handshake this is a short-lived client or a port scanner, not a
    /// security failure, whatever the mechanism.
    pub fn closed_by_peer(&self) -> bool {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
        match self {
            ConnectionError::PeerClosed => true,
            ConnectionError::Io(e) => {
                matches!(e.kind(), BrokenPipe | ConnectionReset | ConnectionAborted | UnexpectedEof)
            }
            _ => false,
        }
    }

    /// Protocol errors do not reconnect (libzmq behaviour). A handshake we misused ourselves is
    /// not one.
    pub fn is_protocol(&self) -> bool {
        match self {
            ConnectionError::Handshake(HandshakeError::Misuse(_)) => false,
            ConnectionError::Greeting(_)
            | ConnectionError::Frame(_)
            | ConnectionError::Command(_)
            | ConnectionError::Handshake(_)
            | ConnectionError::Curve(_)
            | ConnectionError::Limit(_)
            | ConnectionError::PeerViolation(_) => true,
            _ => false,
        }
    }

    /// Who the end of the connection is down to.
    pub fn fault(&self) -> Fault {
        match self {
            ConnectionError::Refused(_) => Fault::Policy,
            ConnectionError::Handshake(HandshakeError::AuthFailed { .. }) => Fault::Policy,
            ConnectionError::Handshake(HandshakeError::PeerError(_)) => Fault::PeerPolicy,
            ConnectionError::SocketClosed | ConnectionError::Handshake(HandshakeError::Misuse(_)) => Fault::Local,
            ConnectionError::Io(_)
            | ConnectionError::PeerClosed
            | ConnectionError::HandshakeTimeout
            | ConnectionError::HeartbeatTimeout => Fault::Transport,
            _ => Fault::Protocol,
        }
    }
}

/// Who a connection's end is down to ([`ConnectionError::fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The peer broke the protocol or went over a limit (not reconnected).
    Protocol,
    /// Our side's rules refused the peer: the socket's (PAIR taken, duplicate routing id) or the
    /// authenticator's.
    Policy,
    /// The peer's rules refused us (it sent ERROR: wrong credentials, a key it does not allow…).
    PeerPolicy,
    /// The network, a silent peer (timeouts), or the peer closing: reconnected.
    Transport,
    /// Our own socket is closing.
    Local,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_end_says_who_erred() {
        let cases = [
            (ConnectionError::Refused(Refusal::PairTaken), Fault::Policy),
            (
                ConnectionError::Handshake(HandshakeError::AuthFailed { status: 400, reason: "no".into() }),
                Fault::Policy,
            ),
            (ConnectionError::Handshake(HandshakeError::PeerError("400".into())), Fault::PeerPolicy),
            (ConnectionError::Handshake(HandshakeError::Malformed("x")), Fault::Protocol),
            (ConnectionError::Limit(LimitError::Frames { limit: 1 }), Fault::Protocol),
            (ConnectionError::PeerViolation("inproc peer wrote after the handshake"), Fault::Protocol),
            (ConnectionError::Io(io::ErrorKind::ConnectionReset.into()), Fault::Transport),
            (ConnectionError::HeartbeatTimeout, Fault::Transport),
            (ConnectionError::PeerClosed, Fault::Transport),
            (ConnectionError::SocketClosed, Fault::Local),
            (ConnectionError::Handshake(HandshakeError::Misuse("x")), Fault::Local),
        ];
        for (error, fault) in cases {
            assert_eq!(error.fault(), fault, "{error}");
            // Only what the peer did wrong, or a refusal exchanged in the handshake, stops reconnection.
            let stops = matches!(fault, Fault::Protocol | Fault::PeerPolicy)
                || matches!(error, ConnectionError::Handshake(HandshakeError::AuthFailed { .. }));
            assert_eq!(error.is_protocol(), stops, "{error}");
        }
    }
}
