//! Hostile input to the server (patterns.md §D behaviour 12 over the wire, and the abuse
//! cases): malformed kvmsgs on the collector, garbage snapshot requests, a client requesting
//! snapshots in a loop, 10k keys from 50 concurrent clients. The server must keep serving everyone
//! and its state must equal the expected map.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use chp::command::SnapshotReply;
use chp::kvmsg::MAX_KEY_LEN;
use chp::{Client, KvMsg, Snapshot};
use common::*;
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::{bounded, eventually, step};

fn frames(parts: Vec<Bytes>) -> Message {
    Message::from(parts)
}

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_kvsets_are_dropped_and_counted_and_take_no_sequence() {
    bounded(async {
        let server = server_with(|c| c.max_value_len = 64).await;
        let addr = server.address().clone();
        let mut raw = Raw::connect(&addr, "").await;
        let publisher = raw_publisher(&addr, &mut raw).await;
        let base = server.sequence();
        let rejected = server.stats().rejected;
        let seq = Bytes::from_static(&[0; 8]);
        let uuid = Bytes::from_static(&[9; 16]);
        let e = Bytes::new;
        let garbage = vec![
            frames(vec![b("/k"), seq.clone(), e(), e()]),                     // 4 frames
            frames(vec![b("/k"), seq.clone(), e(), e(), b("v"), b("extra")]), // 6 frames
            frames(vec![b("/k")]),                                            // 1 frame
            frames(vec![b("/k"), Bytes::from_static(&[0; 7]), e(), e(), b("v")]), // short sequence
            frames(vec![b("/k"), seq.clone(), Bytes::from_static(&[1; 5]), e(), b("v")]), // bad UUID
            frames(vec![b("/k"), seq.clone(), uuid.clone(), b("noequals\n"), b("v")]),
            frames(vec![b("/k"), seq.clone(), uuid.clone(), b("=x\n"), b("v")]),
            frames(vec![b("/k"), seq.clone(), uuid.clone(), Bytes::from_static(b"a=\xff"), b("v")]),
            frames(vec![e(), seq.clone(), e(), e(), b("v")]), // empty key
            frames(vec![Bytes::from(vec![b'k'; MAX_KEY_LEN + 1]), seq.clone(), e(), e(), b("v")]), // long key
            frames(vec![b("HUGZ"), seq.clone(), e(), e(), b("v")]),
            frames(vec![b("KTHXBAI"), seq.clone(), e(), e(), b("v")]),
            frames(vec![b("/k"), seq.clone(), e(), b("ttl=soon\n"), b("v")]),
            frames(vec![b("/k"), seq.clone(), e(), b("ttl=-1\n"), b("v")]),
            frames(vec![b("/k"), seq.clone(), e(), e(), Bytes::from(vec![b'v'; 65])]), // value too large
        ];
        let n = garbage.len() as u64;
        for m in garbage {
            publisher.send(m).await.unwrap();
        }
        let mut after = KvMsg::new("/after", "ok");
        after.uuid = Some(chp::Uuid::new_v4());
        publisher.send(after.to_message()).await.unwrap();
        let echo = raw.next_kvpub().await;
        assert_eq!((echo.key.as_ref(), echo.sequence, echo.uuid), (&b"/after"[..], base + 1, after.uuid));
        assert_eq!(server.stats().rejected - rejected, n);
        assert_eq!(server.map(), (base + 1, map(&[("/after", "ok"), ("/probe", "1")])));

        // A frame over the collector's MAXMSGSIZE drops that connection; everyone else is served.
        let big = Socket::new(SocketType::Pub);
        big.connect(&addr.collector()).await.unwrap();
        let mut events = big.monitor();
        step("oversized frame drops the connection", async {
            loop {
                let _ = big.send(frames(vec![b("/big"), seq.clone(), e(), e(), Bytes::from(vec![0; 1 << 16])])).await;
                if let Ok(Some(zmtp::MonitorEvent::Disconnected { .. })) =
                    tokio::time::timeout(Duration::from_millis(50), events.next_event()).await
                {
                    return;
                }
            }
        })
        .await;
        let c = client(&addr, "").await;
        assert_eq!(c.set("/still", "served", None).await, Ok(Some(base + 2)));
        assert_eq!(server.get(b"/big"), None);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_snapshot_requests_get_no_answer() {
    bounded(async {
        let server = server().await;
        let addr = server.address().clone();
        let writer = client(&addr, "").await;
        writer.set("/a/1", "1", None).await.unwrap();
        writer.set("/b/1", "2", None).await.unwrap();
        let rejected = server.stats().rejected;
        let dealer = Socket::new(SocketType::Dealer);
        dealer.connect(&addr.snapshot()).await.unwrap();
        let garbage = vec![
            frames(vec![b("GIMME"), b("/a/")]),
            frames(vec![b("ICANHAZ?"), Bytes::from(vec![b'/'; chp::kvmsg::MAX_KEY_LEN + 1])]),
            frames(vec![b("ICANHAZ?"), b(""), b("extra")]),
            frames(vec![b("")]),
            frames(vec![Bytes::from(vec![0xff; 300])]),
        ];
        let n = garbage.len() as u64;
        for m in garbage {
            dealer.send(m).await.unwrap();
        }
        dealer.send(frames(vec![b("ICANHAZ?"), b("/a/")])).await.unwrap();
        // The first answer is to the valid request: the garbage got none.
        let first = SnapshotReply::parse(step("reply", dealer.recv()).await.unwrap().frames()).unwrap();
        assert!(matches!(first, SnapshotReply::KvSync(ref kv) if kv.key == "/a/1" && kv.value == "1"), "{first:?}");
        let end = SnapshotReply::parse(step("reply", dealer.recv()).await.unwrap().frames()).unwrap();
        assert!(matches!(end, SnapshotReply::KthxBai(ref k) if k.sequence == 2 && k.subtree == "/a/"), "{end:?}");
        assert_eq!(server.stats().rejected - rejected, n);
        assert!(tokio::time::timeout(Duration::from_millis(100), dealer.recv()).await.is_err(), "nothing more");
        // Still serving.
        let c = client(&addr, "").await;
        assert_eq!(c.snapshot(), Snapshot { sequence: 2, map: map(&[("/a/1", "1"), ("/b/1", "2")]) });
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_requesting_snapshots_in_a_loop_does_not_stop_the_others() {
    bounded(async {
        let server = server_with(|c| c.snapshot_stall_timeout = Duration::from_millis(300)).await;
        let addr = server.address().clone();
        let mut raw = Raw::connect(&addr, "").await;
        let publisher = raw_publisher(&addr, &mut raw).await;
        let keys = 3000;
        for i in 0..keys {
            publisher.send(KvMsg::new(format!("/k/{i:05}"), format!("value {i}")).to_message()).await.unwrap();
        }
        eventually("preloaded", || server.len() == keys + 1).await;

        // The hostile peer asks for the whole map every 2 ms and never reads.
        let hostile = Socket::new(SocketType::Dealer);
        hostile.connect(&addr.snapshot()).await.unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let asking = tokio::spawn({
            let (hostile, requests) = (hostile.clone(), requests.clone());
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(2));
                loop {
                    tick.tick().await;
                    hostile.send(frames(vec![b("ICANHAZ?"), b("")])).await.unwrap();
                    requests.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        // Meanwhile other clients sync, write and read as usual.
        let a = client(&addr, "").await;
        assert_eq!(a.len(), keys + 1);
        let seq = a.set("/k/new", "x", None).await.unwrap().unwrap();
        let b2 = client(&addr, "/k/").await;
        assert_eq!(b2.get("/k/new").as_deref(), Some(&b"x"[..]));
        assert_eq!(b2.sequence(), seq);
        assert_eq!(a.snapshot().map, server.map().1);
        // Once its queues (socket and TCP buffers) are full, its stalled stream is abandoned; its
        // requests were coalesced meanwhile (one streaming, one waiting), so the server streamed
        // far fewer snapshots than it asked for.
        eventually("hostile snapshot abandoned", || server.stats().snapshots_aborted >= 1).await;
        let stats = server.stats();
        let asked = requests.load(Ordering::Relaxed);
        eprintln!("{stats:?} for {asked} requests");
        assert!(
            (stats.snapshots + stats.snapshots_aborted) * 4 < asked,
            "served the loop: {stats:?} for {asked} requests"
        );
        let c = client(&addr, "/k/").await;
        assert_eq!(c.len(), keys + 1);
        asking.abort();
        drop(hostile);
        let c = client(&addr, "/k/").await;
        assert_eq!(c.len(), keys + 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_keys_from_fifty_concurrent_clients() {
    bounded(async {
        let server = server().await;
        let addr = server.address().clone();
        let observer = client(&addr, "").await;
        let (clients, per_client) = (50, 200);
        let mut tasks = Vec::new();
        for i in 0..clients {
            let addr = addr.clone();
            tasks.push(tokio::spawn(async move {
                let c = client(&addr, &format!("/c{i}/")).await;
                for j in 0..per_client {
                    c.set(format!("/c{i}/k{j}"), format!("{i}-{j}"), None).await.expect("set confirmed");
                }
                let snap = c.snapshot();
                c.close().await;
                snap
            }));
        }
        let mut expected = BTreeMap::new();
        for (i, t) in tasks.into_iter().enumerate() {
            let snap = t.await.unwrap();
            let mine: BTreeMap<Bytes, Bytes> = (0..per_client)
                .map(|j| (Bytes::from(format!("/c{i}/k{j}")), Bytes::from(format!("{i}-{j}"))))
                .collect();
            assert_eq!(snap.map, mine, "client {i}'s replica");
            expected.extend(mine);
        }
        assert_eq!(expected.len(), clients * per_client);
        let (sequence, server_map) = server.map();
        assert_eq!(server_map, expected);
        assert!(sequence >= (clients * per_client) as u64);
        eventually("observer caught up", || observer.sequence() == sequence).await;
        assert_eq!(observer.snapshot().map, expected);
        let late = Client::start(options(&addr, "")).unwrap();
        let late = synced(late).await;
        assert_eq!(late.snapshot(), Snapshot { sequence, map: expected });
    })
    .await;
}
