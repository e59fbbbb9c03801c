//! Direct writes (issue 20's latency): a sender whose connection's writer is idle writes a small
//! message to the stream itself. Framing, order with queued messages and commands, partial writes
//! into a full socket buffer (the rest goes out before anything else), heartbeats between them,
//! and a reconnect that must not carry half a message into the new connection. (Against libzmq:
//! every request-reply test in `interop.rs` goes through this path.)

use std::time::Duration;

use tokio::time::timeout;
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::STEP;

/// Message `i`: its number, then one to three frames filled with a pattern that names `i`. The
/// first 1,000 are small enough to be written directly (sizes straddling the one-byte/eight-byte
/// length boundary); later ones mix in frames above the direct path's limit.
fn message(i: usize) -> Message {
    const SMALL: [usize; 5] = [1, 255, 256, 3_000, 5_000];
    const MIXED: [usize; 7] = [1, 255, 256, 3_000, 16 * 1024, 16 * 1024 + 1, 70_000];
    let sizes: &[usize] = if i < 1_000 { &SMALL } else { &MIXED };
    let frames = 1 + i % 3;
    let frame = |k: usize| {
        let len = sizes[(i + k) % sizes.len()];
        let mut bytes = (i as u32).to_be_bytes().repeat(len / 4 + 1);
        bytes.truncate(len);
        bytes
    };
    let number = (i as u32).to_be_bytes().to_vec();
    Message::from(std::iter::once(number).chain((0..frames).map(frame)).collect::<Vec<_>>())
}

fn number(msg: &Message) -> usize {
    u32::from_be_bytes(msg[0][..].try_into().expect("a 4-byte number")) as usize
}

/// A PUSH connected to a PULL that queues at most 2 messages.
async fn pair(kind: &str) -> (Socket, Socket) {
    let pull = Socket::new(SocketType::Pull);
    pull.set_rcvhwm(2);
    let endpoint = match kind {
        "tcp" => "tcp://127.0.0.1:*".to_owned(),
        _ => {
            let dir = std::env::temp_dir().join(format!("zmtp-direct-{}-{}", std::process::id(), rand_suffix()));
            format!("ipc://{}", dir.display())
        }
    };
    let endpoint = pull.bind(&endpoint).await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.connect(&endpoint).await.unwrap();
    (push, pull)
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    h.finish()
}

