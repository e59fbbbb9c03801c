//! `Proxy` / `proxy()`: ROUTER↔DEALER with REQ clients and REP workers, PULL→PUSH, XSUB↔XPUB, a
//! capture socket receiving a copy of every message in both directions, pause/resume, and
//! terminate (also while a forward is blocked), over tcp, ipc and inproc.
//!
//! No sleeps are used for synchronisation: tests wait for messages or monitor events (bounded by
//! [`WAIT`]); fixed windows ([`QUIET`]) only assert that nothing arrives (e.g. while paused).

use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use zmtp::{Error, Message, Monitor, MonitorEvent, Proxy, ProxyControl, Socket, SocketType, proxy};

#[macro_use]
mod common;
use common::*;
use zmtp_testkit::bounded;

fn msg(frames: &[&str]) -> Message {
    frames.iter().map(|f| Bytes::copy_from_slice(f.as_bytes())).collect()
}

fn strs(m: &Message) -> Vec<String> {
    m.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect()
}

async fn send(s: &Socket, m: impl Into<Message>) {
    match timeout(WAIT, s.send(m)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{:?} send failed: {e}", s.socket_type()),
        Err(_) => panic!("{:?} send did not complete within {WAIT:?}", s.socket_type()),
    }
}

async fn recv_within(s: &Socket, limit: Duration) -> Option<Message> {
    match timeout(limit, s.recv()).await {
        Ok(Ok(m)) => Some(m),
        Ok(Err(e)) => panic!("{:?} recv failed: {e}", s.socket_type()),
        Err(_) => None,
    }
}

async fn recv_strs(s: &Socket) -> Vec<String> {
    let m = recv_within(s, WAIT).await.unwrap_or_else(|| panic!("{:?}: no message within {WAIT:?}", s.socket_type()));
    strs(&m)
}

async fn assert_silent(s: &Socket, who: &str) {
    if let Some(m) = recv_within(s, QUIET).await {
        panic!("{who} received {:?}, expected nothing", strs(&m));
    }
}

