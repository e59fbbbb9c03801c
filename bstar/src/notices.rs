//! What the runner tells the application, in order: role changes, accepted requests, peer liveness.
//!
//! One ordered stream, so an application sees `BecameActive` *before* the request whose vote caused
//! the failover (the place to replay pending work before serving). Accepted requests are bounded:
//! while [`Config::request_queue`](crate::Config::request_queue) of them wait unread, the runner stops
//! reading the voter socket (clients queue in zmtp) but keeps heartbeating.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::{Notify, mpsc};
use zmtp::Message;

use crate::fsm::State;

/// One thing the runner reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// This server entered ACTIVE (fired once per change; the reference's new-active callback).
    BecameActive,
    /// This server entered PASSIVE (fired once per change; the reference's new-passive callback).
    BecamePassive,
    /// A client request the FSM accepted, exactly as the voter socket received it (for a ROUTER
    /// voter the first frame is the client's routing id). Reply through [`Handle::voter`](crate::Handle::voter).
    Request(Message),
    /// A valid state message arrived after silence (or for the first time); carries the peer's state.
    PeerAlive(State),
    /// No valid state message from the peer for 2 × heartbeat (also reported at start-up when the
    /// peer was never heard within that window). A passive server stays passive until a client votes.
    PeerSilent,
    /// The peer claimed this server's role and healing ([`Config::heal_split_brain`](crate::Config::heal_split_brain))
    /// decided what to do; a role change, if any, follows as its own notice.
    SplitBrain(crate::split::Split),
    /// A connection's security handshake failed (a wrong or unlisted CURVE key, a peer without
    /// CURVE …). The same reason on the same [`Link`] is reported at most once a second;
    /// `Status::handshake_failures` counts them all.
    HandshakeFailed {
        /// Which socket.
        link: Link,
        /// The other side's address (empty for ipc).
        peer: String,
        /// Why, as the connection reported it.
        reason: String,
    },
}

/// One of a server's three sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// The state PUB: the peer's SUB connects here.
    StatePub,
    /// The state SUB, connecting to the peer's state PUB.
    StateSub,
    /// The voter: clients connect here.
    Voter,
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Link::StatePub => "state PUB",
            Link::StateSub => "state SUB",
            Link::Voter => "voter",
        })
    }
}

/// The application's end: a [`Stream`] of [`Notice`]s, ending when the runner stops.
///
/// Dropping it is allowed: accepted requests are then read and discarded.
#[derive(Debug)]
pub struct Notices {
    rx: mpsc::UnboundedReceiver<Notice>,
    gate: Arc<Gate>,
}

impl Notices {
    /// The next notice; `None` once the runner has stopped and everything was delivered.
    pub async fn recv(&mut self) -> Option<Notice> {
        let notice = self.rx.recv().await;
        self.taken(&notice);
        notice
    }

    /// The next notice if one is waiting.
    pub fn try_recv(&mut self) -> Option<Notice> {
        let notice = self.rx.try_recv().ok();
        self.taken(&notice);
        notice
    }

    fn taken(&self, notice: &Option<Notice>) {
        if let Some(Notice::Request(_)) = notice {
            self.gate.release();
        }
    }
}

impl Stream for Notices {
    type Item = Notice;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Notice>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(notice) = &polled {
            self.taken(notice);
        }
        polled
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        self.gate.close();
    }
}

/// The runner's end.
#[derive(Debug)]
pub(crate) struct Outbox {
    tx: mpsc::UnboundedSender<Notice>,
    gate: Arc<Gate>,
}

impl Outbox {
    pub(crate) fn new(capacity: usize) -> (Outbox, Notices) {
        let (tx, rx) = mpsc::unbounded_channel();
        let gate = Arc::new(Gate {
            outstanding: AtomicUsize::new(0),
            capacity,
            space: Notify::new(),
            closed: AtomicBool::new(false),
        });
        (Outbox { tx, gate: gate.clone() }, Notices { rx, gate })
    }

    /// Queues a notice. Returns false when nobody listens any more.
    pub(crate) fn send(&self, notice: Notice) -> bool {
        let request = matches!(notice, Notice::Request(_));
        if request {
            self.gate.outstanding.fetch_add(1, Ordering::SeqCst);
        }
        let sent = self.tx.send(notice).is_ok();
        if request && !sent {
            self.gate.outstanding.fetch_sub(1, Ordering::SeqCst);
        }
        sent
    }

    /// Resolves when another request may be read from the voter socket.
    pub(crate) async fn room(&self) {
        self.gate.room().await;
    }
}

#[derive(Debug)]
struct Gate {
    outstanding: AtomicUsize,
    capacity: usize,
    space: Notify,
    closed: AtomicBool,
}

impl Gate {
    async fn room(&self) {
        loop {
            // `notify_one` stores a permit when nobody waits yet, so a release between the check
            // and the await is not lost.
            let wake = self.space.notified();
            if self.closed.load(Ordering::SeqCst) || self.outstanding.load(Ordering::SeqCst) < self.capacity {
                return;
            }
            wake.await;
        }
    }

    fn release(&self) {
        self.outstanding.fetch_sub(1, Ordering::SeqCst);
        self.space.notify_one();
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.space.notify_one();
    }
}
