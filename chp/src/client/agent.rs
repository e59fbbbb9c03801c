//! The client agent: owns the sockets and runs the synchronisation state machine.
//!
//! One *attempt* talks to one server with fresh SUB and DEALER sockets and goes through two
//! phases — syncing (the snapshot asked for at once, see [`Proof`]), active — until it ends: the server is lost
//! (silence, dropped connection, sequence regression), a re-sync is needed (gap), the client fails
//! (gap under [`GapPolicy::Fail`]) or closes. After a loss the next attempt goes to the next server
//! in the list: the list-and-cursor design is what a failover pair (Binary Star) plugs into. The
//! PUB socket for KVSETs stays connected to every server's collector, as 12/CHP's reliable mode
//! wants (every server hears every update); over CURVE with a different key per server there is
//! one such PUB per server key (a socket's options, the server key included, apply to all its
//! connections).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::uuid::Uuid;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::SelectAll;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;
use zmtp::{ConnectionError, Message, Monitor, MonitorEvent, Socket, SocketType};

use super::recent::RecentWrites;
use super::replica::Outcome;
use super::{ClientError, ClientOptions, Command, Event, GapPolicy, Shared, Status};
use crate::address::ServerAddress;
use crate::command::{HUGZ, IcanHaz, SnapshotReply, Update};
use crate::kvmsg::KvMsg;

/// Messages handled per wakeup of the subscriber branch.
const BATCH: usize = 256;
/// How long closing waits for queued KVSETs to go out.
const PUBLISHER_LINGER: Duration = Duration::from_secs(1);

/// Why an attempt ended.
enum End {
    Closed,
    /// Move on to the next server.
    Lost(String),
    /// The server could not be reached at all (connection refused or failed): move on to the next
    /// server at once, without waiting out the server ttl.
    Unreachable(String),
    /// The server refused the handshake (security): move on to the next server.
    Refused(String),
    /// Start over with the same server.
    Resync(String),
    /// Stop for good.
    Failed(String),
}

enum Phase {
    /// ICANHAZ? sent: collecting KVSYNCs, queueing KVPUBs.
    Syncing { entries: BTreeMap<Bytes, Bytes>, queued: Vec<KvMsg> },
    /// Applying KVPUBs.
    Active,
}

struct PendingSet {
    msg: KvMsg,
    reply: oneshot::Sender<Result<Option<u64>, ClientError>>,
    sent: Option<Instant>,
    deadline: Instant,
}

pub(super) struct Agent {
    options: ClientOptions,
    shared: Arc<Shared>,
    events: broadcast::Sender<Event>,
    status: watch::Sender<Status>,
    commands: mpsc::Receiver<Command>,
    commands_open: bool,
    close: watch::Receiver<bool>,
    /// PUB sockets for KVSETs: one per distinct server key (one in all, without CURVE or with one
    /// key for every server), each with the indices of the servers whose collector it connects to.
    publishers: Vec<(Socket, Vec<usize>)>,
    pub_events: SelectAll<Monitor>,
    pub_events_open: bool,
    /// Servers that refused the handshake since the last sync.
    refused: HashSet<usize>,
    /// Collector endpoints our PUB has a live connection to.
    collectors_up: HashSet<String>,
    pending: HashMap<Uuid, PendingSet>,
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
    /// This attempt's subscription proof (see [`Proof`]).
    proof: Proof,
}

/// Whether this attempt's snapshot is known to be exact.
///
/// The snapshot is asked for at once (as the reference client does), not after the subscription
/// has proven live: a one-shot `get` then answers in one round trip instead of waiting up to a
/// HUGZ interval. The price is the subscribe-before-snapshot race (updates published after the
/// snapshot's sequence `S` but before the server had our subscription are in neither), so the
/// snapshot is *provisional* until the subscriber's first message settles it: a KVPUB numbered at
/// most `S + 1` proves the subscription was live in time. Anything else (a HUGZ, a later KVPUB)
/// cannot prove it, so the snapshot is asked for once more on a fresh snapshot socket, now that the
/// subscription is known to be live: that one is exact. So an attempt takes at most two snapshots.
#[derive(Default)]
struct Proof {
    /// The subscriber's first message this attempt: `Some(Some(seq))` a KVPUB, `Some(None)` other.
    first: Option<Option<u64>>,
    /// The current snapshot was asked for after the subscription proved live: it is exact.
    asked_when_live: bool,
    /// Synced on a snapshot not yet known to be exact: its sequence.
    provisional: Option<u64>,
    /// Ask for the snapshot again (set by the handlers, carried out by the attempt loop).
    ask_again: bool,
    /// A snapshot was loaded this attempt: a second one only confirms it (no second `Synced`).
    loaded: bool,
}

