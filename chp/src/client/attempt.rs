//! One attempt with one server: its sockets ([`Connection`]), what their monitors report
//! ([`Link`]), and how the attempt ends ([`End`]).

use std::sync::Arc;
use std::time::Duration;

use zmtp::{ConnectionError, Monitor, MonitorEvent, Socket, SocketType};

use super::ClientOptions;
use super::failure::{Refusal, RefusalKind, ServerLoss};
use crate::address::ServerAddress;
use crate::command::{HUGZ, IcanHaz, Subtree};

/// Why an attempt ended.
#[derive(Debug)]
pub(super) enum End {
    /// The client was closed.
    Closed,
    /// Move on to the next server.
    Lost(ServerLoss),
    /// The server refused the handshake (security): move on to the next server, or fail once
    /// every server refused.
    Refused(Refusal),
    /// Updates were lost: start over with the same server, or fail (per [`GapPolicy`](super::GapPolicy)).
    Gap {
        /// The sequence that should have come.
        expected: u64,
        /// The sequence that came.
        got: u64,
    },
}

/// One attempt's sockets to its server: a SUB to its publisher, a DEALER to its snapshot port.
pub(super) struct Connection {
    pub(super) sub: Socket,
    pub(super) sub_link: Link,
    /// A subtree client also needs HUGZ; that subscription is added once connected, so it
    /// travels after the subtree's: the first HUGZ then proves both are live at the server.
    hugz_subscribed: bool,
    pub(super) dealer: Socket,
    pub(super) dealer_link: Link,
    /// The DEALER is connected: from each request until its snapshot has been loaded.
    dealer_connected: bool,
}

/// One socket's connection to the server, as its monitor reports it.
pub(super) struct Link {
    pub(super) events: Monitor,
    /// The monitor has not ended.
    pub(super) open: bool,
    /// A TCP connection was made: until then a retried connect means the server is unreachable
    /// (a retry after a connection ends means something else).
    reached: bool,
    /// Connections the server closed during the handshake, this attempt.
    closed_in_handshake: u32,
}

impl Connection {
    /// Fresh sockets to `server`: the SUB subscribed to our subtree, the DEALER to ask for snapshots.
    pub(super) async fn open(options: &ClientOptions, server: &ServerAddress) -> Result<Connection, End> {
        let sub = Socket::new(SocketType::Sub);
        sub.set_linger(Some(Duration::ZERO));
        sub.set_rcvhwm(options.queue_limit);
        if let Some(curve) = &options.curve {
            curve.apply(&sub, server);
        }
        let sub_link = Link::new(sub.monitor());
        sub.subscribe(options.subtree.as_bytes()).expect("SUB socket");
        let endpoint = server.publisher();
        if let Err(error) = sub.connect(&endpoint).await {
            return Err(End::Lost(ServerLoss::Connect { endpoint, error: Arc::new(error) }));
        }
        let (dealer, dealer_events) = snapshot_socket(options, server).await?;
        Ok(Connection {
            sub,
            sub_link,
            hugz_subscribed: options.subtree.is_all(),
            dealer,
            dealer_link: Link::new(dealer_events),
            dealer_connected: true,
        })
    }

    /// Sends ICANHAZ? for `subtree`.
    pub(super) fn ask(&self, subtree: &Subtree) {
        let _ = self.dealer.try_send(IcanHaz { subtree: subtree.clone() }.to_message());
    }

    /// Asks for the snapshot again on a fresh snapshot socket.
    pub(super) async fn ask_again(&mut self, options: &ClientOptions, server: &ServerAddress) -> Result<(), End> {
        let (fresh, events) = snapshot_socket(options, server).await?;
        std::mem::replace(&mut self.dealer, fresh).close().await;
        self.dealer_link.renew(events);
        self.dealer_connected = true;
        self.ask(&options.subtree);
        Ok(())
    }

    /// Drops the snapshot connection once a snapshot is loaded: it carries nothing more until
    /// the next request, which [`ask_again`](Self::ask_again) makes on a fresh socket anyway. The
    /// server then holds two connections per client (our subscriber and our publisher) instead of
    /// three: under an open-files limit of 20,000, the difference between 6,600 clients and 9,900.
    pub(super) async fn release_snapshot(&mut self, server: &ServerAddress) {
        if std::mem::take(&mut self.dealer_connected) {
            // Err: the connect already ended (its monitor tells the agent what that means).
            let _ = self.dealer.disconnect(&server.snapshot()).await;
        }
    }

    /// A monitor event of the subscriber.
    pub(super) fn on_subscriber_event(
        &mut self,
        event: Option<MonitorEvent>,
        curve: bool,
        server: &ServerAddress,
    ) -> Result<(), End> {
        match self.sub_link.on_event(event, curve)? {
            Some(MonitorEvent::HandshakeSucceeded { .. }) if !self.hugz_subscribed => {
                self.sub.subscribe(HUGZ).expect("SUB socket");
                self.hugz_subscribed = true;
                Ok(())
            }
            Some(MonitorEvent::Disconnected { error, .. }) => {
                Err(End::Lost(ServerLoss::Dropped { endpoint: server.publisher(), error }))
            }
            _ => Ok(()),
        }
    }

    pub(super) async fn close(self) {
        self.sub.close().await;
        self.dealer.close().await;
    }
}

