//! Clone Model Five (the ZeroMQ Guide, chapter 5): ephemeral values and deletes, and a reactor.
//! A KVSET with a `ttl` property (seconds) expires: the server stores an absolute deadline and a
//! periodic flush deletes expired keys, publishing each deletion as an update with an empty value;
//! an update with an empty value deletes its key everywhere. The server is one event loop mixing
//! sockets and the flush timer. (The full `chp` server replaces the periodic full scan with a
//! deadline index; this is the Guide's design.)
//!
//! `cargo run --example clone5 [clients] [updates-per-client]`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chp::KvMsg;
use chp::command::{IcanHaz, KthxBai, KvSync, SnapshotReply, Subtree, Update};
use tokio::sync::oneshot;
use zmtp::{Message, Socket, SocketType};

/// The three server endpoints.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// ROUTER.
    pub snapshot: String,
    /// PUB.
    pub publisher: String,
    /// PULL.
    pub collector: String,
}

/// The server's final state.
pub struct ServerOutcome {
    /// Updates sequenced.
    pub sequence: u64,
    /// Its map.
    pub map: BTreeMap<Bytes, Bytes>,
}

/// Binds the server's sockets.
pub async fn bind() -> zmtp::Result<(Socket, Socket, Socket, Endpoints)> {
    let snapshot = Socket::new(SocketType::Router);
    let publisher = Socket::new(SocketType::Pub);
    let collector = Socket::new(SocketType::Pull);
    let endpoints = Endpoints {
        snapshot: snapshot.bind("tcp://127.0.0.1:*").await?,
        publisher: publisher.bind("tcp://127.0.0.1:*").await?,
        collector: collector.bind("tcp://127.0.0.1:*").await?,
    };
    Ok((snapshot, publisher, collector, endpoints))
}

/// The server: sequences, republishes and stores collected updates (an empty value deletes, a
/// `ttl` sets a deadline), deletes expired keys every `flush_every`, answers snapshots, until
/// `stop`.
pub async fn server(
    snapshot: Socket,
    publisher: Socket,
    collector: Socket,
    flush_every: Duration,
    mut stop: oneshot::Receiver<()>,
) -> ServerOutcome {
    let mut map: BTreeMap<Bytes, (Bytes, Option<Instant>)> = BTreeMap::new();
    let mut sequence = 0;
    let mut flush = tokio::time::interval(flush_every);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            msg = collector.recv() => {
                let Ok(msg) = msg else { break };
                let Ok(mut kv) = KvMsg::parse(msg.frames()) else { eprintln!("server: bad update dropped"); continue };
                sequence += 1;
                kv.sequence = sequence;
                let _ = publisher.send(kv.to_message()).await;
                if kv.is_delete() {
                    map.remove(&kv.key);
                } else {
                    let ttl = kv.properties.get("ttl").and_then(|t| t.parse::<f64>().ok()).filter(|t| *t > 0.0);
                    let deadline = ttl.map(|t| Instant::now() + Duration::from_secs_f64(t));
                    map.insert(kv.key, (kv.body, deadline));
                }
            }
            _ = flush.tick() => {
                let now = Instant::now();
                let expired: Vec<Bytes> =
                    map.iter().filter(|(_, (_, d))| d.is_some_and(|d| d <= now)).map(|(k, _)| k.clone()).collect();
                for key in expired {
                    map.remove(&key);
                    sequence += 1;
                    let mut kv = KvMsg::new(key, Bytes::new());
                    kv.sequence = sequence;
                    let _ = publisher.send(kv.to_message()).await;
                }
            }
            request = snapshot.recv() => {
                let Ok(mut request) = request else { break };
                let identity = request.pop_front().unwrap_or_default();
                if IcanHaz::parse(request.frames()).is_err() {
                    continue;
                }
                for (key, (value, _)) in &map {
                    let kv = KvSync { key: key.clone(), sequence, value: value.clone() };
                    let _ = snapshot.send(routed(&identity, SnapshotReply::KvSync(kv).to_message())).await;
                }
                let end = SnapshotReply::KthxBai(KthxBai { sequence, subtree: Bytes::new() });
                let _ = snapshot.send(routed(&identity, end.to_message())).await;
            }
        }
    }
    ServerOutcome { sequence, map: map.into_iter().map(|(k, (v, _))| (k, v)).collect() }
}

fn routed(identity: &Bytes, mut msg: Message) -> Message {
    msg.push_front(identity.clone());
    msg
}

/// A client's final state.
pub struct ClientOutcome {
    /// Sequence of the last update applied.
    pub sequence: u64,
    /// Its map.
    pub map: BTreeMap<Bytes, Bytes>,
}

