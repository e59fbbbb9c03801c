//! The CHP server: SNAPSHOT (ROUTER) at port P, PUBLISHER (PUB) at P+1, COLLECTOR (SUB) at P+2.
//!
//! [`ServerState`] is the state machine (map, sequence, TTL deadlines) and knows nothing of
//! sockets; [`Server`] binds the three sockets and drives it from one task:
//!
//! - each KVSET on the collector is validated ([`KvSet::parse`], [`ServerState::apply`]), given the
//!   next sequence, stored (an empty value deletes) and republished as a KVPUB; malformed ones are
//!   logged, counted in [`ServerStats::rejected`] and dropped;
//! - each key with a `ttl` property is deleted when its deadline passes (a deadline index, checked
//!   to the millisecond) and the deletion published as a KVPUB with an empty value;
//! - HUGZ goes out every [`ServerConfig::hugz_interval`] — under load too, because a subtree client
//!   sees none of the traffic outside its subtree and must not mistake a busy server for a dead one —
//!   plus a few extra HUGZ shortly after each new subscriber connects, so a client proves its
//!   subscription (and starts) in milliseconds rather than a full interval;
//! - ICANHAZ? requests stream from their own tasks (see `snapshot.rs`).
//!
//! **Which runtime.** Every update goes through the one task that owns the map, so a server gains
//! little from many threads and pays for the wake-ups between them: measured on 2 cores (4
//! publisher and 2 subscriber processes replaying KVSETs), its CPU per update was 1.22-1.28 µs
//! on a 2-worker runtime and 0.85-0.92 µs on a runtime of its own with one worker, as the
//! `chp server` command runs it by default. A pair server is better off with two: its Binary Star
//! heartbeat then never waits behind long work on the map, such as loading a copy of the peer's.
//!
//! What the application reads of a running server (address, map, sequence, counters) is a
//! [`ServerView`]; [`Server`] and the pair's [`HaServer`](ha::HaServer) both dereference to it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use chp::server::{Server, ServerConfig};
//! let server = Server::bind(ServerConfig { bind: "127.0.0.1".into(), ..ServerConfig::default() }).await?;
//! println!("CHP server at {}", server.address()); // tcp://127.0.0.1:P, P picked by the OS
//! assert_eq!(server.sequence(), 0);
//! server.close().await;
//! # Ok(()) }
//! ```

pub mod ha;
pub mod metrics;
pub mod pending;
mod persist;
mod snapshot;
mod state;
mod view;

use std::collections::BTreeSet;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use zmtp::task::{Background, StopSignal};
use zmtp::{Message, MonitorEvent, Socket, SocketType};

