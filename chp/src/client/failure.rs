//! Why a client stopped for good ([`Failure`]), why it gave up on one server ([`ServerLoss`]), and
//! how a server refused it ([`Refusal`]).

use std::sync::Arc;
use std::time::Duration;

use zmtp::ConnectionError;

/// Why the client stopped for good: [`Status::Failed`](super::Status::Failed) and
/// [`ClientError::Failed`](super::ClientError::Failed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// Updates were lost, under [`GapPolicy::Fail`](super::GapPolicy::Fail): the sequence jumped
    /// from `expected - 1` to `got`.
    #[error("sequence gap: expected {expected}, got {got} (updates lost)")]
    Gap {
        /// The sequence that should have come.
        expected: u64,
        /// The sequence that came.
        got: u64,
    },
    /// Every server of the list refused this client since its last sync (retrying would not
    /// help); `refusal` is the last one.
    #[error("refused by {}: {refusal}", if *.servers == 1 { "the server" } else { "every server" })]
    Refused {
        /// How many servers the list has (each of them refused).
        servers: usize,
        /// The last refusal.
        refusal: Refusal,
    },
}

/// A server refused this client's handshake, on the connection to `endpoint`.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{endpoint}: {error} ({kind})")]
#[non_exhaustive]
pub struct Refusal {
    /// The server's endpoint (its publisher or snapshot port).
    pub endpoint: String,
    /// What the refusal most likely means.
    pub kind: RefusalKind,
    /// The connection's error, as the socket's monitor reported it.
    pub error: Arc<ConnectionError>,
}

impl Refusal {
    pub(super) fn new(endpoint: String, kind: RefusalKind, error: Arc<ConnectionError>) -> Refusal {
        Refusal { endpoint, kind, error }
    }
}

/// Equal when they name the same endpoint, kind and error text (a connection error may hold an
/// `io::Error`, which has no equality).
impl PartialEq for Refusal {
    fn eq(&self, other: &Refusal) -> bool {
        self.endpoint == other.endpoint
            && self.kind == other.kind
            && (Arc::ptr_eq(&self.error, &other.error) || self.error.to_string() == other.error.to_string())
    }
}

impl Eq for Refusal {}

/// What a refused handshake most likely means (its `Display` is the hint given to the user).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefusalKind {
    /// With CURVE, the server closed the connection during the handshake twice in a row: a
    /// CURVE server does that with a HELLO it cannot decrypt.
    #[error("the server closed the connection during the CURVE handshake: wrong server public key?")]
    WrongServerKey,
    /// Without CURVE, the server closed the connection during the handshake twice in a row.
    #[error("the server closed the connection during the handshake: does it require CURVE?")]
    CurveRequired,
    /// One side offered CURVE, the other NULL.
    #[error("security mechanisms differ: CURVE on one side only?")]
    MechanismMismatch,
    /// The server's authenticator (or its socket's rules) turned this client away.
    #[error("authentication failed: is this client's public key on the server's allow list?")]
    NotAllowed,
    /// Another protocol error during the handshake (not a ZMTP server, a wrong socket type).
    #[error("handshake failed")]
    Handshake,
}

/// Why the client gave up on a server and moved on ([`Event::ServerLost`](super::Event::ServerLost)'s
/// reason). Errors are shared (`Arc`) so that the event can be cloned to every reader; two losses
/// are equal when they are the same kind and say the same thing.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerLoss {
    /// The server could not be reached at all (connection refused or failed): move on to the
    /// next server at once, without waiting out the server ttl.
    #[error("cannot connect to {endpoint}")]
    Unreachable {
        /// The endpoint whose connect was retried before any connection was made.
        endpoint: String,
    },
    /// Our socket would not connect (a bad endpoint, say).
    #[error("cannot connect to {endpoint}: {error}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// Why.
        error: Arc<zmtp::Error>,
    },
    /// The subscriber socket stopped receiving.
    #[error("subscriber socket closed")]
    SubscriberClosed,
    /// The snapshot socket stopped receiving.
    #[error("snapshot socket closed")]
    SnapshotClosed,
    /// The subscriber's connection ended.
    #[error("connection to {endpoint} dropped: {error}")]
    Dropped {
        /// The server's publisher endpoint.
        endpoint: String,
        /// Why.
        error: Arc<ConnectionError>,
    },
    /// No snapshot came within the server ttl.
    #[error("no snapshot within {0:?} (a passive server, or none)")]
    NoSnapshot(Duration),
    /// Nothing came from the server within the server ttl.
    #[error("nothing received for {0:?} (no HUGZ)")]
    Silent(Duration),
    /// The server refused our handshake (see [`Refusal`] for the likely cause).
    #[error("refused: {0}")]
    Refused(Refusal),
    /// The sequence went backwards.
    #[error("sequence went back from {last} to {got} (server restarted?)")]
    Regression {
        /// The last sequence applied.
        last: u64,
        /// The sequence that came.
        got: u64,
    },
}

impl PartialEq for ServerLoss {
    fn eq(&self, other: &ServerLoss) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other) && self.to_string() == other.to_string()
    }
}

impl Eq for ServerLoss {}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(kind: RefusalKind) -> Refusal {
        Refusal::new("tcp://127.0.0.1:5556".into(), kind, Arc::new(ConnectionError::PeerClosed))
    }

    #[test]
    fn a_refusal_says_where_what_and_why() {
        let failure = Failure::Refused { servers: 1, refusal: refusal(RefusalKind::WrongServerKey) };
        assert_eq!(
            failure.to_string(),
            "refused by the server: tcp://127.0.0.1:5556: peer closed the connection \
             (the server closed the connection during the CURVE handshake: wrong server public key?)"
        );
        let failure = Failure::Refused { servers: 2, refusal: refusal(RefusalKind::NotAllowed) };
        assert!(failure.to_string().starts_with("refused by every server: tcp://127.0.0.1:5556: "));
    }

    #[test]
    fn refusals_compare_by_what_they_say() {
        assert_eq!(refusal(RefusalKind::Handshake), refusal(RefusalKind::Handshake));
        assert_ne!(refusal(RefusalKind::Handshake), refusal(RefusalKind::NotAllowed));
        let other_error = Refusal::new(
            "tcp://127.0.0.1:5556".into(),
            RefusalKind::Handshake,
            Arc::new(ConnectionError::HandshakeTimeout),
        );
        assert_ne!(refusal(RefusalKind::Handshake), other_error);
    }

    #[test]
    fn a_gap_names_both_sequences() {
        assert_eq!(Failure::Gap { expected: 3, got: 5 }.to_string(), "sequence gap: expected 3, got 5 (updates lost)");
    }
}
