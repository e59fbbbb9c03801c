//! The task that runs one server of the pair: it binds the sockets, then turns Binary Star's
//! notices, the CHP sockets and the peer link into the active's or the passive's behaviour (see
//! the [parent module](super)). The handle ([`super::HaServer`]) only reads what this task
//! publishes; everything that changes the map or a role happens here, in one place.
//!
//! - Active: [`Driver::collect`] sequences client updates; expiry and HUGZ run as in the single
//!   server.
//! - Passive: a [`Follower`] ([`follow`]) subscribes to the active's publisher, fetches its map
//!   with `PEERSYNC?` and applies its updates in order, clearing the pending list.
//! - Promotion: [`Driver::promote`] replays the pending list before serving.

mod follow;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bstar::{BinaryStar, Notice, Notices, State};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zmtp::task::{Background, StopSignal};
use zmtp::{Message, MonitorEvent, Socket, SocketType};

use self::follow::{Follower, Phase};
use super::reports::{HaEvent, HaShared, HaStats, HaStatus};
use super::{HaConfig, HaError};
use crate::command::{Freshness, KvSet, PEER_NEWER, hugz_message, parse_peersync};
use crate::durable::JournalError;
use crate::kvmsg::SequenceFrames;
use crate::server::pending::{Held, Pending};
use crate::server::persist::Persist;
use crate::server::snapshot::Snapshots;
use crate::server::{ServerError, Shared, WELCOME_HUGZ, log_refused, persisted, restamp};

/// A pair server's sockets, bound: Binary Star's (its voter is the SNAPSHOT socket) and the
/// CHP publisher and collector.
pub(super) struct Sockets {
    /// Binary Star, not yet running.
    pub(super) star: BinaryStar,
    notices: Notices,
    publisher: Socket,
    collector: Socket,
    /// The publisher's connection events (a new subscriber gets welcome HUGZ).
    pub_events: zmtp::Monitor,
}

impl Sockets {
    /// Binds the CHP sockets (the SNAPSHOT socket being the Binary Star voter) and the Binary
    /// Star sockets.
    pub(super) async fn bind(config: &HaConfig) -> Result<Sockets, HaError> {
        let server = &config.server;
        let endpoint = |port: u16| format!("tcp://{}:{port}", server.bind);
        if server.port == 0 || server.port > u16::MAX - 2 {
            let e = ServerError::Bind {
                endpoint: endpoint(server.port),
                source: zmtp::Error::InvalidEndpoint(
                    endpoint(server.port),
                    "a pair server needs a fixed port P (its peer connects to it), 1..=65533",
                ),
            };
            return Err(e.into());
        }
        let port = server.port;
        let mut star_config = bstar::Config::new(config.side, &config.state, &config.peer_state)
            .voter(endpoint(port), SocketType::Router)
            .voter_backlog(crate::server::LISTEN_BACKLOG)
            .heartbeat(config.heartbeat)
            .heal_split_brain(true);
        if let Some(curve) = &server.curve {
            star_config = star_config.curve(curve.bstar());
        }
        let (star, notices) = BinaryStar::bind(star_config).await.map_err(|e| match e {
            bstar::Error::Socket(source) => {
                HaError::Bind(ServerError::Bind { endpoint: format!("{} or {}", endpoint(port), config.state), source })
            }
            other => other.into(),
        })?;
        server.limit_snapshot(star.handle().voter());
        let publisher = server.publisher();
        let collector = server.collector();
        if let Some(curve) = &server.curve {
            // The peer follows our publisher (while passive): admitted even with an allow list.
            curve.server(&publisher, true);
            curve.server(&collector, false);
        }
        let pub_events = publisher.monitor();
        for (socket, offset) in [(&publisher, 1), (&collector, 2)] {
            let at = endpoint(port + offset);
            if let Err(source) = socket.bind(&at).await {
                drop(star);
                return Err(ServerError::Bind { endpoint: at, source }.into());
            }
        }
        Ok(Sockets { star, notices, publisher, collector, pub_events })
    }
}

