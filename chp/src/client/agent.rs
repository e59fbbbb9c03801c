//! The client agent: owns the sockets and carries out the synchronisation state machine.
//!
//! One *attempt* talks to one server with fresh SUB and DEALER sockets (a [`Connection`]) and goes
//! through the states of [`SyncState`] — syncing (the snapshot asked for at once), loaded, active —
//! until it ends ([`End`]): the server is lost (silence, dropped connection, sequence regression), it
//! refused us, a gap means a re-sync (or, under [`GapPolicy::Fail`], the client fails) or the client
//! closes. After a loss the next attempt goes to the next server in the list: the list-and-cursor
//! design is what a failover pair (Binary Star) plugs into. The PUB socket for KVSETs stays
//! connected to every server's collector, as 12/CHP's reliable mode wants (every server hears every
//! update); over CURVE with a different key per server there is one such PUB per server key (a
//! socket's options, the server key included, apply to all its connections).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::uuid::Uuid;
use futures::StreamExt;
use futures::stream::SelectAll;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use zmtp::{Message, Monitor, MonitorEvent, Socket, SocketType};

use super::attempt::{Connection, End};
use super::failure::Failure;
use super::failure::ServerLoss;
use super::outbox::{Reply, State};
use super::proof::CollectorProof;
use super::recent::{RecentWrites, fingerprint};
use super::replica::Outcome;
use super::sync::{Answer, Heard, Load, SyncState};
use super::{ClientError, ClientOptions, Command, Event, GapPolicy, Shared, Status};
use crate::address::ServerAddress;
use crate::command::{SnapshotReply, Update};
use crate::kvmsg::KvMsg;

/// Messages handled per wakeup of the subscriber branch.
const BATCH: usize = 256;
/// How long closing waits for queued KVSETs to go out.
const PUBLISHER_LINGER: Duration = Duration::from_secs(1);

pub(super) struct Agent {
    options: ClientOptions,
    shared: Arc<Shared>,
    events: broadcast::Sender<Event>,
    status: watch::Sender<Status>,
    commands: mpsc::Receiver<Command>,
    commands_open: bool,
    close: watch::Receiver<bool>,
    /// PUB sockets for KVSETs: one per distinct server key (one in all, without CURVE or with one
    /// key for every server).
    publishers: Vec<Socket>,
    /// For each of `publishers`, the indices of the servers whose collector it connects to.
    publisher_servers: Vec<Vec<usize>>,
    /// The outbox's direct way is open (see the `outbox` module).
    direct_open: bool,
    pub_events: SelectAll<Monitor>,
    pub_events_open: bool,
    /// Servers that refused the handshake since the last sync.
    refused: HashSet<usize>,
    /// Collector endpoints our PUB has a live connection to.
    collectors_up: HashSet<String>,
    /// Whether an echo has proven that our KVSETs reach the current server's collector.
    proof: CollectorProof,
    next_set_check: Option<Instant>,
    /// Index of the server in use.
    current: usize,
    /// When the last message from a server arrived (subscriber or snapshot socket).
    last_message: Option<Instant>,
    /// The server we were in sync with when it was lost, and when it was last heard: the next
    /// sync with another server is a failover.
    lost: Option<(ServerAddress, Instant)>,
    /// A sync has completed before (so the next one is a re-sync).
    synced_before: bool,
    /// Our writes confirmed lately, to send again if a failover lost them.
    recent: RecentWrites,
}

