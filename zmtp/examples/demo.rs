//! The loopback demo: ROUTER/DEALER echo, PUB/SUB fan-out with prefix filters, and PUSH/PULL
//! throughput, all over TCP on 127.0.0.1 with embedded defaults.
//!
//! Run: `cargo run --release --example demo`

use std::time::{Duration, Instant};

use bytes::Bytes;
use zmtp::{Message, MonitorEvent, Socket, SocketType};

#[tokio::main]
async fn main() -> zmtp::Result<()> {
    println!("== ROUTER/DEALER echo over tcp ==");
    let router = Socket::new(SocketType::Router);
    let endpoint = router.bind("tcp://127.0.0.1:*").await?;
    println!("router bound at {endpoint}");
    let echo = router.clone();
    tokio::spawn(async move {
        while let Ok(msg) = echo.recv().await {
            let _ = echo.send(msg).await; // [routing id, body...] goes back to the sender
        }
    });
    let mut dealers = Vec::new();
    for name in ["alice", "bob", "carol"] {
        let dealer = Socket::new(SocketType::Dealer);
        dealer.set_routing_id(name)?;
        dealer.connect(&endpoint).await?;
        dealers.push((name, dealer));
    }
    for (name, dealer) in &dealers {
        dealer.send(Message::from(vec![format!("hello from {name}")])).await?;
        let reply = dealer.recv().await?;
        println!("{name:>6} got echo: {}", String::from_utf8_lossy(&reply[0]));
    }

    println!("\n== PUB/SUB fan-out with prefix filters ==");
    let publisher = Socket::new(SocketType::Pub);
    let endpoint = publisher.bind("tcp://127.0.0.1:*").await?;
    let mut events = publisher.monitor();
    let filters = ["weather.", "sports.", ""];
    let mut subscribers = Vec::new();
    for filter in filters {
        let sub = Socket::new(SocketType::Sub);
        sub.subscribe(filter)?;
        sub.subscribe("sync")?;
        sub.connect(&endpoint).await?;
        subscribers.push(sub);
    }
    let mut handshakes = 0;
    while handshakes < subscribers.len() {
        if let Some(MonitorEvent::HandshakeSucceeded { .. }) = events.next_event().await {
            handshakes += 1;
        }
    }
    // Subscriptions travel after the handshake: publish "sync" until every subscriber has one.
    for sub in &subscribers {
        loop {
            publisher.send("sync").await?;
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(20), sub.recv()).await {
                break;
            }
        }
    }
    let topics = ["weather.paris 12C", "sports.final 3-1", "news.markets up", "weather.oslo -4C"];
    for t in topics {
        publisher.send(t).await?;
    }
    publisher.send("sync.end").await?;
    for (sub, filter) in subscribers.iter().zip(filters) {
        let mut got = Vec::new();
        loop {
            let msg = sub.recv().await?;
            if msg[0] == "sync.end" {
                break;
            }
            if msg[0] == "sync" {
                continue; // leftovers of the warm-up
            }
            got.push(String::from_utf8_lossy(&msg[0]).into_owned());
        }
        println!("subscriber {:<10} received {got:?}", format!("{filter:?}"));
    }

    println!("\n== PUSH/PULL throughput over tcp loopback ==");
    let pull = Socket::new(SocketType::Pull);
    let endpoint = pull.bind("tcp://127.0.0.1:*").await?;
    let push = Socket::new(SocketType::Push);
    push.connect(&endpoint).await?;
    const COUNT: usize = 1_000_000;
    let payload = Bytes::from(vec![0u8; 64]);
    let sender = tokio::spawn(async move {
        let result: zmtp::Result<()> = async {
            for _ in 0..COUNT {
                push.send(Message::single(payload.clone())).await?;
            }
            push.close().await;
            Ok(())
        }
        .await;
        result
    });
    let first = pull.recv().await?;
    let start = Instant::now();
    let mut bytes = first.byte_len();
    for _ in 1..COUNT {
        bytes += pull.recv().await?.byte_len();
    }
    let elapsed = start.elapsed();
    sender.await.expect("sender task")?;
    println!(
        "{COUNT} messages of 64 B ({} MB) in {:.2?}: {:.0} msg/s",
        bytes / 1_000_000,
        elapsed,
        COUNT as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