impl Proof {
    /// True when a subscriber whose first message was `first` was live for every update after
    /// snapshot `sequence`.
    fn covers(first: Option<u64>, sequence: u64) -> bool {
        first.is_some_and(|seq| seq <= sequence.saturating_add(1))
    }
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
        let publishers = groups
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
            .collect();
        Agent {
            options,
            shared,
            events,
            status,
            commands,
            commands_open: true,
            close,
            publishers,
            pub_events,
            pub_events_open: true,
            refused: HashSet::new(),
            collectors_up: HashSet::new(),
            pending: HashMap::new(),
            next_set_check: None,
            current: 0,
            last_message: None,
            lost: None,
            synced_before: false,
            // A lost write was confirmed shortly before its server died; the failover that reveals
            // it follows within a server ttl or two.
            recent: RecentWrites::new(recent_window),
            proof: Proof::default(),
        }
    }

    pub(super) async fn run(mut self) {
        for (publisher, members) in &self.publishers {
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
            if matches!(end, End::Unreachable(_)) {
                unreachable += 1;
                let n = self.options.servers.len();
                if unreachable % n == 0 {
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
                End::Lost(reason) | End::Unreachable(reason) => {
                    match unreachable {
                        0 => tracing::warn!(server = %server, "server lost: {reason}"),
                        // A server that is down is the normal state after a failover: said once
                        // per round of the list, at debug.
                        _ => tracing::debug!(server = %server, "server unreachable: {reason}"),
                    }
                    if self.lost.is_none() && self.synced_before {
                        self.lost = Some((server.clone(), self.last_message.unwrap_or_else(Instant::now)));
                    }
                    self.emit(Event::ServerLost { server, reason });
                    self.current = (self.current + 1) % self.options.servers.len();
                }
                End::Refused(reason) => {
                    // Reported through the event and, once every server refused, the status
                    // (the application's error): logged at info only.
                    tracing::info!(server = %server, "server refused us: {reason}");
                    if self.lost.is_none() && self.synced_before {
                        self.lost = Some((server.clone(), self.last_message.unwrap_or_else(Instant::now)));
                    }
                    self.emit(Event::ServerLost { server, reason: format!("refused: {reason}") });
                    self.refused.insert(self.current);
                    let n = self.options.servers.len();
                    if self.refused.len() == n {
                        let by = if n == 1 { "the server" } else { "every server" };
                        let why = format!("refused by {by}: {reason}");
                        tracing::info!("client failed: {why}");
                        break Some(why);
                    }
                    self.current = (self.current + 1) % n;
                }
                End::Resync(reason) => tracing::info!(server = %server, "re-syncing: {reason}"),
                End::Failed(reason) => {
                    tracing::error!(server = %server, "client failed: {reason}");
                    break Some(reason);
                }
            }
        };
        let error = match &failure {
            Some(why) => ClientError::Failed(why.clone()),
            None => ClientError::Closed,
        };
        for (_, p) in self.pending.drain() {
            let _ = p.reply.send(Err(error.clone()));
        }
        self.status.send_replace(match failure {
            Some(why) => Status::Failed(why),
            None => Status::Closed,
        });
        for (publisher, _) in std::mem::take(&mut self.publishers) {
            publisher.close().await;
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

    /// A fresh snapshot (DEALER) socket connected to `server`, and its monitor.
    async fn snapshot_socket(&self, server: &ServerAddress) -> Result<(Socket, Monitor), End> {
        let dealer = Socket::new(SocketType::Dealer);
        dealer.set_linger(Some(Duration::ZERO));
        dealer.set_rcvhwm(self.options.queue_limit);
        if let Some(curve) = &self.options.curve {
            curve.apply(&dealer, server);
        }
        let events = dealer.monitor();
        match dealer.connect(&server.snapshot()).await {
            Ok(_) => Ok((dealer, events)),
            Err(e) => Err(End::Lost(format!("cannot connect to {}: {e}", server.snapshot()))),
        }
    }

    fn emit(&self, event: Event) {
        let _ = self.events.send(event);
    }

    fn collector_ready(&self, server: &ServerAddress) -> bool {
        self.collectors_up.contains(&server.collector())
    }

    /// One attempt with `server`: sync, apply, until something ends it.
    async fn attempt(&mut self, server: &ServerAddress) -> End {
        let subtree = self.options.subtree.clone();
        let ttl = self.options.server_ttl;
        self.proof = Proof::default();
        let sub = Socket::new(SocketType::Sub);
        sub.set_linger(Some(Duration::ZERO));
        sub.set_rcvhwm(self.options.queue_limit);
        if let Some(curve) = &self.options.curve {
            curve.apply(&sub, server);
        }
        let mut sub_events = sub.monitor();
        let mut sub_events_open = true;
        // Connections the server closed during the handshake, this attempt (subscriber, dealer).
        let (mut sub_closed, mut dealer_closed) = (0, 0);
        // A TCP connection was made, this attempt (subscriber, dealer): until then a retried connect
        // means the server is unreachable (a retry after a connection ends means something else).
        let (mut sub_reached, mut dealer_reached) = (false, false);
        sub.subscribe(subtree.as_bytes()).expect("SUB socket");
        // A subtree client also needs HUGZ; that subscription is added once connected, so it travels
        // after the subtree's: the first HUGZ then proves both are live at the server.
        let mut hugz_subscribed = subtree.is_all();
        if let Err(e) = sub.connect(&server.publisher()).await {
            return End::Lost(format!("cannot connect to {}: {e}", server.publisher()));
        }
        let (mut dealer, mut dealer_events) = match self.snapshot_socket(server).await {
            Ok(pair) => pair,
            Err(end) => return end,
        };
        let mut dealer_events_open = true;
        self.status.send_replace(Status::Connecting(server.clone()));
        tracing::debug!(server = %server, subtree = %subtree, "connecting");
        // Ask for the snapshot at once (see [`Proof`] for why that is exact in the end).
        let request = IcanHaz { subtree: self.options.subtree.clone() }.to_message();
        let _ = dealer.try_send(request);
        let mut phase = Phase::Syncing { entries: BTreeMap::new(), queued: Vec::new() };
        self.status.send_replace(Status::Syncing(server.clone()));
        let mut expiry = Instant::now() + ttl;
        // While syncing, ICANHAZ? is asked again at this interval until the snapshot starts: the
        // server may be a passive one of a pair that rejects the vote until its peer has expired
        // (a rejected vote gets no answer), so this bounds how late after that the takeover comes.
        let retry = (ttl / 4).clamp(Duration::from_millis(10), Duration::from_millis(100));
        let mut icanhaz_retry: Option<Instant> = Some(Instant::now() + retry);
        let far = Duration::from_secs(3600);
        let end = loop {
            let set_check = self.next_set_check;
            let active = matches!(phase, Phase::Active);
            let syncing = matches!(phase, Phase::Syncing { .. });
            tokio::select! {
                _ = self.close.changed() => break End::Closed,
                cmd = self.commands.recv(), if self.commands_open => match cmd {
                    Some(Command::Set { msg, reply }) => self.add_set(msg, reply, active, server),
                    None => self.commands_open = false,
                },
                msg = sub.recv() => {
                    let Ok(msg) = msg else { break End::Lost("subscriber socket closed".into()) };
                    let now = Instant::now();
                    self.last_message = Some(now);
                    // While syncing only the snapshot counts: a server that sends HUGZ but no
                    // snapshot (a passive one) must not hold the client forever.
                    if !syncing {
                        expiry = now + ttl;
                    }
                    let mut next = Some(msg);
                    let mut handled = 0;
                    let mut ended = None;
                    while let Some(msg) = next.take() {
                        if let Some(end) = self.on_update(msg, &mut phase, server) {
                            ended = Some(end);
                            break;
                        }
                        handled += 1;
                        if handled < BATCH {
                            next = sub.try_recv().ok();
                        }
                    }
                    if let Some(end) = ended {
                        break end;
                    }
                }
                msg = dealer.recv(), if syncing => {
                    let Ok(msg) = msg else { break End::Lost("snapshot socket closed".into()) };
                    let now = Instant::now();
                    self.last_message = Some(now);
                    expiry = now + ttl;
                    icanhaz_retry = None;
                    if let Some(end) = self.on_snapshot(msg, &mut phase, server) {
                        break end;
                    }
                }
                _ = std::future::ready(()), if self.proof.ask_again => {
                    // The snapshot could not be proven exact: ask again on a fresh snapshot socket
                    // (replies to the earlier request must not be taken for this one's).
                    self.proof.ask_again = false;
                    self.proof.asked_when_live = true;
                    match self.snapshot_socket(server).await {
                        Ok((fresh, events)) => {
                            std::mem::replace(&mut dealer, fresh).close().await;
                            dealer_events = events;
                            dealer_reached = false;
                        }
                        Err(end) => break end,
                    }
                    dealer_events_open = true;
                    let _ = dealer.try_send(IcanHaz { subtree: self.options.subtree.clone() }.to_message());
                    tracing::debug!(server = %server, "subscription proven live after the snapshot was asked for; asking again");
                    let now = Instant::now();
                    expiry = now + ttl;
                    icanhaz_retry = Some(now + retry);
                }
                _ = tokio::time::sleep_until(icanhaz_retry.unwrap_or_else(|| Instant::now() + far)), if syncing && icanhaz_retry.is_some() => {
                    // Nothing yet: ask again (a rejected vote is dropped without an answer).
                    let request = IcanHaz { subtree: self.options.subtree.clone() }.to_message();
                    let _ = dealer.try_send(request);
                    tracing::debug!(server = %server, "no snapshot yet; ICANHAZ? again");
                    icanhaz_retry = Some(Instant::now() + retry);
                }
                event = sub_events.next_event(), if sub_events_open => match event {
                    Some(MonitorEvent::HandshakeSucceeded { .. }) if !hugz_subscribed => {
                        sub.subscribe(HUGZ).expect("SUB socket");
                        hugz_subscribed = true;
                    }
                    Some(MonitorEvent::Disconnected { error, .. }) => {
                        break End::Lost(format!("connection to {} dropped: {error}", server.publisher()));
                    }
                    Some(MonitorEvent::Connected { .. }) => sub_reached = true,
                    Some(MonitorEvent::ConnectRetried { endpoint, .. }) if !sub_reached => {
                        break End::Unreachable(format!("cannot connect to {endpoint}"));
                    }
                    Some(MonitorEvent::HandshakeFailed { endpoint, error, .. }) => {
                        if let Some(end) = self.refusal(&endpoint, &error, &mut sub_closed) {
                            break end;
                        }
                    }
                    Some(_) => {}
                    None => sub_events_open = false,
                },
                event = dealer_events.next_event(), if dealer_events_open => match event {
                    Some(MonitorEvent::Connected { .. }) => dealer_reached = true,
                    Some(MonitorEvent::ConnectRetried { endpoint, .. }) if !dealer_reached => {
                        break End::Unreachable(format!("cannot connect to {endpoint}"));
                    }
                    Some(MonitorEvent::HandshakeFailed { endpoint, error, .. }) => {
                        if let Some(end) = self.refusal(&endpoint, &error, &mut dealer_closed) {
                            break end;
                        }
                    }
                    Some(_) => {}
                    None => dealer_events_open = false,
                },
                event = self.pub_events.next(), if self.pub_events_open => match event {
                    Some(MonitorEvent::HandshakeSucceeded { endpoint, .. }) => {
                        self.collectors_up.insert(endpoint);
                        if active {
                            self.flush_sets(server);
                        }
                    }
                    Some(MonitorEvent::Disconnected { endpoint, .. }) => {
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
                    break End::Lost(match phase {
                        Phase::Syncing { .. } => format!("no snapshot within {ttl:?} (a passive server, or none)"),
                        _ => format!("nothing received for {ttl:?} (no HUGZ)"),
                    });
                }
                _ = tokio::time::sleep_until(set_check.unwrap_or_else(|| Instant::now() + far)), if set_check.is_some() => {
                    self.check_sets(active, server);
                }
            }
        };
        sub.close().await;
        dealer.close().await;
        end
    }

    /// A failed handshake on the subscriber or snapshot socket: the end of the attempt when it is
    /// a refusal (a protocol error, such as failed authentication or a security mechanism
    /// mismatch, at once; the server closing the connection mid-handshake, as a CURVE server does
    /// with a HELLO it cannot decrypt, the second time on the same socket — the server accepted
    /// the reconnection, so it is up and closing on purpose, not going down).
    fn refusal(&self, endpoint: &str, error: &ConnectionError, closed_in_handshake: &mut u32) -> Option<End> {
        let curve = self.options.curve.is_some();
        let hint = match error {
            ConnectionError::SocketClosed | ConnectionError::HandshakeTimeout => return None,
            ConnectionError::PeerClosed | ConnectionError::Io(_) => {
                *closed_in_handshake += 1;
                if *closed_in_handshake < 2 {
                    tracing::debug!(endpoint, %error, "connection closed during the handshake");
                    return None;
                }
                if curve {
                    "the server closed the connection during the CURVE handshake: wrong server public key?"
                } else {
                    "the server closed the connection during the handshake: does it require CURVE?"
                }
            }
            ConnectionError::Greeting(zmtp::GreetingError::MechanismMismatch { .. }) => {
                "security mechanisms differ: CURVE on one side only?"
            }
            e if matches!(e.fault(), zmtp::Fault::Policy | zmtp::Fault::PeerPolicy) => {
                "authentication failed: is this client's public key on the server's allow list?"
            }
            e if e.is_protocol() => "handshake failed",
            _ => return None,
        };
        Some(End::Refused(format!("{endpoint}: {error} ({hint})")))
    }

    /// A message on the subscriber socket.
    fn on_update(&mut self, msg: Message, phase: &mut Phase, server: &ServerAddress) -> Option<End> {
        let update = match Update::parse(msg.frames()) {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::warn!(server = %server, error = %e, "dropped bad message from publisher");
                None
            }
        };
        if self.proof.first.is_none() {
            let first = match &update {
                Some(Update::KvPub(m)) => Some(m.sequence),
                _ => None,
            };
            self.proof.first = Some(first);
            let provisional = self.proof.provisional.take();
            if provisional.is_some_and(|sequence| Proof::covers(first, sequence)) {
                // The subscription was live in time: the snapshot was exact.
                self.status.send_replace(Status::Active(server.clone()));
            }
            if let Some(sequence) = provisional
                && !Proof::covers(first, sequence)
            {
                // Synced on a snapshot the subscription may have missed updates after.
                self.proof.ask_again = true;
                let queued = match update {
                    Some(Update::KvPub(m)) => vec![m],
                    _ => Vec::new(),
                };
                *phase = Phase::Syncing { entries: BTreeMap::new(), queued };
                return None;
            }
        }
        match phase {
            Phase::Syncing { queued, .. } => {
                if let Some(Update::KvPub(m)) = update {
                    queued.push(m);
                }
                None
            }
            Phase::Active => match update {
                Some(Update::KvPub(m)) => self.apply(m),
                _ => None,
            },
        }
    }

    /// A message on the snapshot socket (only read while syncing).
    fn on_snapshot(&mut self, msg: Message, phase: &mut Phase, server: &ServerAddress) -> Option<End> {
        let reply = match SnapshotReply::parse(msg.frames()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(server = %server, error = %e, "dropped bad snapshot message");
                return None;
            }
        };
        let Phase::Syncing { entries, .. } = phase else { return None };
        match reply {
            SnapshotReply::KvSync(kv) => {
                if !self.options.subtree.contains(&kv.key) {
                    tracing::warn!(server = %server, key = %kv.key.escape_ascii(), "dropped KVSYNC outside our subtree");
                } else if kv.value.is_empty() {
                    entries.remove(&kv.key);
                } else {
                    entries.insert(Bytes::copy_from_slice(&kv.key), Bytes::copy_from_slice(&kv.value));
                }
                None
            }
            SnapshotReply::KthxBai(end) => {
                if !self.proof.asked_when_live
                    && let Some(first) = self.proof.first
                    && !Proof::covers(first, end.sequence)
                {
                    // The subscription went live too late for this snapshot: updates after it
                    // may be in neither. Ask again, keeping what the subscriber queued.
                    tracing::debug!(server = %server, sequence = end.sequence, "snapshot older than the subscription");
                    entries.clear();
                    self.proof.ask_again = true;
                    return None;
                }
                if !self.proof.asked_when_live && self.proof.first.is_none() {
                    self.proof.provisional = Some(end.sequence);
                }
                let Phase::Syncing { entries, queued } = std::mem::replace(phase, Phase::Active) else {
                    unreachable!("checked above")
                };
                let keys = entries.len();
                {
                    let mut replica = self.shared.replica_mut();
                    let mut changes = Vec::new();
                    // Keys that queued updates newer than the snapshot will set: reported by them.
                    let superseded: HashSet<Bytes> =
                        queued.iter().filter(|m| m.sequence > end.sequence).map(|m| m.key.clone()).collect();
                    replica.load(entries, end.sequence, &superseded, &mut changes);
                    for change in changes {
                        self.emit(change);
                    }
                    if !self.proof.loaded {
                        self.emit(Event::Synced { server: server.clone(), sequence: end.sequence, keys });
                    }
                }
                self.proof.loaded = true;
                tracing::info!(server = %server, sequence = end.sequence, keys, queued = queued.len(), "synced");
                let mut failed_over = false;
                if let Some((from, last_heard)) = self.lost.take()
                    && from != *server
                {
                    failed_over = true;
                    let outage = last_heard.elapsed();
                    tracing::info!(from = %from, to = %server, ?outage, "failed over");
                    self.emit(Event::Failover { from, to: server.clone(), sequence: end.sequence, keys, outage });
                }
                for m in queued {
                    if let Some(end) = self.apply(m) {
                        return Some(end);
                    }
                }
                if self.synced_before {
                    self.confirm_from_snapshot(end.sequence);
                }
                if failed_over {
                    self.resend_lost_writes();
                }
                self.synced_before = true;
                self.refused.clear();
                self.status.send_replace(match self.proof.provisional {
                    Some(_) => Status::Loaded(server.clone()),
                    None => Status::Active(server.clone()),
                });
                self.flush_sets(server);
                None
            }
        }
    }

    /// Applies a KVPUB to the replica, emitting its event and confirming a matching pending set.
    fn apply(&mut self, msg: KvMsg) -> Option<End> {
        let (uuid, sequence) = (msg.uuid, msg.sequence);
        let check_gaps = self.options.subtree.is_all();
        // The echo of our own KVSET (even one already covered by the snapshot) confirms it.
        let ours = uuid.and_then(|u| self.pending.remove(&u));
        let mut before = None;
        let outcome = {
            let mut replica = self.shared.replica_mut();
            if ours.is_some() {
                before = replica.map.get(&msg.key).cloned();
            }
            let outcome = replica.apply(msg, &self.options.subtree, check_gaps);
            if let Outcome::Applied(event) = &outcome {
                // Sent under the lock, so `Client::watch` gets an exact cut.
                self.emit(event.clone());
            }
            outcome
        };
        if let Some(p) = ours {
            let _ = p.reply.send(Ok(Some(sequence)));
            if matches!(outcome, Outcome::Applied(_)) {
                self.recent.confirmed(p.msg, before, Instant::now());
            }
        }
        match outcome {
            Outcome::Applied(_) | Outcome::Stale | Outcome::OutsideSubtree => None,
            Outcome::Gap { expected, got } => {
                self.emit(Event::Gap { expected, got });
                let why = format!("sequence gap: expected {expected}, got {got} (updates lost)");
                Some(match self.options.gap_policy {
                    GapPolicy::Resync => End::Resync(why),
                    GapPolicy::Fail => End::Failed(why),
                })
            }
            Outcome::Regression { last, got } => {
                Some(End::Lost(format!("sequence went back from {last} to {got} (server restarted?)")))
            }
        }
    }

    /// After a re-sync (a failover, say): a set already sent whose value the new snapshot holds
    /// is confirmed with the snapshot's sequence. Its echo may have gone out before this client
    /// subscribed (a pair server replays pending updates at takeover), and a retransmit would be
    /// dropped as a duplicate.
    fn confirm_from_snapshot(&mut self, sequence: u64) {
        let done: Vec<Uuid> = {
            let replica = self.shared.replica();
            self.pending
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
            if let Some(p) = self.pending.remove(&uuid) {
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
            if self.pending.contains_key(&uuid) {
                continue;
            }
            tracing::warn!(key = %msg.key.escape_ascii(), "a write the lost server confirmed is missing on the new one: sending it again");
            // Nobody waits for this confirmation: the write was confirmed once already.
            let (reply, _) = oneshot::channel();
            let deadline = now + self.options.set_timeout;
            self.pending.insert(uuid, PendingSet { msg, reply, sent: None, deadline });
            self.schedule_set_check(deadline);
        }
    }

    fn schedule_set_check(&mut self, at: Instant) {
        self.next_set_check = Some(self.next_set_check.map_or(at, |t| t.min(at)));
    }

    fn add_set(
        &mut self,
        msg: KvMsg,
        reply: oneshot::Sender<Result<Option<u64>, ClientError>>,
        active: bool,
        server: &ServerAddress,
    ) {
        let uuid = msg.uuid.expect("client sets carry a UUID");
        let deadline = Instant::now() + self.options.set_timeout;
        self.pending.insert(uuid, PendingSet { msg, reply, sent: None, deadline });
        self.schedule_set_check(deadline);
        if active && self.collector_ready(server) {
            self.send_set(uuid, Instant::now());
        }
    }

    /// Sends (or resends) a pending KVSET. (Keys outside our subtree, which would never be echoed
    /// to us, are refused by `Client::set` before they get here.)
    fn send_set(&mut self, uuid: Uuid, now: Instant) {
        let Some(p) = self.pending.get_mut(&uuid) else { return };
        if p.sent.is_some() {
            tracing::debug!(key = %p.msg.key.escape_ascii(), "no echo yet: retransmitting KVSET");
        }
        // PUB never blocks (it drops at the HWM); the retransmit covers a drop.
        let msg = p.msg.to_message();
        for (publisher, _) in &self.publishers {
            let _ = publisher.try_send(msg.clone());
        }
        p.sent = Some(now);
        self.schedule_set_check(now + self.options.set_retry);
    }

    /// Sends every pending KVSET not sent yet or due for a retransmit (once in sync with a server
    /// whose collector we are connected to).
    fn flush_sets(&mut self, server: &ServerAddress) {
        if !self.collector_ready(server) {
            return;
        }
        let (now, retry) = (Instant::now(), self.options.set_retry);
        let due: Vec<Uuid> =
            self.pending.iter().filter(|(_, p)| p.sent.is_none_or(|t| t + retry <= now)).map(|(u, _)| *u).collect();
        for uuid in due {
            self.send_set(uuid, now);
        }
    }

    /// Fails timed-out sets, retransmits unconfirmed ones, and schedules the next check.
    fn check_sets(&mut self, active: bool, server: &ServerAddress) {
        let now = Instant::now();
        self.next_set_check = None;
        let timeout = self.options.set_timeout;
        self.pending.retain(|_, p| {
            if p.deadline > now {
                return true;
            }
            let key = String::from_utf8_lossy(&p.msg.key).into_owned();
            let (tx, _) = oneshot::channel();
            let reply = std::mem::replace(&mut p.reply, tx);
            let _ = reply.send(Err(ClientError::SetTimeout { key, timeout }));
            false
        });
        if active {
            self.flush_sets(server);
        }
        // Next: a retransmit still ahead, else the deadline (an unsent set waits for `flush_sets`).
        let retry = self.options.set_retry;
        let next = self
            .pending
            .values()
            .map(|p| match p.sent {
                Some(t) if t + retry > now => (t + retry).min(p.deadline),
                _ => p.deadline,
            })
            .min();
        if let Some(at) = next {
            self.schedule_set_check(at);
        }
    }
}