impl Agent {
    pub(super) fn new(
        options: ClientOptions,
        shared: Arc<Shared>,
        events: broadcast::Sender<Event>,
        status: watch::Sender<Status>,
        commands: mpsc::Receiver<Command>,
        close: watch::Receiver<bool>,
    ) -> Agent {
        let recent_window = options.server_ttl * 4;
        let mut groups: Vec<(Option<[u8; 32]>, Vec<usize>)> = Vec::new();
        for (i, server) in options.servers.iter().enumerate() {
            let key = options.curve.as_ref().and_then(|c| c.key_of(server));
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        let mut pub_events = SelectAll::new();
        let (publishers, publisher_servers) = groups
            .into_iter()
            .map(|(_, members)| {
                let publisher = Socket::new(SocketType::Pub);
                publisher.set_linger(Some(PUBLISHER_LINGER));
                publisher.set_sndhwm(options.queue_limit);
                if let Some(curve) = &options.curve {
                    curve.apply(&publisher, &options.servers[members[0]]);
                }
                pub_events.push(publisher.monitor());
                (publisher, members)
            })
            .unzip();
        Agent {
            options,
            shared,
            events,
            status,
            commands,
            commands_open: true,
            close,
            publishers,
            publisher_servers,
            direct_open: false,
            pub_events,
            pub_events_open: true,
            refused: HashSet::new(),
            collectors_up: HashSet::new(),
            proof: CollectorProof::default(),
            next_set_check: None,
            current: 0,
            last_message: None,
            lost: None,
            synced_before: false,
            // A lost write was confirmed shortly before its server died; the failover that reveals
            // it follows within a server ttl or two.
            recent: RecentWrites::new(recent_window),
        }
    }

    pub(super) async fn run(mut self) {
        for (publisher, members) in self.publishers.iter().zip(&self.publisher_servers) {
            for server in members.iter().map(|i| &self.options.servers[*i]) {
                if let Err(e) = publisher.connect(&server.collector()).await {
                    tracing::error!(server = %server, error = %e, "cannot connect to collector");
                }
            }
        }
        // Consecutive attempts that found their server unreachable: after a whole round of them the
        // next round waits (doubling up to the server ttl), so a client whose servers are all down
        // does not spin.
        let mut unreachable = 0usize;
        let failure = loop {
            let server = self.options.servers[self.current].clone();
            let end = self.attempt(&server).await;
            if matches!(end, End::Lost(ServerLoss::Unreachable { .. })) {
                unreachable += 1;
                let n = self.options.servers.len();
                if unreachable.is_multiple_of(n) {
                    let rounds = (unreachable / n).min(16) as u32;
                    let pause = Duration::from_millis(50).saturating_mul(1 << rounds).min(self.options.server_ttl);
                    if self.pause(pause, &server).await {
                        break None;
                    }
                }
            } else {
                unreachable = 0;
            }
            match end {
                End::Closed => break None,
                End::Lost(loss) => {
                    match unreachable {
                        0 => tracing::warn!(server = %server, "server lost: {loss}"),
                        // A server that is down is the normal state after a failover: said once
                        // per round of the list, at debug.
                        _ => tracing::debug!(server = %server, "server unreachable: {loss}"),
                    }
                    self.note_lost(&server);
                    self.emit(Event::ServerLost { server, reason: loss });
                    self.current = (self.current + 1) % self.options.servers.len();
                }
                End::Refused(refusal) => {
                    // Reported through the event and, once every server refused, the status
                    // (the application's error): logged at info only.
                    tracing::info!(server = %server, "server refused us: {refusal}");
                    self.note_lost(&server);
                    self.emit(Event::ServerLost { server, reason: ServerLoss::Refused(refusal.clone()) });
                    self.refused.insert(self.current);
                    let n = self.options.servers.len();
                    if self.refused.len() == n {
                        let failure = Failure::Refused { servers: n, refusal };
                        tracing::info!("client failed: {failure}");
                        break Some(failure);
                    }
                    self.current = (self.current + 1) % n;
                }
                End::Gap { expected, got } => match self.options.gap_policy {
                    GapPolicy::Resync => tracing::info!(
                        server = %server,
                        "re-syncing: sequence gap: expected {expected}, got {got} (updates lost)"
                    ),
                    GapPolicy::Fail => {
                        let failure = Failure::Gap { expected, got };
                        tracing::error!(server = %server, "client failed: {failure}");
                        break Some(failure);
                    }
                },
            }
        };
        let error = match &failure {
            Some(failure) => ClientError::Failed(failure.clone()),
            None => ClientError::Closed,
        };
        {
            let mut outbox = self.shared.outbox.lock();
            outbox.set_direct(None);
            for (_, p) in outbox.pending.drain() {
                let _ = p.reply.send(Err(error.clone()));
            }
        }
        refuse_commands(&mut self.commands, &error).await;
        self.status.send_replace(match failure {
            Some(failure) => Status::Failed(failure),
            None => Status::Closed,
        });
        for publisher in std::mem::take(&mut self.publishers) {
            publisher.close().await;
        }
    }

    /// After losing `server`: when we were in sync with it, the next sync with another server is
    /// a failover.
    fn note_lost(&mut self, server: &ServerAddress) {
        if self.lost.is_none() && self.synced_before {
            self.lost = Some((server.clone(), self.last_message.unwrap_or_else(Instant::now)));
        }
    }

    /// Waits `pause` between rounds of unreachable servers, still taking commands and failing
    /// timed-out sets. True when the client was closed meanwhile.
    async fn pause(&mut self, pause: Duration, server: &ServerAddress) -> bool {
        let until = Instant::now() + pause;
        let far = Duration::from_secs(3600);
        loop {
            let set_check = self.next_set_check;
            tokio::select! {
                _ = self.close.changed() => return true,
                cmd = self.commands.recv(), if self.commands_open => match cmd {
                    Some(Command::Set { msg, reply }) => self.add_set(msg, reply, false, server),
                    None => self.commands_open = false,
                },
                _ = tokio::time::sleep_until(set_check.unwrap_or_else(|| Instant::now() + far)), if set_check.is_some() => {
                    self.check_sets(false, server);
                }
                _ = tokio::time::sleep_until(until) => return false,
            }
        }
    }

    fn emit(&self, event: Event) {
        let _ = self.events.send(event);
    }

    fn collector_ready(&self, server: &ServerAddress) -> bool {
        self.collectors_up.contains(&server.collector())
    }

    /// Connected, and an echo has proven the connection (see the `proof` module).
    fn collector_proven(&self, server: &ServerAddress) -> bool {
        let collector = server.collector();
        self.collectors_up.contains(&collector) && self.proof.is_proven(&collector)
    }

    /// One attempt with `server`: sync, apply, until something ends it.
    async fn attempt(&mut self, server: &ServerAddress) -> End {
        let mut connection = match Connection::open(&self.options, server).await {
            Ok(connection) => connection,
            Err(end) => return end,
        };
        self.status.send_replace(Status::Connecting(server.clone()));
        tracing::debug!(server = %server, subtree = %self.options.subtree, "connecting");
        // Ask for the snapshot at once (see the `sync` module for why that is exact in the end).
        connection.ask(&self.options.subtree);
        let mut state = SyncState::start();
        self.status.send_replace(Status::Syncing(server.clone()));
        let ttl = self.options.server_ttl;
        let curve = self.options.curve.is_some();
        let mut expiry = Instant::now() + ttl;
        // While syncing, ICANHAZ? is asked again at this interval until the snapshot starts: the
        // server may be a passive one of a pair that rejects the vote until its peer has expired
        // (a rejected vote gets no answer), so this bounds how late after that the takeover comes.
        let retry = (ttl / 4).clamp(Duration::from_millis(10), Duration::from_millis(100));
        let mut icanhaz_retry: Option<Instant> = Some(Instant::now() + retry);
        let far = Duration::from_secs(3600);
        let end = loop {
            let set_check = self.next_set_check;
            let syncing = state.is_syncing();
            let mut ask_again = false;
            tokio::select! {
                _ = self.close.changed() => break End::Closed,
                cmd = self.commands.recv(), if self.commands_open => {
                    // Take what else is queued too (a pipelining writer's), so one wakeup and
                    // one pass of this loop's timers serve many writes.
                    let mut next = cmd;
                    let mut taken = 0;
                    loop {
                        match next {
                            Some(Command::Set { msg, reply }) => self.add_set(msg, reply, !syncing, server),
                            None => {
                                self.commands_open = false;
                                break;
                            }
                        }
                        taken += 1;
                        if taken == BATCH {
                            break;
                        }
                        match self.commands.try_recv() {
                            Ok(cmd) => next = Some(cmd),
                            Err(_) => break,
                        }
                    }
                }
                msg = connection.sub.recv() => {
                    let Ok(msg) = msg else { break End::Lost(ServerLoss::SubscriberClosed) };
                    let now = Instant::now();
                    self.last_message = Some(now);
                    // While syncing only the snapshot counts: a server that sends HUGZ but no
                    // snapshot (a passive one) must not hold the client forever.
                    if !syncing {
                        expiry = now + ttl;
                    }
                    match self.on_updates(msg, &connection.sub, &mut state, server) {
                        Ok(again) => ask_again = again,
                        Err(end) => break end,
                    }
                }
                msg = connection.dealer.recv(), if syncing => {
                    let Ok(msg) = msg else { break End::Lost(ServerLoss::SnapshotClosed) };
                    let now = Instant::now();
                    self.last_message = Some(now);
                    expiry = now + ttl;
                    icanhaz_retry = None;
                    match self.on_snapshots(msg, &connection.dealer, &mut state, server) {
                        Ok(again) => ask_again = again,
                        Err(end) => break end,
                    }
                }
                _ = tokio::time::sleep_until(icanhaz_retry.unwrap_or_else(|| Instant::now() + far)), if syncing && icanhaz_retry.is_some() => {
                    // Nothing yet: ask again (a rejected vote is dropped without an answer).
                    connection.ask(&self.options.subtree);
                    tracing::debug!(server = %server, "no snapshot yet; ICANHAZ? again");
                    icanhaz_retry = Some(Instant::now() + retry);
                }
                event = connection.sub_link.events.next_event(), if connection.sub_link.open => {
                    if let Err(end) = connection.on_subscriber_event(event, curve, server) {
                        break end;
                    }
                }
                event = connection.dealer_link.events.next_event(), if connection.dealer_link.open => {
                    if let Err(end) = connection.dealer_link.on_event(event, curve) {
                        break end;
                    }
                }
                event = self.pub_events.next(), if self.pub_events_open => match event {
                    Some(MonitorEvent::HandshakeSucceeded { endpoint, .. }) => {
                        self.proof.forget(&endpoint);
                        self.collectors_up.insert(endpoint);
                        if !syncing {
                            self.flush_sets(server);
                        }
                    }
                    Some(MonitorEvent::Disconnected { endpoint, .. }) => {
                        self.proof.forget(&endpoint);
                        self.collectors_up.remove(&endpoint);
                    }
                    Some(MonitorEvent::HandshakeFailed { endpoint, error, .. }) => {
                        // The subscriber and snapshot sockets report it (same server, same keys).
                        tracing::debug!(endpoint, %error, "handshake with the collector failed");
                    }
                    Some(_) => {}
                    None => self.pub_events_open = false,
                },
                _ = tokio::time::sleep_until(expiry) => {
                    break End::Lost(match syncing {
                        true => ServerLoss::NoSnapshot(ttl),
                        false => ServerLoss::Silent(ttl),
                    });
                }
                _ = tokio::time::sleep_until(set_check.unwrap_or_else(|| Instant::now() + far)), if set_check.is_some() => {
                    self.check_sets(!syncing, server);
                }
                _ = self.shared.outbox.unchecked.notified() => {
                    // A write went out the direct way with no check scheduled: keep one
                    // scheduled while any write is pending.
                    self.schedule_set_check(Instant::now() + self.options.set_retry);
                }
            }
            self.update_direct(!state.is_syncing() && !ask_again && self.collector_proven(server), server);
            if !state.is_syncing() {
                connection.release_snapshot(server).await;
            }
            if ask_again {
                // The snapshot could not be proven exact: ask again on a fresh snapshot socket
                // (replies to the earlier request must not be taken for this one's).
                if let Err(end) = connection.ask_again(&self.options, server).await {
                    break end;
                }
                tracing::debug!(server = %server, "subscription proven live after the snapshot was asked for; asking again");
                let now = Instant::now();
                expiry = now + ttl;
                icanhaz_retry = Some(now + retry);
            }
        };
        self.update_direct(false, server);
        connection.close().await;
        end
    }

    /// A message on the subscriber socket and those queued behind it (up to [`BATCH`]). True: ask
    /// for the snapshot again.
    fn on_updates(
        &mut self,
        msg: Message,
        sub: &Socket,
        state: &mut SyncState,
        server: &ServerAddress,
    ) -> Result<bool, End> {
        let mut ask_again = false;
        let mut next = Some(msg);
        let mut handled = 0;
        while let Some(mut msg) = next.take() {
            let update = match Update::parse_mut(msg.frames_mut()) {
                Ok(u) => Some(u),
                Err(e) => {
                    tracing::warn!(server = %server, error = %e, "dropped bad message from publisher");
                    None
                }
            };
            match state.on_update(update) {
                Heard::Nothing => {}
                Heard::Apply(m) => self.apply(m)?,
                Heard::Proven(m) => {
                    // The subscription was live in time: the snapshot was exact.
                    self.status.send_replace(Status::Active(server.clone()));
                    if let Some(m) = m {
                        self.apply(m)?;
                    }
                }
                Heard::AskAgain => ask_again = true,
            }
            handled += 1;
            if handled < BATCH {
                next = sub.try_recv().ok();
            }
        }
        Ok(ask_again)
    }

    /// A message on the snapshot socket and those queued behind it (up to [`BATCH`], while still
    /// syncing): a million-key snapshot then costs a few thousand passes of the agent's loop, and
    /// its timers, instead of a million. True: ask for the snapshot again.
    fn on_snapshots(
        &mut self,
        msg: Message,
        dealer: &Socket,
        state: &mut SyncState,
        server: &ServerAddress,
    ) -> Result<bool, End> {
        let mut ask_again = self.on_snapshot(msg, state, server)?;
        for _ in 1..BATCH {
            if ask_again || !state.is_syncing() {
                break;
            }
            let Ok(msg) = dealer.try_recv() else { break };
            ask_again = self.on_snapshot(msg, state, server)?;
        }
        Ok(ask_again)
    }

    /// A message on the snapshot socket (only read while syncing). True: ask for the snapshot again.
    fn on_snapshot(&mut self, mut msg: Message, state: &mut SyncState, server: &ServerAddress) -> Result<bool, End> {
        let reply = match SnapshotReply::parse_mut(msg.frames_mut()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(server = %server, error = %e, "dropped bad snapshot message");
                return Ok(false);
            }
        };
        match state.on_snapshot(reply, &self.options.subtree) {
            Answer::Nothing => Ok(false),
            Answer::OutsideSubtree(key) => {
                tracing::warn!(server = %server, key = %key.escape_ascii(), "dropped KVSYNC outside our subtree");
                Ok(false)
            }
            Answer::AskAgain => {
                tracing::debug!(server = %server, "snapshot older than the subscription");
                Ok(true)
            }
            Answer::Load(load) => self.load(load, server).map(|()| false),
        }
    }

