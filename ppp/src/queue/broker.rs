//! The queue's decisions as a plain type: no sockets, no runtime, no clock.
//!
//! Which worker gets which request, who is idle, who has expired, which request goes back to the
//! pending queue and which reply reaches its client are decided here, from [`Input`]s that carry
//! the time they happened. The [runner](super::runner) owns the sockets; it feeds every message,
//! disconnect and timer tick in with [`Broker::handle`], then performs each [`Action`] that
//! [`Broker::poll_action`] hands out, in order. Kept apart so that LRU order, expiry at the exact
//! liveness boundary and request timeouts are unit-tested to the instant, with a plain `Instant`
//! base and offsets instead of sleeps.
//!
//! A send can fail (the worker's connection is gone, or it is not reading). The runner reports that
//! at once, as [`Input::HeartbeatUnroutable`] or [`Input::DispatchFailed`], before it polls the
//! next action: requests are handed out one [`Action::Dispatch`] at a time, so the request of a
//! failed dispatch goes to the very next idle worker, in the order it had.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use zmtp::Message;
use zmtp::throttle::Throttle;

use super::{Overflow, Queue, QueueEvent, QueueStats};
use crate::display_id;
use crate::protocol::{Command, Envelope, ProtocolError};

/// A request waiting for, or held by, a worker: `[client address…, "", content…]`.
type Request = Message;

/// Something that happened to the queue, fed in with the time it happened.
#[derive(Debug)]
pub(crate) enum Input {
    /// A client's message from the frontend: `[client id, addresses…, "", content…]`.
    Request(Message),
    /// A worker's message from the backend (READY, HEARTBEAT or a reply), its routing id split off.
    FromWorker {
        /// The worker's routing id.
        worker: Bytes,
        /// The rest of the message.
        msg: Message,
    },
    /// A backend connection ended. The monitor does not say whose, so the runner passes the
    /// routing ids that are still connected: a known worker not among them is gone.
    BackendDisconnected {
        /// The backend's connected routing ids, read after the disconnect.
        connected: HashSet<Bytes>,
    },
    /// The [`Action::Heartbeat`] to this worker could not be routed: its connection is gone.
    HeartbeatUnroutable {
        /// The worker.
        worker: Bytes,
    },
    /// The [`Action::Dispatch`] just polled could not be sent (the worker is gone, or not reading).
    DispatchFailed {
        /// The worker.
        worker: Bytes,
    },
    /// The time [`Broker::next_wakeup`] asked for (or later): expiry, request timeouts, heartbeats.
    Tick,
}

/// Something the runner must do, in the order polled.
#[derive(Debug, PartialEq)]
pub(crate) enum Action {
    /// Send `[worker, request…]` on the backend; a failure is reported as [`Input::DispatchFailed`].
    Dispatch {
        /// The worker's routing id.
        worker: Bytes,
        /// Exactly what the client sent, nothing added (the Guide's worker takes only that).
        request: Request,
    },
    /// Send `[worker, HEARTBEAT]` on the backend; if it cannot be routed, report
    /// [`Input::HeartbeatUnroutable`] (a full outbound queue is no news: expiry decides).
    Heartbeat {
        /// The worker's routing id.
        worker: Bytes,
    },
    /// Send this reply on the frontend: `[client id, addresses…, "", content…]`. Publish the stats
    /// first, so that a client never sees its reply before the counters do.
    Reply(Message),
    /// Publish the stats, then this event.
    Event(QueueEvent),
}

#[derive(Debug)]
struct WorkerState {
    /// Last time the worker was heard from.
    seen: Instant,
    /// The request it is working on, and when it was dispatched.
    job: Option<(Instant, Request)>,
    /// Its request timed out and went to another worker: it rejoins the idle list on its next
    /// sign of life (HEARTBEAT or a reply).
    timed_out: bool,
}