/// Client `id`'s updates: keys `/c{id}/{j}`; those with an even `j` live `ttl`; then the keys with
/// `j % 4 == 1` are deleted. What survives: the keys with `j % 4 == 3`.
pub fn updates(id: usize, count: usize, ttl: Duration) -> Vec<KvMsg> {
    let mut sets: Vec<KvMsg> = (0..count)
        .map(|j| {
            let mut kv = KvMsg::new(format!("/c{id}/{j}"), format!("{id}-{j}"));
            if j % 2 == 0 {
                kv.properties.insert("ttl", format!("{}", ttl.as_secs_f64())).expect("valid property");
            }
            kv
        })
        .collect();
    let deletes: Vec<KvMsg> =
        (0..count).filter(|j| j % 4 == 1).map(|j| KvMsg::new(format!("/c{id}/{j}"), "")).collect();
    sets.extend(deletes);
    sets
}

/// Sequences one client's updates take: its sets and deletes, and one expiry per ttl key.
pub fn sequences_per_client(count: usize) -> u64 {
    (count + count.div_ceil(2) + (0..count).filter(|j| j % 4 == 1).count()) as u64
}

/// The map once everything has expired: the keys with `j % 4 == 3`.
pub fn expected_map(clients: usize, count: usize) -> BTreeMap<Bytes, Bytes> {
    (0..clients)
        .flat_map(|id| (0..count).filter(|j| j % 4 == 3).map(move |j| (format!("/c{id}/{j}"), format!("{id}-{j}"))))
        .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
        .collect()
}

/// A client: pushes its updates (one per millisecond) and applies everyone's, until it has seen
/// update number `total` (every set, delete and expiry of every client).
pub async fn client(
    endpoints: &Endpoints,
    id: usize,
    count: usize,
    ttl: Duration,
    total: u64,
) -> zmtp::Result<ClientOutcome> {
    let subscriber = Socket::new(SocketType::Sub);
    subscriber.subscribe("")?;
    subscriber.connect(&endpoints.publisher).await?;
    let snapshot = Socket::new(SocketType::Dealer);
    snapshot.connect(&endpoints.snapshot).await?;
    let push = Socket::new(SocketType::Push);
    push.connect(&endpoints.collector).await?;
    let mut to_send = updates(id, count, ttl).into_iter();

    let first = loop {
        if let Some(kv) = to_send.next() {
            push.send(kv.to_message()).await?;
        }
        if let Ok(msg) = tokio::time::timeout(Duration::from_millis(100), subscriber.recv()).await {
            break msg?;
        }
    };
    snapshot.send(IcanHaz { subtree: Subtree::all() }.to_message()).await?;
    let mut map = BTreeMap::new();
    let mut sequence = loop {
        match SnapshotReply::parse(snapshot.recv().await?.frames()) {
            Ok(SnapshotReply::KvSync(kv)) => {
                map.insert(kv.key, kv.value);
            }
            Ok(SnapshotReply::KthxBai(end)) => break end.sequence,
            Err(e) => eprintln!("client {id}: bad snapshot message: {e}"),
        }
    };
    apply(first, &mut sequence, &mut map);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut sending = true;
    while sequence < total || sending {
        tokio::select! {
            msg = subscriber.recv() => apply(msg?, &mut sequence, &mut map),
            _ = tick.tick(), if sending => match to_send.next() {
                Some(kv) => push.send(kv.to_message()).await?,
                None => sending = false,
            },
        }
    }
    Ok(ClientOutcome { sequence, map })
}

/// Applies a KVPUB newer than `sequence`.
fn apply(msg: Message, sequence: &mut u64, map: &mut BTreeMap<Bytes, Bytes>) {
    if let Ok(Update::KvPub(kv)) = Update::parse(msg.frames())
        && kv.sequence > *sequence
    {
        *sequence = kv.sequence;
        if kv.is_delete() {
            map.remove(&kv.key);
        } else {
            map.insert(kv.key, kv.body);
        }
    }
}

/// Runs a server (flushing every `flush_every`) and `clients` clients of `count` updates each,
/// ttl keys living `ttl`.
pub async fn run(
    clients: usize,
    count: usize,
    ttl: Duration,
    flush_every: Duration,
) -> zmtp::Result<(ServerOutcome, Vec<ClientOutcome>)> {
    let (snapshot, publisher, collector, endpoints) = bind().await?;
    let (stop, stopped) = oneshot::channel();
    let server = tokio::spawn(server(snapshot, publisher, collector, flush_every, stopped));
    let total = clients as u64 * sequences_per_client(count);
    let tasks: Vec<_> = (0..clients)
        .map(|id| {
            let endpoints = endpoints.clone();
            tokio::spawn(async move { client(&endpoints, id, count, ttl, total).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("client task")?);
    }
    let _ = stop.send(());
    Ok((server.await.expect("server task"), outcomes))
}

#[tokio::main]
async fn main() -> zmtp::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse().ok());
    let clients = args.next().flatten().unwrap_or(3);
    let count = args.next().flatten().unwrap_or(100);
    let (server, outcomes) = run(clients, count, Duration::from_secs(1), Duration::from_secs(1)).await?;
    let expected = expected_map(clients, count);
    println!("server: {} updates sequenced, {} keys left", server.sequence, server.map.len());
    for (id, c) in outcomes.iter().enumerate() {
        let same = if c.map == expected { "as expected" } else { "DIFFERENT" };
        println!("client {id}: at sequence {}, {} keys, {same}", c.sequence, c.map.len());
    }
    Ok(())
}