async fn handshakes(mon: &mut Monitor, n: usize) {
    for _ in 0..n {
        wait_event(mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;
    }
}

/// Connects and waits for the handshake.
async fn connect_live(s: &Socket, ep: &str) {
    let mut mon = s.monitor();
    connect(s, ep).await;
    handshakes(&mut mon, 1).await;
}

/// Starts a proxy between two bound sockets; returns their endpoints, its control and its task.
async fn start(
    transport: &str,
    front_type: SocketType,
    back_type: SocketType,
    capture: Option<Socket>,
) -> (String, String, ProxyControl, JoinHandle<zmtp::Result<()>>) {
    let front = Socket::new(front_type);
    let back = Socket::new(back_type);
    let front_ep = bind(&front, transport, "front").await;
    let back_ep = bind(&back, transport, "back").await;
    let mut p = Proxy::new(front, back);
    if let Some(c) = capture {
        p = p.with_capture(c);
    }
    let control = p.control();
    (front_ep, back_ep, control, tokio::spawn(p.run()))
}

/// Terminates the proxy and checks `run()` returned `Ok`.
async fn terminate(control: &ProxyControl, running: JoinHandle<zmtp::Result<()>>) {
    control.terminate();
    let result = timeout(WAIT, running).await.expect("run() returns after terminate").expect("proxy task");
    assert!(result.is_ok(), "terminate makes run() return Ok, got {result:?}");
}

/// A capture PUSH connected to a PULL tap (bound over `transport`); returns (capture, tap).
async fn capture_pair(transport: &str) -> (Socket, Socket) {
    let tap = Socket::new(SocketType::Pull);
    let ep = bind(&tap, transport, "capture").await;
    let capture = Socket::new(SocketType::Push);
    connect_live(&capture, &ep).await;
    (capture, tap)
}

// ---------------------------------------------------------------------------------------------
// ROUTER ↔ DEALER
// ---------------------------------------------------------------------------------------------

/// Three REQ clients and two REP workers through a ROUTER↔DEALER proxy: every request gets its own
/// reply, and both workers serve.
async fn router_dealer_req_rep(transport: &'static str) {
    let (front_ep, back_ep, control, running) = start(transport, SocketType::Router, SocketType::Dealer, None).await;

    let mut workers = Vec::new();
    for w in 0..2 {
        let rep = Socket::new(SocketType::Rep);
        connect_live(&rep, &back_ep).await;
        workers.push(tokio::spawn(async move {
            let mut served = 0;
            loop {
                let Ok(req) = rep.recv().await else { return served };
                let mut reply = Message::single(Bytes::from(format!("w{w}")));
                for f in req {
                    reply.push(f);
                }
                if rep.send(reply).await.is_err() {
                    return served;
                }
                served += 1;
            }
        }));
    }

    let mut clients = Vec::new();
    for c in 0..3 {
        let req = Socket::new(SocketType::Req);
        connect_live(&req, &front_ep).await;
        clients.push(tokio::spawn(async move {
            let mut by_worker = [0usize; 2];
            for k in 0..10 {
                let body = format!("c{c}-{k}");
                req.send(msg(&[&body, "tail"])).await.expect("request");
                let reply = timeout(WAIT, req.recv()).await.expect("reply in time").expect("reply");
                let reply = strs(&reply);
                assert_eq!(&reply[1..], [body.as_str(), "tail"], "the reply to this request");
                by_worker[if reply[0] == "w0" { 0 } else { 1 }] += 1;
            }
            by_worker
        }));
    }
    let mut totals = [0usize; 2];
    for c in clients {
        let by_worker = timeout(WAIT, c).await.expect("client done").expect("client task");
        totals[0] += by_worker[0];
        totals[1] += by_worker[1];
    }
    assert_eq!(totals[0] + totals[1], 30);
    assert!(totals[0] > 0 && totals[1] > 0, "DEALER load-balances over both workers: {totals:?}");
    terminate(&control, running).await;
    for w in workers {
        w.abort();
    }
}

over_transports!(router_dealer_req_rep);

// ---------------------------------------------------------------------------------------------
// PULL → PUSH, XSUB ↔ XPUB
// ---------------------------------------------------------------------------------------------

/// PUSH → [PULL|PUSH] → PULL: every message, in order, multipart intact.
async fn pull_push_pipeline(transport: &'static str) {
    let (front_ep, back_ep, control, running) = start(transport, SocketType::Pull, SocketType::Push, None).await;
    let producer = Socket::new(SocketType::Push);
    let consumer = Socket::new(SocketType::Pull);
    connect(&producer, &front_ep).await;
    connect(&consumer, &back_ep).await;
    for i in 0..200 {
        send(&producer, msg(&[&i.to_string(), "second", ""])).await;
    }
    for i in 0..200 {
        assert_eq!(recv_strs(&consumer).await, [i.to_string().as_str(), "second", ""]);
    }
    assert_silent(&consumer, "consumer").await;
    terminate(&control, running).await;
}

/// PUB → [XSUB|XPUB] → SUB: the SUB's subscription reaches the PUB through the proxy, and only
/// matching messages arrive.
async fn xsub_xpub_forwarder(transport: &'static str) {
    let (front_ep, back_ep, control, running) = start(transport, SocketType::XSub, SocketType::XPub, None).await;
    let publisher = Socket::new(SocketType::Pub);
    let mut pub_mon = publisher.monitor();
    connect(&publisher, &front_ep).await;
    handshakes(&mut pub_mon, 1).await;
    let sub = Socket::new(SocketType::Sub);
    sub.subscribe("x").expect("subscribe");
    connect(&sub, &back_ep).await;
    // Publish until the subscription has travelled up through the proxy.
    let synced = timeout(WAIT, async {
        loop {
            send(&publisher, "x-sync").await;
            if recv_within(&sub, Duration::from_millis(20)).await.is_some() {
                return;
            }
        }
    })
    .await;
    synced.expect("subscription never reached the publisher through the proxy");
    send(&publisher, "y1").await;
    send(&publisher, "x1").await;
    send(&publisher, "end").await;
    send(&publisher, "x2").await;
    let mut got = Vec::new();
    loop {
        let m = recv_strs(&sub).await.remove(0);
        if m == "x2" {
            break;
        }
        if m != "x-sync" {
            got.push(m);
        }
    }
    assert_eq!(got, ["x1"]);
    terminate(&control, running).await;
}

over_transports!(pull_push_pipeline, xsub_xpub_forwarder);

// ---------------------------------------------------------------------------------------------
// Capture
// ---------------------------------------------------------------------------------------------

/// The capture socket gets a copy of every message, requests and replies, frames intact.
async fn capture_sees_both_directions(transport: &'static str) {
    let (capture, tap) = capture_pair(transport).await;
    let (front_ep, back_ep, control, running) =
        start(transport, SocketType::Router, SocketType::Dealer, Some(capture)).await;
    let rep = Socket::new(SocketType::Rep);
    connect_live(&rep, &back_ep).await;
    let req = Socket::new(SocketType::Req);
    req.set_routing_id("client").expect("routing id");
    connect_live(&req, &front_ep).await;

    for round in 0..3 {
        let ping = format!("ping{round}");
        let pong = format!("pong{round}");
        send(&req, ping.clone()).await;
        assert_eq!(recv_strs(&rep).await, [ping.as_str()]);
        send(&rep, pong.clone()).await;
        assert_eq!(recv_strs(&req).await, [pong.as_str()]);
        assert_eq!(recv_strs(&tap).await, ["client", "", ping.as_str()], "request as forwarded front → back");
        assert_eq!(recv_strs(&tap).await, ["client", "", pong.as_str()], "reply as forwarded back → front");
    }
    assert_silent(&tap, "capture").await;
    terminate(&control, running).await;
}

over_transports!(capture_sees_both_directions);

/// `proxy(frontend, backend, Some(capture))`, the plain function: forwards with capture and
/// returns the error once a socket is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_function_forwards_and_ends_with_closed() {
    bounded(async {
        let (capture, tap) = capture_pair("inproc").await;
        let front = Socket::new(SocketType::Pull);
        let back = Socket::new(SocketType::Push);
        let front_ep = bind(&front, "inproc", "fn-front").await;
        let back_ep = bind(&back, "inproc", "fn-back").await;
        let front_handle = front.clone();
        let running = tokio::spawn(proxy(front, back, Some(capture)));
        let producer = Socket::new(SocketType::Push);
        let consumer = Socket::new(SocketType::Pull);
        connect(&producer, &front_ep).await;
        connect(&consumer, &back_ep).await;
        send(&producer, "one").await;
        assert_eq!(recv_strs(&consumer).await, ["one"]);
        assert_eq!(recv_strs(&tap).await, ["one"]);
        front_handle.close().await;
        let result = timeout(WAIT, running).await.expect("proxy() returns").expect("task");
        assert!(matches!(result, Err(Error::Closed)), "a closed socket ends the proxy with Closed: {result:?}");
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Pause / resume / terminate
// ---------------------------------------------------------------------------------------------

/// While paused nothing is forwarded (messages wait in the queues); after resume they flow, in
/// order; terminate while paused makes run() return Ok.
async fn pause_and_resume(transport: &'static str) {
    let (front_ep, back_ep, control, running) = start(transport, SocketType::Pull, SocketType::Push, None).await;
    let producer = Socket::new(SocketType::Push);
    let consumer = Socket::new(SocketType::Pull);
    connect(&producer, &front_ep).await;
    connect(&consumer, &back_ep).await;
    send(&producer, "before").await;
    assert_eq!(recv_strs(&consumer).await, ["before"]);

    control.pause();
    for i in 0..5 {
        send(&producer, format!("paused-{i}")).await;
    }
    assert_silent(&consumer, "consumer while the proxy is paused").await;
    control.resume();
    for i in 0..5 {
        assert_eq!(recv_strs(&consumer).await, [format!("paused-{i}")]);
    }
    send(&producer, "after").await;
    assert_eq!(recv_strs(&consumer).await, ["after"]);

    control.pause();
    send(&producer, "never").await;
    assert_silent(&consumer, "consumer while paused again").await;
    terminate(&control, running).await;
}

over_transports!(pause_and_resume);

/// A pause reaches a batch whose send waits for room: once `pause()` has returned, only what the
/// backend had already taken arrives (its queues hold a few messages at these HWMs), then nothing
/// until `resume()`, and then the rest of the batch, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_stops_a_batch_that_waits_for_room() {
    bounded(async {
        let (front, back) = (Socket::new(SocketType::Pull), Socket::new(SocketType::Push));
        back.set_sndhwm(1);
        let front_ep = bind(&front, "inproc", "pause-batch-front").await;
        let back_ep = bind(&back, "inproc", "pause-batch-back").await;
        let proxy = Proxy::new(front, back);
        let control = proxy.control();
        let running = tokio::spawn(proxy.run());
        let (producer, consumer) = (Socket::new(SocketType::Push), Socket::new(SocketType::Pull));
        consumer.set_rcvhwm(1);
        connect_live(&producer, &front_ep).await;
        connect_live(&consumer, &back_ep).await;
        // One send of 50: they reach the proxy's frontend together, and it takes them as one batch.
        let mut batch: Vec<Message> = (0..50).map(|i| Message::from(format!("{i}"))).collect();
        producer.send_many(&mut batch).await.expect("queued");
        let number = |frames: Vec<String>| frames[0].parse::<usize>().expect("a number");
        let mut got = vec![number(recv_strs(&consumer).await)];
        control.pause();
        while let Some(m) = recv_within(&consumer, QUIET).await {
            got.push(number(strs(&m)));
        }
        assert!(got.len() <= PAUSE_SLACK, "the batch went on crossing while paused: {got:?}");
        control.resume();
        while got.len() < 50 {
            got.push(number(recv_strs(&consumer).await));
        }
        assert!(got.iter().copied().eq(0..50), "{got:?}");
        terminate(&control, running).await;
    })
    .await
}

/// What may still arrive after a pause at SNDHWM 1 and RCVHWM 1 over inproc: the backend's
/// queue, the consumer's, the one message its receive takes ahead, and the one in hand.
const PAUSE_SLACK: usize = 8;

/// A proxy stuck forwarding (the backend PUSH has no peer, so its send waits) still terminates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_while_a_forward_is_blocked() {
    bounded(async {
        let (front_ep, _back_ep, control, running) = start("tcp", SocketType::Pull, SocketType::Push, None).await;
        let producer = Socket::new(SocketType::Push);
        connect(&producer, &front_ep).await;
        send(&producer, "stuck").await;
        // The proxy took "stuck" and waits to hand it to a backend peer that never comes; its task
        // must still be running.
        let mut running = running;
        assert!(timeout(QUIET, &mut running).await.is_err(), "run() returned while forwarding");
        terminate(&control, running).await;
    })
    .await
}

/// The control is cheap to clone and works from another task; terminate before anything was
/// forwarded returns Ok at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_from_another_task() {
    bounded(async {
        let (_front, _back, control, running) = start("inproc", SocketType::Router, SocketType::Dealer, None).await;
        let remote = control.clone();
        tokio::spawn(async move { remote.terminate() }).await.expect("task");
        let result = timeout(WAIT, running).await.expect("run() returns").expect("task");
        assert!(result.is_ok(), "{result:?}");
    })
    .await
}
