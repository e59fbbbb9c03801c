//! The passive side of the driver: following the active. A [`Follower`] subscribes to the
//! active's publisher, proves the subscription live by its first message, asks the active for its
//! whole map with `PEERSYNC?` on a fresh socket ([`Phase`]), then applies its updates in sequence
//! order; each update the active publishes takes its copy off the pending list. A gap or a stalled
//! snapshot starts the fetch again. Kept apart from the driver's loop because it is the one part
//! that only a passive server runs, and the one with its own phases.

use std::time::Duration;

use bstar::State;
use tokio::time::Instant;
use zmtp::{Message, MonitorEvent, Socket, SocketType};

use super::Driver;
use crate::command::{KTHXBAI, PEER_NEWER, Update, peersync_message};
use crate::durable::JournalError;
use crate::kvmsg::KvMsg;
use crate::server::ha::HaEvent;
use crate::server::parse_ttl;
use crate::server::state::{Followed, PeerEntry};

/// The passive server's view of the active's publisher.
pub(super) struct Follower {
    pub(super) sub: Socket,
    /// The snapshot request's socket (fresh for each request, so a late answer to an abandoned
    /// one never arrives).
    pub(super) dealer: Option<Socket>,
    pub(super) phase: Phase,
}

/// Where a follower is in copying the active's map.
pub(super) enum Phase {
    /// Subscribed; waiting for the first message (proof the subscription is live).
    Proving,
    /// PEERSYNC? sent: collecting KVSYNCs, queueing updates.
    Syncing {
        requested: Instant,
        deadline: Instant,
        /// The snapshot's sequence, from the first KVSYNC.
        sequence: Option<u64>,
        entries: Vec<PeerEntry>,
        queued: Vec<KvMsg>,
    },
    /// Applying the active's updates in sequence order.
    Following,
}

impl Follower {
    /// Closes its sockets (in the background: the driver's loop does not wait for them).
    pub(super) fn close(self) {
        tokio::spawn(self.sub.close());
        if let Some(dealer) = self.dealer {
            tokio::spawn(dealer.close());
        }
    }
}

impl Driver {
    pub(super) fn become_passive(&mut self) {
        tracing::info!(peer = %self.config.peer, "passive: following the active");
        self.role = State::Passive;
        // An active yielding to a newer peer's map (or healing a split brain) stops confirming.
        self.confirming = false;
        self.yielding = false;
        self.stood_aside_for_epoch = 0;
        self.was_passive = true;
        self.peer_synced = false;
        self.newer_than_peer = false;
        // The map is kept until the active's snapshot replaces it: a server that yields after a
        // split brain, then has to serve again before its copy is complete (the peer died too),
        // serves what it had rather than nothing.
        if let Some(old) = self.follower.take() {
            old.close();
        }
        let sub = Socket::new(SocketType::Sub);
        sub.set_linger(Some(Duration::ZERO));
        sub.set_rcvhwm(self.config.server.queue_limit);
        sub.set_reconnect_ivl(Some(self.config.heartbeat.min(Duration::from_millis(100))));
        sub.subscribe("").expect("SUB socket");
        if let Some(curve) = &self.config.server.curve {
            curve.peer_client(&sub);
            // A refused handshake leaves the passive without a copy: say why (ends with the socket).
            let mut events = sub.monitor();
            tokio::spawn(async move {
                while let Some(event) = events.next_event().await {
                    if let MonitorEvent::HandshakeFailed { endpoint, error, .. } = event
                        && !matches!(*error, zmtp::ConnectionError::SocketClosed)
                    {
                        tracing::error!(
                            endpoint,
                            %error,
                            "cannot follow the peer: CURVE handshake failed (is the peer's public key right, and \
                             does the peer know ours?)"
                        );
                    }
                }
            });
        }
        let endpoint = self.config.peer.publisher();
        // `connect` only starts the background connect; it does not wait for the peer.
        let connecting = sub.clone();
        tokio::spawn(async move {
            if let Err(e) = connecting.connect(&endpoint).await {
                tracing::error!(endpoint, error = %e, "cannot follow the peer");
            }
        });
        self.follower = Some(Follower { sub, dealer: None, phase: Phase::Proving });
        self.emit(HaEvent::BecamePassive);
    }