    /// Replaces the replica with a complete snapshot and applies the updates queued meanwhile.
    fn load(&mut self, load: Load, server: &ServerAddress) -> Result<(), End> {
        let Load { entries, queued, sequence, announce, exact } = load;
        let keys = entries.len();
        {
            let mut replica = self.shared.replica_mut();
            let mut changes = Vec::new();
            // Keys that queued updates newer than the snapshot will set: reported by them.
            let superseded: HashSet<_> =
                queued.iter().filter(|m| m.sequence > sequence).map(|m| m.key.clone()).collect();
            let listened = super::listened(&self.events);
            replica.load(entries, sequence, &superseded, listened.then_some(&mut changes));
            for change in changes {
                self.emit(change);
            }
            if announce {
                self.emit(Event::Synced { server: server.clone(), sequence, keys });
            }
        }
        tracing::info!(server = %server, sequence, keys, queued = queued.len(), "synced");
        let mut failed_over = false;
        if let Some((from, last_heard)) = self.lost.take()
            && from != *server
        {
            failed_over = true;
            let outage = last_heard.elapsed();
            tracing::info!(from = %from, to = %server, ?outage, "failed over");
            self.emit(Event::Failover { from, to: server.clone(), sequence, keys, outage });
        }
        for m in queued {
            self.apply(m)?;
        }
        if self.synced_before {
            self.confirm_from_snapshot(sequence);
        }
        if failed_over {
            self.resend_lost_writes();
        }
        self.synced_before = true;
        self.refused.clear();
        self.status.send_replace(match exact {
            true => Status::Active(server.clone()),
            false => Status::Loaded(server.clone()),
        });
        self.flush_sets(server);
        Ok(())
    }

