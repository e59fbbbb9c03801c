//! Clone Model One (the ZeroMQ Guide, chapter 5): a server publishes key-value updates on PUB, a
//! client stores what it receives on SUB. No snapshot: a late client misses everything published
//! before it joined, and its map is only the updates it saw.
//!
//! `cargo run --example clone1 [updates]`

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use chp::KvMsg;
use tokio::sync::oneshot;
use zmtp::{Socket, SocketType};

/// Update number `sequence`: a pseudo-random key in 0..10000 and the sequence as the value, so the
/// expected map for any range of sequences can be recomputed.
pub fn update(sequence: u64) -> KvMsg {
    let mut msg = KvMsg::new(format!("{}", sequence.wrapping_mul(7919) % 10_000), format!("{sequence}"));
    msg.sequence = sequence;
    msg
}

/// What the client ended with.
pub struct Outcome {
    /// First sequence received.
    pub first: u64,
    /// Last sequence received.
    pub last: u64,
    /// The client's map.
    pub map: BTreeMap<Bytes, Bytes>,
}

/// The server: publishes updates 1, 2, 3, … (ten per millisecond) until `stop` fires.
pub async fn server(publisher: Socket, mut stop: oneshot::Receiver<()>) {
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut sequence = 0;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                for _ in 0..10 {
                    sequence += 1;
                    let _ = publisher.send(update(sequence).to_message()).await;
                }
            }
        }
    }
    println!("server: {sequence} updates out");
}

/// The client: stores `count` updates, whatever they are.
pub async fn client(endpoint: &str, count: usize) -> zmtp::Result<Outcome> {
    let subscriber = Socket::new(SocketType::Sub);
    subscriber.subscribe("")?;
    subscriber.connect(endpoint).await?;
    let mut map = BTreeMap::new();
    let (mut first, mut last) = (0, 0);
    for n in 0..count {
        let msg = subscriber.recv().await?;
        let Ok(kv) = KvMsg::parse(msg.frames()) else { continue };
        if n == 0 {
            first = kv.sequence;
        }
        last = kv.sequence;
        map.insert(kv.key, kv.body);
    }
    Ok(Outcome { first, last, map })
}

/// Runs a server and a client on loopback until the client has `count` updates.
pub async fn run(count: usize) -> zmtp::Result<Outcome> {
    let publisher = Socket::new(SocketType::Pub);
    // No HWM drops (0MQ 2.x, which the Guide was written for, queued without limit).
    publisher.set_sndhwm(0);
    let endpoint = publisher.bind("tcp://127.0.0.1:*").await?;
    let (stop, stopped) = oneshot::channel();
    let server = tokio::spawn(server(publisher, stopped));
    let outcome = client(&endpoint, count).await;
    let _ = stop.send(());
    let _ = server.await;
    outcome
}

#[tokio::main]
async fn main() -> zmtp::Result<()> {
    let count = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let outcome = run(count).await?;
    println!(
        "client: {count} updates in, sequences {}..={} (missed the {} before it joined), {} keys",
        outcome.first,
        outcome.last,
        outcome.first - 1,
        outcome.map.len()
    );
    Ok(())
}