/// The queue's state: registered workers, the LRU idle list, the pending requests and the counters.
#[derive(Debug)]
pub(crate) struct Broker {
    liveness_span: Duration,
    interval: Duration,
    max_pending: usize,
    request_timeout: Duration,
    overflow: Overflow,
    workers: HashMap<Bytes, WorkerState>,
    /// Invariant: a known worker is in `idle` exactly when it has no job and has not timed out.
    /// Front = longest idle.
    idle: VecDeque<Bytes>,
    pending: VecDeque<Request>,
    /// No worker expires before this (a lower bound: refreshing a worker only moves it later).
    next_expiry_check: Option<Instant>,
    next_heartbeat: Instant,
    /// Counters (the gauges are filled in by [`Broker::stats`]).
    counters: QueueStats,
    /// What the runner has yet to do; dispatches are made when it runs dry ([`Broker::poll_action`]).
    outbox: VecDeque<Action>,
    /// Malformed messages and dropped replies are what peers cause: a flood of them must not flood
    /// the log. Per queue, judged at the input's time.
    log_throttle: Throttle,
}

impl Broker {
    /// A broker with no workers, started at `now` (the first heartbeats are due one interval later).
    pub(crate) fn new(config: &Queue, now: Instant) -> Self {
        Broker {
            liveness_span: config.interval * config.liveness,
            interval: config.interval,
            max_pending: config.max_pending,
            request_timeout: config.request_timeout,
            overflow: config.overflow,
            workers: HashMap::new(),
            idle: VecDeque::new(),
            pending: VecDeque::new(),
            next_expiry_check: None,
            next_heartbeat: now + config.interval,
            counters: QueueStats::default(),
            outbox: VecDeque::new(),
            log_throttle: Throttle::default(),
        }
    }

