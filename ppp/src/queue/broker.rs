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
//!
//! The fuzz target `ppp_broker` compiles this file by path, so it reaches the rest of the crate
//! only through `super::` (the queue's public types), `crate::display_id` and `crate::protocol`.

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
            // With Backpressure the runner stops reading before this; a new request never grows the
            // queue past the bound either way. (Requests back from lost workers are never dropped,
            // so they can take it past `max_pending` for a while.)
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const SECOND: u64 = 1000;

    /// The Guide's liveness and interval (expiry after 3 s); a request timeout long enough that
    /// only the tests about it see it.
    fn config() -> Queue {
        Queue {
            liveness: 3,
            interval: Duration::from_secs(1),
            request_timeout: Duration::from_secs(60),
            ..Queue::default()
        }
    }

    /// A broker started at `base`, fed at `base + ms`, and polled dry after every input (what the
    /// runner does when every send succeeds).
    struct Harness {
        broker: Broker,
        base: Instant,
    }

    impl Harness {
        fn new(config: Queue) -> Self {
            let base = Instant::now();
            Harness { broker: Broker::new(&config, base), base }
        }

        fn at(&self, ms: u64) -> Instant {
            self.base + Duration::from_millis(ms)
        }

        fn feed(&mut self, ms: u64, input: Input) -> Vec<Action> {
            self.broker.handle(self.at(ms), input);
            self.poll_all(ms)
        }

        fn poll_all(&mut self, ms: u64) -> Vec<Action> {
            let now = self.at(ms);
            std::iter::from_fn(|| self.broker.poll_action(now)).collect()
        }

        fn worker_sends(&mut self, ms: u64, worker: &'static str, msg: Message) -> Vec<Action> {
            self.feed(ms, Input::FromWorker { worker: id(worker), msg })
        }

        fn ready(&mut self, ms: u64, worker: &'static str) -> Vec<Action> {
            self.worker_sends(ms, worker, Command::Ready.message())
        }

        fn heartbeat(&mut self, ms: u64, worker: &'static str) -> Vec<Action> {
            self.worker_sends(ms, worker, Command::Heartbeat.message())
        }

        /// The worker echoes `request` back: the right envelope, so the reply to it.
        fn answer(&mut self, ms: u64, worker: &'static str, request: &Message) -> Vec<Action> {
            self.worker_sends(ms, worker, request.clone())
        }

        fn request(&mut self, ms: u64, request: &Message) -> Vec<Action> {
            self.feed(ms, Input::Request(request.clone()))
        }

        fn tick(&mut self, ms: u64) -> Vec<Action> {
            self.feed(ms, Input::Tick)
        }

        fn stats(&self) -> QueueStats {
            self.broker.stats()
        }
    }

    fn id(name: &'static str) -> Bytes {
        Bytes::from_static(name.as_bytes())
    }

    /// `[client id, "", body]`, as the frontend ROUTER delivers a Lazy Pirate request.
    fn request(client: &'static str, body: &'static str) -> Message {
        Message::from(vec![client, "", body])
    }

    fn dispatch(worker: &'static str, request: &Message) -> Action {
        Action::Dispatch { worker: id(worker), request: request.clone() }
    }

    fn event(event: QueueEvent) -> Action {
        Action::Event(event)
    }

    fn ready_event(worker: &'static str) -> Action {
        event(QueueEvent::WorkerReady { worker: id(worker) })
    }

    /// Heartbeats go out in the workers' map order: their targets as a set, the rest in order.
    fn split_heartbeats(actions: Vec<Action>) -> (BTreeSet<Bytes>, Vec<Action>) {
        let mut heartbeats = BTreeSet::new();
        let mut rest = Vec::new();
        for action in actions {
            match action {
                Action::Heartbeat { worker } => assert!(heartbeats.insert(worker), "two heartbeats to one worker"),
                other => rest.push(other),
            }
        }
        (heartbeats, rest)
    }

    fn ids(names: &[&'static str]) -> BTreeSet<Bytes> {
        names.iter().map(|n| id(n)).collect()
    }

    /// Workers that sent READY at time 0, in this order.
    fn with_workers(config: Queue, workers: &[&'static str]) -> Harness {
        let mut h = Harness::new(config);
        for w in workers {
            assert_eq!(h.ready(0, w), [ready_event(w)]);
        }
        h
    }

    #[test]
    fn ready_registers_a_worker_once() {
        let mut h = Harness::new(config());
        assert_eq!(h.ready(0, "A"), [ready_event("A")]);
        // A second READY from an idle worker changes nothing (it is not listed twice).
        assert_eq!(h.ready(10, "A"), []);
        assert_eq!((h.stats().workers, h.stats().idle), (1, 1));
    }

    #[test]
    fn requests_go_to_the_longest_idle_worker() {
        let mut h = with_workers(config(), &["A", "B", "C"]);
        let r = [request("c1", "1"), request("c2", "2"), request("c3", "3"), request("c4", "4")];
        assert_eq!(h.request(10, &r[0]), [dispatch("A", &r[0])]);
        assert_eq!(h.request(20, &r[1]), [dispatch("B", &r[1])]);
        // A finishes first and goes to the back of the idle list, behind C.
        assert_eq!(h.answer(30, "A", &r[0]), [Action::Reply(r[0].clone())]);
        assert_eq!(h.request(40, &r[2]), [dispatch("C", &r[2])]);
        assert_eq!(h.request(50, &r[3]), [dispatch("A", &r[3])]);
        assert_eq!((h.stats().idle, h.stats().requests, h.stats().replies), (0, 4, 1));
    }

    #[test]
    fn a_request_waits_for_a_worker_and_goes_to_the_first_ready() {
        let mut h = Harness::new(config());
        let r = request("c", "job");
        assert_eq!(h.request(0, &r), []);
        assert_eq!(h.stats().pending, 1);
        assert_eq!(h.ready(10, "A"), [ready_event("A"), dispatch("A", &r)]);
        assert_eq!(h.stats().pending, 0);
    }

    #[test]
    fn a_busy_worker_heartbeat_earns_it_no_second_request() {
        let mut h = with_workers(config(), &["A"]);
        let (r1, r2) = (request("c1", "1"), request("c2", "2"));
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        assert_eq!(h.request(0, &r2), []);
        assert_eq!(h.heartbeat(500, "A"), []);
        assert_eq!((h.stats().idle, h.stats().pending), (0, 1));
        assert_eq!(h.answer(600, "A", &r1), [Action::Reply(r1.clone()), dispatch("A", &r2)]);
    }

    #[test]
    fn heartbeats_and_messages_from_unregistered_workers_are_not_a_registration() {
        let mut h = Harness::new(config());
        assert_eq!(h.heartbeat(0, "X"), []);
        let reply = request("c", "late");
        let reason = "from an unregistered worker (expired, or never sent READY)".to_string();
        assert_eq!(h.answer(0, "X", &reply), [event(QueueEvent::ReplyDropped { worker: id("X"), reason })]);
        assert_eq!((h.stats().workers, h.stats().replies_dropped, h.stats().replies), (0, 1, 0));
    }

    #[test]
    fn a_silent_worker_expires_at_exactly_liveness_intervals() {
        let mut h = with_workers(config(), &["A"]);
        assert_eq!(h.broker.next_wakeup(), h.at(SECOND), "the first heartbeat comes before the expiry");
        assert_eq!(h.tick(SECOND), [Action::Heartbeat { worker: id("A") }]);
        assert_eq!(h.tick(2 * SECOND), [Action::Heartbeat { worker: id("A") }]);
        assert_eq!(h.broker.next_wakeup(), h.at(3 * SECOND));
        // One nanosecond before the boundary it is alive.
        h.broker.handle(h.at(3 * SECOND) - Duration::from_nanos(1), Input::Tick);
        assert_eq!(h.poll_all(3 * SECOND), []);
        assert_eq!(h.stats().workers, 1);
        let silent_for = Duration::from_secs(3);
        assert_eq!(h.tick(3 * SECOND), [event(QueueEvent::WorkerExpired { worker: id("A"), silent_for })]);
        assert_eq!((h.stats().workers, h.stats().idle), (0, 0));
        // No worker, no heartbeat, no expiry to watch: only the heartbeat schedule remains.
        assert_eq!(h.broker.next_wakeup(), h.at(4 * SECOND));
        assert_eq!(h.tick(4 * SECOND), []);
    }

    #[test]
    fn any_message_from_a_worker_moves_its_expiry() {
        let mut h = with_workers(config(), &["A"]);
        assert_eq!(h.heartbeat(2500, "A"), []);
        assert_eq!(h.tick(3 * SECOND), [Action::Heartbeat { worker: id("A") }]);
        // A malformed message is still a sign of life.
        let unknown = Message::single(Bytes::from_static(b"?"));
        assert!(matches!(&h.worker_sends(3500, "A", unknown)[..], [Action::Event(QueueEvent::Malformed { .. })]));
        assert_eq!(h.tick(6499), [Action::Heartbeat { worker: id("A") }]);
        assert_eq!(h.stats().workers, 1);
        let silent_for = Duration::from_secs(3);
        assert_eq!(h.tick(6500), [event(QueueEvent::WorkerExpired { worker: id("A"), silent_for })]);
    }

    #[test]
    fn an_expired_busy_worker_request_goes_to_the_front_of_the_queue() {
        let mut h = with_workers(config(), &["A", "B"]);
        let r = [request("c1", "1"), request("c2", "2"), request("c3", "3")];
        assert_eq!(h.request(0, &r[0]), [dispatch("A", &r[0])]);
        assert_eq!(h.request(0, &r[1]), [dispatch("B", &r[1])]);
        assert_eq!(h.request(0, &r[2]), []);
        assert_eq!(h.heartbeat(2 * SECOND, "B"), []);
        let (heartbeats, rest) = split_heartbeats(h.tick(3 * SECOND));
        assert_eq!(heartbeats, ids(&["B"]), "the expired worker is not heartbeated");
        let silent_for = Duration::from_secs(3);
        assert_eq!(
            rest,
            [
                event(QueueEvent::Redispatched { worker: id("A") }),
                event(QueueEvent::WorkerExpired { worker: id("A"), silent_for }),
            ]
        );
        // A's request is ahead of the one that was waiting.
        assert_eq!(h.answer(3100, "B", &r[1]), [Action::Reply(r[1].clone()), dispatch("B", &r[0])]);
        assert_eq!(h.answer(3200, "B", &r[0]), [Action::Reply(r[0].clone()), dispatch("B", &r[2])]);
        assert_eq!((h.stats().redispatched, h.stats().replies, h.stats().workers), (1, 2, 1));
        // A's late answer finds no registered worker.
        assert!(matches!(&h.answer(3300, "A", &r[0])[..], [Action::Event(QueueEvent::ReplyDropped { .. })]));
        assert_eq!(h.stats().replies, 2);
    }

    /// A request held for `request_timeout` goes to another worker at the heartbeat that finds it
    /// due (the boundary included); the holder comes back on its next heartbeat.
    #[test]
    fn a_request_held_past_the_timeout_goes_to_another_worker() {
        let mut h = with_workers(Queue { request_timeout: Duration::from_secs(2), ..config() }, &["A", "B"]);
        let r1 = request("c1", "1");
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        assert_eq!(split_heartbeats(h.tick(SECOND)), (ids(&["A", "B"]), vec![]));
        for w in ["A", "B"] {
            assert_eq!(h.heartbeat(1500, w), []);
        }
        let (heartbeats, rest) = split_heartbeats(h.tick(2 * SECOND));
        assert_eq!(heartbeats, ids(&["A", "B"]), "a timed-out worker is still heartbeated");
        assert_eq!(rest, [event(QueueEvent::RequestTimedOut { worker: id("A") }), dispatch("B", &r1)]);
        assert_eq!((h.stats().redispatched, h.stats().idle, h.stats().workers), (1, 0, 2));
        // Its heartbeat shows A alive and done: idle again, and listed once.
        assert_eq!(h.heartbeat(2100, "A"), []);
        assert_eq!(h.heartbeat(2200, "A"), []);
        assert_eq!(h.stats().idle, 1);
        let r2 = request("c2", "2");
        assert_eq!(h.request(2300, &r2), [dispatch("A", &r2)]);
        assert_eq!(h.answer(2400, "B", &r1), [Action::Reply(r1.clone())]);
        assert_eq!((h.stats().replies, h.stats().replies_dropped), (1, 0));
    }

    #[test]
    fn a_late_reply_from_a_timed_out_worker_is_dropped_and_brings_the_worker_back() {
        let mut h = with_workers(Queue { request_timeout: Duration::from_secs(1), ..config() }, &["A"]);
        let r1 = request("c1", "1");
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        // The only worker timed out: the request waits for the next worker to be idle.
        let (_, rest) = split_heartbeats(h.tick(SECOND));
        assert_eq!(rest, [event(QueueEvent::RequestTimedOut { worker: id("A") })]);
        assert_eq!(h.stats().pending, 1);
        // Its late reply is not forwarded (the request is someone's again), but A is alive: it gets
        // the request again.
        let reason = "not the reply to the worker's current request (late, or re-dispatched)".to_string();
        assert_eq!(
            h.answer(1500, "A", &r1),
            [event(QueueEvent::ReplyDropped { worker: id("A"), reason }), dispatch("A", &r1)]
        );
        assert_eq!(h.answer(1600, "A", &r1), [Action::Reply(r1.clone())]);
        let stats = h.stats();
        assert_eq!((stats.requests, stats.replies, stats.replies_dropped, stats.redispatched), (1, 1, 1, 1));
    }

    #[test]
    fn ready_from_a_timed_out_worker_makes_it_idle_again() {
        let mut h = with_workers(Queue { request_timeout: Duration::from_secs(1), ..config() }, &["A", "B"]);
        let r1 = request("c1", "1");
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        let (_, rest) = split_heartbeats(h.tick(SECOND));
        assert_eq!(rest, [event(QueueEvent::RequestTimedOut { worker: id("A") }), dispatch("B", &r1)]);
        assert_eq!(h.ready(1500, "A"), [], "a known worker: no new registration");
        let r2 = request("c2", "2");
        assert_eq!(h.request(1600, &r2), [dispatch("A", &r2)]);
    }

    #[test]
    fn ready_from_a_busy_worker_redispatches_its_request_and_one_reply_goes_out() {
        let mut h = with_workers(config(), &["A"]);
        let r1 = request("c1", "1");
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        // The worker restarted: the request goes out again, here to the same (only) worker.
        assert_eq!(h.ready(100, "A"), [event(QueueEvent::Redispatched { worker: id("A") }), dispatch("A", &r1)]);
        assert_eq!(h.answer(200, "A", &r1), [Action::Reply(r1.clone())]);
        assert!(matches!(&h.answer(300, "A", &r1)[..], [Action::Event(QueueEvent::ReplyDropped { .. })]));
        let stats = h.stats();
        assert_eq!((stats.replies, stats.replies_dropped, stats.redispatched, stats.idle), (1, 1, 1, 1));
    }

    #[test]
    fn a_reply_to_another_request_is_dropped_and_the_worker_stays_busy() {
        let mut h = with_workers(config(), &["A"]);
        let (r1, r2) = (request("c1", "1"), request("c2", "2"));
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        assert_eq!(h.request(0, &r2), []);
        assert!(matches!(&h.answer(10, "A", &r2)[..], [Action::Event(QueueEvent::ReplyDropped { .. })]));
        assert_eq!((h.stats().idle, h.stats().pending), (0, 1));
        // The reply's content may differ from the request's; only the address stack must match.
        let answer = Message::from(vec!["c1", "", "ONE"]);
        assert_eq!(h.worker_sends(20, "A", answer.clone()), [Action::Reply(answer), dispatch("A", &r2)]);
    }

    #[test]
    fn drop_oldest_keeps_the_newest_requests() {
        let mut h = Harness::new(Queue { max_pending: 2, overflow: Overflow::DropOldest, ..config() });
        let r = [request("c1", "1"), request("c2", "2"), request("c3", "3")];
        assert_eq!(h.request(0, &r[0]), []);
        assert_eq!(h.request(0, &r[1]), []);
        assert!(h.broker.accepts_requests(), "DropOldest keeps reading");
        assert_eq!(h.request(0, &r[2]), [event(QueueEvent::RequestDropped)]);
        assert!(h.broker.accepts_requests());
        let stats = h.stats();
        assert_eq!((stats.requests, stats.requests_dropped, stats.pending), (3, 1, 2));
        assert_eq!(h.ready(10, "A"), [ready_event("A"), dispatch("A", &r[1])]);
        assert_eq!(h.ready(10, "B"), [ready_event("B"), dispatch("B", &r[2])]);
    }

    #[test]
    fn backpressure_stops_reading_while_the_queue_is_full() {
        let mut h = Harness::new(Queue { max_pending: 2, ..config() });
        let r = [request("c1", "1"), request("c2", "2"), request("c3", "3")];
        assert_eq!(h.request(0, &r[0]), []);
        assert!(h.broker.accepts_requests());
        assert_eq!(h.request(0, &r[1]), []);
        assert!(!h.broker.accepts_requests());
        assert_eq!(h.ready(10, "A"), [ready_event("A"), dispatch("A", &r[0])]);
        assert!(h.broker.accepts_requests(), "a request left the queue");
        // Fed anyway when full, the broker still keeps its bound.
        assert_eq!(h.request(20, &r[2]), []);
        assert_eq!(h.request(20, &request("c4", "4")), [event(QueueEvent::RequestDropped)]);
        assert_eq!(h.stats().pending, 2);
    }

    #[test]
    fn a_disconnected_busy_worker_request_is_redispatched_at_once() {
        let mut h = with_workers(config(), &["A", "B"]);
        let r1 = request("c1", "1");
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        assert_eq!(
            h.feed(100, Input::BackendDisconnected { connected: ids(&["B"]).into_iter().collect() }),
            [
                event(QueueEvent::Redispatched { worker: id("A") }),
                event(QueueEvent::WorkerDisconnected { worker: id("A") }),
                dispatch("B", &r1),
            ]
        );
        assert_eq!((h.stats().workers, h.stats().redispatched), (1, 1));
    }

    #[test]
    fn a_disconnected_idle_worker_leaves_the_idle_list() {
        let mut h = with_workers(config(), &["A", "B"]);
        // Another peer's connection (a client of the backend that never sent READY, say): no one is gone.
        assert_eq!(h.feed(50, Input::BackendDisconnected { connected: ids(&["A", "B"]).into_iter().collect() }), []);
        assert_eq!(
            h.feed(100, Input::BackendDisconnected { connected: ids(&["B", "X"]).into_iter().collect() }),
            [event(QueueEvent::WorkerDisconnected { worker: id("A") })]
        );
        let r1 = request("c1", "1");
        assert_eq!(h.request(200, &r1), [dispatch("B", &r1)]);
        assert_eq!((h.stats().workers, h.stats().idle, h.stats().redispatched), (1, 0, 0));
        // It may come back.
        assert_eq!(h.ready(300, "A"), [ready_event("A")]);
    }

    #[test]
    fn an_unroutable_heartbeat_purges_its_worker() {
        let mut h = with_workers(config(), &["A", "B"]);
        let r1 = request("c1", "1");
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        assert_eq!(
            h.feed(SECOND, Input::HeartbeatUnroutable { worker: id("A") }),
            [
                event(QueueEvent::Redispatched { worker: id("A") }),
                event(QueueEvent::WorkerDisconnected { worker: id("A") }),
                dispatch("B", &r1),
            ]
        );
        // Reported again (or for a worker that never registered): nothing more happens.
        assert_eq!(h.feed(SECOND, Input::HeartbeatUnroutable { worker: id("A") }), []);
        assert_eq!(h.stats().workers, 1);
    }

    #[test]
    fn a_failed_dispatch_goes_to_the_next_idle_worker_in_order() {
        let mut h = Harness::new(config());
        let (r1, r2) = (request("c1", "1"), request("c2", "2"));
        for r in [&r1, &r2] {
            h.broker.handle(h.at(0), Input::Request(r.clone()));
        }
        for w in ["A", "B", "C"] {
            h.broker.handle(h.at(0), Input::FromWorker { worker: id(w), msg: Command::Ready.message() });
        }
        let now = h.at(0);
        for w in ["A", "B", "C"] {
            assert_eq!(h.broker.poll_action(now), Some(ready_event(w)));
        }
        assert_eq!(h.broker.poll_action(now), Some(dispatch("A", &r1)));
        h.broker.handle(now, Input::DispatchFailed { worker: id("A") });
        assert_eq!(
            h.poll_all(0),
            [event(QueueEvent::WorkerDisconnected { worker: id("A") }), dispatch("B", &r1), dispatch("C", &r2)]
        );
        // Never held, so not re-dispatched.
        assert_eq!((h.stats().workers, h.stats().redispatched, h.stats().requests), (2, 0, 2));
    }

    #[test]
    fn malformed_messages_are_dropped_and_their_senders_stay_usable() {
        let mut h = with_workers(config(), &["A"]);
        let malformed = |side, error| event(QueueEvent::Malformed { side, error });
        assert_eq!(
            h.feed(0, Input::Request(Message::from(vec!["c", "no envelope"]))),
            [malformed("frontend", ProtocolError::MissingEnvelope)]
        );
        assert_eq!(
            h.feed(0, Input::Request(Message::from(vec!["c", ""]))),
            [malformed("frontend", ProtocolError::MissingContent)]
        );
        assert_eq!(h.stats().requests, 0);
        assert_eq!(
            h.worker_sends(0, "A", Message::single(Bytes::from_static(&[7]))),
            [malformed("backend", ProtocolError::UnknownCommand(Bytes::from_static(&[7])))]
        );
        assert_eq!(
            h.worker_sends(0, "A", Message::from(vec!["c", "no envelope"])),
            [malformed("backend", ProtocolError::MissingEnvelope)]
        );
        assert_eq!(h.worker_sends(0, "A", Message::new()), [malformed("backend", ProtocolError::MissingEnvelope)]);
        let r1 = request("c1", "1");
        assert_eq!(h.request(10, &r1), [dispatch("A", &r1)]);
        assert_eq!(h.answer(20, "A", &r1), [Action::Reply(r1.clone())]);
        assert_eq!((h.stats().replies_dropped, h.stats().requests, h.stats().replies), (0, 1, 1));
    }

    #[test]
    fn heartbeats_go_every_interval_to_idle_and_busy_workers_without_catch_up_bursts() {
        let mut h = with_workers(config(), &["A", "B"]);
        let r1 = request("c1", "1");
        assert_eq!(h.request(0, &r1), [dispatch("A", &r1)]);
        assert_eq!(h.tick(999), []);
        assert_eq!(split_heartbeats(h.tick(SECOND)), (ids(&["A", "B"]), vec![]));
        assert_eq!(h.broker.next_wakeup(), h.at(2 * SECOND));
        for w in ["A", "B"] {
            assert_eq!(h.heartbeat(2600, w), []);
        }
        // Woken far too late (a stalled runtime): one heartbeat, then the schedule restarts from now.
        assert_eq!(split_heartbeats(h.tick(5500)), (ids(&["A", "B"]), vec![]));
        assert_eq!(h.broker.next_wakeup(), h.at(5600), "the expiry of workers last heard at 2.6 s comes first");
        for w in ["A", "B"] {
            assert_eq!(h.heartbeat(5550, w), []);
        }
        assert_eq!(h.tick(5600), [], "nothing expired, no heartbeat due");
        assert_eq!(h.broker.next_wakeup(), h.at(6500));
    }

    #[test]
    fn stats_count_every_outcome() {
        let mut h = Harness::new(Queue { max_pending: 1, overflow: Overflow::DropOldest, ..config() });
        let r = [request("c1", "1"), request("c2", "2"), request("c3", "3")];
        h.request(0, &r[0]);
        h.request(0, &r[1]); // drops r[0]
        h.ready(0, "A"); // gets r[1]
        h.ready(0, "B");
        h.request(0, &r[2]); // to B
        h.ready(10, "B"); // B restarts: r[2] goes out again, to B (A is busy)
        h.answer(20, "A", &r[1]);
        h.answer(30, "A", &r[1]); // dropped: A has no request now
        h.answer(40, "B", &r[2]);
        let expected = QueueStats {
            workers: 2,
            idle: 2,
            pending: 0,
            requests: 3,
            replies: 2,
            redispatched: 1,
            replies_dropped: 1,
            requests_dropped: 1,
        };
        assert_eq!(h.stats(), expected);
    }

    /// A small deterministic generator for the sequence test (no dependency, same run every time).
    struct XorShift(u64);

    impl XorShift {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// The broker's invariants, and the promises it makes to clients, after any sequence of inputs.
    fn check_invariants(broker: &Broker, held: usize) {
        let idle: HashSet<&Bytes> = broker.idle.iter().collect();
        assert_eq!(idle.len(), broker.idle.len(), "a worker listed twice as idle: {:?}", broker.idle);
        for (id, w) in &broker.workers {
            assert_eq!(idle.contains(id), w.job.is_none() && !w.timed_out, "idle list wrong for {id:?}: {w:?}");
        }
        assert!(idle.iter().all(|id| broker.workers.contains_key(*id)), "an unknown worker is idle");
        assert!(broker.pending.is_empty() || broker.idle.is_empty(), "a request waits beside an idle worker");
        let jobs = broker.workers.values().filter(|w| w.job.is_some()).count();
        assert_eq!(jobs, held);
        let c = broker.counters;
        assert_eq!(
            c.requests,
            c.replies + c.requests_dropped + (broker.pending.len() + jobs) as u64,
            "every request is replied to, dropped, waiting or held"
        );
        if let Some(first) = broker.workers.values().map(|w| w.seen + broker.liveness_span).min() {
            assert!(broker.next_expiry_check.is_some_and(|t| t <= first), "an expiry would be missed");
        }
    }

    /// Random interleavings of every input, with sends that sometimes fail: the invariants hold
    /// throughout and no client ever gets two replies.
    #[test]
    fn random_sequences_keep_the_invariants() {
        const WORKERS: [&str; 4] = ["W0", "W1", "W2", "W3"];
        // Summed over all runs, to show that the sequences reach every outcome.
        let (mut totals, mut expired, mut timed_out) = (QueueStats::default(), 0, 0);
        for seed in 1..=200u64 {
            let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let overflow = if seed % 2 == 0 { Overflow::DropOldest } else { Overflow::Backpressure };
            let config = Queue {
                max_pending: 1 + rng.below(4) as usize,
                request_timeout: Duration::from_millis(500 + rng.below(3000)),
                overflow,
                ..config()
            };
            let base = Instant::now();
            let mut broker = Broker::new(&config, base);
            let mut now = base;
            // What each worker was last sent, and everything it was ever sent (for late replies).
            let mut current: HashMap<Bytes, Message> = HashMap::new();
            let mut history: Vec<(Bytes, Message)> = Vec::new();
            let mut replied = HashSet::new();
            let mut next_request = 0u64;
            for _ in 0..300 {
                now += Duration::from_millis(rng.below(700));
                let worker = Bytes::from_static(WORKERS[rng.below(4) as usize].as_bytes());
                let input = match rng.below(10) {
                    0 => Input::FromWorker { worker, msg: Command::Ready.message() },
                    1 => Input::FromWorker { worker, msg: Command::Heartbeat.message() },
                    2 | 3 => match current.get(&worker) {
                        Some(request) => Input::FromWorker { worker, msg: request.clone() },
                        None => Input::Tick,
                    },
                    4 if !history.is_empty() => {
                        let (worker, request) = history[rng.below(history.len() as u64) as usize].clone();
                        Input::FromWorker { worker, msg: request }
                    }
                    5 | 6 if overflow == Overflow::DropOldest || broker.accepts_requests() => {
                        next_request += 1;
                        let client = Bytes::from(format!("client-{next_request}"));
                        Input::Request(Message::from(vec![client, Bytes::new(), Bytes::from_static(b"body")]))
                    }
                    7 => {
                        let connected = WORKERS.iter().filter(|_| rng.below(4) != 0).map(|w| id(w)).collect();
                        Input::BackendDisconnected { connected }
                    }
                    _ => Input::Tick,
                };
                let (is_request, waiting) = (matches!(input, Input::Request(_)), broker.pending.len());
                broker.handle(now, input);
                if is_request {
                    // Requests back from lost workers may exceed the bound; a new one never grows it.
                    assert!(broker.pending.len() <= waiting.max(broker.max_pending), "max_pending exceeded");
                }
                while let Some(action) = broker.poll_action(now) {
                    match action {
                        Action::Dispatch { worker, request } => {
                            if rng.below(8) == 0 {
                                broker.handle(now, Input::DispatchFailed { worker });
                            } else {
                                current.insert(worker.clone(), request.clone());
                                history.push((worker, request));
                            }
                        }
                        Action::Heartbeat { worker } => {
                            if rng.below(16) == 0 {
                                broker.handle(now, Input::HeartbeatUnroutable { worker });
                            }
                        }
                        Action::Reply(reply) => assert!(replied.insert(reply[0].clone()), "two replies: {reply:?}"),
                        Action::Event(QueueEvent::WorkerExpired { .. }) => expired += 1,
                        Action::Event(QueueEvent::RequestTimedOut { .. }) => timed_out += 1,
                        Action::Event(_) => {}
                    }
                }
                let held = broker.workers.values().filter(|w| w.job.is_some()).count();
                check_invariants(&broker, held);
            }
            let run = broker.stats();
            totals.replies += run.replies;
            totals.redispatched += run.redispatched;
            totals.replies_dropped += run.replies_dropped;
            totals.requests_dropped += run.requests_dropped;
        }
        assert!(expired > 0 && timed_out > 0, "{expired} expiries, {timed_out} timeouts");
        let QueueStats { replies, redispatched, replies_dropped, requests_dropped, .. } = totals;
        assert!(replies > 0 && redispatched > 0 && replies_dropped > 0 && requests_dropped > 0, "{totals:?}");
    }
}
