//! Clone Model Four (the ZeroMQ Guide, chapter 5): subtrees. A client asks for the snapshot of one
//! subtree (`ICANHAZ?` + `/group/`) and subscribes to that prefix only — the Guide's code also
//! subscribed to everything, which made the filter useless (reference bug 14); here it does not.
//! Otherwise as Model Three; clients prove their subscription with their own first update.
//!
//! `cargo run --example clone4 [clients-per-group] [updates-per-client]`

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
                let Ok(IcanHaz { subtree }) = IcanHaz::parse(request.frames()) else { continue };
                for (key, value) in map.iter().filter(|(k, _)| subtree.contains(k)) {
                    let kv = KvSync { key: key.clone(), sequence, value: value.clone() };
                    let _ = snapshot.send(routed(&identity, SnapshotReply::KvSync(kv).to_message())).await;
                }
                let end = SnapshotReply::KthxBai(KthxBai { sequence, subtree: subtree.to_bytes() });
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

/// The subtree of group `group`.
pub fn subtree(group: usize) -> Subtree {
    format!("/g{group}/").parse().expect("valid subtree")
}

/// Client `id`'s updates, in its group's subtree: keys `/g{group}/c{id}-{j}`.
pub fn updates(group: usize, id: usize, count: usize) -> Vec<KvMsg> {
    (0..count).map(|j| KvMsg::new(format!("/g{group}/c{id}-{j}"), format!("{id}-{j}"))).collect()
}

/// A client of group `group`: pushes its `count` updates (one per millisecond) and applies those
/// of its subtree until it holds all `keys` keys of its group.
pub async fn client(
    endpoints: &Endpoints,
    group: usize,
    id: usize,
    count: usize,
    keys: usize,
) -> zmtp::Result<ClientOutcome> {
    let subtree = subtree(group);
    let subscriber = Socket::new(SocketType::Sub);
    subscriber.subscribe(subtree.as_bytes())?;
    subscriber.connect(&endpoints.publisher).await?;
    let snapshot = Socket::new(SocketType::Dealer);
    snapshot.connect(&endpoints.snapshot).await?;
    let push = Socket::new(SocketType::Push);
    push.connect(&endpoints.collector).await?;
    let mut to_send = updates(group, id, count).into_iter();

    let first = loop {
        if let Some(kv) = to_send.next() {
            push.send(kv.to_message()).await?;
        }
        if let Ok(msg) = tokio::time::timeout(Duration::from_millis(100), subscriber.recv()).await {
            break msg?;
        }
    };
    snapshot.send(IcanHaz { subtree }.to_message()).await?;
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
    while map.len() < keys || sending {
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

/// Runs a server and two groups of `per_group` clients, `count` updates each.
pub async fn run(per_group: usize, count: usize) -> zmtp::Result<(ServerOutcome, Vec<(usize, ClientOutcome)>)> {
    let (snapshot, publisher, collector, endpoints) = bind().await?;
    let (stop, stopped) = oneshot::channel();
    let server = tokio::spawn(server(snapshot, publisher, collector, stopped));
    let tasks: Vec<_> = (0..2 * per_group)
        .map(|id| {
            let endpoints = endpoints.clone();
            let group = id % 2;
            tokio::spawn(async move { (group, client(&endpoints, group, id, count, per_group * count).await) })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        let (group, outcome) = t.await.expect("client task");
        outcomes.push((group, outcome?));
    }
    let _ = stop.send(());
    Ok((server.await.expect("server task"), outcomes))
}

/// `map` restricted to `subtree`.
pub fn within(map: &BTreeMap<Bytes, Bytes>, subtree: &Subtree) -> BTreeMap<Bytes, Bytes> {
    map.iter().filter(|(k, _)| subtree.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[tokio::main]
async fn main() -> zmtp::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse().ok());
    let per_group = args.next().flatten().unwrap_or(2);
    let count = args.next().flatten().unwrap_or(100);
    let (server, clients) = run(per_group, count).await?;
    println!("server: {} updates sequenced, {} keys", server.sequence, server.map.len());
    for (id, (group, c)) in clients.iter().enumerate() {
        let same = if c.map == within(&server.map, &subtree(*group)) { "equal to" } else { "DIFFERENT from" };
        println!("client {id} ({}): {} keys, {same} the server's subtree", subtree(*group), c.map.len());
    }
    Ok(())
}