    /// Sends PEERSYNC? on a fresh socket; `queued` are updates already received.
    fn request_snapshot(&mut self, queued: Vec<KvMsg>) {
        // With a journal, say how new our map is: the active, if it restarted with us, serves
        // only if its own is at least as new.
        let request = peersync_message(self.persist.is_some().then(|| self.freshness()));
        let Some(follower) = self.follower.as_mut() else { return };
        if let Some(old) = follower.dealer.take() {
            tokio::spawn(old.close());
        }
        if self.star.peer_state() != Some(State::Active) {
            // Only the active has a map to give (and only its vote is safe to ask for).
            follower.phase = Phase::Proving;
            return;
        }
        let dealer = Socket::new(SocketType::Dealer);
        dealer.set_linger(Some(Duration::ZERO));
        dealer.set_rcvhwm(self.config.server.queue_limit);
        if let Some(curve) = &self.config.server.curve {
            curve.peer_client(&dealer);
        }
        let timeout = self.config.peer_sync_timeout;
        let endpoint = self.config.peer.snapshot();
        let sending = dealer.clone();

        // DEALER waits for a connected peer to send: never in the event loop.
        tokio::spawn(async move {
            let send = async {
                sending.connect(&endpoint).await?;
                sending.send(request).await
            };
            match tokio::time::timeout(timeout, send).await {
                Ok(Ok(())) => tracing::debug!(endpoint, "PEERSYNC? sent"),
                Ok(Err(e)) => tracing::warn!(endpoint, error = %e, "cannot ask the peer for a snapshot"),
                Err(_) => tracing::warn!(endpoint, "the peer's snapshot port is not reachable"),
            }
        });
        let now = Instant::now();
        follower.dealer = Some(dealer);
        follower.phase =
            Phase::Syncing { requested: now, deadline: now + timeout, sequence: None, entries: Vec::new(), queued };
    }

    pub(super) fn sync_timed_out(&mut self) {
        self.stats.peer_sync_timeouts += 1;
        if let Some(suppressed) = zmtp::throttle::allow("chp: peer snapshot timed out") {
            tracing::warn!(
                peer = %self.config.peer,
                timeout = ?self.config.peer_sync_timeout,
                suppressed,
                "no progress on the peer's snapshot; asking again"
            );
        }
        if self.star.status().peer == bstar::Liveness::Alive {
            // Once its publisher is heard again (the subscription proven anew: it may be
            // reconnecting, and what it misses meanwhile is in no snapshot asked for before).
            if let Some(follower) = self.follower.as_mut() {
                if let Some(dealer) = follower.dealer.take() {
                    tokio::spawn(dealer.close());
                }
                follower.phase = Phase::Proving;
            }
        } else {
            // A silent peer publishes nothing that would prove it: ask at once. (It may be an
            // active that stands aside for us, whose NEWER answer was lost.)
            self.request_snapshot(Vec::new());
        }
    }

    /// The peer went silent: a copy that waits for proof from its publisher asks at once, for the
    /// same reason as [`Driver::sync_timed_out`].
    pub(super) fn ask_silent_peer(&mut self) {
        if self.follower.as_ref().is_some_and(|f| matches!(f.phase, Phase::Proving)) {
            self.request_snapshot(Vec::new());
        }
    }