/// Starts the pair on bound sockets: Binary Star's runner and the driver, each in its own task
/// (heartbeats never wait for the driver). The driver's task stops Binary Star when it stops.
pub(super) fn spawn(
    config: HaConfig,
    sockets: Sockets,
    shared: Arc<Shared>,
    ha: Arc<HaShared>,
    persist: Option<Persist>,
) -> Background<Result<(), HaError>> {
    let Sockets { star, notices, publisher, collector, pub_events } = sockets;
    let handle = star.handle();
    let server = &config.server;
    let snapshots = Snapshots::new(
        handle.voter().clone(),
        shared.clone(),
        server.max_concurrent_snapshots,
        server.snapshot_stall_timeout,
    );
    if let Some(persist) = &persist {
        snapshots.set_epoch(persist.epoch());
    }
    // Not eligible to take over from PASSIVE until this server holds the truth (see
    // `Driver::holds_truth`); becoming active at formation (PRIMARY meets BACKUP) is unaffected.
    handle.set_eligible(false);
    // A durable primary restarted alone waits for its peer, whose map may be newer than ours.
    handle.set_may_start_alone(persist.is_none() || config.start_alone);
    // A durable server that goes active with a live peer serves nothing until the two have
    // compared maps (`Driver::promote`), so a restarted peer may make it active even before it
    // holds a complete copy. Without this, an unsynced passive and a restarted primary (which may
    // hold the newest map) wait for each other for good.
    handle.set_confirms_with_restarted_peer(persist.is_some());
    let runner = tokio::spawn(star.run());
    let role = config.side.start_state();
    // What the journal last published is remembered as published, as if this server had never
    // stopped: a client's retransmit of a write confirmed just before a crash is not applied again.
    let mut pending = Pending::new(config.pending);
    let mut persist = persist;
    if let Some(persist) = persist.as_mut() {
        let now = std::time::Instant::now();
        for uuid in persist.take_recent_uuids() {
            pending.record_uuid(uuid, now);
        }
    }
    let driver = Driver {
        pending,
        config,
        shared,
        ha,
        star: handle,
        publisher,
        collector,
        snapshots,
        role,
        was_passive: false,
        holds_truth: false,
        follower: None,
        stats: HaStats::default(),
        peer_synced: false,
        welcome: BTreeSet::new(),
        persist,
        confirming: false,
        newer_than_peer: false,
        yielding: false,
        stood_aside_for_epoch: 0,
        journal_error: None,
        sequences: SequenceFrames::default(),
    };
    Background::spawn(|stop| driver.run(notices, runner, pub_events, stop))
}

/// Most collector messages handled per wakeup.
const BATCH: usize = 256;

struct Driver {
    config: HaConfig,
    shared: Arc<Shared>,
    ha: Arc<HaShared>,
    star: bstar::Handle,
    publisher: Socket,
    collector: Socket,
    snapshots: Snapshots,
    pending: Pending,
    /// Our role as far as the CHP side is concerned (changes when the notice is handled).
    role: State,
    was_passive: bool,
    /// This server has been active, or holds a complete copy of the active's map: it may take
    /// over. A server that never had either (a restarted one still copying the active's map)
    /// refuses to, so a map it holds only in part is never served as the truth.
    holds_truth: bool,
    follower: Option<Follower>,
    stats: HaStats,
    peer_synced: bool,
    welcome: BTreeSet<Instant>,
    /// The journal, with a data directory.
    persist: Option<Persist>,
    /// Active at the pair's formation with a journal, not serving yet: waiting for the peer's
    /// `PEERSYNC?` to say whose map is newer (see [`Driver::promote`]). There is no time limit:
    /// a live passive asks again after each [`HaConfig::peer_sync_timeout`].
    confirming: bool,
    /// The active answered our `PEERSYNC?` that our map is newer than its own: it falls silent,
    /// and we take over holding the truth.
    newer_than_peer: bool,
    /// Confirming, we learned the peer's map is newer and fell silent (Binary Star state and
    /// HUGZ) so that it takes over; we then yield to it and follow (see [`Driver::on_request`]).
    yielding: bool,
    /// The epoch of the map we stood aside for (while `yielding`): a promotion after all (the
    /// peer came back with an older map) starts above it, so that map, were it ever restored,
    /// sorts below what we serve from then on.
    stood_aside_for_epoch: u64,
    /// A followed update could not be journaled: the server stops after the batch.
    journal_error: Option<JournalError>,
    /// Where the KVPUBs' sequence frames are cut from.
    sequences: SequenceFrames,
}

