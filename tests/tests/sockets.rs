//! Per-socket-type behaviour over tcp, ipc and inproc, asserting libzmq's semantics
//! (zmtp-wire.md §3 and libzmq's `test_spec_*`, `test_router_*`, `test_probe_router`, `test_hwm`,
//! `test_heartbeats`, ...).
//!
//! Every scenario is an `async fn(transport)`; [`over_transports!`] turns it into a module with one
//! test per transport, so a failure names the transport: `push_round_robin::ipc`.
//!
//! No sleeps are used for synchronisation: tests wait for monitor events, for messages (bounded by
//! [`WAIT`]), or retry until a condition holds. The only fixed windows are *negative* checks ("nothing
//! arrives within [`QUIET`]").

use std::time::Duration;

use bytes::Bytes;
use futures::{FutureExt, SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;
use zmtp::{ConnectionError, Error, Message, Monitor, MonitorEvent, Socket, SocketType};

#[macro_use]
mod common;
use common::*;
use zmtp_testkit::bounded;

fn sock(socket_type: SocketType) -> Socket {
    Socket::new(socket_type)
}

/// A message from string frames.
fn msg(frames: &[&str]) -> Message {
    frames.iter().map(|f| Bytes::copy_from_slice(f.as_bytes())).collect()
}

/// The frames as (lossy) strings, for readable assertions.
fn strs(m: &Message) -> Vec<String> {
    m.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect()
}

async fn send(s: &Socket, m: impl Into<Message>) {
    match timeout(WAIT, s.send(m)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("send failed: {e}"),
        Err(_) => panic!("send did not complete within {WAIT:?}"),
    }
}

async fn recv(s: &Socket) -> Message {
    match timeout(WAIT, s.recv()).await {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => panic!("recv failed: {e}"),
        Err(_) => panic!("no message within {WAIT:?}"),
    }
}

async fn recv_within(s: &Socket, limit: Duration) -> Option<Message> {
    match timeout(limit, s.recv()).await {
        Ok(Ok(m)) => Some(m),
        Ok(Err(e)) => panic!("recv failed: {e}"),
        Err(_) => None,
    }
}

async fn recv_strs(s: &Socket) -> Vec<String> {
    strs(&recv(s).await)
}

/// Asserts that nothing arrives within [`QUIET`].
async fn assert_silent(s: &Socket, who: &str) {
    if let Some(m) = recv_within(s, QUIET).await {
        panic!("{who} received {:?}, expected nothing", strs(&m));
    }
}

/// Waits for `n` HandshakeSucceeded events.
async fn handshakes(mon: &mut Monitor, n: usize) {
    for _ in 0..n {
        wait_event(mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;
    }
}

/// Waits for `n` Disconnected events.
async fn disconnects(mon: &mut Monitor, n: usize) {
    for _ in 0..n {
        wait_event(mon, "Disconnected", |e| matches!(e, MonitorEvent::Disconnected { .. })).await;
    }
}

/// Events already queued on a monitor, without waiting.
fn pending_events(mon: &mut Monitor) -> Vec<MonitorEvent> {
    let mut events = Vec::new();
    while let Some(Some(e)) = mon.next().now_or_never() {
        events.push(e);
    }
    events
}

fn is_generated_id(id: &[u8]) -> bool {
    id.len() == 5 && id[0] == 0
}

/// Binds, retrying while the address is still held by a socket that is going away.
async fn bind_retry(s: &Socket, ep: &str) -> String {
    let bound = timeout(WAIT, async {
        loop {
            match s.bind(ep).await {
                Ok(bound) => return bound,
                Err(Error::AddressInUse(_)) => {}
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::AddrInUse => {}
                Err(e) => panic!("rebinding {ep} failed: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    bound.unwrap_or_else(|_| panic!("{ep} still in use after {WAIT:?}"))
}

/// Publishes `topic` until `sub` receives it: the subscription has reached the publisher.
async fn sync_sub(publisher: &Socket, sub: &Socket, topic: &str) {
    let synced = timeout(WAIT, async {
        loop {
            publisher.send(msg(&[topic])).await.expect("publish");
            if let Some(m) = recv_within(sub, Duration::from_millis(20)).await
                && m[0] == topic.as_bytes()
            {
                return;
            }
        }
    })
    .await;
    synced.expect("subscription never reached the publisher");
}

/// First frames received until `end`, skipping leftover `!sync` messages.
async fn collect_until(sub: &Socket, end: &str) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let first = recv_strs(sub).await.remove(0);
        if first == end {
            return got;
        }
        if !first.starts_with("!sync") {
            got.push(first);
        }
    }
}

/// Parses a message whose first frame is a decimal index.
fn index(m: &Message) -> usize {
    std::str::from_utf8(&m[0])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an indexed message: {:?}", strs(m)))
}

// ---------------------------------------------------------------------------------------------
// PUSH / PULL
// ---------------------------------------------------------------------------------------------

/// Shared by PUSH and DEALER: a bound socket load-balances over 3 connected peers round-robin.
async fn round_robin_out(transport: &'static str, out_type: SocketType, peer_type: SocketType) {
    let out = sock(out_type);
    let mut mon = out.monitor();
    let ep = bind(&out, transport, "rr-out").await;
    let peers: Vec<Socket> = (0..3).map(|_| sock(peer_type)).collect();
    for p in &peers {
        connect(p, &ep).await;
    }
    handshakes(&mut mon, 3).await;
    for i in 0..12 {
        send(&out, i.to_string()).await;
    }
    let mut firsts = Vec::new();
    for p in &peers {
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(index(&recv(p).await));
        }
        let k = got[0];
        assert_eq!(got, vec![k, k + 3, k + 6, k + 9], "each peer gets every third");
        firsts.push(k);
    }
    firsts.sort();
    assert_eq!(firsts, vec![0, 1, 2]);
    for p in &peers {
        assert!(matches!(p.try_recv(), Err(Error::WouldBlock)));
    }
}

/// Shared by PULL and DEALER: two peers each queued 10 messages; receiving alternates between them
/// (fair queuing), each peer's messages in order.
async fn fair_queue_in(transport: &'static str, in_type: SocketType, peer_type: SocketType) {
    let input = sock(in_type);
    let mut mon = input.monitor();
    let ep = bind(&input, transport, "fq-in").await;
    let a = sock(peer_type);
    let b = sock(peer_type);
    let mut mon_a = a.monitor();
    let mut mon_b = b.monitor();
    connect(&a, &ep).await;
    connect(&b, &ep).await;
    handshakes(&mut mon_a, 1).await;
    handshakes(&mut mon_b, 1).await;
    for i in 0..10 {
        send(&a, format!("a{i}")).await;
        send(&b, format!("b{i}")).await;
    }
    // Closing (LINGER infinite) flushes; once `input` has seen both connections end, every message
    // of both peers sits in its queue, so the receive order shows the fair-queueing rule alone.
    a.close().await;
    b.close().await;
    disconnects(&mut mon, 2).await;
    let mut got = Vec::new();
    for _ in 0..20 {
        got.push(recv_strs(&input).await.remove(0));
    }
    for pair in got.windows(2) {
        assert_ne!(pair[0].as_bytes()[0], pair[1].as_bytes()[0], "fair queueing alternates peers: {got:?}");
    }
    for src in ["a", "b"] {
        let from: Vec<&String> = got.iter().filter(|m| m.starts_with(src)).collect();
        let expected: Vec<String> = (0..10).map(|i| format!("{src}{i}")).collect();
        assert_eq!(from, expected.iter().collect::<Vec<_>>());
    }
}

async fn push_round_robin(t: &'static str) {
    round_robin_out(t, SocketType::Push, SocketType::Pull).await;
}

async fn pull_fair_queue(t: &'static str) {
    fair_queue_in(t, SocketType::Pull, SocketType::Push).await;
}

// ---------------------------------------------------------------------------------------------
// DEALER
// ---------------------------------------------------------------------------------------------

async fn dealer_round_robin(t: &'static str) {
    round_robin_out(t, SocketType::Dealer, SocketType::Dealer).await;
}

async fn dealer_fair_queue(t: &'static str) {
    fair_queue_in(t, SocketType::Dealer, SocketType::Dealer).await;
}

/// A DEALER with no peer blocks on send; the send completes once a peer connects.
async fn dealer_blocks_without_peer(t: &'static str) {
    let dealer = sock(SocketType::Dealer);
    let ep = bind(&dealer, t, "dealer-block").await;
    assert!(matches!(dealer.try_send("never-1"), Err(Error::WouldBlock)));
    assert!(timeout(QUIET, dealer.send("never-2")).await.is_err(), "send with no peer must block");
    let pending = tokio::spawn({
        let dealer = dealer.clone();
        async move { dealer.send("hello").await }
    });
    let peer = sock(SocketType::Dealer);
    connect(&peer, &ep).await;
    timeout(WAIT, pending).await.expect("send still blocked after a peer connected").expect("task").expect("send");
    // Neither the refused try_send nor the cancelled send went anywhere.
    assert_eq!(recv_strs(&peer).await, ["hello"]);
    send(&peer, "back").await;
    assert_eq!(recv_strs(&dealer).await, ["back"]);
}

/// Messages sent on a DEALER that connected before anyone bound are delivered once the peer binds.
async fn dealer_connect_before_bind(t: &'static str) {
    let ep = unbound_endpoint(t, "dealer-cbb");
    let dealer = sock(SocketType::Dealer);
    connect(&dealer, &ep).await;
    send(&dealer, "early-1").await;
    send(&dealer, msg(&["early-2", "part"])).await;
    let peer = sock(SocketType::Dealer);
    let bound = bind_retry(&peer, &ep).await;
    assert_eq!(bound, ep);
    assert_eq!(recv_strs(&peer).await, ["early-1"]);
    assert_eq!(recv_strs(&peer).await, ["early-2", "part"]);
    send(&peer, "reply").await;
    assert_eq!(recv_strs(&dealer).await, ["reply"]);
}

// ---------------------------------------------------------------------------------------------
// ROUTER
// ---------------------------------------------------------------------------------------------

async fn router_routes_by_identity(t: &'static str) {
    let router = sock(SocketType::Router);
    let mut mon = router.monitor();
    let ep = bind(&router, t, "router-id").await;
    let a = sock(SocketType::Dealer);
    a.set_routing_id("A").unwrap();
    let b = sock(SocketType::Dealer);
    b.set_routing_id("B").unwrap();
    connect(&a, &ep).await;
    connect(&b, &ep).await;
    handshakes(&mut mon, 2).await;
    let mut ids = router.peer_routing_ids();
    ids.sort();
    assert_eq!(ids, vec![Bytes::from("A"), Bytes::from("B")]);

    send(&router, msg(&["B", "for-b", "2"])).await;
    send(&router, msg(&["A", "for-a"])).await;
    assert_eq!(recv_strs(&a).await, ["for-a"]);
    assert_eq!(recv_strs(&b).await, ["for-b", "2"]);

    send(&a, msg(&["from-a", "x"])).await;
    assert_eq!(recv_strs(&router).await, ["A", "from-a", "x"]);
    send(&b, "from-b").await;
    assert_eq!(recv_strs(&router).await, ["B", "from-b"]);
}

/// Anonymous peers get generated 5-byte ids (0x00 + u32), distinct, usable to reply.
async fn router_generated_ids(t: &'static str) {
    let router = sock(SocketType::Router);
    let ep = bind(&router, t, "router-gen").await;
    let d1 = sock(SocketType::Dealer);
    let d2 = sock(SocketType::Dealer);
    connect(&d1, &ep).await;
    connect(&d2, &ep).await;
    send(&d1, "one").await;
    let m1 = recv(&router).await;
    send(&d2, "two").await;
    let m2 = recv(&router).await;
    assert_eq!(m1.len(), 2);
    assert_eq!(m2.len(), 2);
    assert_eq!(m1[1], "one");
    assert_eq!(m2[1], "two");
    let (id1, id2) = (m1[0].clone(), m2[0].clone());
    assert!(is_generated_id(&id1), "generated id {id1:?}");
    assert!(is_generated_id(&id2), "generated id {id2:?}");
    assert_ne!(id1, id2);
    let ids = router.peer_routing_ids();
    assert!(ids.contains(&id1) && ids.contains(&id2), "{ids:?}");

    send(&router, Message::from(vec![id2.clone(), Bytes::from("to-2")])).await;
    send(&router, Message::from(vec![id1.clone(), Bytes::from("to-1")])).await;
    assert_eq!(recv_strs(&d1).await, ["to-1"]);
    assert_eq!(recv_strs(&d2).await, ["to-2"]);
}

/// Without ROUTER_MANDATORY a message to an unknown id is dropped silently.
async fn router_drops_unknown(t: &'static str) {
    let router = sock(SocketType::Router);
    let mut mon = router.monitor();
    let ep = bind(&router, t, "router-unknown").await;
    let a = sock(SocketType::Dealer);
    a.set_routing_id("A").unwrap();
    connect(&a, &ep).await;
    handshakes(&mut mon, 1).await;
    router.send(msg(&["nobody", "lost-1"])).await.expect("send");
    router.try_send(msg(&["nobody", "lost-2"])).expect("try_send");
    send(&router, msg(&["A", "found"])).await;
    assert_eq!(recv_strs(&a).await, ["found"]);
    assert!(matches!(a.try_recv(), Err(Error::WouldBlock)));
}

/// ROUTER_MANDATORY: an unknown id fails with HostUnreachable(id).
async fn router_mandatory(t: &'static str) {
    let router = sock(SocketType::Router);
    router.set_router_mandatory(true);
    let mut mon = router.monitor();
    let ep = bind(&router, t, "router-mandatory").await;
    let a = sock(SocketType::Dealer);
    a.set_routing_id("A").unwrap();
    connect(&a, &ep).await;
    handshakes(&mut mon, 1).await;
    match timeout(WAIT, router.send(msg(&["nobody", "x"]))).await {
        Ok(Err(Error::HostUnreachable(id))) => assert_eq!(id, "nobody"),
        other => panic!("expected HostUnreachable, got {other:?}"),
    }
    match router.try_send(msg(&["nobody", "x"])) {
        Err(Error::HostUnreachable(id)) => assert_eq!(id, "nobody"),
        other => panic!("expected HostUnreachable, got {other:?}"),
    }
    send(&router, msg(&["A", "found"])).await;
    assert_eq!(recv_strs(&a).await, ["found"]);
}

/// ROUTER_HANDOVER: a second peer with the same id takes the id over.
async fn router_handover(t: &'static str) {
    let router = sock(SocketType::Router);
    router.set_router_handover(true);
    let ep = bind(&router, t, "router-handover").await;
    let first = sock(SocketType::Dealer);
    first.set_routing_id("X").unwrap();
    // Once handed over, the first connection is closed; it must not come back and take X again.
    first.set_reconnect_ivl(None);
    connect(&first, &ep).await;
    send(&first, "hello-1").await;
    assert_eq!(recv_strs(&router).await, ["X", "hello-1"]);

    let second = sock(SocketType::Dealer);
    second.set_routing_id("X").unwrap();
    connect(&second, &ep).await;
    send(&second, "hello-2").await;
    assert_eq!(recv_strs(&router).await, ["X", "hello-2"]);

    send(&router, msg(&["X", "to-x"])).await;
    assert_eq!(recv_strs(&second).await, ["to-x"]);
    assert_silent(&first, "the dealer that lost its id").await;
}

/// Without handover, a duplicate id is refused: the original keeps the id and keeps receiving, and
/// the newcomer neither receives nor gets its messages through.
async fn router_duplicate_refused(t: &'static str) {
    let router = sock(SocketType::Router);
    let mut mon = router.monitor();
    let ep = bind(&router, t, "router-dup").await;
    let first = sock(SocketType::Dealer);
    first.set_routing_id("X").unwrap();
    connect(&first, &ep).await;
    handshakes(&mut mon, 1).await;
    send(&first, "hello-1").await;
    assert_eq!(recv_strs(&router).await, ["X", "hello-1"]);

    let second = sock(SocketType::Dealer);
    second.set_routing_id("X").unwrap();
    connect(&second, &ep).await;
    send(&second, "from-second").await;
    // The newcomer's connection has been dealt with (refused, or accepted and ignored as libzmq does).
    wait_event(&mut mon, "the duplicate's handshake outcome", |e| {
        matches!(e, MonitorEvent::HandshakeFailed { .. } | MonitorEvent::HandshakeSucceeded { .. })
    })
    .await;

    send(&router, msg(&["X", "to-x"])).await;
    assert_eq!(recv_strs(&first).await, ["to-x"]);
    send(&first, "hello-again").await;
    assert_eq!(recv_strs(&router).await, ["X", "hello-again"]);
    assert_silent(&second, "the duplicate").await;
    assert!(matches!(router.try_recv(), Err(Error::WouldBlock)), "the duplicate's message must not be delivered");
}

// ---------------------------------------------------------------------------------------------
// PROBE_ROUTER
// ---------------------------------------------------------------------------------------------

/// A DEALER with PROBE_ROUTER sends an empty message to the ROUTER it connects to.
async fn dealer_probe_router(t: &'static str) {
    let router = sock(SocketType::Router);
    let ep = bind(&router, t, "probe-dealer").await;
    let dealer = sock(SocketType::Dealer);
    dealer.set_routing_id("P").unwrap();
    dealer.set_probe_router(true);
    connect(&dealer, &ep).await;
    assert_eq!(recv_strs(&router).await, ["P", ""]);
    send(&dealer, "after").await;
    assert_eq!(recv_strs(&router).await, ["P", "after"]);
}

/// libzmq's test_probe_router: a ROUTER client with PROBE_ROUTER and id X connects to a ROUTER
/// server, which receives [X, ""] and can answer; the client sees the server's generated id.
async fn router_probe_router(t: &'static str) {
    let server = sock(SocketType::Router);
    let ep = bind(&server, t, "probe-router").await;
    let client = sock(SocketType::Router);
    client.set_routing_id("X").unwrap();
    client.set_probe_router(true);
    connect(&client, &ep).await;
    assert_eq!(recv_strs(&server).await, ["X", ""]);
    send(&server, msg(&["X", "Hello"])).await;
    let m = recv(&client).await;
    assert_eq!(m.len(), 2, "{:?}", strs(&m));
    assert!(is_generated_id(&m[0]), "server id {:?}", m[0]);
    assert_eq!(m[1], "Hello");
}

// ---------------------------------------------------------------------------------------------
// HWM
// ---------------------------------------------------------------------------------------------

/// PUSH (SNDHWM 10) to a PULL (RCVHWM 10) that does not read: sending blocks after about
/// SNDHWM + RCVHWM messages plus what the transport buffers; nothing is lost once PULL reads.
async fn push_blocks_at_hwm(t: &'static str) {
    const HWM: usize = 10;
    const SIZE: usize = 64 * 1024;
    // In-flight writer batch + read buffer + transport buffers on top of the two queues; TCP's
    // kernel buffers (several MiB on loopback) absorb the most.
    let upper = if t == "tcp" { 600 } else { 100 };
    let pull = sock(SocketType::Pull);
    pull.set_rcvhwm(HWM);
    let ep = bind(&pull, t, "push-hwm").await;
    let push = sock(SocketType::Push);
    push.set_sndhwm(HWM);
    let mut mon = push.monitor();
    connect(&push, &ep).await;
    handshakes(&mut mon, 1).await;

    let payload = Bytes::from(vec![0x5a; SIZE]);
    let item = |i: usize| Message::from(vec![Bytes::from(i.to_string()), payload.clone()]);
    let mut sent = 0;
    loop {
        match push.try_send(item(sent)) {
            Ok(()) => sent += 1,
            Err(Error::WouldBlock) => {
                // WouldBlock may be momentary (the writer is about to drain the queue): blocked for
                // real means send() cannot complete for a while.
                match timeout(QUIET, push.send(item(sent))).await {
                    Ok(Ok(())) => sent += 1,
                    Ok(Err(e)) => panic!("send failed: {e}"),
                    Err(_) => break,
                }
            }
            Err(e) => panic!("try_send failed: {e}"),
        }
        assert!(sent <= upper, "PUSH never blocked: {sent} messages sent");
    }
    assert!(sent >= HWM, "blocked after {sent} messages, before SNDHWM {HWM}");
    for i in 0..sent {
        let m = recv(&pull).await;
        assert_eq!(index(&m), i);
        assert_eq!(m[1].len(), SIZE);
    }
    // The cancelled send was not sent.
    assert_silent(&pull, "PULL after draining").await;
}

/// PUB at its HWM drops instead of blocking: 10000 messages to a SUB that does not read go out
/// without waiting, and the SUB gets far fewer, in order.
async fn pub_drops_at_hwm(t: &'static str) {
    const COUNT: usize = 10_000;
    let publisher = sock(SocketType::Pub);
    publisher.set_sndhwm(10);
    let ep = bind(&publisher, t, "pub-hwm").await;
    let sub = sock(SocketType::Sub);
    sub.set_rcvhwm(10);
    sub.subscribe("").unwrap();
    connect(&sub, &ep).await;
    sync_sub(&publisher, &sub, "!sync").await;

    // 20 KiB frames are sent by reference, so the publisher itself stays cheap.
    let payload = Bytes::from(vec![1u8; 20 * 1024]);
    let item = |i: usize| Message::from(vec![Bytes::from(i.to_string()), payload.clone()]);
    for i in 0..COUNT / 2 {
        publisher.try_send(item(i)).unwrap_or_else(|e| panic!("PUB try_send #{i} failed: {e}"));
    }
    let all_sent = timeout(WAIT, async {
        for i in COUNT / 2..COUNT {
            publisher.send(item(i)).await.expect("PUB send");
        }
    })
    .await;
    all_sent.expect("PUB send blocked at HWM");

    let mut got = Vec::new();
    while let Some(m) = recv_within(&sub, QUIET).await {
        if m[0] != "!sync" {
            got.push(index(&m));
        }
    }
    assert!(!got.is_empty(), "SUB received nothing");
    assert!(got.len() < 2_000, "SUB received {} of {COUNT}: PUB did not drop at HWM", got.len());
    assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
}

// ---------------------------------------------------------------------------------------------
// PUB / SUB
// ---------------------------------------------------------------------------------------------

async fn sub_prefix_filter(t: &'static str) {
    let publisher = sock(SocketType::Pub);
    let ep = bind(&publisher, t, "sub-prefix").await;
    let sub = sock(SocketType::Sub);
    sub.subscribe("ab").unwrap();
    sub.subscribe("!").unwrap();
    connect(&sub, &ep).await;
    sync_sub(&publisher, &sub, "!sync").await;
    for topic in ["a", "xab", "abc", "ab", "b", "Ab", "!end"] {
        send(&publisher, msg(&[topic, "body"])).await;
    }
    assert_eq!(collect_until(&sub, "!end").await, ["abc", "ab"]);
}

async fn sub_everything(t: &'static str) {
    let publisher = sock(SocketType::Pub);
    let ep = bind(&publisher, t, "sub-all").await;
    let sub = sock(SocketType::Sub);
    sub.subscribe("").unwrap();
    connect(&sub, &ep).await;
    sync_sub(&publisher, &sub, "!sync").await;
    for topic in ["a", "xab", "", "abc", "!end"] {
        send(&publisher, topic).await;
    }
    assert_eq!(collect_until(&sub, "!end").await, ["a", "xab", "", "abc"]);
}

/// Unsubscribe (refcounted: one unsubscribe per subscribe) stops delivery.
async fn sub_unsubscribe(t: &'static str) {
    let publisher = sock(SocketType::Pub);
    let ep = bind(&publisher, t, "sub-unsub").await;
    let sub = sock(SocketType::Sub);
    sub.subscribe("x").unwrap();
    sub.subscribe("x").unwrap();
    sub.subscribe("!").unwrap();
    connect(&sub, &ep).await;
    sync_sub(&publisher, &sub, "!sync").await;
    send(&publisher, "x-0").await;
    send(&publisher, "!end").await;
    assert_eq!(collect_until(&sub, "!end").await, ["x-0"]);

    // One reference left: still subscribed.
    sub.unsubscribe("x").unwrap();
    send(&publisher, "x-1").await;
    send(&publisher, "!end").await;
    assert_eq!(collect_until(&sub, "!end").await, ["x-1"]);

    // Last reference: publish until a sentinel sent after the unsubscribe arrives; no "x" may.
    sub.unsubscribe("x").unwrap();
    let propagated = timeout(WAIT, async {
        for n in 0.. {
            send(&publisher, format!("x-loop-{n}")).await;
            send(&publisher, format!("!mark-{n}")).await;
            while let Some(m) = recv_within(&sub, Duration::from_millis(20)).await {
                let first = strs(&m).remove(0);
                assert!(!first.starts_with('x'), "{first} after unsubscribe");
                if first.starts_with("!mark") {
                    return;
                }
            }
        }
    })
    .await;
    propagated.expect("sentinel never arrived after unsubscribe");
    send(&publisher, "x-final").await;
    send(&publisher, "!end").await;
    let got = collect_until(&sub, "!end").await;
    assert!(got.iter().all(|m| m.starts_with("!mark")), "after unsubscribe: {got:?}");
}

/// A SUB subscribed to "x" and "!" that has every one of `topics` queued: published, then the
/// publisher closed (closing flushes; the SUB seeing the connection end means all are queued).
async fn sub_with_queued(t: &'static str, name: &str, topics: &[&str]) -> Socket {
    let publisher = sock(SocketType::Pub);
    let ep = bind(&publisher, t, name).await;
    let sub = sock(SocketType::Sub);
    let mut mon = sub.monitor();
    sub.subscribe("x").unwrap();
    sub.subscribe("!").unwrap();
    connect(&sub, &ep).await;
    sync_sub(&publisher, &sub, "!sync").await;
    for topic in topics {
        send(&publisher, *topic).await;
    }
    publisher.close().await;
    disconnects(&mut mon, 1).await;
    sub
}

/// libzmq filters on receipt: messages already queued for a topic are not delivered once it is
/// unsubscribed (pyzmq/libzmq 4.3.5: PUB x1, x2, !end; SUB unsubscribes x; recv gives only !end).
async fn sub_unsubscribe_filters_queued(t: &'static str) {
    let sub = sub_with_queued(t, "sub-unsub-queued", &["x-1", "x-2", "!end"]).await;
    sub.unsubscribe("x").unwrap();
    assert_eq!(collect_until(&sub, "!end").await, Vec::<String>::new());
}

/// The same once a receive has taken the later messages off the queue ahead of the application
/// (a SUB's receive takes up to 32 at once): the unsubscribe drops them there too.
async fn sub_unsubscribe_filters_what_was_taken_ahead(t: &'static str) {
    let sub = sub_with_queued(t, "sub-unsub-ahead", &["!first", "x-1", "!between", "x-2", "!end"]).await;
    assert_eq!(collect_until(&sub, "!first").await, Vec::<String>::new());
    sub.unsubscribe("x").unwrap();
    assert_eq!(collect_until(&sub, "!end").await, ["!between"]);
}

async fn sub_multiple_filters(t: &'static str) {
    let publisher = sock(SocketType::Pub);
    let ep = bind(&publisher, t, "sub-multi").await;
    let (s1, s2, s3) = (sock(SocketType::Sub), sock(SocketType::Sub), sock(SocketType::Sub));
    s1.subscribe("a").unwrap();
    s1.subscribe("!").unwrap();
    s2.subscribe("b").unwrap();
    s2.subscribe("!").unwrap();
    s3.subscribe("").unwrap();
    for s in [&s1, &s2, &s3] {
        connect(s, &ep).await;
    }
    for s in [&s1, &s2, &s3] {
        sync_sub(&publisher, s, "!sync").await;
    }
    for topic in ["a1", "b1", "c1", "ab", "!end"] {
        send(&publisher, topic).await;
    }
    assert_eq!(collect_until(&s1, "!end").await, ["a1", "ab"]);
    assert_eq!(collect_until(&s2, "!end").await, ["b1"]);
    assert_eq!(collect_until(&s3, "!end").await, ["a1", "b1", "c1", "ab"]);
}

// ---------------------------------------------------------------------------------------------
// REQ / REP
// ---------------------------------------------------------------------------------------------

async fn req_rep_round_trip(t: &'static str) {
    let rep = sock(SocketType::Rep);
    let ep = bind(&rep, t, "req-rep").await;
    let req = sock(SocketType::Req);
    connect(&req, &ep).await;
    for round in 0..3 {
        let q = format!("q{round}");
        send(&req, msg(&[&q, "part-2", ""])).await;
        assert_eq!(recv_strs(&rep).await, [q.as_str(), "part-2", ""]);
        send(&rep, msg(&["r", &q])).await;
        assert_eq!(recv_strs(&req).await, ["r", q.as_str()]);
    }
}

async fn req_rep_alternation(t: &'static str) {
    let rep = sock(SocketType::Rep);
    let ep = bind(&rep, t, "req-rep-fsm").await;
    let req = sock(SocketType::Req);
    connect(&req, &ep).await;

    // REQ cannot receive before sending; REP cannot send before receiving.
    assert!(matches!(timeout(WAIT, req.recv()).await, Ok(Err(Error::InvalidState))));
    assert!(matches!(req.try_recv(), Err(Error::InvalidState)));
    assert!(matches!(timeout(WAIT, rep.send("early")).await, Ok(Err(Error::InvalidState))));
    assert!(matches!(rep.try_send("early"), Err(Error::InvalidState)));

    send(&req, "q1").await;
    // A second request before the reply is refused.
    assert!(matches!(timeout(WAIT, req.send("q2")).await, Ok(Err(Error::InvalidState))));
    assert!(matches!(req.try_send("q2"), Err(Error::InvalidState)));

    assert_eq!(recv_strs(&rep).await, ["q1"]);
    // REP must reply before receiving again.
    assert!(matches!(timeout(WAIT, rep.recv()).await, Ok(Err(Error::InvalidState))));
    send(&rep, "a1").await;
    assert!(matches!(rep.try_send("a1-again"), Err(Error::InvalidState)));
    assert_eq!(recv_strs(&req).await, ["a1"]);

    // The cycle starts over, and the refused q2 was never sent.
    send(&req, "q3").await;
    assert_eq!(recv_strs(&rep).await, ["q3"]);
    send(&rep, "a3").await;
    assert_eq!(recv_strs(&req).await, ["a3"]);
}

/// Answers every request with [name, request...] until the test ends.
fn spawn_echo_rep(rep: Socket, name: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok(m) = rep.recv().await {
            let mut reply = Message::single(name);
            for f in m {
                reply.push(f);
            }
            if rep.send(reply).await.is_err() {
                return;
            }
        }
    })
}

/// REQ load-balances requests over its peers in connect order.
async fn req_round_robin(t: &'static str) {
    let (rep_a, rep_b) = (sock(SocketType::Rep), sock(SocketType::Rep));
    let ep_a = bind(&rep_a, t, "req-rr-a").await;
    let ep_b = bind(&rep_b, t, "req-rr-b").await;
    let echo_a = spawn_echo_rep(rep_a, "A");
    let echo_b = spawn_echo_rep(rep_b, "B");
    let req = sock(SocketType::Req);
    connect(&req, &ep_a).await;
    connect(&req, &ep_b).await;
    let mut served = Vec::new();
    for i in 0..6 {
        let q = format!("q{i}");
        send(&req, q.clone()).await;
        let reply = recv_strs(&req).await;
        assert_eq!(reply[1], q);
        served.push(reply[0].clone());
    }
    assert_eq!(served, ["A", "B", "A", "B", "A", "B"]);
    echo_a.abort();
    echo_b.abort();
}

/// REQ_RELAXED: a new request may go out before the reply; only the reply to the latest request
/// (from the peer it went to) is delivered.
async fn req_relaxed(t: &'static str) {
    let (rep_a, rep_b) = (sock(SocketType::Rep), sock(SocketType::Rep));
    let ep_a = bind(&rep_a, t, "req-relaxed-a").await;
    let ep_b = bind(&rep_b, t, "req-relaxed-b").await;
    let req = sock(SocketType::Req);
    req.set_req_relaxed(true);
    connect(&req, &ep_a).await;
    connect(&req, &ep_b).await;
    send(&req, "A").await;
    send(&req, "B").await; // allowed: relaxed
    assert_eq!(recv_strs(&rep_a).await, ["A"]);
    assert_eq!(recv_strs(&rep_b).await, ["B"]);
    send(&rep_a, "reply-A").await; // stale: dropped by REQ
    send(&rep_b, "reply-B").await;
    assert_eq!(recv_strs(&req).await, ["reply-B"]);
}

/// ROUTER talking to REQ sees the envelope [id, "", body...] and must reply with it.
async fn router_req_envelope(t: &'static str) {
    let router = sock(SocketType::Router);
    let ep = bind(&router, t, "router-req").await;
    let req = sock(SocketType::Req);
    req.set_routing_id("R").unwrap();
    connect(&req, &ep).await;
    send(&req, msg(&["body", "more"])).await;
    assert_eq!(recv_strs(&router).await, ["R", "", "body", "more"]);
    send(&router, msg(&["R", "", "reply", "more"])).await;
    assert_eq!(recv_strs(&req).await, ["reply", "more"]);
}

/// DEALER talking to REP must add the "" delimiter itself; REP drops requests without one and
/// restores the whole envelope on the reply.
async fn dealer_rep_envelope(t: &'static str) {
    let rep = sock(SocketType::Rep);
    let ep = bind(&rep, t, "dealer-rep").await;
    let dealer = sock(SocketType::Dealer);
    connect(&dealer, &ep).await;
    send(&dealer, "no-delimiter").await; // dropped by REP
    send(&dealer, msg(&["", "body"])).await;
    assert_eq!(recv_strs(&rep).await, ["body"]);
    send(&rep, "reply").await;
    assert_eq!(recv_strs(&dealer).await, ["", "reply"]);
    send(&dealer, msg(&["hop", "", "body-2", "x"])).await;
    assert_eq!(recv_strs(&rep).await, ["body-2", "x"]);
    send(&rep, "reply-2").await;
    assert_eq!(recv_strs(&dealer).await, ["hop", "", "reply-2"]);
}

// ---------------------------------------------------------------------------------------------
// PAIR
// ---------------------------------------------------------------------------------------------

/// A bound PAIR accepts one peer; a second one is refused and the first keeps working.
async fn pair_exclusive(t: &'static str) {
    let bound = sock(SocketType::Pair);
    let mut mon = bound.monitor();
    let ep = bind(&bound, t, "pair").await;
    let first = sock(SocketType::Pair);
    connect(&first, &ep).await;
    handshakes(&mut mon, 1).await;
    send(&first, "hi").await;
    assert_eq!(recv_strs(&bound).await, ["hi"]);

    let second = sock(SocketType::Pair);
    connect(&second, &ep).await;
    send(&second, "intruder").await; // queued on second's own connect slot
    // As in libzmq, the ZMTP handshake succeeds; then the PAIR turns the peer away.
    handshakes(&mut mon, 1).await;
    let outcome =
        wait_event(&mut mon, "the second PAIR's refusal", |e| matches!(e, MonitorEvent::Disconnected { .. })).await;
    if let MonitorEvent::Disconnected { error, .. } = &outcome {
        assert!(matches!(&**error, ConnectionError::Refused(_)), "refusal reason: {error:?}");
    }

    send(&bound, "to-first").await;
    assert_eq!(recv_strs(&first).await, ["to-first"]);
    send(&first, "still-here").await;
    assert_eq!(recv_strs(&bound).await, ["still-here"]);
    assert_silent(&second, "the second PAIR").await;
    assert!(matches!(bound.try_recv(), Err(Error::WouldBlock)), "the second PAIR's message must not be delivered");
}

// ---------------------------------------------------------------------------------------------
// Reconnect
// ---------------------------------------------------------------------------------------------

/// A SUB keeps receiving after its PUB restarts on the same endpoint (it re-sends its
/// subscriptions on reconnect).
async fn sub_survives_pub_restart(t: &'static str) {
    let pub1 = sock(SocketType::Pub);
    pub1.set_linger(Some(Duration::ZERO));
    let ep = bind(&pub1, t, "pub-restart").await;
    let sub = sock(SocketType::Sub);
    sub.subscribe("topic").unwrap();
    connect(&sub, &ep).await;
    sync_sub(&pub1, &sub, "topic-before").await;
    pub1.close().await;

    let pub2 = sock(SocketType::Pub);
    let bound = bind_retry(&pub2, &ep).await;
    assert_eq!(bound, ep);
    let resumed = timeout(WAIT, async {
        loop {
            send(&pub2, msg(&["topic-after", "x"])).await;
            send(&pub2, "other").await; // not subscribed: must never arrive
            while let Some(m) = recv_within(&sub, Duration::from_millis(20)).await {
                let frames = strs(&m);
                assert!(frames[0].starts_with("topic"), "unsubscribed {frames:?}");
                if frames[0] == "topic-after" {
                    assert_eq!(frames, ["topic-after", "x"]);
                    return;
                }
            }
        }
    })
    .await;
    resumed.expect("SUB never received from the restarted PUB");
}

// ---------------------------------------------------------------------------------------------
// Heartbeats
// ---------------------------------------------------------------------------------------------

/// The 64-byte ZMTP 3.1 NULL greeting (zmtp-wire.md §1.1).
fn raw_greeting() -> Vec<u8> {
    let mut g = vec![0u8; 64];
    g[0] = 0xff;
    g[8] = 1;
    g[9] = 0x7f;
    g[10] = 3;
    g[11] = 1;
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// READY exactly as a libzmq DEALER sends it (zmtp-wire.md §1.4).
fn raw_ready_dealer() -> Vec<u8> {
    let mut r = vec![0x04, 0x29, 0x05];
    r.extend_from_slice(b"READY");
    r.push(0x0b);
    r.extend_from_slice(b"Socket-Type");
    r.extend_from_slice(&[0, 0, 0, 6]);
    r.extend_from_slice(b"DEALER");
    r.push(0x08);
    r.extend_from_slice(b"Identity");
    r.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(r.len(), 2 + 0x29);
    r
}

fn router_with_heartbeat() -> Socket {
    let router = sock(SocketType::Router);
    router.set_heartbeat_ivl(Duration::from_millis(50));
    router.set_heartbeat_timeout(Some(Duration::from_millis(100)));
    router
}

/// libzmq test_heartbeats: a ROUTER with HEARTBEAT_IVL 50 ms drops a peer that completed the
/// handshake and then never answers a PING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_disconnects_silent_raw_peer() {
    bounded(async {
        let router = router_with_heartbeat();
        let mut mon = router.monitor();
        let ep = bind(&router, "tcp", "hb-raw").await;
        let addr = ep.strip_prefix("tcp://").expect("tcp endpoint");
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream.write_all(&raw_greeting()).await.expect("greeting");
        stream.write_all(&raw_ready_dealer()).await.expect("READY");
        let mut seen = Vec::new();
        let ended = timeout(Duration::from_secs(5), async {
            let mut buf = [0u8; 4096];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        ended.expect("silent peer still connected after 5 s");
        assert!(seen.windows(5).any(|w| w == b"\x04PING"), "the ROUTER never sent a PING");
        let event = wait_event(&mut mon, "Disconnected/HandshakeFailed", |e| {
            matches!(e, MonitorEvent::Disconnected { .. } | MonitorEvent::HandshakeFailed { .. })
        })
        .await;
        match event {
            MonitorEvent::Disconnected { error, .. } => {
                assert!(matches!(&*error, ConnectionError::HeartbeatTimeout), "disconnect reason: {error:?}")
            }
            other => panic!("handshake should have succeeded: {other:?}"),
        }
    })
    .await
}

/// A zmtp DEALER answers the ROUTER's PINGs and stays connected.
async fn heartbeat_keeps_live_peer(t: &'static str) {
    let router = router_with_heartbeat();
    let mut mon = router.monitor();
    let ep = bind(&router, t, "hb-live").await;
    let dealer = sock(SocketType::Dealer);
    dealer.set_routing_id("D").unwrap();
    let mut dealer_mon = dealer.monitor();
    connect(&dealer, &ep).await;
    handshakes(&mut mon, 1).await;
    // 15 heartbeat intervals with no application traffic.
    let dropped = timeout(Duration::from_millis(750), async {
        wait_event(&mut mon, "Disconnected", |e| {
            matches!(e, MonitorEvent::Disconnected { .. } | MonitorEvent::HandshakeFailed { .. })
        })
        .await
    })
    .await;
    if let Ok(event) = dropped {
        panic!("live peer was dropped: {event:?}");
    }
    let dealer_events = pending_events(&mut dealer_mon);
    assert!(
        !dealer_events.iter().any(|e| matches!(e, MonitorEvent::Disconnected { .. })),
        "dealer saw {dealer_events:?}"
    );
    send(&dealer, "alive").await;
    assert_eq!(recv_strs(&router).await, ["D", "alive"]);
    send(&router, msg(&["D", "yes"])).await;
    assert_eq!(recv_strs(&dealer).await, ["yes"]);
}

// ---------------------------------------------------------------------------------------------
// Cancel safety
// ---------------------------------------------------------------------------------------------

/// recv() raced against a short timer loses nothing: every message arrives exactly once, in order.
async fn recv_cancel_safety(t: &'static str) {
    const N: usize = 2000;
    let pull = sock(SocketType::Pull);
    let ep = bind(&pull, t, "cancel-recv").await;
    let push = sock(SocketType::Push);
    connect(&push, &ep).await;
    let mut cancelled = 0;
    // Nothing is coming yet: these recv() calls are certainly cancelled.
    for _ in 0..3 {
        tokio::select! {
            m = pull.recv() => panic!("unexpected {m:?}"),
            _ = tokio::time::sleep(Duration::from_millis(1)) => cancelled += 1,
        }
    }
    let sender = tokio::spawn(async move {
        for i in 0..N {
            push.send(i.to_string()).await.expect("send");
            if i % 100 == 99 {
                // Gaps in the flow, so that receives are also cancelled mid-stream.
                tokio::time::sleep(Duration::from_millis(2)).await;
            } else {
                tokio::task::yield_now().await;
            }
        }
        push
    });
    let mut got = Vec::with_capacity(N);
    let received = timeout(WAIT, async {
        while got.len() < N {
            tokio::select! {
                m = pull.recv() => got.push(index(&m.expect("recv"))),
                _ = tokio::time::sleep(Duration::from_millis(1)) => cancelled += 1,
            }
        }
    })
    .await;
    received.unwrap_or_else(|_| panic!("only {} of {N} messages received", got.len()));
    assert!(got.iter().copied().eq(0..N), "lost/duplicated/reordered messages");
    assert!(cancelled >= 3);
    let _push = sender.await.expect("sender");
    assert!(matches!(pull.try_recv(), Err(Error::WouldBlock)));
}

/// send() on a full PUSH raced against a timer: the messages whose send completed are all
/// received, in order, and the ones whose send was cancelled are not.
async fn send_cancel_safety(t: &'static str) {
    const SIZE: usize = 32 * 1024;
    let pull = sock(SocketType::Pull);
    pull.set_rcvhwm(5);
    let ep = bind(&pull, t, "cancel-send").await;
    let push = sock(SocketType::Push);
    push.set_sndhwm(5);
    let mut mon = push.monitor();
    connect(&push, &ep).await;
    handshakes(&mut mon, 1).await;

    let payload = Bytes::from(vec![3u8; SIZE]);
    let item = |i: usize| Message::from(vec![Bytes::from(i.to_string()), payload.clone()]);
    let mut completed = Vec::new();
    let mut cancelled = Vec::new();
    let mut i = 0;
    // Phase 1: PULL does not read, so sends end up blocking and being cancelled.
    let mut consecutive = 0;
    while consecutive < 3 {
        tokio::select! {
            r = push.send(item(i)) => { r.expect("send"); completed.push(i); consecutive = 0; }
            _ = tokio::time::sleep(Duration::from_millis(20)) => { cancelled.push(i); consecutive += 1; }
        }
        i += 1;
        assert!(i < 5000, "PUSH never blocked");
    }
    let reader = tokio::spawn({
        let pull = pull.clone();
        async move {
            let mut got = Vec::new();
            loop {
                let m = pull.recv().await.expect("recv");
                if m[0] == "end" {
                    return got;
                }
                got.push(index(&m));
            }
        }
    });
    // Phase 2: PULL reads concurrently; sends race a 1 ms timer or a single yield, so some complete
    // and some are cancelled while the queue drains.
    for n in 0..300 {
        if n % 2 == 0 {
            tokio::select! {
                r = push.send(item(i)) => { r.expect("send"); completed.push(i); }
                _ = tokio::time::sleep(Duration::from_millis(1)) => cancelled.push(i),
            }
        } else {
            tokio::select! {
                r = push.send(item(i)) => { r.expect("send"); completed.push(i); }
                _ = tokio::task::yield_now() => cancelled.push(i),
            }
        }
        i += 1;
    }
    send(&push, "end").await;
    let got = timeout(WAIT, reader).await.expect("reader did not finish").expect("reader");
    assert!(cancelled.len() >= 3);
    assert_eq!(got, completed, "received != completed sends (cancelled: {cancelled:?})");
}

// ---------------------------------------------------------------------------------------------
// unbind / disconnect
// ---------------------------------------------------------------------------------------------

/// After unbind nothing gets through that endpoint: its connections close, new ones fail.
async fn unbind_stops_delivery(t: &'static str) {
    let pull = sock(SocketType::Pull);
    let mut mon = pull.monitor();
    let ep = bind(&pull, t, "unbind").await;
    let push1 = sock(SocketType::Push);
    connect(&push1, &ep).await;
    send(&push1, "before").await;
    assert_eq!(recv_strs(&pull).await, ["before"]);

    pull.unbind(&ep).await.expect("unbind");
    // The connection accepted on that endpoint is closed.
    disconnects(&mut mon, 1).await;
    assert!(matches!(pull.unbind(&ep).await, Err(Error::EndpointNotFound(_))));

    let push2 = sock(SocketType::Push);
    connect(&push2, &ep).await;
    send(&push2, "new-peer").await; // queued for a connection that never succeeds
    send(&push1, "old-peer").await;
    assert_silent(&pull, "PULL after unbind").await;
    // A connection already in the kernel's backlog may still be accepted and closed (libzmq's
    // listener also terminates asynchronously), but none may complete a handshake.
    let events = pending_events(&mut mon);
    assert!(
        !events.iter().any(|e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })),
        "a connection got through after unbind: {events:?}"
    );
}

/// After disconnect, messages go only to the remaining peers.
async fn disconnect_stops_delivery(t: &'static str) {
    let (pull_a, pull_b) = (sock(SocketType::Pull), sock(SocketType::Pull));
    let ep_a = bind(&pull_a, t, "disconnect-a").await;
    let ep_b = bind(&pull_b, t, "disconnect-b").await;
    let push = sock(SocketType::Push);
    let mut mon = push.monitor();
    connect(&push, &ep_a).await;
    connect(&push, &ep_b).await;
    handshakes(&mut mon, 2).await;
    for i in 0..4 {
        send(&push, format!("before-{i}")).await;
    }
    assert_eq!(recv_strs(&pull_a).await, ["before-0"]);
    assert_eq!(recv_strs(&pull_a).await, ["before-2"]);
    assert_eq!(recv_strs(&pull_b).await, ["before-1"]);
    assert_eq!(recv_strs(&pull_b).await, ["before-3"]);

    push.disconnect(&ep_a).await.expect("disconnect");
    assert!(matches!(push.disconnect(&ep_a).await, Err(Error::EndpointNotFound(_))));
    for i in 0..4 {
        send(&push, format!("after-{i}")).await;
    }
    for i in 0..4 {
        assert_eq!(recv_strs(&pull_b).await, [format!("after-{i}")]);
    }
    assert_silent(&pull_a, "the disconnected PULL").await;
}

/// `disconnect()` discards what was received from that connection and not yet read (libzmq's
/// `zmq_disconnect`), including what a PULL's receive took ahead of the application (up to 32).
/// pyzmq/libzmq 4.3.5, tcp and ipc: PUSH sends 10 and closes; PULL reads unread-0, disconnects,
/// and reads nothing more (without the disconnect it reads unread-1).
async fn disconnect_drops_what_was_received_but_not_read(t: &'static str) {
    let push = sock(SocketType::Push);
    let ep = bind(&push, t, "disconnect-unread").await;
    let pull = sock(SocketType::Pull);
    let mut mon = pull.monitor();
    connect(&pull, &ep).await;
    handshakes(&mut mon, 1).await;
    for i in 0..10 {
        send(&push, format!("unread-{i}")).await;
    }
    // Closing flushes: once the PULL sees the connection end, all ten are queued on its side.
    push.close().await;
    disconnects(&mut mon, 1).await;
    assert_eq!(recv_strs(&pull).await, ["unread-0"]);
    pull.disconnect(&ep).await.expect("disconnect");
    assert_silent(&pull, "the PULL after disconnect").await;
}

// ---------------------------------------------------------------------------------------------
// Stream / Sink, shared sockets
// ---------------------------------------------------------------------------------------------

async fn stream_and_sink(t: &'static str) {
    let pull = sock(SocketType::Pull);
    let ep = bind(&pull, t, "stream-sink").await;
    let push = sock(SocketType::Push);
    connect(&push, &ep).await;
    let mut sink = std::pin::pin!(push.sink());
    sink.send(msg(&["one", "1"])).await.expect("sink send");
    sink.send(msg(&["two"])).await.expect("sink send");
    let mut more = futures::stream::iter((3..6).map(|i| Ok(Message::single(i.to_string()))));
    sink.send_all(&mut more).await.expect("sink send_all");

    let mut stream = std::pin::pin!(pull.stream());
    let mut next = async || {
        timeout(WAIT, stream.next()).await.expect("stream stalled").expect("stream ended").expect("stream item")
    };
    assert_eq!(strs(&next().await), ["one", "1"]);
    assert_eq!(strs(&next().await), ["two"]);
    for i in 3..6 {
        assert_eq!(strs(&next().await), [i.to_string()]);
    }
}

/// One socket shared (cloned) by two tasks: one sends, the other receives.
async fn shared_socket_across_tasks(t: &'static str) {
    const N: usize = 2000;
    let echo = sock(SocketType::Dealer);
    let ep = bind(&echo, t, "shared").await;
    let echo_task = tokio::spawn(async move {
        while let Ok(m) = echo.recv().await {
            if echo.send(m).await.is_err() {
                return;
            }
        }
    });
    let dealer = sock(SocketType::Dealer);
    connect(&dealer, &ep).await;
    let tx = dealer.clone();
    let rx = dealer.clone();
    let sender = tokio::spawn(async move {
        for i in 0..N {
            tx.send(msg(&[&i.to_string(), "payload"])).await.expect("send");
        }
    });
    let receiver = tokio::spawn(async move {
        for i in 0..N {
            let m = rx.recv().await.expect("recv");
            assert_eq!(index(&m), i);
            assert_eq!(m[1], "payload");
        }
    });
    timeout(WAIT, sender).await.expect("sender stalled").expect("sender");
    timeout(WAIT, receiver).await.expect("receiver stalled").expect("receiver");
    echo_task.abort();
}

over_transports!(
    push_round_robin,
    pull_fair_queue,
    dealer_round_robin,
    dealer_fair_queue,
    dealer_blocks_without_peer,
    dealer_connect_before_bind,
    router_routes_by_identity,
    router_generated_ids,
    router_drops_unknown,
    router_mandatory,
    router_handover,
    router_duplicate_refused,
    dealer_probe_router,
    router_probe_router,
    push_blocks_at_hwm,
    pub_drops_at_hwm,
    sub_prefix_filter,
    sub_everything,
    sub_unsubscribe,
    sub_unsubscribe_filters_queued,
    sub_unsubscribe_filters_what_was_taken_ahead,
    sub_multiple_filters,
    req_rep_round_trip,
    req_rep_alternation,
    req_round_robin,
    req_relaxed,
    router_req_envelope,
    dealer_rep_envelope,
    pair_exclusive,
    sub_survives_pub_restart,
    heartbeat_keeps_live_peer,
    recv_cancel_safety,
    send_cancel_safety,
    unbind_stops_delivery,
    disconnect_stops_delivery,
    disconnect_drops_what_was_received_but_not_read,
    stream_and_sink,
    shared_socket_across_tasks,
);
