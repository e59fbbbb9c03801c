//! Memory bounded in bytes (issue 14): clients that stop reading cannot make the server hold
//! gigabytes. Measured by counts (what a stalled subscriber still receives) and by the process's
//! resident memory (the server runs in this process), never by a clock.

mod common;

use std::time::Duration;

use bytes::Bytes;
use chp::KvMsg;
use chp::command::IcanHaz;
use common::*;
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::{bounded, eventually, step};

/// Resident memory of this process, in bytes (Linux).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

const MB: usize = 1 << 20;

/// 30 clients ask for a snapshot of a 16 MB map and never read. Before, each request queued a
/// copy of the whole map for its client until the client disconnected (30 x 16 MB); now a snapshot
/// streams no faster than its client reads, each stalled client holds at most its byte budget, and
/// once the stall timeout gives up on it the client is dropped and its queue freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_snapshot_readers_hold_at_most_their_byte_budget() {
    bounded(async {
        let server = server_with(|c| {
            c.max_value_len = 8 * 1024;
            c.snapshot_peer_bytes = 256 * 1024;
            c.snapshot_stall_timeout = Duration::from_millis(500);
        })
        .await;
        let addr = server.address().clone();
        let mut raw = Raw::connect(&addr, "").await;
        let publisher = raw_publisher(&addr, &mut raw).await;
        let value = Bytes::from(vec![b'v'; 4000]);
        for i in 0..4000 {
            let mut kv = KvMsg::new(format!("/big/{i:05}"), value.clone());
            kv.uuid = Some(chp::Uuid::new_v4());
            publisher.send(kv.to_message()).await.unwrap();
        }
        eventually("map loaded", || server.len() == 4001).await;
        let before = rss();
        let mut stalled = Vec::new();
        for _ in 0..30 {
            let dealer = Socket::new(SocketType::Dealer);
            dealer.set_rcvhwm(1);
            dealer.set_reconnect_ivl(None);
            dealer.connect(&addr.snapshot()).await.unwrap();
            dealer.send(IcanHaz { subtree: chp::command::Subtree::all() }.to_message()).await.unwrap();
            stalled.push(dealer);
        }
        let mut peak = before;
        step("every stalled snapshot abandoned", async {
            while server.stats().snapshots_aborted < 30 {
                peak = peak.max(rss());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        let grown = peak.saturating_sub(before);
        eprintln!(
            "RSS before {} MB, peak {} MB (+{} MB) with 30 stalled snapshot readers of a 16 MB map",
            before / MB,
            peak / MB,
            grown / MB
        );
        assert!(grown < 240 * MB, "30 stalled snapshot readers grew the process by {} MB", grown / MB);
        // Everyone else is served as before.
        let c = client(&addr, "/big/").await;
        assert_eq!(c.snapshot().map.len(), 4000);
        drop(stalled);
    })
    .await;
}

/// A subscriber that never reads, under 200 updates of 256 KiB: the publisher holds at most its
/// byte budget for it and drops the rest (the subscriber sees the gap and re-syncs); before, it
/// queued all 50 MB (up to 100,000 messages).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_is_held_to_its_byte_budget() {
    bounded(async {
        let server = server_with(|c| {
            c.max_value_len = 300 * 1024;
            c.subscriber_bytes = MB;
        })
        .await;
        let addr = server.address().clone();
        let mut raw = Raw::connect(&addr, "").await;
        let publisher = raw_publisher(&addr, &mut raw).await;
        let snail = Socket::new(SocketType::Sub);
        snail.set_rcvhwm(1);
        snail.subscribe("/snail").unwrap();
        snail.connect(&addr.publisher()).await.unwrap();
        // Live: an update reaches it.
        step("subscriber live", async {
            loop {
                let mut kv = KvMsg::new("/snail/probe", "1");
                kv.uuid = Some(chp::Uuid::new_v4());
                publisher.send(kv.to_message()).await.unwrap();
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(100), snail.recv()).await {
                    return;
                }
            }
        })
        .await;
        while tokio::time::timeout(Duration::from_millis(200), snail.recv()).await.is_ok() {}
        let base = server.sequence();
        let value = Bytes::from(vec![b'x'; 256 * 1024]);
        for _ in 0..200 {
            let mut kv = KvMsg::new("/snail/big", value.clone());
            kv.uuid = Some(chp::Uuid::new_v4());
            publisher.send(kv.to_message()).await.unwrap();
        }
        eventually("all 200 applied", || server.sequence() == base + 200).await;
        // The raw observer, which reads, got them all: only the snail was held back.
        let mut received = 0;
        while let Ok(Ok(msg)) = tokio::time::timeout(Duration::from_millis(300), snail.recv()).await {
            let msg: Message = msg;
            if msg.len() == 5 && msg[4].len() == value.len() {
                received += 1;
            }
        }
        eprintln!("a subscriber that stopped reading got {received} of 200 updates of 256 KiB");
        assert!(received < 100, "{received} of 200 updates of 256 KiB were held for a subscriber that read nothing");
        drop(raw);
    })
    .await;
}