use self::persist::Persist;
pub use self::state::{ApplyError, Followed, MAX_TTL, PeerEntry, ServerState, parse_ttl};
use self::view::Shared;
pub use self::view::{ServerStats, ServerView};
use crate::command::{KvSet, hugz_message};
use crate::durable::{Durability, JournalError};
use crate::kvmsg::{KvMsg, SequenceFrames};
use crate::security::ServerCurve;

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Interface to bind: an IP address, a host name, or `*` for all interfaces. Default `*`.
    pub bind: String,
    /// P, the SNAPSHOT port (P+1 and P+2 are used too). 0 (the default) picks a free P for which
    /// P+1 and P+2 are free as well.
    pub port: u16,
    /// HUGZ period. Default 1 s.
    pub hugz_interval: Duration,
    /// Largest value accepted, in bytes; also bounds every inbound frame (MAXMSGSIZE) on the
    /// collector. Default 1 MiB.
    pub max_value_len: usize,
    /// Snapshots streamed at the same time (more wait, holding nothing). Default 32.
    pub max_concurrent_snapshots: usize,
    /// A snapshot whose client reads nothing for this long is abandoned. Default 10 s.
    pub snapshot_stall_timeout: Duration,
    /// Messages queued per subscriber on the publisher, and per client on the collector, before
    /// the publisher drops (a subscriber then sees a sequence gap). Default 100 000.
    pub queue_limit: usize,
    /// Bytes queued per subscriber on the publisher before it drops updates for that subscriber
    /// (the Clone answer to a slow subscriber, the Guide's Suicidal Snail: it sees the gap and
    /// re-syncs by snapshot). Default 16 MiB.
    pub subscriber_bytes: usize,
    /// Bytes queued per client on the snapshot socket: a snapshot streams no faster than its
    /// client reads it, holding at most this much (plus one chunk) for it. Default 1 MiB.
    pub snapshot_peer_bytes: usize,
    /// CURVE on the three sockets (see [`ServerCurve`]); `None` (the default): no security.
    pub curve: Option<ServerCurve>,
    /// Keep the map on disk in this directory (see [`crate::durable`]): a restarted server
    /// serves the map, ttl deadlines and sequence it had. `None` (the default): in memory only.
    pub data_dir: Option<PathBuf>,
    /// With a [`data_dir`](Self::data_dir): when updates reach the disk, and so what a power
    /// failure can lose. Default [`Durability::Always`]: nothing that was published.
    pub durability: Durability,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "*".into(),
            port: 0,
            hugz_interval: Duration::from_secs(1),
            max_value_len: 1 << 20,
            max_concurrent_snapshots: 32,
            snapshot_stall_timeout: Duration::from_secs(10),
            queue_limit: 100_000,
            subscriber_bytes: 16 << 20,
            snapshot_peer_bytes: 1 << 20,
            curve: None,
            data_dir: None,
            durability: Durability::Always,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// Binding one of the three sockets failed.
    #[error("cannot bind {endpoint}: {source}")]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// Why.
        source: zmtp::Error,
    },
    /// No free port triple was found.
    #[error("no free ports P, P+1, P+2 found on {0} after {1} attempts")]
    NoFreePorts(String, usize),
    /// The configured port leaves no room for P+1 and P+2.
    #[error("port {0} is too high: the server uses P, P+1 and P+2, so P must be 1..=65533")]
    PortTooHigh(u16),
    /// The data directory could not be opened or its contents read.
    #[error("data directory: {0}")]
    Journal(#[from] JournalError),
    /// A data directory was given to a build without the `durable` feature.
    #[error("this build keeps no data directory (chp's `durable` feature is off)")]
    NotDurable,
    /// A setting out of its range (a zero interval would make the server spin).
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

/// A running single CHP server (see the [module docs](self)). Dropping it stops it.
///
/// It dereferences to its [`ServerView`]: `server.sequence()`, `server.get(key)`,
/// `server.address()` … read the map and counters, as on an [`HaServer`](ha::HaServer).
pub struct Server {
    view: ServerView,
    task: Background<()>,
}

struct Sockets {
    snapshot: Socket,
    publisher: Socket,
    collector: Socket,
    port: u16,
}

/// Extra HUGZ after a subscriber connects, so its subscription is proven live quickly.
const WELCOME_HUGZ: [Duration; 4] =
    [Duration::from_millis(2), Duration::from_millis(10), Duration::from_millis(50), Duration::from_millis(200)];

impl Server {
    /// Binds the three sockets and starts serving.
    ///
    /// With a [`data_dir`](ServerConfig::data_dir), the map stored there is loaded first (the
    /// sequence continues from it), before any socket is bound.
    pub async fn bind(config: ServerConfig) -> Result<Server, ServerError> {
        let (state, persist) = open_state(&config).await?;
        let (sockets, pub_events) = bind_sockets(&config).await?;
        let view = ServerView::serving(&config.bind, sockets.port, state);
        let shared = view.shared().clone();
        let task = Background::spawn(|stop| run(sockets, pub_events, shared, config, persist, stop));
        tracing::info!(address = %view.address(), "CHP server listening (snapshot P, publisher P+1, collector P+2)");
        Ok(Server { view, task })
    }

    /// Stops serving and closes the sockets.
    pub async fn close(self) {
        self.task.close().await;
    }

    /// Waits until the server stops (it only stops when told to, or if a socket fails).
    pub async fn wait(self) {
        self.task.wait().await;
    }
}

impl Deref for Server {
    type Target = ServerView;

    fn deref(&self) -> &ServerView {
        &self.view
    }
}

/// Connections each CHP listener queues before it accepts them (ZMQ_BACKLOG; Linux caps it at
/// `net.core.somaxconn`, 4096 by default). After a failover every client reconnects at once; with
/// zmtp's default of 1024 a crowd of 4,800 overflowed it (48,584 drops in one storm) and the
/// dropped clients waited out TCP's SYN retransmits: storms took 16 to 32 s instead of 5.
pub(crate) const LISTEN_BACKLOG: u32 = 4096;

/// The CHP sockets' limits, the same on a single server and on a pair server.
impl ServerConfig {
    /// The SNAPSHOT socket's: a full per-peer queue blocks the stream (ROUTER_MANDATORY), so a
    /// snapshot goes no faster than its client reads.
    fn limit_snapshot(&self, snapshot: &Socket) {
        snapshot.set_backlog(LISTEN_BACKLOG);
        snapshot.set_router_mandatory(true);
        snapshot.set_sndhwm(10_000);
        snapshot.set_sndhwm_bytes(self.snapshot_peer_bytes);
    }

    /// A PUBLISHER socket with the per-subscriber queue limits.
    fn publisher(&self) -> Socket {
        let publisher = Socket::new(SocketType::Pub);
        publisher.set_linger(Some(Duration::ZERO));
        publisher.set_backlog(LISTEN_BACKLOG);
        publisher.set_sndhwm(self.queue_limit);
        publisher.set_sndhwm_bytes(self.subscriber_bytes);
        publisher
    }

    /// A COLLECTOR socket subscribed to everything, refusing frames larger than a KVSET can be.
    fn collector(&self) -> Socket {
        let collector = Socket::new(SocketType::Sub);
        collector.set_linger(Some(Duration::ZERO));
        collector.set_backlog(LISTEN_BACKLOG);
        collector.set_rcvhwm(self.queue_limit);
        collector.set_maxmsgsize(Some(self.max_value_len.max(crate::kvmsg::MAX_KEY_LEN) as u64 + 1024));
        collector.subscribe("").expect("SUB socket");
        collector
    }
}

fn port_of(endpoint: &str) -> Option<u16> {
    endpoint.rsplit_once(':')?.1.parse().ok()
}

async fn bind_sockets(config: &ServerConfig) -> Result<(Sockets, zmtp::Monitor), ServerError> {
    const ATTEMPTS: usize = 256;
    if config.port > u16::MAX - 2 {
        return Err(ServerError::PortTooHigh(config.port));
    }
    let bind = |port: u16| format!("tcp://{}:{port}", config.bind);
    for _ in 0..ATTEMPTS {
        let snapshot = Socket::new(SocketType::Router);
        snapshot.set_linger(Some(Duration::ZERO));
        config.limit_snapshot(&snapshot);
        let publisher = config.publisher();
        let collector = config.collector();
        if let Some(curve) = &config.curve {
            for s in [&snapshot, &publisher, &collector] {
                curve.server(s, false);
            }
        }
        let pub_events = publisher.monitor();

        let fixed = config.port != 0;
        // Port 0: a random triple below the OS's ephemeral range. An OS-assigned port P comes from the
        // ephemeral range, where outgoing connections keep taking P+1 and P+2 on a busy machine.
        let wanted = if fixed { config.port } else { random_low_port() };
        let endpoint = bind(wanted);
        let bound = match snapshot.bind(&endpoint).await {
            Ok(bound) => bound,
            Err(source) if fixed => return Err(ServerError::Bind { endpoint, source }),
            Err(_) => {
                for s in [snapshot, publisher, collector] {
                    s.close().await;
                }
                continue;
            }
        };
        let port = port_of(&bound).expect("tcp endpoint has a port");
        if port > u16::MAX - 2 {
            // Only an OS-chosen port can get here (a fixed one was checked above).
            continue;
        }
        let mut ok = true;
        for (socket, offset) in [(&publisher, 1), (&collector, 2)] {
            let endpoint = bind(port + offset);
            if let Err(source) = socket.bind(&endpoint).await {
                if fixed {
                    return Err(ServerError::Bind { endpoint, source });
                }
                ok = false;
                break;
            }
        }
        if ok {
            return Ok((Sockets { snapshot, publisher, collector, port }, pub_events));
        }
        for s in [snapshot, publisher, collector] {
            s.close().await;
        }
    }
    Err(ServerError::NoFreePorts(config.bind.clone(), ATTEMPTS))
}

/// A random port P with P..=P+2 in 10000..20000, below the ephemeral range of common systems (Linux
/// 32768.., BSDs and Windows 49152..), where outgoing connections do not take ports.
fn random_low_port() -> u16 {
    rand::Rng::gen_range(&mut rand::thread_rng(), 10_000..19_997)
}

/// Most KVSETs applied per lock of the state.
const BATCH: usize = 256;

async fn run(
    sockets: Sockets,
    mut pub_events: zmtp::Monitor,
    shared: Arc<Shared>,
    config: ServerConfig,
    mut persist: Option<Persist>,
    mut stop: StopSignal,
) {
    let Sockets { snapshot, publisher, collector, .. } = sockets;
    let snapshots = snapshot::Snapshots::new(
        snapshot.clone(),
        shared.clone(),
        config.max_concurrent_snapshots,
        config.snapshot_stall_timeout,
    );
    let mut next_hugz = Instant::now() + config.hugz_interval;
    let mut welcome: BTreeSet<Instant> = BTreeSet::new();
    let mut monitor_open = true;
    let mut batch = Vec::with_capacity(BATCH);
    let mut publish: Vec<KvMsg> = Vec::with_capacity(BATCH);
    let mut outgoing: Vec<Message> = Vec::with_capacity(BATCH);
    let mut sequences = SequenceFrames::default();
    let far = Duration::from_secs(3600);
    let mut sync_timer = match (&persist, config.durability) {
        (Some(_), Durability::Interval(every)) => Some(tokio::time::interval(every)),
        _ => None,
    };
    loop {
        let expiry = shared.lock().next_expiry().map(Instant::from_std);
        let hugz_at = welcome.first().copied().map_or(next_hugz, |w| w.min(next_hugz));
        tokio::select! {
            _ = &mut stop => break,
            received = collector.recv_many(&mut batch, BATCH) => {
                if received.is_err() {
                    break;
                }
                collect(&shared, &mut batch, &mut publish, &mut outgoing, &mut sequences);
                if let Err(e) = persisted(&mut persist, &shared, &publish).await {
                    tracing::error!(error = %e, "cannot write the journal: the server stops (nothing unwritten was published)");
                    break;
                }
                publish.clear();
                if publisher.send_many(&mut outgoing).await.is_err() {
                    break;
                }
            }
            _ = async { sync_timer.as_mut().expect("enabled").tick().await }, if sync_timer.is_some() => {
                if let Some(persist) = persist.as_mut()
                    && let Err(e) = persist.tick(&shared).await
                {
                    tracing::error!(error = %e, "cannot sync the journal: the server stops");
                    break;
                }
            }
            msg = snapshot.recv() => {
                let Ok(msg) = msg else { break };
                snapshots.request(msg);
            }
            _ = tokio::time::sleep_until(expiry.unwrap_or_else(|| Instant::now() + far)), if expiry.is_some() => {
                shared.lock().expire(std::time::Instant::now(), &mut publish);
                shared.stats.expired.add(publish.len() as u64);
                if let Err(e) = persisted(&mut persist, &shared, &publish).await {
                    tracing::error!(error = %e, "cannot write the journal: the server stops (nothing unwritten was published)");
                    break;
                }
                for update in publish.drain(..) {
                    tracing::debug!(key = %update.key.escape_ascii(), sequence = update.sequence, "expired");
                    let _ = publisher.send(update.to_message()).await;
                }
            }
            _ = tokio::time::sleep_until(hugz_at) => {
                let now = Instant::now();
                if next_hugz <= now {
                    next_hugz = now + config.hugz_interval;
                }
                while welcome.first().is_some_and(|w| *w <= now) {
                    welcome.pop_first();
                }
                shared.stats.hugz.inc();
                let sequence = shared.lock().sequence();
                let _ = publisher.send(hugz_message(sequence)).await;
            }
            event = pub_events.next_event(), if monitor_open => match event {
                Some(MonitorEvent::HandshakeSucceeded { .. }) => {
                    let now = Instant::now();
                    if welcome.len() < 64 {
                        welcome.extend(WELCOME_HUGZ.iter().map(|d| now + *d));
                    }
                }
                Some(MonitorEvent::HandshakeFailed { peer, error, .. }) => {
                    log_refused(&peer, &error, config.curve.is_some())
                }
                Some(_) => {}
                None => monitor_open = false,
            },
        }
    }
    for s in [snapshot, publisher, collector] {
        s.close().await;
    }
    if let Some(persist) = persist.as_mut() {
        persist.finish().await;
    }
    tracing::info!("CHP server stopped");
}

/// Logs a subscriber's failed handshake (wrong server key, key not allowed, no CURVE, …). Without
/// security, a peer gone in the middle of it is a short-lived client, not a refusal (with CURVE it
/// may be a server closing on a key it cannot decrypt, so it is reported). A protocol error was
/// already logged by zmtp for this very connection, so it is only repeated at `debug`; a
/// subscriber that keeps failing is named once per period.
fn log_refused(peer: &str, error: &zmtp::ConnectionError, secure: bool) {
    if (!secure && error.closed_by_peer()) || error.is_protocol() {
        tracing::debug!(peer, %error, "subscriber handshake failed");
    } else if !matches!(error, zmtp::ConnectionError::SocketClosed) {
        let ip = peer.rsplit_once(':').map_or(peer, |(ip, _port)| ip);
        if let Some(suppressed) = zmtp::throttle::allow_from("chp: subscriber handshake failed", ip) {
            tracing::warn!(peer, %error, suppressed, "refused a subscriber: handshake failed");
        }
    }
}

/// An empty map, or with a [`data_dir`](ServerConfig::data_dir) the one stored there and its
/// journal (opened on the blocking pool).
async fn open_state(config: &ServerConfig) -> Result<(ServerState, Option<Persist>), ServerError> {
    if config.hugz_interval.is_zero() {
        return Err(ServerError::Config("the HUGZ interval must be positive"));
    }
    let mut state = ServerState::new(std::time::Instant::now());
    state.set_max_value_len(config.max_value_len);
    match config.data_dir.clone() {
        None => Ok((state, None)),
        #[cfg(not(feature = "durable"))]
        Some(_) => Err(ServerError::NotDurable),
        #[cfg(feature = "durable")]
        Some(dir) => {
            let durability = config.durability;
            let (state, persist) = tokio::task::spawn_blocking(move || {
                let persist = Persist::open(&dir, durability, &mut state);
                (state, persist)
            })
            .await
            .expect("opening the journal panicked");
            Ok((state, Some(persist?)))
        }
    }
}

/// Journals `updates` (just applied) and commits them, if the server keeps a journal: they may be
/// published once this returns `Ok`.
async fn persisted(persist: &mut Option<Persist>, shared: &Arc<Shared>, updates: &[KvMsg]) -> Result<(), JournalError> {
    let Some(persist) = persist.as_mut().filter(|_| !updates.is_empty()) else { return Ok(()) };
    persist.append(&shared.lock(), updates)?;
    persist.commit(shared).await
}

/// The KVPUB of `update`, applied from the KVSET `received`: the received message with the
/// server's sequence in frame 1. Restamped rather than re-encoded, so the hot path allocates no
/// frames (the sequence frames come from one shared buffer). Only a properties frame that is not
/// already in its canonical form (a repeated name, a blank line) is encoded again, so subscribers
/// see what `KvMsg::to_message` would have sent.
fn restamp(mut received: Message, update: &KvMsg, sequences: &mut SequenceFrames) -> Message {
    let frames = received.frames_mut();
    frames[1] = sequences.frame(update.sequence);
    if !frames[3].is_empty() {
        let canonical = update.properties.encode();
        if frames[3] != canonical.as_bytes() {
            frames[3] = Bytes::from(canonical);
        }
    }
    received
}

/// Applies a batch of collector messages under one lock; fills `publish` with the applied
/// updates (for the journal) and `outgoing` with their KVPUBs (see [`restamp`]).
fn collect(
    shared: &Shared,
    batch: &mut Vec<Message>,
    publish: &mut Vec<KvMsg>,
    outgoing: &mut Vec<Message>,
    sequences: &mut SequenceFrames,
) {
    let now = std::time::Instant::now();
    let mut state = shared.lock();
    let applied_before = publish.len();
    for msg in batch.drain(..) {
        let applied = KvSet::parse(msg.frames()).map_err(|e| e.to_string()).and_then(|set| {
            // The key for the log line is read from the message (still whole) only on a refusal:
            // a clone of it per update cost two atomic operations on the hot path.
            state.apply(set, now).map_err(|e| format!("key {}: {e}", msg.frames()[0].escape_ascii()))
        });
        match applied {
            Ok(update) => {
                outgoing.push(restamp(msg, &update, sequences));
                publish.push(update);
            }
            Err(e) => {
                shared.stats.rejected.inc();
                if let Some(suppressed) = zmtp::throttle::allow("chp: bad KVSET") {
                    tracing::warn!(error = %e, frames = msg.len(), suppressed, "dropped bad KVSET");
                }
            }
        }
    }
    shared.stats.updates.add((publish.len() - applied_before) as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kvset(key: &str, properties: &str) -> Message {
        let frame = |b: &[u8]| Bytes::copy_from_slice(b);
        Message::from_frames([
            frame(key.as_bytes()),
            frame(&[0; 8]),
            frame(&[7; 16]),
            frame(properties.as_bytes()),
            frame(b"value"),
        ])
    }

    #[test]
    fn a_kvpub_is_the_kvset_restamped_with_canonical_properties() {
        let view = ServerView::serving("127.0.0.1", 5556, ServerState::new(std::time::Instant::now()));
        let mut batch = vec![kvset("/a", ""), kvset("/b", "ttl=9\n"), kvset("/c", "ttl=5\n\nttl=9"), kvset("", "")];
        let (mut publish, mut outgoing) = (Vec::new(), Vec::new());
        collect(view.shared(), &mut batch, &mut publish, &mut outgoing, &mut SequenceFrames::default());
        assert!(batch.is_empty());
        assert_eq!(publish.len(), 3, "the empty key is refused");
        assert_eq!(view.stats().rejected, 1);
        for (sent, update) in outgoing.iter().zip(&publish) {
            assert_eq!(sent, &update.to_message(), "what KvMsg would encode");
        }
        assert_eq!(outgoing[1][3], "ttl=9\n");
        assert_eq!(outgoing[2][3], "ttl=9\n", "a repeated name and a blank line are re-encoded");
        assert_eq!(publish.iter().map(|u| u.sequence).collect::<Vec<_>>(), [1, 2, 3]);
    }
}