    /// Applies a KVPUB to the replica, emitting its event and confirming a matching pending set.
    fn apply(&mut self, msg: KvMsg) -> Result<(), End> {
        let (uuid, sequence) = (msg.uuid, msg.sequence);
        let check_gaps = self.options.subtree.is_all();
        // The echo of our own KVSET (even one already covered by the snapshot) confirms it.
        let ours = uuid.and_then(|u| self.shared.outbox.lock().pending.remove(&u));
        if ours.is_some()
            && let Some(uuid) = &uuid
        {
            // Our probe's echo: what is held behind it goes out once the loop opens the direct way.
            self.proof.echoed(uuid);
        }
        let (outcome, before) = {
            let mut replica = self.shared.replica_mut();
            // What the key held before our write, should it need repairing after a failover.
            let before = ours.is_some().then(|| fingerprint(replica.map.get(&msg.key[..]).map(|v| &v[..])));
            let mut outcome = replica.apply(msg, &self.options.subtree, check_gaps, super::listened(&self.events));
            if let Outcome::Applied(event) = &mut outcome
                && let Some(event) = event.take()
            {
                // Sent under the lock, so `Client::watch` gets an exact cut.
                self.emit(event);
            }
            (outcome, before)
        };
        if let Some(p) = ours {
            let _ = p.reply.send(Ok(Some(sequence)));
            if let (Outcome::Applied(_), Some(before)) = (&outcome, before) {
                self.recent.confirmed(p.msg, before, Instant::now());
            }
        }
        match outcome {
            Outcome::Applied(_) | Outcome::Stale | Outcome::OutsideSubtree => Ok(()),
            Outcome::Gap { expected, got } => {
                self.emit(Event::Gap { expected, got });
                Err(End::Gap { expected, got })
            }
            Outcome::Regression { last, got } => Err(End::Lost(ServerLoss::Regression { last, got })),
        }
    }