/// A fresh snapshot (DEALER) socket connected to `server`, and its monitor.
async fn snapshot_socket(options: &ClientOptions, server: &ServerAddress) -> Result<(Socket, Monitor), End> {
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_linger(Some(Duration::ZERO));
    dealer.set_rcvhwm(options.queue_limit);
    if let Some(curve) = &options.curve {
        curve.apply(&dealer, server);
    }
    let events = dealer.monitor();
    let endpoint = server.snapshot();
    match dealer.connect(&endpoint).await {
        Ok(_) => Ok((dealer, events)),
        Err(error) => Err(End::Lost(ServerLoss::Connect { endpoint, error: Arc::new(error) })),
    }
}

impl Link {
    fn new(events: Monitor) -> Link {
        Link { events, open: true, reached: false, closed_in_handshake: 0 }
    }

    /// Watches a new socket's monitor (same attempt: handshake closes still count).
    fn renew(&mut self, events: Monitor) {
        self.events = events;
        self.open = true;
        self.reached = false;
    }

    /// Takes a monitor event: the end of the attempt for a server unreachable or refusing us;
    /// the events this does not settle are handed back.
    pub(super) fn on_event(&mut self, event: Option<MonitorEvent>, curve: bool) -> Result<Option<MonitorEvent>, End> {
        match event {
            Some(MonitorEvent::Connected { .. }) => self.reached = true,
            Some(MonitorEvent::ConnectRetried { endpoint, .. }) if !self.reached => {
                return Err(End::Lost(ServerLoss::Unreachable { endpoint }));
            }
            Some(MonitorEvent::HandshakeFailed { endpoint, error, .. }) => {
                if let Some(kind) = refusal(&endpoint, &error, curve, &mut self.closed_in_handshake) {
                    return Err(End::Refused(Refusal::new(endpoint, kind, error)));
                }
            }
            None => self.open = false,
            other => return Ok(other),
        }
        Ok(None)
    }
}

/// What a failed handshake on the subscriber or snapshot socket means, when it is a refusal (a
/// protocol error, such as failed authentication or a security mechanism mismatch, at once; the
/// server closing the connection mid-handshake, as a CURVE server does with a HELLO it cannot
/// decrypt, the second time in the attempt — the server accepted the reconnection, so it is up and
/// closing on purpose, not going down).
fn refusal(endpoint: &str, error: &ConnectionError, curve: bool, closed_in_handshake: &mut u32) -> Option<RefusalKind> {
    match error {
        ConnectionError::SocketClosed | ConnectionError::HandshakeTimeout => None,
        ConnectionError::PeerClosed | ConnectionError::Io(_) => {
            *closed_in_handshake += 1;
            if *closed_in_handshake < 2 {
                tracing::debug!(endpoint, %error, "connection closed during the handshake");
                return None;
            }
            Some(match curve {
                true => RefusalKind::WrongServerKey,
                false => RefusalKind::CurveRequired,
            })
        }
        ConnectionError::Greeting(zmtp::GreetingError::MechanismMismatch { .. }) => {
            Some(RefusalKind::MechanismMismatch)
        }
        e if matches!(e.fault(), zmtp::Fault::Policy | zmtp::Fault::PeerPolicy) => Some(RefusalKind::NotAllowed),
        e if e.is_protocol() => Some(RefusalKind::Handshake),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zmtp::{HandshakeError, Mechanism};

    fn classify(error: ConnectionError, curve: bool, closed: &mut u32) -> Option<RefusalKind> {
        refusal("tcp://127.0.0.1:5557", &error, curve, closed)
    }

    #[test]
    fn a_server_closing_the_handshake_refuses_the_second_time() {
        for (curve, kind) in [(true, RefusalKind::WrongServerKey), (false, RefusalKind::CurveRequired)] {
            let mut closed = 0;
            assert_eq!(classify(ConnectionError::PeerClosed, curve, &mut closed), None, "once may be a restart");
            assert_eq!(classify(ConnectionError::PeerClosed, curve, &mut closed), Some(kind));
        }
    }

    #[test]
    fn protocol_and_policy_errors_refuse_at_once() {
        let mut closed = 0;
        let mismatch = zmtp::GreetingError::MechanismMismatch { ours: Mechanism::Curve, theirs: "NULL".into() };
        assert_eq!(classify(mismatch.into(), true, &mut closed), Some(RefusalKind::MechanismMismatch));
        let denied = HandshakeError::PeerError("400 denied".into());
        assert_eq!(classify(denied.into(), true, &mut closed), Some(RefusalKind::NotAllowed));
        let unexpected = HandshakeError::UnexpectedMessage;
        assert_eq!(classify(unexpected.into(), false, &mut closed), Some(RefusalKind::Handshake));
        assert_eq!(closed, 0);
    }

    #[test]
    fn timeouts_and_our_own_close_are_not_refusals() {
        let mut closed = 0;
        for error in
            [ConnectionError::HandshakeTimeout, ConnectionError::SocketClosed, ConnectionError::HeartbeatTimeout]
        {
            assert_eq!(classify(error, true, &mut closed), None);
        }
        assert_eq!(closed, 0);
    }

    #[test]
    fn loss_reasons_read_as_before() {
        let ttl = Duration::from_millis(300);
        assert_eq!(ServerLoss::NoSnapshot(ttl).to_string(), "no snapshot within 300ms (a passive server, or none)");
        assert_eq!(ServerLoss::Silent(ttl).to_string(), "nothing received for 300ms (no HUGZ)");
        assert_eq!(
            ServerLoss::Regression { last: 11, got: 1 }.to_string(),
            "sequence went back from 11 to 1 (server restarted?)"
        );
        let endpoint = "tcp://127.0.0.1:5557".to_owned();
        assert_eq!(ServerLoss::Unreachable { endpoint }.to_string(), "cannot connect to tcp://127.0.0.1:5557");
    }
}
