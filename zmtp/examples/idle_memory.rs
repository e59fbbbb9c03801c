//! Memory held per idle connection: a ROUTER and N DEALERs in one process over TCP loopback, the
//! process's resident set before and after they have all connected (both ends of each connection,
//! and one DEALER socket each, are counted). Linux only (reads /proc/self/status).
//!
//! Run: `cargo run --release --example idle_memory -- 2000`

use std::time::Duration;

use zmtp::{Socket, SocketType};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> zmtp::Result<()> {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let router = Socket::new(SocketType::Router);
    let endpoint = router.bind("tcp://127.0.0.1:*").await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = rss_kib();
    let mut dealers = Vec::with_capacity(n);
    for i in 0..n {
        let dealer = Socket::new(SocketType::Dealer);
        dealer.set_routing_id(format!("d{i}"))?;
        dealer.connect(&endpoint).await?;
        dealers.push(dealer);
    }
    while router.peer_routing_ids().len() < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib();
    println!(
        "idle connections: {n}; RSS {before} KiB -> {after} KiB; {:.1} KiB per connection (both ends)",
        (after - before) as f64 / n as f64
    );
    Ok(())
}
