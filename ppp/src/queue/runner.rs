//! The queue's I/O: the two ROUTER sockets, their connection monitors and the timer, around the
//! [`Broker`] that makes every decision.
//!
//! Kept thin on purpose: it turns what the sockets and the clock report into [`Input`]s, performs
//! the [`Action`]s that come back (and reports a send that failed as another input), publishes the
//! stats and the events, and logs refused handshakes. Whatever is worth a unit test lives in the
//! broker.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::{Instant, sleep_until};
use zmtp::task::StopSignal;
use zmtp::{Message, MonitorEvent, Socket};

use super::broker::{Action, Broker, Input};
use super::{QueueEvent, QueueStats};
use crate::display_id;
use crate::protocol::Command;

/// Messages handled per wake-up before timers get a look in.
const BATCH: usize = 128;

/// A running queue's sockets and the broker between them.
pub(super) struct Runner {
    pub(super) frontend: Socket,
    pub(super) backend: Socket,
    /// Connection events of the backend: a dropped connection may be a worker's.
    pub(super) backend_events: zmtp::Monitor,
    /// Connection events of the frontend (for handshake failures).
    pub(super) frontend_events: zmtp::Monitor,
    /// When a refused handshake was last logged at `warn` (at most one per interval; the rest at
    /// `debug`: a misconfigured peer retries every 100 ms).
    pub(super) refusal_logged: Option<Instant>,
    pub(super) interval: Duration,
    pub(super) broker: Broker,
    pub(super) events: broadcast::Sender<QueueEvent>,
    pub(super) published: Arc<Mutex<QueueStats>>,
}

impl Runner {
    pub(super) async fn run(mut self, mut stop: StopSignal) {
        let timer = sleep_until(Instant::from_std(self.broker.next_wakeup()));
        tokio::pin!(timer);
        loop {
            let wake = Instant::from_std(self.broker.next_wakeup());
            if timer.deadline() != wake {
                timer.as_mut().reset(wake);
            }
            let read_frontend = self.broker.accepts_requests();
            let outcome = tokio::select! {
                _ = &mut stop => break,
                r = self.backend.recv() => r.map(|m| self.on_backend(m)).and_then(|()| self.drain()),
                r = self.frontend.recv(), if read_frontend => {
                    r.map(|m| self.feed(Input::Request(m))).and_then(|()| self.drain())
                }
                Some(ev) = self.frontend_events.next_event() => {
                    if let MonitorEvent::HandshakeFailed { peer, error, .. } = ev {
                        self.handshake_failed("frontend", peer, &error);
                    }
                    Ok(())
                }
                Some(ev) = self.backend_events.next_event() => match ev {
                    MonitorEvent::HandshakeFailed { peer, error, .. } => {
                        self.handshake_failed("backend", peer, &error);
                        Ok(())
                    }
                    MonitorEvent::Disconnected { .. } => {
                        // Whatever the peer sent before it went counts (a reply, say). The route is
                        // removed before the disconnect is reported, so the connected routing ids
                        // tell which worker it was (the event does not).
                        let drained = self.drain_backend().map(drop);
                        let connected: HashSet<_> = self.backend.peer_routing_ids().into_iter().collect();
                        self.feed(Input::BackendDisconnected { connected });
                        drained
                    }
                    _ => Ok(()),
                },
                () = &mut timer => {
                    let now = Instant::now();
                    // Messages already received count as signs of life: read them before judging.
                    let drained = self.drain_backend().map(drop);
                    self.feed_at(now, Input::Tick);
                    drained
                }
            };
            if let Err(e) = outcome {
                if !matches!(e, zmtp::Error::Closed) {
                    tracing::error!(error = %e, "queue socket failed; stopping");
                }
                break;
            }
            self.publish_stats();
        }
        let stats = self.broker.stats();
        tracing::info!(pending = stats.pending, workers = stats.workers, "queue stopping");
        let Runner { frontend, backend, .. } = self;
        tokio::join!(frontend.close(), backend.close());
    }

