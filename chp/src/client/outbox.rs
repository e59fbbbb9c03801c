//! The client's writes in flight (sent or not, until their echo or a timeout answers them), shared
//! by the [`Client`](super::Client) handles and the agent.
//!
//! While the agent is in sync with a server whose collector our PUB is connected to, and an echo
//! has proven that connection (the `proof` module), it opens the *direct way*: a write is sent
//! from the caller's task, under the same lock that records it, so the agent (which answers it
//! when its echo comes) always finds it, and the write costs no wake-up of the agent on its way
//! out (one task hop fewer on every `set`'s latency). Otherwise a write goes through the agent's
//! command channel, which holds it until then.
//!
//! Order: writes from one task go out in the order they were submitted. A write takes the direct
//! way only when no write is waiting in the channel (else it could overtake one), and the agent
//! sends what it held before it opens the way.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use zmtp::Socket;

use super::ClientError;
use crate::kvmsg::KvMsg;
use crate::uuid::{Uuid, UuidMap};

/// Where a write's answer goes: its sequence once echoed (`None`: confirmed without one).
pub(super) type Reply = oneshot::Sender<Result<Option<u64>, ClientError>>;

/// A write not answered yet.
pub(super) struct PendingSet {
    pub msg: KvMsg,
    pub reply: Reply,
    /// When it was last sent (`None`: held until the client is in sync).
    pub sent: Option<Instant>,
    /// When it fails with [`ClientError::SetTimeout`].
    pub deadline: Instant,
}

/// The writes in flight and the direct way out (see the module docs).
pub(super) struct Outbox {
    state: Mutex<State>,
    /// Rung when a write taken the direct way finds no check of timeouts and retransmits
    /// scheduled by the agent ([`State::checking`]): the agent then schedules one. Only then: a
    /// wake-up of the agent for every write, off the write's path but competing with it for the
    /// runtime's threads, made the p99 of `set` under load worse, not better.
    pub(super) unchecked: Notify,
    set_timeout: Duration,
}

pub(super) struct State {
    pub pending: UuidMap<PendingSet>,
    /// The writes recorded unsent, in submission order, so they go out in it (answered or sent
    /// ones are dropped from it by [`due`](Self::due); it is empty once the client is in sync).
    held: Vec<Uuid>,
    /// The agent's PUB sockets while the direct way is open.
    direct: Option<Vec<Socket>>,
    /// Writes handed to the agent's channel and not yet taken by it.
    queued: usize,
    /// The agent has a check of the pending writes scheduled (it sets this when it schedules one
    /// and clears it, under this lock, when a check finds nothing left to schedule), so a write
    /// recorded while it is set will be looked at.
    pub checking: bool,
}

/// What [`Outbox::submit`] did with a write.
pub(super) enum Submitted {
    /// Sent, and pending.
    Sent,
    /// The direct way is closed, or writes wait in the channel: send it to the agent (counted as
    /// queued until [`State::take_queued`]).
    Queue(KvMsg, Reply),
}

impl Outbox {
    pub(super) fn new(set_timeout: Duration) -> Outbox {
        Outbox {
            state: Mutex::new(State {
                pending: UuidMap::default(),
                held: Vec::new(),
                direct: None,
                queued: 0,
                checking: false,
            }),
            unchecked: Notify::new(),
            set_timeout,
        }
    }

    /// The state, for the agent's bookkeeping (a poisoned lock is taken as is: every change to the
    /// state is a single insert, remove or counter step).
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A write from a handle: sent now if the direct way is open and nothing waits in the channel.
    pub(super) fn submit(&self, msg: KvMsg, reply: Reply) -> Submitted {
        let mut state = self.lock();
        let Some(publishers) = state.direct.as_ref().filter(|_| state.queued == 0) else {
            state.queued += 1;
            return Submitted::Queue(msg, reply);
        };
        send(publishers, &msg);
        let now = Instant::now();
        state.insert(msg, reply, Some(now), now + self.set_timeout);
        let unchecked = !std::mem::replace(&mut state.checking, true);
        drop(state);
        if unchecked {
            self.unchecked.notify_one();
        }
        Submitted::Sent
    }
}

impl State {
    /// Records a write, after every write recorded before it.
    pub(super) fn insert(&mut self, msg: KvMsg, reply: Reply, sent: Option<Instant>, deadline: Instant) {
        let uuid = msg.uuid.expect("client sets carry a UUID");
        if sent.is_none() {
            self.held.push(uuid);
        }
        self.pending.insert(uuid, PendingSet { msg, reply, sent, deadline });
    }