    /// After a re-sync (a failover, say): a set already sent whose value the new snapshot holds
    /// is confirmed with the snapshot's sequence. Its echo may have gone out before this client
    /// subscribed (a pair server replays pending updates at takeover), and a retransmit would be
    /// dropped as a duplicate.
    fn confirm_from_snapshot(&mut self, sequence: u64) {
        let mut outbox = self.shared.outbox.lock();
        let done: Vec<Uuid> = {
            let replica = self.shared.replica();
            outbox
                .pending
                .iter()
                .filter(|(_, p)| {
                    let held = replica.map.get(&p.msg.key);
                    p.sent.is_some()
                        && match p.msg.is_delete() {
                            true => held.is_none(),
                            false => held == Some(&p.msg.body),
                        }
                })
                .map(|(u, _)| *u)
                .collect()
        };
        for uuid in done {
            if let Some(p) = outbox.pending.remove(&uuid) {
                tracing::debug!(key = %p.msg.key.escape_ascii(), "set confirmed by the snapshot");
                let _ = p.reply.send(Ok(Some(sequence)));
            }
        }
    }

    /// After a failover: our writes the lost server confirmed but the new one never applied (it was
    /// killed between echoing them to us and passing them to its peer) go out again.
    fn resend_lost_writes(&mut self) {
        let now = Instant::now();
        let lost = {
            let replica = self.shared.replica();
            self.recent.lost(&replica.map, now)
        };
        for msg in lost {
            let Some(uuid) = msg.uuid else { continue };
            let mut outbox = self.shared.outbox.lock();
            if outbox.pending.contains_key(&uuid) {
                continue;
            }
            tracing::warn!(key = %msg.key.escape_ascii(), "a write the lost server confirmed is missing on the new one: sending it again");
            // Nobody waits for this confirmation: the write was confirmed once already.
            let (reply, _) = oneshot::channel();
            let deadline = now + self.options.set_timeout;
            outbox.insert(msg, reply, None, deadline);
            drop(outbox);
            self.schedule_set_check(deadline);
        }
    }