async fn recv_on(socket: Option<Socket>) -> zmtp::Result<Message> {
    match socket {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Driver {
    async fn run(
        mut self,
        mut notices: Notices,
        mut runner: JoinHandle<Result<(), bstar::Error>>,
        mut pub_events: zmtp::Monitor,
        mut stop: StopSignal,
    ) -> Result<(), HaError> {
        let mut next_hugz = Instant::now() + self.config.server.hugz_interval;
        let mut monitor_open = true;
        let mut batch = Vec::with_capacity(BATCH);
        let mut runner_done = None;
        let mut sync_timer = match (&self.persist, self.config.server.durability) {
            (Some(_), crate::durable::Durability::Interval(every)) => Some(tokio::time::interval(every)),
            _ => None,
        };
        let result = loop {
            let expiry = match self.role {
                State::Active if !self.confirming => self.shared.lock().next_expiry().map(Instant::from_std),
                _ => None,
            };
            let hugz_at = self.welcome.first().copied().map_or(next_hugz, |w| w.min(next_hugz));
            let follow_sub = self.follower.as_ref().map(|f| f.sub.clone());
            let (follow_dealer, sync_deadline) = match &self.follower {
                Some(Follower { dealer: Some(d), phase: Phase::Syncing { deadline, .. }, .. }) => {
                    (Some(d.clone()), Some(*deadline))
                }
                _ => (None, None),
            };
            tokio::select! {
                _ = &mut stop => break Ok(()),
                notice = notices.recv() => match notice {
                    Some(notice) => {
                        if let Err(e) = self.on_notice(notice).await {
                            break Err(e);
                        }
                    }
                    None => {
                        // The runner stopped (fatal pair failure or socket error).
                        let result = (&mut runner).await.unwrap_or(Ok(()));
                        runner_done = Some(());
                        break result.map_err(HaError::from);
                    }
                },
                received = self.collector.recv_many(&mut batch, BATCH) => {
                    if received.is_err() {
                        break Ok(());
                    }
                    if let Err(e) = self.collect(&mut batch).await {
                        break Err(journal_failed(e));
                    }
                }
                msg = recv_on(follow_sub.clone()) => match msg {
                    Ok(msg) => {
                        // The active's updates, as many as are queued, then one commit for them.
                        self.on_peer_update(msg);
                        for _ in 1..BATCH {
                            match follow_sub.as_ref().map(|s| s.try_recv()) {
                                Some(Ok(msg)) => self.on_peer_update(msg),
                                _ => break,
                            }
                        }
                        if let Some(e) = self.journal_error.take() {
                            break Err(journal_failed(e));
                        }
                        if let Some(persist) = self.persist.as_mut()
                            && let Err(e) = persist.commit(&self.shared).await
                        {
                            break Err(journal_failed(e));
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "peer subscriber failed"),
                },
                msg = recv_on(follow_dealer) => match msg {
                    Ok(msg) => {
                        if let Err(e) = self.on_peer_snapshot(msg).await {
                            break Err(journal_failed(e));
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "peer snapshot socket failed"),
                },
                _ = sleep_until(sync_deadline) => self.sync_timed_out(),
                _ = async { sync_timer.as_mut().expect("enabled").tick().await }, if sync_timer.is_some() => {
                    if let Some(persist) = self.persist.as_mut()
                        && let Err(e) = persist.tick(&self.shared).await
                    {
                        break Err(journal_failed(e));
                    }
                }
                _ = sleep_until(expiry) => {
                    let mut publish = Vec::new();
                    self.shared.lock().expire(std::time::Instant::now(), &mut publish);
                    self.shared.stats.expired.add(publish.len() as u64);
                    if let Err(e) = persisted(&mut self.persist, &self.shared, &publish).await {
                        break Err(journal_failed(e));
                    }
                    for update in publish {
                        tracing::debug!(key = %update.key.escape_ascii(), sequence = update.sequence, "expired");
                        let _ = self.publisher.send(update.to_message()).await;
                    }
                }
                _ = tokio::time::sleep_until(hugz_at) => {
                    let now = Instant::now();
                    if next_hugz <= now {
                        next_hugz = now + self.config.server.hugz_interval;
                    }
                    while self.welcome.first().is_some_and(|w| *w <= now) {
                        self.welcome.pop_first();
                    }
                    if !self.star.is_silent() {
                        // (Silent while standing aside: clients move to the peer sooner. Binary
                        // Star speaks again when the peer restarts, and so do we, for the
                        // restarted peer's follower to prove its subscription and ask again.)
                        self.shared.stats.hugz.inc();
                        let sequence = self.shared.lock().sequence();
                        let _ = self.publisher.send(hugz_message(sequence)).await;
                    }
                    self.pending.forget(now.into_std());
                }
                event = pub_events.next_event(), if monitor_open => match event {
                    Some(MonitorEvent::HandshakeSucceeded { .. }) => {
                        let now = Instant::now();
                        if self.welcome.len() < 64 {
                            self.welcome.extend(WELCOME_HUGZ.iter().map(|d| now + *d));
                        }
                    }
                    Some(MonitorEvent::HandshakeFailed { peer, error, .. }) => {
                        log_refused(&peer, &error, self.config.server.curve.is_some())
                    }
                    Some(_) => {}
                    None => monitor_open = false,
                },
            }
            self.update_status(true, None);
        };
        self.star.close();
        if runner_done.is_none() {
            let _ = tokio::time::timeout(Duration::from_secs(5), runner).await;
        }
        let fatal = match &result {
            Err(HaError::Fatal(e)) => Some(e.to_string()),
            Err(HaError::Journal(why)) => Some(why.clone()),
            _ => None,
        };
        if let Some(why) = &fatal {
            tracing::error!("pair failure, stopping: {why}");
        }
        if let Some(f) = self.follower.take() {
            f.close();
        }
        for s in [self.publisher.clone(), self.collector.clone()] {
            s.close().await;
        }
        self.update_status(false, fatal.clone());
        let _ = self.ha.events.send(HaEvent::Stopped(fatal));
        if let Some(persist) = self.persist.as_mut() {
            persist.finish().await;
        }
        tracing::info!("CHP pair server stopped");
        result
    }

    fn update_status(&self, running: bool, fatal: Option<String>) {
        let (sequence, keys) = {
            let state = self.shared.lock();
            (state.sequence(), state.len())
        };
        let star = self.star.status();
        let mut stats = self.stats;
        stats.pending = self.pending.stats();
        let pending = self.pending.len();
        let (role, peer_synced) = (self.role, self.peer_synced);
        self.ha.status.send_if_modified(|s| {
            let next = HaStatus {
                side: s.side,
                state: role,
                peer: star.peer,
                peer_state: star.peer_state,
                peer_synced,
                sequence,
                keys,
                pending,
                stats,
                running,
                fatal: fatal.or_else(|| s.fatal.clone()),
            };
            if *s == next {
                return false;
            }
            *s = next;
            true
        });
    }

    fn emit(&self, event: HaEvent) {
        let _ = self.ha.events.send(event);
    }

    async fn on_notice(&mut self, notice: Notice) -> Result<(), HaError> {
        match notice {
            Notice::BecameActive => self.promote().await?,
            Notice::BecamePassive => self.become_passive(),
            Notice::Request(msg) => self.on_request(msg).await?,
            Notice::PeerAlive(state) => self.emit(HaEvent::PeerAlive(state)),
            Notice::PeerSilent => {
                // (Not a server that went active from PASSIVE without a complete copy, only to
                // compare with a restarted peer: it waits.)
                let ours_is_whole = self.holds_truth || !self.was_passive;
                if self.confirming && self.config.start_alone && !self.yielding && ours_is_whole {
                    tracing::warn!("the peer went silent before saying how new its map is: serving ours (start_alone)");
                    self.finish_promotion(None).await?;
                } else if self.confirming {
                    tracing::warn!(
                        "the peer went silent before saying how new its map is: waiting for it (its map may be newer; \
                         start_alone serves ours)"
                    );
                }
                if self.role == State::Passive && !self.holds_truth {
                    let keys = self.shared.lock().len();
                    tracing::error!(
                        keys,
                        "the active peer is silent and this server holds no complete copy of its map: it will not \
                         take over (clients get no snapshot) until the peer is back; with both servers' copies lost, \
                         restart both to start from an empty map"
                    );
                } else if self.role == State::Passive {
                    tracing::warn!("the active peer is silent; waiting for a client to vote");
                }
                if self.role == State::Passive && !self.peer_synced {
                    self.ask_silent_peer();
                }
                self.emit(HaEvent::PeerSilent)
            }
            _ => {}
        }
        Ok(())
    }

    /// A request on the SNAPSHOT socket (we are active): ICANHAZ? from a client, PEERSYNC? from
    /// the peer. With a journal, the peer's PEERSYNC? says how new its map is: while confirming,
    /// that decides whether we serve ours (and the peer copies it) or stop for the peer's newer
    /// one.
    async fn on_request(&mut self, msg: Message) -> Result<(), HaError> {
        let mut peersync = msg.frames().get(1..).and_then(parse_peersync);
        if peersync.is_some() && !self.sent_by_peer(&msg) {
            // Under CURVE only the peer's key may say how new "the peer's" map is: a client's
            // PEERSYNC? must neither make us step aside (a newer freshness while confirming) nor end our
            // confirming before the peer has spoken. It is served as a client's request.
            if let Some(suppressed) = zmtp::throttle::allow("chp: PEERSYNC? from a client key") {
                tracing::warn!(suppressed, "a PEERSYNC? from a key that is not the peer's: its freshness is ignored");
            }
            if self.confirming {
                return Ok(());
            }
            peersync = Some(None);
        }
        if self.confirming {
            let Some(theirs) = peersync else {
                // A client asks before we know whose map is newer: it asks again.
                return Ok(());
            };
            let ours = self.freshness();
            if theirs.is_some_and(|theirs| theirs > ours) {
                if self.star.peer_state() != Some(State::Passive) {
                    // Said by a peer not heard PASSIVE yet (late), or by its previous process (it
                    // restarted since): falling silent now could leave a restarted peer waiting
                    // for good. It asks again after each peer_sync_timeout.
                    return Ok(());
                }
                // The peer takes over once it has this answer (it asks again after each
                // peer_sync_timeout while it has not: each ask is answered).
                let identity = msg.frames()[0].clone();
                let answer = Message::from(vec![identity, bytes::Bytes::from_static(PEER_NEWER.as_bytes())]);
                let _ = self.star.voter().send(answer).await;
                // Silent again if Binary Star spoke again because the peer restarted meanwhile
                // (it lost the answer with it: see `bstar::Handle::fall_silent`).
                let speaking = !self.star.is_silent() && self.star.state() == State::Active;
                self.stood_aside_for_epoch = theirs.map_or(0, |f| f.epoch).max(self.stood_aside_for_epoch);
                if !self.yielding || speaking {
                    // Fall silent rather than stop: the peer, finding us silent, takes over on a
                    // client's vote, and we yield to it on hearing it ACTIVE (split-brain healing)
                    // and follow. A stopped server restarted at once (a service manager) came back
                    // ACTIVE before its peer had found it silent, and stopped again, in a loop.
                    self.yielding = true;
                    self.star.fall_silent();
                    tracing::warn!(
                        ours = ?ours,
                        theirs = ?theirs,
                        "the peer's map is newer than ours (both restarted): falling silent so that it takes over; \
                         this server then follows it"
                    );
                }
                return Ok(());
            }
            if self.yielding {
                let restarted = !self.star.is_silent()
                    && self.star.state() == State::Active
                    && self.star.peer_state() == Some(State::Passive);
                if !restarted {
                    // Silent for a peer that said its map is newer: no promotion on another's word.
                    return Ok(());
                }
                // Binary Star spoke again because the peer restarted, and its map is no longer
                // newer than ours (its disk was replaced, say): we serve, and it copies ours.
                tracing::warn!(ours = ?ours, theirs = ?theirs, "the restarted peer's map is no newer than ours now");
                self.yielding = false;
                let epoch = theirs.map_or(0, |f| f.epoch).max(std::mem::take(&mut self.stood_aside_for_epoch));
                self.finish_promotion(Some(epoch)).await?;
                return Ok(());
            }
            self.finish_promotion(theirs.map(|f| f.epoch)).await?;
        } else if let (Some(Some(theirs)), Some(_)) = (peersync, &self.persist) {
            let ours = self.freshness();
            if theirs > ours {
                // We took over alone (the peer was down at our start): ours is the map clients
                // have been served since; the peer's newer writes give way (clients still running
                // resend their own). Our epoch moves above the peer's first, so the map it copies
                // now sorts above the one it had.
                tracing::warn!(ours = ?ours, theirs = ?theirs, "the returning peer's map was newer; it takes ours");
                let epoch = ours.epoch.max(theirs.epoch).saturating_add(1);
                if let Some(persist) = self.persist.as_mut() {
                    persist.set_epoch(epoch).await.map_err(journal_failed)?;
                }
                self.snapshots.set_epoch(epoch);
            }
        }
        self.snapshots.request(msg);
        Ok(())
    }

    /// Whether a request on the SNAPSHOT socket came from the peer. Under CURVE the peer's
    /// PEERSYNC? DEALER is a client with the peer's key; without it nothing is authenticated and
    /// any request may be the peer's (the README says so).
    fn sent_by_peer(&self, msg: &Message) -> bool {
        match &self.config.server.curve {
            Some(curve) => curve.is_peer(msg.property("User-Id")),
            None => true,
        }
    }

    /// Our map's epoch and sequence (zero without a journal).
    fn freshness(&self) -> Freshness {
        Freshness { epoch: self.persist.as_ref().map_or(0, |p| p.epoch()), sequence: self.shared.lock().sequence() }
    }

    /// BecameActive. With a journal and a live peer (the pair forming after a restart), first
    /// confirm whose map is newer: the peer says in its PEERSYNC? ([`Driver::on_request`]). Until
    /// then nothing is served, published or expired, and client updates are held as a passive
    /// holds them. Otherwise: serve at once.
    async fn promote(&mut self) -> Result<(), HaError> {
        if self.persist.is_some() && !self.newer_than_peer && self.star.status().peer == bstar::Liveness::Alive {
            self.role = State::Active;
            self.confirming = true;
            if let Some(follower) = self.follower.take() {
                // Active from PASSIVE because the peer restarted: the maps are compared as
                // journaled, and a copy of the peer's old map that was still arriving is dropped.
                if matches!(follower.phase, Phase::Syncing { .. }) {
                    tracing::info!("dropped the unfinished copy of the peer's map: the peer restarted");
                }
                follower.close();
            }
            tracing::info!("active: waiting for the peer to say how new its map is");
            return Ok(());
        }
        self.finish_promotion(None).await
    }

    /// Becoming active for good: stop following, take a new epoch (a journal's), replay the
    /// pending list, then serve. `peer_epoch`: what the peer said its epoch was.
    async fn finish_promotion(&mut self, peer_epoch: Option<u64>) -> Result<(), HaError> {
        self.confirming = false;
        let now = std::time::Instant::now();
        let mut overlaid = false;
        let mut complete = !self.was_passive || self.peer_synced;
        if let Some(mut follower) = self.follower.take() {
            if let Phase::Syncing { sequence, entries, queued, .. } =
                std::mem::replace(&mut follower.phase, Phase::Following)
            {
                // The active died in the middle of our snapshot: keep what arrived.
                complete = false;
                overlaid = true;
                let mut state = self.shared.lock();
                state.overlay(entries, now);
                if let Some(s) = sequence {
                    state.advance_sequence(s);
                }
                for m in queued {
                    if m.sequence > state.sequence() {
                        state.advance_sequence(m.sequence - 1);
                        state.follow(&m, now);
                    }
                }
            }
            follower.close();
        }
        if let Some(persist) = self.persist.as_mut() {
            // Every promotion starts an epoch above both servers' (as far as we know the peer's),
            // so a map this server publishes from now on sorts above any the peer holds. A partial
            // snapshot laid over our map above is in memory only: the journal takes the whole map.
            let epoch = persist.epoch().max(peer_epoch.unwrap_or(0)).saturating_add(1);
            let written = match overlaid {
                true => persist.reset(&self.shared, epoch).await,
                false => persist.set_epoch(epoch).await,
            };
            written.map_err(journal_failed)?;
            self.snapshots.set_epoch(epoch);
            tracing::info!(epoch, "new epoch");
        }
        let replay = self.pending.take_all();
        let replayed = replay.len();
        let mut publish = Vec::with_capacity(replayed);
        let complete = complete || std::mem::take(&mut self.newer_than_peer);
        let (sequence, keys) = {
            let mut state = self.shared.lock();
            for msg in replay {
                match state.apply(KvSet(msg), now) {
                    Ok(update) => {
                        self.pending.record(&update, now);
                        publish.push(update);
                    }
                    Err(e) => {
                        self.shared.stats.rejected.inc();
                        tracing::warn!(error = %e, "dropped a pending update at replay");
                    }
                }
            }
            (state.sequence(), state.len())
        };
        if let Err(e) = persisted(&mut self.persist, &self.shared, &publish).await {
            return Err(journal_failed(e));
        }
        self.shared.stats.updates.add(publish.len() as u64);
        for update in publish {
            let _ = self.publisher.send(update.to_message()).await;
        }
        self.role = State::Active;
        self.holds_truth = true;
        self.star.set_eligible(true);
        self.stats.promotions += 1;
        if complete {
            tracing::info!(replayed, sequence, keys, "active");
        } else {
            tracing::warn!(replayed, sequence, keys, "active before holding a complete copy of the peer's map");
        }
        self.emit(HaEvent::BecameActive { replayed, sequence, keys, complete });
        Ok(())
    }

    /// A batch of KVSETs from the collector: applied, journaled, then published (held while not
    /// serving).
    async fn collect(&mut self, batch: &mut Vec<Message>) -> Result<(), JournalError> {
        let now = std::time::Instant::now();
        let (mut publish, mut outgoing) = (Vec::new(), Vec::new());
        {
            let mut state = self.shared.lock();
            for msg in batch.drain(..) {
                let set = match KvSet::parse(msg.frames()) {
                    Ok(set) => set,
                    Err(e) => {
                        self.shared.stats.rejected.inc();
                        if let Some(suppressed) = zmtp::throttle::allow("chp: bad KVSET") {
                            tracing::warn!(error = %e, frames = msg.len(), suppressed, "dropped bad KVSET");
                        }
                        continue;
                    }
                };
                if let Err(e) = state.check(&set.0) {
                    self.shared.stats.rejected.inc();
                    if let Some(suppressed) = zmtp::throttle::allow("chp: bad KVSET") {
                        tracing::warn!(error = %e, key = %set.0.key.escape_ascii(), suppressed, "dropped bad KVSET");
                    }
                    continue;
                }
                if self.role != State::Active || self.confirming {
                    if self.pending.hold(set.0, now) == Held::Queued {
                        tracing::trace!("update held until the active publishes it");
                    }
                    continue;
                }
                if self.pending.is_duplicate(&set.0) {
                    self.stats.duplicates += 1;
                    tracing::debug!(key = %set.0.key.escape_ascii(), "dropped a KVSET already published");
                    continue;
                }
                match state.apply(set, now) {
                    Ok(update) => {
                        self.pending.record(&update, now);
                        outgoing.push(restamp(msg, &update, &mut self.sequences));
                        publish.push(update);
                    }
                    Err(e) => {
                        self.shared.stats.rejected.inc();
                        if let Some(suppressed) = zmtp::throttle::allow("chp: bad KVSET") {
                            tracing::warn!(error = %e, suppressed, "dropped bad KVSET");
                        }
                    }
                }
            }
        }
        persisted(&mut self.persist, &self.shared, &publish).await?;
        self.shared.stats.updates.add(publish.len() as u64);
        let _ = self.publisher.send_many(&mut outgoing).await;
        Ok(())
    }
}

/// A journal failure stops the server (nothing unwritten was published).
fn journal_failed(e: JournalError) -> HaError {
    tracing::error!(error = %e, "cannot write the journal: the server stops (nothing unwritten was published)");
    HaError::Journal(e.to_string())
}