    /// The pending writes to send: those not sent yet, in submission order, then those last sent
    /// `retry` or more before `now` (a retransmit comes out of order whatever its place).
    pub(super) fn due(&mut self, now: Instant, retry: Duration) -> Vec<Uuid> {
        let pending = &self.pending;
        self.held.retain(|uuid| pending.get(uuid).is_some_and(|p| p.sent.is_none()));
        let mut due = self.held.clone();
        due.extend(pending.iter().filter(|(_, p)| p.sent.is_some_and(|t| t + retry <= now)).map(|(uuid, _)| *uuid));
        due
    }

    /// The agent took a write from its channel.
    pub(super) fn take_queued(&mut self) {
        self.queued = self.queued.saturating_sub(1);
    }

    /// Opens the direct way through `publishers`, or closes it (`None`).
    pub(super) fn set_direct(&mut self, publishers: Option<Vec<Socket>>) {
        self.direct = publishers;
    }

    /// Sends pending write `uuid` (again) through `publishers`, noting when.
    pub(super) fn send(&mut self, uuid: &Uuid, publishers: &[Socket], now: Instant) -> bool {
        let Some(p) = self.pending.get_mut(uuid) else { return false };
        if p.sent.is_some() {
            tracing::debug!(key = %p.msg.key.escape_ascii(), "no echo yet: retransmitting KVSET");
        }
        send(publishers, &p.msg);
        p.sent = Some(now);
        true
    }
}

/// One KVSET to every collector: PUB never blocks (it drops at the HWM); the retransmit covers a drop.
fn send(publishers: &[Socket], msg: &KvMsg) {
    let Some((last, others)) = publishers.split_last() else { return };
    let msg = msg.to_message();
    // A KVSET's frames do not fit a message inline: each clone allocates, so the last (usually
    // the only) publisher takes the message itself.
    for publisher in others {
        let _ = publisher.try_send(msg.clone());
    }
    let _ = last.try_send(msg);
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    fn write(key: &str) -> (KvMsg, Reply, oneshot::Receiver<Result<Option<u64>, ClientError>>) {
        let mut msg = KvMsg::new(key.to_owned(), "v");
        msg.uuid = Some(Uuid::new_v4());
        let (reply, rx) = oneshot::channel();
        (msg, reply, rx)
    }

    #[tokio::test]
    async fn a_write_goes_direct_only_while_the_way_is_open_and_nothing_is_queued() {
        let outbox = Outbox::new(Duration::from_secs(10));
        let publisher = Socket::new(zmtp::SocketType::Pub);
        // Closed: queued for the agent.
        let (msg, reply, _rx) = write("/a");
        assert!(matches!(outbox.submit(msg, reply), Submitted::Queue(..)));
        outbox.lock().set_direct(Some(vec![publisher.clone()]));
        // Open, but a write still waits in the channel: this one must not overtake it.
        let (msg, reply, _rx) = write("/b");
        assert!(matches!(outbox.submit(msg, reply), Submitted::Queue(..)));
        outbox.lock().take_queued();
        outbox.lock().take_queued();
        // Open and nothing queued: sent, pending, and the agent (no check scheduled) told once.
        let (msg, reply, _rx) = write("/c");
        let uuid = msg.uuid.unwrap();
        assert!(matches!(outbox.submit(msg, reply), Submitted::Sent));
        assert!(outbox.lock().pending.get(&uuid).is_some_and(|p| p.sent.is_some()));
        // A notification with no waiter is kept: the next `notified()` is ready at once.
        assert!(outbox.unchecked.notified().now_or_never().is_some(), "told");
        let (msg, reply, _rx) = write("/c2");
        assert!(matches!(outbox.submit(msg, reply), Submitted::Sent));
        assert!(outbox.unchecked.notified().now_or_never().is_none(), "a check is scheduled already: not told again");
        // Due for a retransmit exactly `retry` after it was sent, not before (asked at instants
        // derived from its own send time, so no clock is read).
        let retry = Duration::from_secs(1);
        let sent = outbox.lock().pending[&uuid].sent.unwrap();
        assert!(!outbox.lock().due(sent + retry - Duration::from_millis(1), retry).contains(&uuid), "not due yet");
        assert!(outbox.lock().due(sent + retry, retry).contains(&uuid), "due");
        outbox.lock().set_direct(None);
        let (msg, reply, _rx) = write("/d");
        assert!(matches!(outbox.submit(msg, reply), Submitted::Queue(..)));
    }

    #[test]
    fn held_writes_are_due_in_submission_order() {
        let mut state = Outbox::new(Duration::from_secs(10)).state.into_inner().unwrap();
        let now = Instant::now();
        let mut uuids = Vec::new();
        for i in 0..100 {
            let (msg, reply, _) = write(&format!("/k/{i}"));
            uuids.push(msg.uuid.unwrap());
            state.insert(msg, reply, None, now);
        }
        assert_eq!(state.due(now, Duration::from_secs(1)), uuids);
    }
}
