//! Clone Model Two (the ZeroMQ Guide, chapter 5): the server also answers snapshot requests
//! (ICANHAZ? on a ROUTER, a KVSYNC per key, KTHXBAI with the sequence). The client subscribes
//! first, waits until an update arrives (proof that its subscription is live — zguide issue #818),
//! asks for the snapshot while updates queue up, then applies only the queued updates newer than
//! the snapshot.
//!
//! `cargo run --example clone2 [updates-after-snapshot]`

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use chp::KvMsg;
use chp::command::{IcanHaz, KthxBai, KvSync, SnapshotReply, Subtree, Update};
use tokio::sync::oneshot;
use zmtp::{Socket, SocketType};

/// Update number `sequence` (deterministic: a key in 0..100, the sequence as the value).
pub fn update(sequence: u64) -> KvMsg {
    let mut msg = KvMsg::new(format!("{}", sequence.wrapping_mul(7919) % 100), format!("{sequence}"));
    msg.sequence = sequence;
    msg
}

/// The map after updates 1..=sequence.
pub fn expected_map(sequence: u64) -> BTreeMap<Bytes, Bytes> {
    (1..=sequence).map(update).map(|m| (m.key, m.body)).collect()
}

/// The server: generates updates (ten per millisecond) into its map and the publisher, and answers
/// snapshot requests, until `stop` fires. Returns how many updates it generated.
pub async fn server(snapshot: Socket, publisher: Socket, mut stop: oneshot::Receiver<()>) -> u64 {
    let mut map: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    let mut sequence = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                for _ in 0..10 {
                    sequence += 1;
                    let kv = update(sequence);
                    let _ = publisher.send(kv.to_message()).await;
                    map.insert(kv.key, kv.body);
                }
            }
            request = snapshot.recv() => {
                let Ok(mut request) = request else { break };
                let identity = request.pop_front().unwrap_or_default();
                if IcanHaz::parse(request.frames()).is_err() {
                    eprintln!("server: bad request dropped");
                    continue;
                }
                for (key, value) in &map {
                    let mut reply = SnapshotReply::KvSync(KvSync { key: key.clone(), sequence, value: value.clone() }).to_message();
                    reply.push_front(identity.clone());
                    let _ = snapshot.send(reply).await;
                }
                let mut end = SnapshotReply::KthxBai(KthxBai { sequence, subtree: Bytes::new() }).to_message();
                end.push_front(identity);
                let _ = snapshot.send(end).await;
                println!("server: sent snapshot at sequence {sequence}");
            }
        }
    }
    sequence
}

/// What the client ended with.
pub struct Outcome {
    /// KTHXBAI's sequence.
    pub snapshot_sequence: u64,
    /// Sequence of the last update applied.
    pub sequence: u64,
    /// Queued updates discarded as already in the snapshot.
    pub discarded: usize,
    /// The client's map.
    pub map: BTreeMap<Bytes, Bytes>,
}

/// The client: synchronises, then applies `extra` more updates.
pub async fn client(snapshot_ep: &str, publisher_ep: &str, extra: u64) -> zmtp::Result<Outcome> {
    let subscriber = Socket::new(SocketType::Sub);
    subscriber.subscribe("")?;
    subscriber.connect(publisher_ep).await?;
    let snapshot = Socket::new(SocketType::Dealer);
    snapshot.connect(snapshot_ep).await?;

    // The first update proves the subscription live; it stays queued with the ones after it.
    let first = subscriber.recv().await?;
    snapshot.send(IcanHaz { subtree: Subtree::all() }.to_message()).await?;
    let mut map = BTreeMap::new();
    let snapshot_sequence = loop {
        match SnapshotReply::parse(snapshot.recv().await?.frames()) {
            Ok(SnapshotReply::KvSync(kv)) => {
                map.insert(kv.key, kv.value);
            }
            Ok(SnapshotReply::KthxBai(end)) => break end.sequence,
            Err(e) => eprintln!("client: bad snapshot message: {e}"),
        }
    };
    let mut sequence = snapshot_sequence;
    let mut discarded = 0;
    let mut next = Some(first);
    while sequence < snapshot_sequence + extra {
        let msg = match next.take() {
            Some(m) => m,
            None => subscriber.recv().await?,
        };
        let Ok(Update::KvPub(kv)) = Update::parse(msg.frames()) else { continue };
        if kv.sequence <= sequence {
            discarded += 1;
            continue;
        }
        sequence = kv.sequence;
        map.insert(kv.key, kv.body);
    }
    Ok(Outcome { snapshot_sequence, sequence, discarded, map })
}

/// Runs a server and a client on loopback.
pub async fn run(extra: u64) -> zmtp::Result<Outcome> {
    let snapshot = Socket::new(SocketType::Router);
    let snapshot_ep = snapshot.bind("tcp://127.0.0.1:*").await?;
    let publisher = Socket::new(SocketType::Pub);
    // No HWM drops (0MQ 2.x, which the Guide was written for, queued without limit).
    publisher.set_sndhwm(0);
    let publisher_ep = publisher.bind("tcp://127.0.0.1:*").await?;
    let (stop, stopped) = oneshot::channel();
    let server = tokio::spawn(server(snapshot, publisher, stopped));
    let outcome = client(&snapshot_ep, &publisher_ep, extra).await;
    let _ = stop.send(());
    let _ = server.await;
    outcome
}

#[tokio::main]
async fn main() -> zmtp::Result<()> {
    let extra = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let outcome = run(extra).await?;
    let ok = outcome.map == expected_map(outcome.sequence);
    println!(
        "client: snapshot at {}, {} queued updates discarded, now at {} with {} keys — {}",
        outcome.snapshot_sequence,
        outcome.discarded,
        outcome.sequence,
        outcome.map.len(),
        if ok { "equal to the server's map at that sequence" } else { "DIFFERENT from the server's map" }
    );
    Ok(())
}
