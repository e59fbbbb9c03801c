//! The inbound side of a socket: one queue per peer, fair-queued round-robin (libzmq's `fq`).
//!
//! A connection's reader pushes a batch of decoded messages under one lock; when its queue reaches
//! RCVHWM it parks, which stops it reading and lets TCP push back on the sender. The socket pops one
//! message at a time from the next ready peer, so a fast peer cannot starve a slow one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::Notify;

use super::subscriptions::Subscriptions;
pub(crate) use crate::link::peer_id::PeerId;
use crate::link::peer_id::PeerMap;
use crate::link::waiters::Waiters;
use crate::message::{Message, Meta, Properties};

#[derive(Debug)]
struct PeerQueue {
    messages: VecDeque<Message>,
    hwm: usize,
    /// The routing id, kept here so a ROUTER can still prefix messages that outlive the connection.
    routing_id: Bytes,
    /// Wakes the connection's reader when room frees up.
    reader_wake: Arc<Notify>,
    reader_waiting: bool,
    /// The connection is gone; drop the queue once drained.
    detached: bool,
    /// CONFLATE: only the newest message is kept.
    conflate: bool,
    /// What each message taken from here carries from its connection: its properties (User-Id,
    /// Peer-Address, …) and, for a SERVER or PEER, the sender's routing id. Attached as a message
    /// is taken: here, the reference count is touched by the receiving thread only.
    meta: Option<Arc<Meta>>,
}

#[derive(Debug, Default)]
struct State {
    /// Boxed: a socket with one peer (a DEALER, a REQ) has a table of 4 entries, 104 bytes each
    /// inline, 16 boxed.
    queues: PeerMap<Box<PeerQueue>>,
    /// Peers with at least one message, in round-robin order.
    ready: VecDeque<PeerId>,
    /// SUB's local prefix filter (libzmq filters on receipt too). Boxed: 80 bytes that every other
    /// socket would carry unused.
    filter: Option<Box<Subscriptions>>,
    /// INVERT_MATCHING: SUB keeps what its filter does *not* match.
    invert: bool,
}

/// A received message with the peer it came from.
#[derive(Debug)]
pub(crate) struct Received {
    pub peer: PeerId,
    pub routing_id: Bytes,
    pub message: Message,
}

#[derive(Debug)]
pub(crate) struct Inbox {
    state: Mutex<State>,
    readable: Arc<Waiters>,
}

/// The outcome of a push: all taken, or parked at the HWM.
pub(crate) enum Pushed {
    All,
    Full(Arc<Notify>),
}

