//! The batch API (issue 20): `send_many`, `recv_many`, the coalescing `sink()` and a ROUTER's
//! `send_encoded`. Order, the HWM's back-pressure, what a dropped future leaves behind, errors in
//! the middle of a batch, and that a loop of batches still gives the runtime back (`fairness.rs`).
//! (Against libzmq: `interop.rs`, `send_many_to_libzmq_pull`, `libzmq_push_to_recv_many` and
//! `send_encoded_to_libzmq_dealer`.)

use std::time::Duration;

use futures::SinkExt;
use tokio::time::timeout;
use zmtp::{Error, Message, Socket, SocketType};
use zmtp_testkit::STEP;

fn numbered(range: std::ops::Range<usize>) -> Vec<Message> {
    range.map(|i| Message::from(format!("{i}"))).collect()
}

fn number(m: &Message) -> usize {
    std::str::from_utf8(&m[0]).unwrap().parse().unwrap()
}

async fn pair(sndhwm: usize, rcvhwm: usize) -> (Socket, Socket) {
    let pull = Socket::new(SocketType::Pull);
    pull.set_rcvhwm(rcvhwm);
    let endpoint = pull.bind("tcp://127.0.0.1:*").await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.set_sndhwm(sndhwm);
    push.connect(&endpoint).await.unwrap();
    (push, pull)
}

/// Receives until `n` messages, with recv_many of at most `max`; checks each call's count.
async fn recv_n(pull: &Socket, n: usize, max: usize) -> Vec<Message> {
    let mut got = Vec::new();
    while got.len() < n {
        let before = got.len();
        let taken = timeout(STEP, pull.recv_many(&mut got, max)).await.expect("recv_many in time").unwrap();
        assert!((1..=max).contains(&taken) && got.len() == before + taken, "took {taken} (max {max})");
    }
    got
}