    fn schedule_set_check(&mut self, at: Instant) {
        self.next_set_check = Some(self.next_set_check.map_or(at, |t| t.min(at)));
        self.shared.outbox.lock().checking = true;
    }

    /// A write the agent took from its channel: pending, and sent now if `active` (in sync) and
    /// connected to the server's collector, else once it is.
    fn add_set(&mut self, msg: KvMsg, reply: Reply, active: bool, server: &ServerAddress) {
        let uuid = msg.uuid.expect("client sets carry a UUID");
        let now = Instant::now();
        let deadline = now + self.options.set_timeout;
        let proven = self.collector_proven(server);
        let ready = active && self.collector_ready(server);
        let sent = {
            let mut outbox = self.shared.outbox.lock();
            outbox.take_queued();
            outbox.insert(msg, reply, None, deadline);
            match proven {
                true => active && outbox.send(&uuid, &self.publishers, now),
                false => {
                    ready && Self::flush(&mut self.proof, &self.publishers, &mut outbox, server, self.options.set_retry)
                }
            }
        };
        self.schedule_set_check(deadline);
        if sent {
            self.schedule_set_check(now + self.options.set_retry);
        }
    }

    /// Sends every pending KVSET not sent yet or due for a retransmit (once in sync with a server
    /// whose collector we are connected to).
    fn flush_sets(&mut self, server: &ServerAddress) {
        if !self.collector_ready(server) {
            return;
        }
        let mut outbox = self.shared.outbox.lock();
        if Self::flush(&mut self.proof, &self.publishers, &mut outbox, server, self.options.set_retry) {
            drop(outbox);
            self.schedule_set_check(Instant::now() + self.options.set_retry);
        }
    }