/// The sender yields after each message, so its connection's writer parks between them and the
/// next one is written directly; the receiver (a queue of 2) starts reading only once 800 are
/// sent (megabytes: the socket buffers fill, a direct write goes out in part, and the writer takes
/// over until the receiver drains them).
async fn sends_with_pauses_arrive_whole_and_in_order(kind: &str) {
    let (push, pull) = pair(kind).await;
    const N: usize = 3_000;
    let (sent_800, start) = tokio::sync::oneshot::channel();
    let sender = tokio::spawn(async move {
        let mut sent_800 = Some(sent_800);
        for i in 0..N {
            timeout(STEP, push.send(message(i))).await.expect("send in time").unwrap();
            if i == 800 {
                let _ = sent_800.take().unwrap().send(());
            }
            tokio::task::yield_now().await;
        }
        push
    });
    start.await.unwrap();
    for i in 0..N {
        let got = timeout(STEP, pull.recv()).await.expect("recv in time").unwrap();
        assert!(got == message(i), "message {i} over {kind}: {} frames", got.len());
    }
    timeout(STEP, sender).await.expect("all sent").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_sends_with_pauses_arrive_whole_and_in_order() {
    sends_with_pauses_arrive_whole_and_in_order("tcp").await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipc_sends_with_pauses_arrive_whole_and_in_order() {
    sends_with_pauses_arrive_whole_and_in_order("ipc").await;
}

#[tokio::test(flavor = "current_thread")]
async fn request_reply_with_heartbeats_keeps_every_round_trip() {
    // PINGs (written by the writer task) between direct writes of requests and replies.
    // PINGs often, but a slow machine (armv7 under qemu) is not taken for a dead peer: a timeout
    // would drop the connection and the REQ's request with it.
    let rep = Socket::new(SocketType::Rep);
    rep.set_heartbeat_ivl(Duration::from_millis(1));
    rep.set_heartbeat_timeout(Some(Duration::from_secs(30)));
    let endpoint = rep.bind("tcp://127.0.0.1:*").await.unwrap();
    let req = Socket::new(SocketType::Req);
    req.set_heartbeat_ivl(Duration::from_millis(1));
    req.set_heartbeat_timeout(Some(Duration::from_secs(30)));
    req.connect(&endpoint).await.unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..2_000 {
            let msg = rep.recv().await.unwrap();
            rep.send(msg).await.unwrap();
        }
        rep
    });
    for i in 0..2_000 {
        timeout(STEP, req.send(message(i))).await.expect("send in time").unwrap();
        let back = timeout(STEP, req.recv()).await.expect("reply in time").unwrap();
        assert!(back == message(i), "round trip {i}");
    }
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_after_a_partial_direct_write_starts_with_a_whole_message() {
    // The receiver stops reading, so a direct write goes out in part; the connection then breaks
    // (the receiver's socket closes) and the sender reconnects to a new one. Whatever was half
    // written belongs to the old connection: the new one must see whole messages only (a torn
    // frame would be a protocol error, or garbage, at the new receiver).
    let first = Socket::new(SocketType::Pull);
    first.set_rcvhwm(2);
    let endpoint = first.bind("tcp://127.0.0.1:*").await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.set_sndhwm(100_000);
    push.set_reconnect_ivl(Some(Duration::from_millis(10)));
    push.connect(&endpoint).await.unwrap();
    for i in 0..2_000 {
        timeout(STEP, push.send(message(i))).await.expect("send in time").unwrap();
        tokio::task::yield_now().await;
    }
    drop(first);
    let second = Socket::new(SocketType::Pull);
    // The first socket lets go of the port as it closes, in the background: bind again until it has.
    timeout(STEP, async {
        while second.bind(&endpoint).await.is_err() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the port is free again");
    for i in 2_000..2_100 {
        timeout(STEP, push.send(message(i))).await.expect("send in time").unwrap();
    }
    // Every message the new receiver gets is one of ours, whole, and they come in order.
    let mut last = None;
    loop {
        let got = timeout(STEP, second.recv()).await.expect("recv in time").unwrap();
        let i = number(&got);
        assert!(got == message(i), "a whole message ({i})");
        assert!(last.is_none_or(|l| i > l), "in order: {i} after {last:?}");
        last = Some(i);
        if i == 2_099 {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_between_partial_direct_writes_keep_every_message_whole() {
    // PINGs every millisecond on both sides while a slow receiver keeps the socket buffer nearly
    // full, so direct writes go out in part: a PING must never land inside the rest of one (the
    // receiver would see a broken frame and drop the connection, losing messages).
    let pull = Socket::new(SocketType::Pull);
    pull.set_rcvhwm(2);
    pull.set_heartbeat_ivl(Duration::from_millis(1));
    // PINGs often, but a receiver that stops reading for a while is not taken for dead.
    pull.set_heartbeat_timeout(Some(Duration::from_secs(30)));
    let endpoint = pull.bind("tcp://127.0.0.1:*").await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.set_heartbeat_ivl(Duration::from_millis(1));
    push.set_heartbeat_timeout(Some(Duration::from_secs(30)));
    push.connect(&endpoint).await.unwrap();
    const N: usize = 3_000;
    let sender = tokio::spawn(async move {
        for i in 0..N {
            let mut msg = Message::single((i as u32).to_be_bytes().to_vec());
            msg.push(vec![(i % 251) as u8; 4_000 + (i % 7) * 1_700]);
            timeout(STEP, push.send(msg)).await.expect("send in time").unwrap();
            tokio::task::yield_now().await;
        }
        push
    });
    for i in 0..N {
        let got = timeout(STEP, pull.recv()).await.expect("recv in time").unwrap();
        assert_eq!(number(&got), i, "in order, none lost");
        assert!(got[1].len() == 4_000 + (i % 7) * 1_700 && got[1].iter().all(|&b| b == (i % 251) as u8));
        if i % 100 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    timeout(STEP, sender).await.expect("all sent").unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_routing_id_alone_is_dropped_as_libzmq_drops_it() {
    // libzmq's router.cpp ignores a prefix with no message after it; so do we (and nothing
    // reaches the stream, directly or through the writer).
    let router = Socket::new(SocketType::Router);
    let endpoint = router.bind("tcp://127.0.0.1:*").await.unwrap();
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_routing_id(&b"d"[..]).unwrap();
    dealer.connect(&endpoint).await.unwrap();
    dealer.send("hello").await.unwrap();
    let hello = timeout(STEP, router.recv()).await.expect("hello").unwrap();
    assert_eq!(&hello[0][..], b"d");
    router.send(Message::single(&b"d"[..])).await.unwrap();
    router.send(Message::from(vec![&b"d"[..], &b"after"[..]])).await.unwrap();
    let got = timeout(STEP, dealer.recv()).await.expect("after").unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0][..], b"after");
}
