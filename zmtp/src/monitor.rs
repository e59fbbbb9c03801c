//! Socket monitor: a stream of connection lifecycle events, with the typed reason when a connection
//! fails. Delivery never blocks the socket: a monitor that falls 1024 events behind loses events.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

use bytes::Bytes;

use crate::error::ConnectionError;
use crate::wire::SocketType;

/// Events queued per monitor before new ones are dropped.
const MONITOR_QUEUE: usize = 1024;

/// Something that happened to one of the socket's endpoints or connections.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum MonitorEvent {
    /// `bind` succeeded.
    Listening {
        /// The endpoint as bound.
        endpoint: String,
    },
    /// A connection was accepted on a bound endpoint.
    Accepted {
        /// The bound endpoint.
        endpoint: String,
        /// The peer's address (empty for ipc/inproc).
        peer: String,
    },
    /// A connect attempt reached the peer.
    Connected {
        /// The endpoint connected to.
        endpoint: String,
        /// The peer's address.
        peer: String,
    },
    /// A connect attempt is under way (libzmq's CONNECT_DELAYED).
    ConnectDelayed {
        /// The endpoint.
        endpoint: String,
    },
    /// A connect attempt failed, or its connection ended; another follows after `retry_in`.
    ConnectRetried {
        /// The endpoint.
        endpoint: String,
        /// Wait before the next attempt.
        retry_in: std::time::Duration,
        /// Why the last attempt did not last: the connect's error (refused, unreachable, a name
        /// that does not resolve…) or how its connection ended.
        reason: Arc<ConnectionError>,
    },
    /// The ZMTP handshake completed (for a STREAM: the raw connection is the socket's).
    HandshakeSucceeded {
        /// The endpoint.
        endpoint: String,
        /// The peer's address.
        peer: String,
        /// The peer's socket type, as its READY said (`None` for a STREAM's raw peer).
        peer_type: Option<SocketType>,
        /// The peer's routing id where the socket has one: a ROUTER's or STREAM's route, a SERVER's
        /// or PEER's 32-bit id (big-endian), else the `Identity` the peer announced, if any.
        routing_id: Option<Bytes>,
    },
    /// The handshake failed: bad greeting, wrong mechanism or socket type, timeout, ERROR from peer.
    HandshakeFailed {
        /// The endpoint.
        endpoint: String,
        /// The peer's address.
        peer: String,
        /// Why.
        error: Arc<ConnectionError>,
    },
    /// An established connection ended.
    Disconnected {
        /// The endpoint.
        endpoint: String,
        /// The peer's address.
        peer: String,
        /// Why.
        error: Arc<ConnectionError>,
        /// The peer's routing id, as [`MonitorEvent::HandshakeSucceeded`] gave it.
        routing_id: Option<Bytes>,
    },
    /// A subscriber's SUBSCRIBE (PUB, XPUB) or a DISH's JOIN (RADIO), as it arrived.
    Subscribed {
        /// The topic prefix, or the group joined.
        topic: Bytes,
        /// The subscriber's routing id, if it has one (see `HandshakeSucceeded`).
        routing_id: Option<Bytes>,
    },
    /// A subscriber's CANCEL (PUB, XPUB) or a DISH's LEAVE (RADIO), as it arrived.
    Unsubscribed {
        /// The topic prefix, or the group left.
        topic: Bytes,
        /// The subscriber's routing id, if it has one.
        routing_id: Option<Bytes>,
    },
    /// The endpoint was unbound/disconnected or the socket closed.
    Closed {
        /// The endpoint.
        endpoint: String,
    },
}

/// The socket's list of monitors.
#[derive(Debug, Default)]
pub(crate) struct Monitors {
    senders: Mutex<Vec<mpsc::Sender<MonitorEvent>>>,
}

impl Monitors {
    pub fn subscribe(&self) -> Monitor {
        let (tx, rx) = mpsc::channel(MONITOR_QUEUE);
        self.senders.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
        Monitor { rx }
    }

    /// Whether any monitor listens (so that building an event can be skipped).
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub fn active(&self) -> bool {
        !self.senders.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    pub fn emit(&self, event: impl FnOnce() -> MonitorEvent) {
        let mut senders = self.senders.lock().unwrap_or_else(|e| e.into_inner());
        if senders.is_empty() {
            return;
        }
        senders.retain(|tx| !tx.is_closed());
        let event = event();
        for tx in senders.iter() {
            let _ = tx.try_send(event.clone());
        }
    }
}

/// A stream of [`MonitorEvent`]s from [`Socket::monitor`](crate::Socket::monitor).
#[derive(Debug)]
pub struct Monitor {
    rx: mpsc::Receiver<MonitorEvent>,
}

impl Monitor {
    /// The next event (`None` once the socket is gone).
    pub async fn next_event(&mut self) -> Option<MonitorEvent> {
        self.rx.recv().await
    }
}

impl Stream for Monitor {
    type Item = MonitorEvent;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<MonitorEvent>> {
        self.rx.poll_recv(cx)
    }
}