    /// Sends the pending writes not sent yet or due for a retransmit — only the probe while the
    /// server's collector is not proven; true if it sent any.
    fn flush(
        proof: &mut CollectorProof,
        publishers: &[Socket],
        outbox: &mut State,
        server: &ServerAddress,
        retry: Duration,
    ) -> bool {
        let now = Instant::now();
        let collector = server.collector();
        if !proof.is_proven(&collector) {
            return match proof.next_probe(&collector, outbox, now, retry) {
                Some(probe) => outbox.send(&probe, publishers, now),
                None => false,
            };
        }
        let due = outbox.due(now, retry);
        for uuid in &due {
            outbox.send(uuid, publishers, now);
        }
        !due.is_empty()
    }

    /// Opens the outbox's direct way (what it holds sent first, so nothing overtakes it) or
    /// closes it. A write already pending keeps its scheduled check either way.
    fn update_direct(&mut self, open: bool, server: &ServerAddress) {
        if open == self.direct_open {
            return;
        }
        self.direct_open = open;
        let mut outbox = self.shared.outbox.lock();
        let sent = open && Self::flush(&mut self.proof, &self.publishers, &mut outbox, server, self.options.set_retry);
        outbox.set_direct(open.then(|| self.publishers.clone()));
        let pending = !outbox.pending.is_empty();
        drop(outbox);
        if sent || pending {
            self.schedule_set_check(Instant::now() + self.options.set_retry);
        }
    }