impl Inbox {
    pub fn new(filter: bool) -> Self {
        let state = State { filter: filter.then(Box::default), ..State::default() };
        Inbox { state: Mutex::new(state), readable: Arc::new(Waiters::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn readable(&self) -> &Arc<Waiters> {
        &self.readable
    }

    pub fn add_peer(&self, peer: PeerId, hwm: usize, conflate: bool, routing_id: Bytes) {
        let queue = PeerQueue {
            messages: VecDeque::new(),
            hwm,
            routing_id,
            reader_wake: Arc::new(Notify::new()),
            reader_waiting: false,
            detached: false,
            conflate,
            meta: None,
        };
        self.lock().queues.insert(peer, Box::new(queue));
    }

    /// The connection is gone: its queued messages stay readable, then the queue goes.
    pub fn detach_peer(&self, peer: PeerId) {
        let mut s = self.lock();
        if let Some(q) = s.queues.get_mut(&peer) {
            if q.messages.is_empty() {
                s.queues.remove(&peer);
            } else {
                q.detached = true;
            }
        }
    }

    /// Drops a peer's queued messages too (REQ/DEALER bind side: libzmq destroys the queue).
    pub fn remove_peer(&self, peer: PeerId) {
        let mut s = self.lock();
        s.queues.remove(&peer);
        s.ready.retain(|&p| p != peer);
    }

    /// Pushes messages from `batch` until the peer's HWM; what is left stays in `batch`.
    pub fn push(&self, peer: PeerId, batch: &mut VecDeque<Message>) -> Pushed {
        let mut s = self.lock();
        let s = &mut *s;
        let Some(q) = s.queues.get_mut(&peer) else {
            batch.clear();
            return Pushed::All;
        };
        let was_empty = q.messages.is_empty();
        if q.conflate
            && let Some(last) = batch.pop_back()
        {
            batch.clear();
            q.messages.clear();
            q.messages.push_back(last);
        }
        if q.messages.is_empty() && (q.hwm == 0 || batch.len() <= q.hwm) {
            // The whole batch fits an empty queue: take the reader's buffer as it is (it gets the
            // queue's empty one back) instead of moving message by message.
            std::mem::swap(&mut q.messages, batch);
        }
        while let Some(msg) = batch.pop_front() {
            if q.hwm != 0 && q.messages.len() >= q.hwm {
                batch.push_front(msg);
                break;
            }
            q.messages.push_back(msg);
        }
        if was_empty && !q.messages.is_empty() {
            s.ready.push_back(peer);
            self.readable.wake();
        }
        if batch.is_empty() {
            Pushed::All
        } else {
            q.reader_waiting = true;
            Pushed::Full(q.reader_wake.clone())
        }
    }

    /// `Some(wake)` while the peer's queue is at or over its HWM (after notices queued past it):
    /// the caller, its reader, parks on `wake` until the application has taken half.
    pub fn over_hwm(&self, peer: PeerId) -> Option<Arc<Notify>> {
        let mut s = self.lock();
        let q = s.queues.get_mut(&peer)?;
        if q.hwm == 0 || q.messages.len() < q.hwm {
            return None;
        }
        q.reader_waiting = true;
        Some(q.reader_wake.clone())
    }

    /// Queues a message that must not be refused by the HWM (XPUB subscription notices); the reader
    /// then waits in [`over_hwm`](Self::over_hwm) before it takes more from that peer.
    pub fn push_unbounded(&self, peer: PeerId, msg: Message) {
        let mut s = self.lock();
        let s = &mut *s;
        let Some(q) = s.queues.get_mut(&peer) else { return };
        let was_empty = q.messages.is_empty();
        q.messages.push_back(msg);
        if was_empty {
            s.ready.push_back(peer);
            self.readable.wake();
        }
    }

    /// Takes the next message, round-robin over ready peers. The peer's routing id comes along only
    /// when asked for (ROUTER): cloning it costs an atomic increment per message.
    pub fn pop(&self, with_routing_id: bool) -> Option<Received> {
        Self::pop_locked(&mut self.lock(), with_routing_id)
    }

    /// Takes messages under one lock, in the order `pop` would give them (round-robin over ready
    /// peers, message by message), handing each to `accept` until it has accepted `max` (it
    /// returns whether it kept the message: a pattern may skip some). Returns how many it kept.
    pub fn pop_many(&self, with_routing_id: bool, max: usize, mut accept: impl FnMut(Received) -> bool) -> usize {
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut kept = 0;
        while kept < max {
            // One peer ready and no filter: its messages in a run, the order a run of pops gives,
            // without the round-robin bookkeeping per message.
            if state.ready.len() == 1 && state.filter.is_none() {
                let peer = state.ready[0];
                if let Some(q) = state.queues.get_mut(&peer) {
                    let run = (max - kept).min(q.messages.len());
                    for mut message in q.messages.drain(..run) {
                        if let Some(meta) = &q.meta {
                            message.set_meta(meta.clone());
                        }
                        let routing_id = if with_routing_id { q.routing_id.clone() } else { Bytes::new() };
                        kept += usize::from(accept(Received { peer, routing_id, message }));
                    }
                    Self::after_run(state, peer);
                    continue;
                }
            }
            let Some(received) = Self::pop_locked(state, with_routing_id) else { break };
            kept += usize::from(accept(received));
        }
        kept
    }

    /// [`pop_many`](Self::pop_many) for a socket that takes every message as it was queued
    /// (PULL, DEALER, PAIR, SUB through its filter, …): up to `max` messages appended to `out`.
    /// A run from the one ready peer is moved into `out` as a block, not message by message
    /// through a [`Received`] (a tenth of a 64-byte message's receive, and every message copied
    /// twice more on the way).
    /// `runs` hears which peer they came from, in order: (peer, how many in a row).
    pub fn pop_many_into(
        &self,
        out: &mut impl Extend<Message>,
        max: usize,
        mut runs: impl FnMut(PeerId, usize),
    ) -> usize {
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut taken = 0;
        while taken < max {
            if state.ready.len() == 1 {
                let peer = state.ready[0];
                let State { queues, filter, invert, .. } = &mut *state;
                if let Some(q) = queues.get_mut(&peer) {
                    let run = (max - taken).min(q.messages.len());
                    let drained = q.messages.drain(..run);
                    let kept = match (&q.meta, filter.as_deref()) {
                        (None, None) => {
                            out.extend(drained);
                            run
                        }
                        // Without a filter the run stays a block of known length (PULL, whose
                        // messages carry properties by default).
                        (Some(meta), None) => {
                            out.extend(drained.map(|mut message| {
                                message.set_meta(meta.clone());
                                message
                            }));
                            run
                        }
                        (meta, filter) => {
                            let mut kept = 0;
                            out.extend(drained.filter(|m| wanted(filter, *invert, m)).map(|mut message| {
                                kept += 1;
                                if let Some(meta) = meta {
                                    message.set_meta(meta.clone());
                                }
                                message
                            }));
                            kept
                        }
                    };
                    taken += kept;
                    if kept > 0 {
                        runs(peer, kept);
                    }
                    Self::after_run(state, peer);
                    continue;
                }
            }
            let Some(received) = Self::pop_locked(state, false) else { break };
            out.extend(std::iter::once(received.message));
            runs(received.peer, 1);
            taken += 1;
        }
        taken
    }

    /// After a run was taken from `peer`, the one ready peer: wakes its reader if it waits for
    /// room, and retires the queue if it is empty.
    fn after_run(state: &mut State, peer: PeerId) {
        let Some(q) = state.queues.get_mut(&peer) else { return };
        if q.reader_waiting && (q.hwm == 0 || q.messages.len() <= q.hwm / 2) {
            q.reader_waiting = false;
            q.reader_wake.notify_one();
        }
        if q.messages.is_empty() {
            state.ready.clear();
            if q.detached {
                state.queues.remove(&peer);
            } else {
                release_if_small(&mut q.messages);
            }
        }
    }

    fn pop_locked(state: &mut State, with_routing_id: bool) -> Option<Received> {
        let State { queues, ready, filter, invert } = state;
        while let Some(peer) = ready.pop_front() {
            let Some(q) = queues.get_mut(&peer) else {
                continue;
            };
            let Some(mut message) = q.messages.pop_front() else {
                continue;
            };
            if let Some(meta) = &q.meta {
                message.set_meta(meta.clone());
            }
            // Wake a parked reader once half the queue is free (libzmq's low-water mark), not per message.
            if q.reader_waiting && (q.hwm == 0 || q.messages.len() <= q.hwm / 2) {
                q.reader_waiting = false;
                q.reader_wake.notify_one();
            }
            let routing_id = if with_routing_id { q.routing_id.clone() } else { Bytes::new() };
            if !q.messages.is_empty() {
                ready.push_back(peer);
            } else if q.detached {
                queues.remove(&peer);
            } else {
                release_if_small(&mut q.messages);
            }
            if wanted(filter.as_deref(), *invert, &message) {
                return Some(Received { peer, routing_id, message });
            }
        }
        None
    }

    /// The properties of the peer's current connection, for the messages taken from now on
    /// (`None`: none, not even the previous connection's). Messages that carry nothing else
    /// then carry no `Meta` at all, and cost no reference count.
    pub fn set_properties(&self, peer: PeerId, properties: Option<Arc<Properties>>) {
        if let Some(q) = self.lock().queues.get_mut(&peer) {
            if properties.is_none() && q.meta.is_none() {
                return;
            }
            Arc::make_mut(q.meta.get_or_insert_with(Arc::default)).properties = properties;
            if q.meta.as_deref() == Some(&Meta::default()) {
                q.meta = None;
            }
        }
    }

    /// SERVER, PEER: the routing id the peer's messages carry ([`Message::routing_id`]).
    #[cfg(feature = "draft")]
    pub fn set_message_routing_id(&self, peer: PeerId, routing_id: u32) {
        if let Some(q) = self.lock().queues.get_mut(&peer) {
            Arc::make_mut(q.meta.get_or_insert_with(Arc::default)).routing_id = routing_id;
        }
    }

    /// The routing id the peer's messages carry (empty: none).
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub fn routing_id(&self, peer: PeerId) -> Option<Bytes> {
        self.lock().queues.get(&peer).map(|q| q.routing_id.clone())
    }

    pub fn set_routing_id(&self, peer: PeerId, routing_id: Bytes) {
        if let Some(q) = self.lock().queues.get_mut(&peer) {
            q.routing_id = routing_id;
        }
    }

    /// INVERT_MATCHING for SUB's filter.
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub fn set_invert(&self, invert: bool) {
        self.lock().invert = invert;
    }

    /// Updates SUB's local filter.
    pub fn filter_update(&self, topic: &[u8], subscribe: bool) {
        if let Some(filter) = self.lock().filter.as_mut() {
            if subscribe {
                filter.add(topic);
            } else {
                filter.remove(topic);
            }
        }
    }

    /// SUB: runs `f` with what its filter wants now, under the lock (not at all for the other
    /// types), so that messages taken from here ahead of the application can be filtered again as
    /// if they were still queued here.
    pub fn with_filter(&self, f: impl FnOnce(&dyn Fn(&Message) -> bool)) {
        let state = self.lock();
        if let Some(filter) = state.filter.as_deref() {
            f(&|message| wanted(Some(filter), state.invert, message));
        }
    }
}

/// Whether SUB's filter (none: every socket type else) lets `message` through. SUB filters on
/// receipt, as libzmq does: an unsubscribe also drops what is already queued.
#[inline]
fn wanted(filter: Option<&Subscriptions>, invert: bool, message: &Message) -> bool {
    filter.is_none_or(|f| f.matches(message.first().map(|f| &f[..]).unwrap_or_default()) != invert)
}

/// An emptied queue that only ever held a few messages gives its buffer back, so that an idle
/// connection holds none (the next batch brings the reader's); a busy one keeps it.
fn release_if_small(messages: &mut VecDeque<Message>) {
    if messages.capacity() <= SMALL_QUEUE {
        *messages = VecDeque::new();
    }
}

/// What counts as a few messages for [`release_if_small`].
const SMALL_QUEUE: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed_and_taken(inbox: &Inbox, peer: PeerId) -> Message {
        let mut batch = VecDeque::from([Message::from("m")]);
        assert!(matches!(inbox.push(peer, &mut batch), Pushed::All));
        inbox.pop(false).expect("queued").message
    }

    #[test]
    fn a_connection_without_properties_clears_the_previous_ones() {
        let inbox = Inbox::new(false);
        let peer: PeerId = 1;
        inbox.add_peer(peer, 0, false, Bytes::new());
        inbox.set_properties(peer, Some(Arc::new(Properties::default())));
        assert!(pushed_and_taken(&inbox, peer).properties().is_some());
        // The next connection of the same peer (a reconnect) brings none (MSG_PROPERTIES off).
        inbox.set_properties(peer, None);
        assert!(pushed_and_taken(&inbox, peer).properties().is_none(), "not the old connection's");
        assert!(inbox.lock().queues.get(&peer).unwrap().meta.is_none(), "nothing left to share per message");
    }
}