    /// Takes in what happened at `now`; the consequences come out of [`poll_action`](Self::poll_action).
    pub(crate) fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Request(msg) => self.on_request(msg, now),
            Input::FromWorker { worker, msg } => self.on_worker(worker, msg, now),
            Input::BackendDisconnected { connected } => {
                let gone: Vec<Bytes> = self.workers.keys().filter(|w| !connected.contains(*w)).cloned().collect();
                for worker in gone {
                    self.worker_disconnected(worker);
                }
            }
            Input::HeartbeatUnroutable { worker } => self.worker_disconnected(worker),
            Input::DispatchFailed { worker } => {
                // The request never reached the worker: back to the front, without counting it as
                // re-dispatched (it was never held).
                if let Some((_, request)) = self.workers.get_mut(&worker).and_then(|w| w.job.take()) {
                    self.pending.push_front(request);
                }
                self.worker_disconnected(worker);
            }
            Input::Tick => self.tick(now),
        }
    }

    /// The next thing to do, or `None` when there is nothing left. A dispatch made here counts as
    /// made at `now` for the request timeout.
    pub(crate) fn poll_action(&mut self, now: Instant) -> Option<Action> {
        self.outbox.pop_front().or_else(|| self.dispatch_one(now))
    }

    /// When the next [`Input::Tick`] is due: the next heartbeat, or the first possible expiry.
    pub(crate) fn next_wakeup(&self) -> Instant {
        self.next_expiry_check.map_or(self.next_heartbeat, |e| e.min(self.next_heartbeat))
    }

    /// False when new requests must wait outside ([`Overflow::Backpressure`] with a full queue):
    /// the runner stops reading the frontend.
    pub(crate) fn accepts_requests(&self) -> bool {
        self.overflow == Overflow::DropOldest || self.pending.len() < self.max_pending
    }

    /// The counters, with the gauges as they are now.
    pub(crate) fn stats(&self) -> QueueStats {
        QueueStats { workers: self.workers.len(), idle: self.idle.len(), pending: self.pending.len(), ..self.counters }
    }

    fn emit(&mut self, event: QueueEvent) {
        self.outbox.push_back(Action::Event(event));
    }

    /// Hands the oldest pending request to the longest-idle worker.
    fn dispatch_one(&mut self, now: Instant) -> Option<Action> {
        if self.pending.is_empty() {
            return None;
        }
        let worker = self.idle.pop_front()?;
        let request = self.pending.pop_front().expect("non-empty");
        self.workers.get_mut(&worker).expect("idle workers are known").job = Some((now, request.clone()));
        Some(Action::Dispatch { worker, request })
    }

    /// A client request: `[client id, addresses…, "", content…]`.
    fn on_request(&mut self, msg: Message, now: Instant) {
        if let Err(error) = Envelope::check(&msg, 1) {
            let from = msg.frames().first().cloned().unwrap_or_default();
            self.malformed("frontend", error, &from, now);
            return;
        }
        if self.pending.len() >= self.max_pending {
            // With Backpressure the runner stops reading before this; the bound holds either way.
            self.pending.pop_front();
            self.counters.requests_dropped += 1;
            tracing::warn!(max_pending = self.max_pending, "pending queue full: dropped the oldest request");
            self.emit(QueueEvent::RequestDropped);
        }
        self.counters.requests += 1;
        self.pending.push_back(msg);
    }

    /// A worker message: `[READY | HEARTBEAT]` or a reply `[addresses…, "", content…]`.
    fn on_worker(&mut self, worker: Bytes, msg: Message, now: Instant) {
        let known = match self.workers.get_mut(&worker) {
            Some(w) => {
                w.seen = now;
                true
            }
            None => false,
        };
        if msg.len() == 1 {
            match Command::parse(&msg) {
                Ok(Command::Ready) => {
                    if let Some(user) = msg.property("User-Id").filter(|u| !u.is_empty()) {
                        tracing::debug!(worker = %display_id(&worker), user, "READY from an authenticated worker");
                    }
                    self.on_ready(worker, now)
                }
                Ok(Command::Heartbeat) if known => self.recovered(&worker),
                Ok(Command::Heartbeat) => {
                    tracing::debug!(worker = %display_id(&worker), "HEARTBEAT from an unregistered worker ignored (READY must come first)");
                }
                Err(error) => self.malformed("backend", error, &worker, now),
            }
            return;
        }
        if !known {
            self.drop_reply(worker, "from an unregistered worker (expired, or never sent READY)".into(), now);
            return;
        }
        if let Err(error) = Envelope::check(&msg, 1) {
            self.malformed("backend", error, &worker, now);
            return;
        }
        let w = self.workers.get_mut(&worker).expect("known");
        if !w.job.as_ref().is_some_and(|(_, request)| same_envelope(request, &msg)) {
            // A late reply (its request timed out, or was re-dispatched) still shows the worker is
            // done and alive.
            self.recovered(&worker);
            self.drop_reply(
                worker,
                "not the reply to the worker's current request (late, or re-dispatched)".into(),
                now,
            );
            return;
        }
        w.job = None;
        self.idle.push_back(worker);
        self.counters.replies += 1;
        self.outbox.push_back(Action::Reply(msg));
    }

    fn on_ready(&mut self, worker: Bytes, now: Instant) {
        match self.workers.entry(worker.clone()) {
            Entry::Occupied(mut e) => {
                // A READY from a known worker restarts its conversation: whatever it was doing is lost.
                let state = e.get_mut();
                let was_timed_out = std::mem::take(&mut state.timed_out);
                if let Some((_, request)) = state.job.take() {
                    tracing::warn!(worker = %display_id(&worker), "busy worker sent READY (restarted); re-dispatching its request");
                    self.pending.push_front(request);
                    self.idle.push_back(worker.clone());
                    self.counters.redispatched += 1;
                    self.emit(QueueEvent::Redispatched { worker });
                } else if was_timed_out {
                    self.idle.push_back(worker);
                }
            }
            Entry::Vacant(e) => {
                e.insert(WorkerState { seen: now, job: None, timed_out: false });
                self.idle.push_back(worker.clone());
                let expiry = now + self.liveness_span;
                self.next_expiry_check = Some(self.next_expiry_check.map_or(expiry, |t| t.min(expiry)));
                tracing::info!(worker = %display_id(&worker), workers = self.workers.len(), "worker ready");
                self.emit(QueueEvent::WorkerReady { worker });
            }
        }
    }

    /// A worker whose request timed out shows a sign of life: it rejoins the idle list.
    fn recovered(&mut self, worker: &Bytes) {
        let Some(w) = self.workers.get_mut(worker) else { return };
        if w.timed_out && w.job.is_none() {
            w.timed_out = false;
            tracing::info!(worker = %display_id(worker), "worker whose request timed out is alive: idle again");
            self.idle.push_back(worker.clone());
        }
    }

    fn tick(&mut self, now: Instant) {
        if self.next_expiry_check.is_some_and(|t| t <= now) {
            self.purge_expired(now);
        }
        if now >= self.next_heartbeat {
            self.requeue_timed_out(now);
            // Every worker, idle or busy (the spec: both peers heartbeat).
            let heartbeats = self.workers.keys().map(|worker| Action::Heartbeat { worker: worker.clone() });
            self.outbox.extend(heartbeats);
            self.next_heartbeat += self.interval;
            if self.next_heartbeat <= now {
                // Late by more than an interval (a stalled runtime): no burst of catch-up heartbeats.
                self.next_heartbeat = now + self.interval;
            }
        }
    }

    fn purge_expired(&mut self, now: Instant) {
        let span = self.liveness_span;
        let expired: Vec<(Bytes, Duration)> = self
            .workers
            .iter()
            .filter(|(_, w)| w.seen + span <= now)
            .map(|(id, w)| (id.clone(), now - w.seen))
            .collect();
        for (worker, silent_for) in expired {
            tracing::warn!(worker = %display_id(&worker), silent_ms = silent_for.as_millis() as u64, "worker expired");
            self.remove_worker(&worker);
            self.emit(QueueEvent::WorkerExpired { worker, silent_for });
        }
        self.next_expiry_check = self.workers.values().map(|w| w.seen + span).min();
    }

    /// Requests held longer than `request_timeout` go back to the front of the pending queue.
    fn requeue_timed_out(&mut self, now: Instant) {
        let timeout = self.request_timeout;
        let stuck: Vec<Bytes> = self
            .workers
            .iter()
            .filter(|(_, w)| w.job.as_ref().is_some_and(|(since, _)| *since + timeout <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for worker in stuck {
            let w = self.workers.get_mut(&worker).expect("listed");
            let (_, request) = w.job.take().expect("listed with a job");
            w.timed_out = true;
            tracing::warn!(worker = %display_id(&worker), timeout_ms = timeout.as_millis() as u64, "request timed out; re-dispatching it");
            self.pending.push_front(request);
            self.counters.redispatched += 1;
            self.emit(QueueEvent::RequestTimedOut { worker });
        }
    }

    /// Purges a worker whose connection is gone (a worker already forgotten stays forgotten).
    fn worker_disconnected(&mut self, worker: Bytes) {
        if !self.workers.contains_key(&worker) {
            return;
        }
        tracing::warn!(worker = %display_id(&worker), "worker disconnected; purged");
        self.remove_worker(&worker);
        self.emit(QueueEvent::WorkerDisconnected { worker });
    }

    /// Forgets a worker; its request, if any, goes back to the front of the queue.
    fn remove_worker(&mut self, worker: &Bytes) {
        let Some(state) = self.workers.remove(worker) else { return };
        match state.job {
            Some((_, request)) => {
                tracing::warn!(worker = %display_id(worker), "re-dispatching the lost worker's request");
                self.pending.push_front(request);
                self.counters.redispatched += 1;
                self.emit(QueueEvent::Redispatched { worker: worker.clone() });
            }
            None if state.timed_out => {}
            None => self.idle.retain(|w| w != worker),
        }
    }

    fn malformed(&mut self, side: &'static str, error: ProtocolError, from: &Bytes, now: Instant) {
        if let Some(suppressed) = self.log_throttle.allow_at("ppp queue: malformed message", now) {
            tracing::warn!(side, peer = %display_id(from), %error, suppressed, "malformed message dropped");
        }
        self.emit(QueueEvent::Malformed { side, error });
    }

    fn drop_reply(&mut self, worker: Bytes, reason: String, now: Instant) {
        self.counters.replies_dropped += 1;
        if let Some(suppressed) = self.log_throttle.allow_at("ppp queue: reply dropped", now) {
            tracing::warn!(worker = %display_id(&worker), %reason, suppressed, "reply dropped");
        }
        self.emit(QueueEvent::ReplyDropped { worker, reason });
    }
}

/// True when `reply` carries the same address stack (the frames up to the empty delimiter) as
/// `request`: the worker's answer to that request.
fn same_envelope(request: &Message, reply: &Message) -> bool {
    address_stack(request).is_some_and(|stack| address_stack(reply) == Some(stack))
}

fn address_stack(msg: &Message) -> Option<&[Bytes]> {
    let end = msg.iter().position(|f| f.is_empty())?;
    Some(&msg.frames()[..end])
}