    /// A message from the active's publisher.
    pub(super) fn on_peer_update(&mut self, mut msg: Message) {
        let now = Instant::now();
        let update = match Update::parse_mut(msg.frames_mut()) {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(error = %e, "dropped bad message from the active");
                return;
            }
        };
        self.pending.prune(now.into_std());
        let Some(follower) = self.follower.as_mut() else { return };
        match (&mut follower.phase, update) {
            (Phase::Proving, update) => {
                let queued = match update {
                    Update::KvPub(m) => vec![m],
                    Update::Hugz { .. } => Vec::new(),
                };
                self.request_snapshot(queued);
            }
            (Phase::Syncing { queued, .. }, Update::KvPub(m)) => queued.push(m),
            (Phase::Following, Update::KvPub(m)) => self.follow(m, now),
            (_, Update::Hugz { .. }) => {}
        }
    }

    /// Applies one update of the active (following), and journals it (committed by the caller).
    fn follow(&mut self, msg: KvMsg, now: Instant) {
        let outcome = self.shared.lock().follow(&msg, now.into_std());
        match outcome {
            Followed::Applied => {
                if let Some(persist) = self.persist.as_mut()
                    && let Err(e) = persist.append(&self.shared.lock(), std::slice::from_ref(&msg))
                {
                    // The map now holds what the journal does not: the server stops once this
                    // batch is handled (`journal_error`).
                    self.journal_error.get_or_insert(e);
                }
                self.pending.published(&msg, now.into_std());
            }
            Followed::Stale => {
                self.pending.published(&msg, now.into_std());
            }
            Followed::Gap { expected, got } => {
                self.stats.gaps += 1;
                tracing::warn!(expected, got, "updates from the active were lost; re-syncing");
                self.peer_synced = false;
                self.request_snapshot(vec![msg]);
            }
        }
    }

    /// A message on the snapshot request's socket.
    pub(super) async fn on_peer_snapshot(&mut self, mut msg: Message) -> Result<(), JournalError> {
        let now = Instant::now();
        if matches!(msg.frames(), [answer] if answer == PEER_NEWER) {
            // Both of us restarted from our journals and ours is newer: the active falls silent,
            // and we take over (on a client's vote, once it is silent) holding the truth.
            tracing::warn!("the active's map is older than ours: it steps aside, and this server takes over");
            self.newer_than_peer = true;
            self.holds_truth = true;
            self.star.set_eligible(true);
            if let Some(follower) = self.follower.as_mut() {
                if let Some(dealer) = follower.dealer.take() {
                    tokio::spawn(dealer.close());
                }
                follower.phase = Phase::Proving;
            }
            return Ok(());
        }
        let kv = match KvMsg::parse_mut(msg.frames_mut()) {
            Ok(kv) => kv,
            Err(e) => {
                tracing::warn!(error = %e, "dropped bad snapshot message from the peer");
                return Ok(());
            }
        };
        let Some(Follower { phase: Phase::Syncing { deadline, sequence, entries, .. }, .. }) = self.follower.as_mut()
        else {
            return Ok(());
        };
        *deadline = now + self.config.peer_sync_timeout;
        if kv.key != KTHXBAI.as_bytes() {
            sequence.get_or_insert(kv.sequence);
            let ttl = kv.properties.get("ttl").and_then(|t| parse_ttl(t).ok().flatten());
            if !kv.body.is_empty() {
                entries.push(PeerEntry { key: kv.key, value: kv.body, ttl });
            }
            return Ok(());
        }
        let follower = self.follower.as_mut().expect("matched above");
        let Phase::Syncing { requested, entries, queued, .. } =
            std::mem::replace(&mut follower.phase, Phase::Following)
        else {
            unreachable!("matched above")
        };
        if let Some(dealer) = follower.dealer.take() {
            tokio::spawn(dealer.close());
        }
        let snapshot_sequence = kv.sequence;
        let keys = entries.len();
        self.shared.lock().load(entries, snapshot_sequence, now.into_std());
        if let Some(persist) = self.persist.as_mut() {
            // Our journal becomes the active's map, in its epoch.
            let epoch = kv.properties.get("epoch").and_then(|e| e.parse().ok()).unwrap_or(0);
            persist.reset(&self.shared, epoch).await?;
            self.snapshots.set_epoch(epoch);
        }
        // What the client sent us before we asked is in the snapshot, or the active never had it.
        self.pending.discard_before(requested.into_std());
        self.peer_synced = true;
        self.holds_truth = true;
        self.star.set_eligible(true);
        self.stats.peer_syncs += 1;
        tracing::info!(sequence = snapshot_sequence, keys, queued = queued.len(), "holding a copy of the active's map");
        self.emit(HaEvent::PeerSynced { sequence: snapshot_sequence, keys });
        for m in queued {
            if m.sequence <= snapshot_sequence {
                // In the snapshot already; still its publication.
                self.pending.published(&m, now.into_std());
            } else {
                self.follow(m, now);
                if !self.peer_synced {
                    break; // a gap: a new snapshot was requested
                }
            }
        }
        if let Some(e) = self.journal_error.take() {
            return Err(e);
        }
        match self.persist.as_mut() {
            Some(persist) => persist.commit(&self.shared).await,
            None => Ok(()),
        }
    }
}