    /// Fails timed-out sets, retransmits unconfirmed ones, and schedules the next check.
    fn check_sets(&mut self, active: bool, server: &ServerAddress) {
        let now = Instant::now();
        self.next_set_check = None;
        let timeout = self.options.set_timeout;
        let mut outbox = self.shared.outbox.lock();
        outbox.pending.retain(|_, p| {
            if p.deadline > now {
                return true;
            }
            let key = String::from_utf8_lossy(&p.msg.key).into_owned();
            let (tx, _) = oneshot::channel();
            let reply = std::mem::replace(&mut p.reply, tx);
            let _ = reply.send(Err(ClientError::SetTimeout { key, timeout }));
            false
        });
        if active && self.collector_ready(server) {
            Self::flush(&mut self.proof, &self.publishers, &mut outbox, server, self.options.set_retry);
        }
        // Next: a retransmit still ahead, else the deadline (an unsent set waits for `flush_sets`).
        let retry = self.options.set_retry;
        let next = outbox
            .pending
            .values()
            .map(|p| match p.sent {
                Some(t) if t + retry > now => (t + retry).min(p.deadline),
                _ => p.deadline,
            })
            .min();
        // Cleared under the lock that records writes: one recorded after this is told to us.
        outbox.checking = next.is_some();
        drop(outbox);
        if let Some(at) = next {
            self.schedule_set_check(at);
        }
    }
}

/// Closes the command channel and answers every write still in it, or still on its way into it,
/// with `error`. A write that took its place in the channel before the agent stopped could
/// otherwise be put there after the receiver was dropped: tokio keeps it (and the caller waits
/// for its answer) for as long as the client lives. Once closed, a new write fails at once.
async fn refuse_commands(commands: &mut mpsc::Receiver<Command>, error: &ClientError) {
    commands.close();
    // `None` once the channel is empty and no place taken before the close is still unused (a
    // place is held only across the synchronous hand-over in `submit`).
    while let Some(Command::Set { reply, .. }) = commands.recv().await {
        let _ = reply.send(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race behind a `set` that never returned after its client failed: the write took its
    /// place in the channel while the agent was stopping, and was put there after. It is answered;
    /// a write after the close fails at once.
    #[tokio::test]
    async fn a_write_on_its_way_into_a_stopping_agent_is_answered() {
        zmtp_testkit::bounded(async {
            let (commands, mut rx) = mpsc::channel(4);
            let (queued, queued_answer) = oneshot::channel();
            commands.try_send(Command::Set { msg: KvMsg::new("/queued", "v"), reply: queued }).unwrap();
            let place = commands.reserve().await.unwrap();
            let error = ClientError::Closed;
            let stopping = tokio::spawn(async move { refuse_commands(&mut rx, &error).await });
            // The agent has closed its channel: no new place...
            while !commands.is_closed() {
                tokio::task::yield_now().await;
            }
            assert!(commands.try_reserve().is_err());
            // ...and the write queued before the close is answered.
            assert!(matches!(queued_answer.await, Ok(Err(ClientError::Closed))));
            // The place taken before it is used now, and answered too.
            let (late, late_answer) = oneshot::channel();
            place.send(Command::Set { msg: KvMsg::new("/late", "v"), reply: late });
            assert!(matches!(late_answer.await, Ok(Err(ClientError::Closed))));
            stopping.await.unwrap();
        })
        .await;
    }
}