#[tokio::test(flavor = "current_thread")]
async fn batches_arrive_whole_and_in_order_through_small_hwms() {
    // 5,000 messages through queues of 10 on each side: send_many waits for room many times.
    let (push, pull) = pair(10, 10).await;
    let sender = tokio::spawn(async move {
        let mut batch = numbered(0..5_000);
        push.send_many(&mut batch).await.unwrap();
        assert!(batch.is_empty());
        assert!(batch.capacity() >= 5_000, "the batch's Vec keeps its capacity");
        push
    });
    let got = recv_n(&pull, 5_000, 64).await;
    assert!(got.iter().map(number).eq(0..5_000));
    sender.await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_send_many_leaves_exactly_the_unsent_messages() {
    // No peer at all: nothing can be sent, and a dropped future must leave the batch as it was.
    let lonely = Socket::new(SocketType::Push);
    let mut batch = numbered(0..10);
    assert!(timeout(Duration::from_millis(50), lonely.send_many(&mut batch)).await.is_err());
    assert!(batch.iter().map(number).eq(0..10));

    // A peer whose queues take little (SNDHWM 5, RCVHWM 100, kernel buffers of 16 KiB each way)
    // and which does not read: 3,000 messages of 1 KiB are more than all of them hold, so some go
    // and the rest stay in the batch, in order. (Small kernel buffers keep the count, and the
    // time under emulation, small: loopback's autotuned buffers hold megabytes.)
    const N: usize = 3_000;
    let pull = Socket::new(SocketType::Pull);
    pull.set_rcvhwm(100);
    pull.set_rcvbuf(Some(16 * 1024));
    let endpoint = pull.bind("tcp://127.0.0.1:*").await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.set_sndhwm(5);
    push.set_sndbuf(Some(16 * 1024));
    push.connect(&endpoint).await.unwrap();
    let padding = bytes::Bytes::from(vec![0u8; 1024]);
    let mut batch: Vec<Message> =
        (0..N).map(|i| Message::from(vec![bytes::Bytes::from(format!("{i}")), padding.clone()])).collect();
    // Any time that lets it fill the queues: then it waits for room that never comes.
    assert!(timeout(Duration::from_millis(300), push.send_many(&mut batch)).await.is_err());
    let sent = N - batch.len();
    assert!(sent > 0 && sent < N, "sent {sent}");
    assert!(batch.iter().map(number).eq(sent..N), "the rest, in order");
    // Sending the rest now delivers every message exactly once, in order.
    let rest = tokio::spawn(async move {
        push.send_many(&mut batch).await.unwrap();
        push
    });
    let got = recv_n(&pull, N, 1_000).await;
    assert!(got.iter().map(number).eq(0..N));
    rest.await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn an_error_in_a_batch_stops_it_there() {
    let (push, pull) = pair(1000, 1000).await;
    let mut batch = vec![Message::from("0"), Message::from("1"), Message::new(), Message::from("3")];
    assert!(matches!(push.send_many(&mut batch).await, Err(Error::EmptyMessage)));
    // The two before it were sent; the empty one is gone; the one after it stays.
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0][0], "3");
    push.send_many(&mut batch).await.unwrap();
    assert!(recv_n(&pull, 3, 10).await.iter().map(number).eq([0, 1, 3]));
    // A socket that cannot send refuses the first message.
    let mut batch = numbered(0..3);
    assert!(matches!(pull.send_many(&mut batch).await, Err(Error::NotSupported(_))));
    assert_eq!(batch.len(), 2);
    // A closed socket's error is not a message's: the batch keeps every message.
    push.clone().close().await;
    assert!(matches!(push.send_many(&mut batch).await, Err(Error::Closed)));
    assert_eq!(batch.len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn recv_many_takes_what_is_queued_up_to_max() {
    let (push, pull) = pair(1000, 1000).await;
    let mut batch = numbered(0..10);
    push.send_many(&mut batch).await.unwrap();
    // Once all ten are queued, a max of 4 takes 4, and `out` is appended to, not cleared.
    let mut got = vec![Message::from("before")];
    let mut seen = 0;
    while seen < 10 {
        seen += timeout(STEP, pull.recv_many(&mut got, 4)).await.unwrap().unwrap();
    }
    assert_eq!(got[0][0], "before");
    assert!(got[1..].iter().map(number).eq(0..10));
    assert_eq!(pull.recv_many(&mut got, 0).await.unwrap(), 0, "max 0 returns at once");
    // Cancel safety: a recv_many dropped while it waits takes nothing.
    assert!(timeout(Duration::from_millis(20), pull.recv_many(&mut got, 4)).await.is_err());
    push.send("after").await.unwrap();
    let mut last = Vec::new();
    timeout(STEP, pull.recv_many(&mut last, 4)).await.unwrap().unwrap();
    assert_eq!(last[0][0], "after");
    // A socket that cannot receive says so.
    assert!(matches!(push.recv_many(&mut last, 4).await, Err(Error::NotSupported(_))));
}

/// A PULL's `recv` takes a few messages ahead of the application: `recv` and `recv_many` in
/// turns still see every message once, in order, and a socket closed with messages taken ahead
/// drops them with it.
#[tokio::test(flavor = "current_thread")]
async fn recv_and_recv_many_in_turns_keep_the_order() {
    let (push, pull) = pair(1000, 1000).await;
    let mut batch = numbered(0..100);
    push.send_many(&mut batch).await.unwrap();
    let mut got = Vec::new();
    while got.len() < 100 {
        got.push(timeout(STEP, pull.recv()).await.unwrap().unwrap());
        if got.len() < 100 {
            timeout(STEP, pull.recv_many(&mut got, 3)).await.unwrap().unwrap();
        }
    }
    assert!(got.iter().map(number).eq(0..100));
    push.send_many(&mut numbered(0..5)).await.unwrap();
    assert_eq!(number(&timeout(STEP, pull.recv()).await.unwrap().unwrap()), 0);
    pull.clone().close().await;
    assert!(matches!(pull.recv().await, Err(Error::Closed)), "what was taken ahead went with the socket");
}

/// A SUB's receive takes messages ahead as a PULL's does: `recv` and `recv_many` in turns still
/// give them in order.
#[tokio::test(flavor = "current_thread")]
async fn a_sub_keeps_the_order_through_recv_and_recv_many_in_turns() {
    let publisher = Socket::new(SocketType::Pub);
    let endpoint = publisher.bind("tcp://127.0.0.1:*").await.unwrap();
    let sub = Socket::new(SocketType::Sub);
    sub.subscribe("").unwrap();
    sub.connect(&endpoint).await.unwrap();
    // Published until one arrives: the subscription has reached the publisher.
    let synced = timeout(STEP, async {
        loop {
            publisher.send("sync").await.unwrap();
            if timeout(Duration::from_millis(20), sub.recv()).await.is_ok() {
                return;
            }
        }
    });
    synced.await.expect("the subscription reached the publisher");
    publisher.send_many(&mut numbered(0..100)).await.unwrap();
    let mut got = Vec::new();
    // Syncs published before the first one arrived come first: dropped as they come.
    let not_sync = |m: &Message| m[0] != "sync";
    while got.len() < 100 {
        got.push(timeout(STEP, sub.recv()).await.unwrap().unwrap());
        got.retain(not_sync);
        if got.len() < 100 {
            timeout(STEP, sub.recv_many(&mut got, 3)).await.unwrap().unwrap();
            got.retain(not_sync);
        }
    }
    assert!(got.iter().map(number).eq(0..100));
}

#[tokio::test(flavor = "current_thread")]
async fn req_and_rep_take_one_message_per_recv_many() {
    let rep = Socket::new(SocketType::Rep);
    let endpoint = rep.bind("tcp://127.0.0.1:*").await.unwrap();
    let req = Socket::new(SocketType::Req);
    req.connect(&endpoint).await.unwrap();
    req.send("question").await.unwrap();
    let mut got = Vec::new();
    assert_eq!(timeout(STEP, rep.recv_many(&mut got, 10)).await.unwrap().unwrap(), 1);
    // REP now owes a reply: another receive is refused, as `recv` refuses it.
    assert!(rep.recv_many(&mut got, 10).await.is_err());
    rep.send("answer").await.unwrap();
    let mut answer = Vec::new();
    assert_eq!(timeout(STEP, req.recv_many(&mut answer, 10)).await.unwrap().unwrap(), 1);
    assert_eq!(answer[0][0], "answer");
}

#[tokio::test(flavor = "current_thread")]
async fn recv_many_fair_queues_message_by_message() {
    // Two pushers, each with a backlog: a batch interleaves them as recv would.
    let pull = Socket::new(SocketType::Pull);
    let endpoint = pull.bind("tcp://127.0.0.1:*").await.unwrap();
    let (a, b) = (Socket::new(SocketType::Push), Socket::new(SocketType::Push));
    a.connect(&endpoint).await.unwrap();
    b.connect(&endpoint).await.unwrap();
    let mut from_a: Vec<Message> = (0..50).map(|i| Message::from(format!("a{i}"))).collect();
    let mut from_b: Vec<Message> = (0..50).map(|i| Message::from(format!("b{i}"))).collect();
    a.send_many(&mut from_a).await.unwrap();
    b.send_many(&mut from_b).await.unwrap();
    let mut got = Vec::new();
    while got.len() < 100 {
        timeout(STEP, pull.recv_many(&mut got, 100)).await.unwrap().unwrap();
    }
    // Each peer's messages in its own order...
    for peer in ["a", "b"] {
        let mine: Vec<String> =
            got.iter().map(|m| String::from_utf8(m[0].to_vec()).unwrap()).filter(|s| s.starts_with(peer)).collect();
        assert_eq!(mine, (0..50).map(|i| format!("{peer}{i}")).collect::<Vec<_>>());
    }
    // ...and while both had messages queued, never two from one in a row past the first switch:
    // the batch alternates as single receives would.
    let letters: Vec<u8> = got.iter().map(|m| m[0][0]).collect();
    let alternations = letters.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(alternations > 1, "batches should interleave the two peers: {:?}", String::from_utf8_lossy(&letters));
}

#[tokio::test(flavor = "current_thread")]
async fn the_sink_holds_fed_messages_until_flush() {
    let (push, pull) = pair(1000, 1000).await;
    let mut sink = push.sink();
    for m in numbered(0..10) {
        sink.feed(m).await.unwrap();
    }
    // Fed, not flushed: nothing has gone.
    let mut got = Vec::new();
    assert!(timeout(Duration::from_millis(100), pull.recv_many(&mut got, 10)).await.is_err());
    sink.flush().await.unwrap();
    assert!(recv_n(&pull, 10, 10).await.iter().map(number).eq(0..10));

    // Past SINK_BATCH held, feeding sends a batch by itself.
    for m in numbered(0..zmtp::SINK_BATCH + 1) {
        sink.feed(m).await.unwrap();
    }
    let first = recv_n(&pull, zmtp::SINK_BATCH, zmtp::SINK_BATCH).await;
    assert!(first.iter().map(number).eq(0..zmtp::SINK_BATCH));
    // `SinkExt::send` flushes: the last one goes too. And close flushes.
    sink.send(Message::from("sent")).await.unwrap();
    sink.feed(Message::from("closed")).await.unwrap();
    sink.close().await.unwrap();
    let rest = recv_n(&pull, 3, 3).await;
    assert_eq!(number(&rest[0]), zmtp::SINK_BATCH);
    assert_eq!((&rest[1][0][..], &rest[2][0][..]), (&b"sent"[..], &b"closed"[..]));
}

#[tokio::test(flavor = "current_thread")]
async fn a_sink_flush_waits_for_room_and_survives_being_dropped() {
    // The peer's queues take little, so a flush of 200 messages of 256 KiB (more than the
    // kernel's buffers hold; fewer than SINK_BATCH, so feeding sends nothing) has to wait for
    // room, in a future of its own.
    let (push, pull) = pair(5, 5).await;
    let mut sink = push.sink();
    let padding = bytes::Bytes::from(vec![0u8; 256 * 1024]);
    for i in 0..200 {
        sink.feed(Message::from(vec![bytes::Bytes::from(format!("{i}")), padding.clone()])).await.unwrap();
    }
    // Dropping the flush's future loses nothing: the next flush goes on where it stopped.
    assert!(timeout(Duration::from_millis(50), sink.flush()).await.is_err());
    let receiver = tokio::spawn(async move { recv_n(&pull, 200, 50).await });
    timeout(STEP * 4, sink.flush()).await.unwrap().unwrap();
    let got = receiver.await.unwrap();
    assert!(got.iter().map(number).eq(0..200));
}

/// CURVE between `server` and `client`, each with a fresh key pair.
fn curve_between(server: &Socket, client: &Socket) {
    use zmtp::security::KeyPair;
    let keys = KeyPair::generate();
    server.set_curve_server(true);
    server.set_curve_keypair(keys.clone());
    client.set_curve_keypair(KeyPair::generate());
    client.set_curve_serverkey(&keys.public_z85()).unwrap();
}

/// Message `i` of a run test: single or multipart, a short or long header (frames of 256 B and
/// more), an empty frame, and now and then a frame over 1 KiB (which ends an encoded run).
fn shaped(i: usize) -> Message {
    let key = bytes::Bytes::from(format!("{i}"));
    match i % 5 {
        0 => Message::from(key),
        1 => Message::from(vec![key, bytes::Bytes::new(), bytes::Bytes::from(vec![b'v'; 256 + i % 700])]),
        2 if i % 45 == 2 => Message::from(vec![key, bytes::Bytes::from(vec![b'L'; 1025 + i % 3000])]),
        _ => Message::from(vec![key, bytes::Bytes::from(format!("value {i}"))]),
    }
}

/// `send_many` of a PUSH with one peer encodes runs of small messages itself (issue 20): they
/// arrive exactly as sent, in order, over every transport and under CURVE, through send HWMs
/// small enough that runs are cut short and waited for.
async fn encoded_runs_arrive_as_sent(endpoint: &str, curve: bool, sndhwm: usize) {
    const N: usize = 6_000;
    let pull = Socket::new(SocketType::Pull);
    let push = Socket::new(SocketType::Push);
    push.set_sndhwm(sndhwm);
    if curve {
        curve_between(&pull, &push);
    }
    let endpoint = pull.bind(endpoint).await.unwrap();
    push.connect(&endpoint).await.unwrap();
    let sender = tokio::spawn(async move {
        // Batches of uneven lengths, some under the 16 a run needs.
        let mut sent = 0;
        let mut batch = Vec::new();
        for len in [1, 15, 16, 17, 300, 2_000, 7].iter().cycle() {
            if sent == N {
                break;
            }
            let len = (*len).min(N - sent);
            batch.extend((sent..sent + len).map(shaped));
            push.send_many(&mut batch).await.unwrap();
            assert!(batch.is_empty());
            sent += len;
        }
        push
    });
    let got = recv_n(&pull, N, 512).await;
    for (i, m) in got.iter().enumerate() {
        let expected = shaped(i);
        assert!(m.iter().eq(expected.iter()), "message {i}: {:?} frames, expected {:?}", m.len(), expected.len());
    }
    sender.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_runs_arrive_as_sent_over_tcp() {
    encoded_runs_arrive_as_sent("tcp://127.0.0.1:*", false, 1000).await;
    encoded_runs_arrive_as_sent("tcp://127.0.0.1:*", false, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_runs_arrive_as_sent_over_ipc() {
    encoded_runs_arrive_as_sent("ipc://*", false, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_runs_arrive_as_sent_over_inproc() {
    encoded_runs_arrive_as_sent(&format!("inproc://{}", zmtp_testkit::unique("runs")), false, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_runs_arrive_as_sent_under_curve() {
    encoded_runs_arrive_as_sent("tcp://127.0.0.1:*", true, 1000).await;
}

// ---------------------------------------------------------------------------------------------
// send_encoded: messages encoded ahead of time, for one ROUTER peer
// ---------------------------------------------------------------------------------------------

/// A ROUTER on `endpoint` (a byte HWM of 1 MiB) and a DEALER named "reader" connected to it,
/// the ROUTER knowing it.
async fn router_and_reader(endpoint: &str, curve: bool, sndhwm: usize, rcvhwm: usize) -> (Socket, Socket) {
    let router = Socket::new(SocketType::Router);
    router.set_sndhwm(sndhwm);
    router.set_sndhwm_bytes(1 << 20);
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_rcvhwm(rcvhwm);
    if curve {
        curve_between(&router, &dealer);
    }
    let endpoint = router.bind(endpoint).await.unwrap();
    dealer.set_routing_id("reader").unwrap();
    dealer.connect(&endpoint).await.unwrap();
    dealer.send("hello").await.unwrap();
    let hello = timeout(STEP, router.recv()).await.expect("hello in time").unwrap();
    assert_eq!(&hello[0][..], b"reader");
    (router, dealer)
}

/// Message `i` of a batch: a key, two empty frames, a value (long every 7th: a 9-byte header).
fn encoded_frames(i: usize) -> [Vec<u8>; 4] {
    let value = if i.is_multiple_of(7) { vec![b'v'; 300 + i % 50] } else { format!("value {i}").into_bytes() };
    [format!("key {i}").into_bytes(), Vec::new(), Vec::new(), value]
}

async fn encoded_batches_arrive_as_their_messages(endpoint: &str, curve: bool) {
    let (router, dealer) = router_and_reader(endpoint, curve, 1000, 1000).await;
    // Mandatory: a full queue makes both kinds of send wait instead of dropping (10,000 messages
    // pass queues of 1,000).
    router.set_router_mandatory(true);
    let sender = tokio::spawn(async move {
        let mut batch = zmtp::EncodedBatch::new();
        for chunk in 0..20 {
            for i in chunk * 500..(chunk + 1) * 500 {
                let frames = encoded_frames(i);
                batch.push(&frames.iter().map(Vec::as_slice).collect::<Vec<_>>()).unwrap();
            }
            assert_eq!(batch.len(), 500);
            router.send_encoded(b"reader", &mut batch).await.unwrap();
            assert!(batch.is_empty() && batch.encoded_len() == 0);
            // A plain send between batches keeps its place.
            router.send(vec![bytes::Bytes::from_static(b"reader"), format!("plain {chunk}").into()]).await.unwrap();
        }
        router
    });
    for chunk in 0..20 {
        for i in chunk * 500..(chunk + 1) * 500 {
            let got = timeout(STEP, dealer.recv()).await.expect("in time").unwrap();
            let expected = encoded_frames(i);
            assert!(got.iter().map(|f| &f[..]).eq(expected.iter().map(Vec::as_slice)), "message {i}");
        }
        let plain = timeout(STEP, dealer.recv()).await.expect("in time").unwrap();
        assert_eq!(plain[0], format!("plain {chunk}"));
    }
    sender.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_batches_arrive_as_their_messages_over_tcp() {
    encoded_batches_arrive_as_their_messages("tcp://127.0.0.1:*", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_batches_arrive_as_their_messages_over_ipc() {
    encoded_batches_arrive_as_their_messages("ipc://*", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_batches_arrive_as_their_messages_over_inproc() {
    encoded_batches_arrive_as_their_messages("inproc://encoded-batches", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_batches_arrive_as_their_messages_under_curve() {
    encoded_batches_arrive_as_their_messages("tcp://127.0.0.1:*", true).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_send_encoded_leaves_its_batch_whole_and_mandatory_routes_are_kept() {
    // A reader that does not read, and a first batch of 32 MiB, more than the kernel's buffers
    // hold: it stays in flight, over the byte HWM, so the second batch waits for room, and a
    // dropped wait leaves it as it was.
    let (router, dealer) = router_and_reader("tcp://127.0.0.1:*", false, 10, 10).await;
    router.set_router_mandatory(true);
    let value = vec![7u8; 4096];
    let (mut first, mut second) = (zmtp::EncodedBatch::new(), zmtp::EncodedBatch::new());
    for i in 0..8192u32 {
        first.push(&[b"first", &i.to_be_bytes(), &value]).unwrap();
    }
    for i in 0..100u32 {
        second.push(&[b"second", &i.to_be_bytes(), b""]).unwrap();
    }
    router.send_encoded(b"reader", &mut first).await.unwrap();
    let (len, bytes) = (second.len(), second.encoded_len());
    assert!(timeout(Duration::from_millis(200), router.send_encoded(b"reader", &mut second)).await.is_err());
    assert_eq!((second.len(), second.encoded_len()), (len, bytes), "the batch is whole");
    // Reading makes room: the same batch goes, and everything arrives once, in order.
    let reader = tokio::spawn(async move {
        for (name, count) in [("first", 8192u32), ("second", 100)] {
            for i in 0..count {
                let got = timeout(STEP, dealer.recv()).await.expect("in time").unwrap();
                assert_eq!((&got[0][..], &got[1][..]), (name.as_bytes(), &i.to_be_bytes()[..]));
            }
        }
    });
    timeout(STEP, router.send_encoded(b"reader", &mut second)).await.expect("room came").unwrap();
    reader.await.unwrap();

    // An unknown peer: refused under ROUTER_MANDATORY (batch kept), dropped without it.
    let mut batch = zmtp::EncodedBatch::new();
    batch.push(&[b"x"]).unwrap();
    assert!(matches!(router.send_encoded(b"nobody", &mut batch).await, Err(Error::HostUnreachable(_))));
    assert_eq!(batch.len(), 1);
    router.set_router_mandatory(false);
    router.send_encoded(b"nobody", &mut batch).await.unwrap();
    assert!(batch.is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn only_a_router_without_conflate_sends_encoded_batches_while_open() {
    let mut batch = zmtp::EncodedBatch::new();
    batch.push(&[b"x"]).unwrap();
    for socket_type in [SocketType::Dealer, SocketType::Push, SocketType::Pub, SocketType::Rep] {
        let socket = Socket::new(socket_type);
        let refused = socket.send_encoded(b"anyone", &mut batch).await;
        assert!(matches!(refused, Err(Error::NotSupported(t)) if t == socket_type), "{socket_type:?}");
        assert_eq!(batch.len(), 1);
    }
    // A batch is many messages: a ROUTER that keeps one (CONFLATE) refuses it.
    let conflating = Socket::new(SocketType::Router);
    conflating.set_conflate(true);
    assert!(matches!(conflating.send_encoded(b"anyone", &mut batch).await, Err(Error::InvalidArgument(_))));
    // A closed ROUTER refuses any batch, an empty one too, as `send` does.
    let closed = Socket::new(SocketType::Router);
    closed.clone().close().await;
    assert!(matches!(closed.send_encoded(b"anyone", &mut batch).await, Err(Error::Closed)));
    assert!(matches!(closed.send_encoded(b"anyone", &mut zmtp::EncodedBatch::new()).await, Err(Error::Closed)));
    assert_eq!(batch.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_encoded_batch_passes_a_small_inproc_queue_in_order() {
    // Over inproc the batch is taken apart and handed over a few hundred messages at a time, so
    // the reader's queue of 10 paces it instead of taking 3,000 messages at once.
    let (router, dealer) = router_and_reader("inproc://encoded-small-queue", false, 10, 10).await;
    let mut batch = zmtp::EncodedBatch::new();
    for i in 0..3000u32 {
        batch.push(&[b"n", &i.to_be_bytes()]).unwrap();
    }
    router.send_encoded(b"reader", &mut batch).await.unwrap();
    for i in 0..3000u32 {
        let got = timeout(STEP, dealer.recv()).await.expect("in time").unwrap();
        assert_eq!(&got[1][..], &i.to_be_bytes()[..]);
    }
}

// ---------------------------------------------------------------------------------------------
// PUB fan-out: shared messages queued back to back go as runs
// ---------------------------------------------------------------------------------------------

/// A PUB ahead of several subscribers queues the messages it publishes in a loop as runs of
/// shared messages (large ones alone): every subscriber gets every message, in order, over each
/// transport and under CURVE.
async fn a_publisher_delivers_every_message_in_order(endpoint: &str, curve: bool) {
    const N: usize = 3_000;
    let publisher = Socket::new(SocketType::Pub);
    publisher.set_sndhwm(0);
    let subscribers: Vec<Socket> = (0..3).map(|_| Socket::new(SocketType::Sub)).collect();
    let server_keys = zmtp::security::KeyPair::generate();
    if curve {
        publisher.set_curve_server(true);
        publisher.set_curve_keypair(server_keys.clone());
    }
    let endpoint = publisher.bind(endpoint).await.unwrap();
    for sub in &subscribers {
        if curve {
            sub.set_curve_keypair(zmtp::security::KeyPair::generate());
            sub.set_curve_serverkey(&server_keys.public_z85()).unwrap();
        }
        sub.set_rcvhwm(0);
        sub.subscribe(b"").unwrap();
        sub.connect(&endpoint).await.unwrap();
    }
    // Until every subscription is live (a PUB drops what no subscriber asked for yet).
    for (i, sub) in subscribers.iter().enumerate() {
        for attempt in 0.. {
            assert!(attempt < 400, "subscriber {i} never heard a probe");
            publisher.send(Message::from(format!("probe {i}"))).await.unwrap();
            if let Ok(got) = timeout(Duration::from_millis(50), sub.recv()).await {
                assert!(got.unwrap()[0].starts_with(b"probe"));
                break;
            }
        }
    }
    for i in 0..N {
        publisher.send(shaped(i)).await.unwrap();
    }
    for (s, sub) in subscribers.iter().enumerate() {
        let mut next = 0;
        while next < N {
            let m = timeout(STEP, sub.recv()).await.expect("in time").unwrap();
            if m[0].starts_with(b"probe") {
                continue;
            }
            let expected = shaped(next);
            assert!(m.iter().eq(expected.iter()), "subscriber {s}, message {next}");
            next += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_delivers_every_message_in_order_over_tcp() {
    a_publisher_delivers_every_message_in_order("tcp://127.0.0.1:*", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_delivers_every_message_in_order_over_ipc() {
    a_publisher_delivers_every_message_in_order("ipc://*", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_delivers_every_message_in_order_over_inproc() {
    a_publisher_delivers_every_message_in_order(&format!("inproc://{}", zmtp_testkit::unique("fanout")), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_delivers_every_message_in_order_under_curve() {
    a_publisher_delivers_every_message_in_order("tcp://127.0.0.1:*", true).await;
}