    fn feed(&mut self, input: Input) {
        self.feed_at(Instant::now(), input);
    }

    /// Hands `input` to the broker and performs what follows from it.
    fn feed_at(&mut self, now: Instant, input: Input) {
        self.broker.handle(now.into_std(), input);
        while let Some(action) = self.broker.poll_action(Instant::now().into_std()) {
            self.perform(action);
        }
    }

    fn perform(&mut self, action: Action) {
        match action {
            Action::Dispatch { worker, mut request } => {
                request.push_front(worker.clone());
                if let Err(error) = self.backend.try_send(request) {
                    // Gone (HostUnreachable) or not reading (WouldBlock): either way not usable.
                    tracing::debug!(worker = %display_id(&worker), %error, "dispatch failed");
                    self.broker.handle(Instant::now().into_std(), Input::DispatchFailed { worker });
                }
            }
            Action::Heartbeat { worker } => {
                let mut msg = Message::single(worker.clone());
                msg.push(Command::Heartbeat.frame());
                match self.backend.try_send(msg) {
                    // A full outbound queue: the worker is not reading; expiry will decide.
                    Ok(()) | Err(zmtp::Error::WouldBlock) => {}
                    Err(_) => self.broker.handle(Instant::now().into_std(), Input::HeartbeatUnroutable { worker }),
                }
            }
            Action::Reply(reply) => {
                self.publish_stats();
                // A frontend ROUTER never blocks; a client that has gone away loses its reply.
                let _ = self.frontend.try_send(reply);
            }
            Action::Event(event) => self.emit(event),
        }
    }

    fn publish_stats(&self) {
        *self.published.lock().unwrap_or_else(|e| e.into_inner()) = self.broker.stats();
    }

    /// Publishes the stats first, so that whoever sees the event sees stats at least as new.
    fn emit(&self, event: QueueEvent) {
        self.publish_stats();
        let _ = self.events.send(event);
    }

    /// Handles whatever else is already queued on both sockets (up to a bound), so one wake-up
    /// serves a burst.
    fn drain(&mut self) -> zmtp::Result<()> {
        for _ in 0..8 {
            if self.drain_backend()? + self.drain_frontend()? == 0 {
                break;
            }
        }
        Ok(())
    }

    fn drain_backend(&mut self) -> zmtp::Result<usize> {
        for n in 0..BATCH {
            match self.backend.try_recv() {
                Ok(msg) => self.on_backend(msg),
                Err(zmtp::Error::WouldBlock) => return Ok(n),
                Err(e) => return Err(e),
            }
        }
        Ok(BATCH)
    }

    fn drain_frontend(&mut self) -> zmtp::Result<usize> {
        for n in 0..BATCH {
            if !self.broker.accepts_requests() {
                return Ok(n);
            }
            match self.frontend.try_recv() {
                Ok(msg) => self.feed(Input::Request(msg)),
                Err(zmtp::Error::WouldBlock) => return Ok(n),
                Err(e) => return Err(e),
            }
        }
        Ok(BATCH)
    }

    fn on_backend(&mut self, mut msg: Message) {
        let worker = msg.pop_front().expect("ROUTER messages carry the routing id");
        self.feed(Input::FromWorker { worker, msg });
    }

    fn handshake_failed(&mut self, side: &'static str, peer: String, error: &zmtp::ConnectionError) {
        let reason = error.to_string();
        let now = Instant::now();
        if self.refusal_logged.is_none_or(|at| now >= at + self.interval) {
            self.refusal_logged = Some(now);
            tracing::warn!(side, %peer, %reason, "security handshake failed; peer disconnected");
        } else {
            tracing::debug!(side, %peer, %reason, "security handshake failed; peer disconnected");
        }
        self.emit(QueueEvent::HandshakeFailed { side, peer, reason });
    }
}
