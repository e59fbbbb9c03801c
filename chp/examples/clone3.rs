//! Clone Model Three (the ZeroMQ Guide, chapter 5): updates come from the clients. Each client
//! PUSHes its updates to the server's collector (PULL); the server gives each the next sequence,
//! republishes it on PUB and stores it; snapshots work as in Model Two.
//!
//! Models one to five have no heartbeat, so a client proves its subscription live with its own
//! first update: it pushes one and waits briefly for anything on its SUB, repeating until something
//! arrives (updates it misses that way are in the snapshot it asks for next).
//!
//! `cargo run --example clone3 [clients] [updates-per-client]`

use std::collections::BTreeMap;
use std::time::Duration;

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

/// The server: sequences and republishes collected updates, answers snapshots, until `stop`.
pub async fn server(
    snapshot: Socket,
    publisher: Socket,
    collector: Socket,
    mut stop: oneshot::Receiver<()>,
) -> ServerOutcome {
    let mut map = BTreeMap::new();
    let mut sequence = 0;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            msg = collector.recv() => {
                let Ok(msg) = msg else { break };
                let Ok(mut kv) = KvMsg::parse(msg.frames()) else { eprintln!("server: bad update dropped"); continue };
                sequence += 1;
                kv.sequence = sequence;
                let _ = publisher.send(kv.to_message()).await;
                map.insert(kv.key, kv.body);
            }
            request = snapshot.recv() => {
                let Ok(mut request) = request else { break };
                let identity = request.pop_front().unwrap_or_default();
                if IcanHaz::parse(request.frames()).is_err() {
                    continue;
                }
                for (key, value) in &map {
                    let kv = KvSync { key: key.clone(), sequence, value: value.clone() };
                    let _ = snapshot.send(routed(&identity, SnapshotReply::KvSync(kv).to_message())).await;
                }
                let end = SnapshotReply::KthxBai(KthxBai { sequence, subtree: Bytes::new() });
                let _ = snapshot.send(routed(&identity, end.to_message())).await;
            }
        }
    }
    ServerOutcome { sequence, map }
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

/// Client `id`'s updates: keys `/c{id}/{j}`.
pub fn updates(id: usize, count: usize) -> Vec<KvMsg> {
    (0..count).map(|j| KvMsg::new(format!("/c{id}/{j}"), format!("{id}-{j}"))).collect()
}

/// A client: pushes its `count` updates (one per millisecond) and applies everyone's, until it has
/// seen update number `total`.
pub async fn client(endpoints: &Endpoints, id: usize, count: usize, total: u64) -> zmtp::Result<ClientOutcome> {
    let subscriber = Socket::new(SocketType::Sub);
    subscriber.subscribe("")?;
    subscriber.connect(&endpoints.publisher).await?;
    let snapshot = Socket::new(SocketType::Dealer);
    snapshot.connect(&endpoints.snapshot).await?;
    let push = Socket::new(SocketType::Push);
    push.connect(&endpoints.collector).await?;
    let mut to_send = updates(id, count).into_iter();

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
        map.insert(kv.key, kv.body);
    }
}

/// Runs a server and `clients` clients of `count` updates each.
pub async fn run(clients: usize, count: usize) -> zmtp::Result<(ServerOutcome, Vec<ClientOutcome>)> {
    let (snapshot, publisher, collector, endpoints) = bind().await?;
    let (stop, stopped) = oneshot::channel();
    let server = tokio::spawn(server(snapshot, publisher, collector, stopped));
    let total = (clients * count) as u64;
    let tasks: Vec<_> = (0..clients)
        .map(|id| {
            let endpoints = endpoints.clone();
            tokio::spawn(async move { client(&endpoints, id, count, total).await })
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
    let (server, clients) = run(clients, count).await?;
    println!("server: {} updates sequenced, {} keys", server.sequence, server.map.len());
    for (id, c) in clients.iter().enumerate() {
        let same = if c.map == server.map { "equal to the server's" } else { "DIFFERENT" };
        println!("client {id}: at sequence {}, {} keys, {same}", c.sequence, c.map.len());
    }
    Ok(())
}
