//! Socket monitor: a stream of connection lifecycle events, with the typed reason when a connection
//! fails. Delivery never blocks the socket: a monitor that falls 1024 events behind loses events.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

use crate::error::ConnectionError;

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
    /// A connect attempt failed; another follows after `retry_in`.
    ConnectRetried {
        /// The endpoint.
        endpoint: String,
        /// Wait before the next attempt.
        retry_in: std::time::Duration,
    },
    /// The ZMTP handshake completed.
    HandshakeSucceeded {
        /// The endpoint.
        endpoint: String,
        /// The peer's address.
        peer: String,
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
