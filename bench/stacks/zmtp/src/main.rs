//! zmtp (this project) under the common bench modes (see bench/common/src/lib.rs).
//! Runtime: tokio current-thread by default, as zmtp's own perf tools (`BENCH_RT=mt` to compare);
//! the fan-out's subscriber process, with many sockets, runs on a two-worker multi-thread runtime (as
//! libzmq's runs an application thread and an I/O thread): +20% delivered at 10 and 100 subscribers,
//! -8% at one, where current-thread stays.

use std::time::{Duration, Instant};

use bench_common::{self as common, Cmd, CtrlClient, CtrlServer, SubStats};
use bytes::Bytes;
use zmtp::{Message, Socket, SocketType};

const DEFAULT_RT: &str = "ct";

fn main() {
    let cmd = Cmd::from_env();
    match cmd.mode.as_str() {
        "thr-inproc" => thr_inproc(cmd.num(0), cmd.num(1)),
        "subs" if cmd.num(1) > 1 => common::runtime("mt").block_on(run(cmd)),
        _ => common::runtime(DEFAULT_RT).block_on(run(cmd)),
    }
}

async fn run(cmd: Cmd) {
    match cmd.mode.as_str() {
        "thr-recv" => {
            let pull = Socket::new(SocketType::Pull);
            // The batch variant is the fast path a user opts into, as monocoque's coalescing mode
            // is: messages without connection properties (monocoque has none to offer).
            pull.set_msg_properties(!batched());
            if common::curve() {
                pull.set_curve_server(true);
                pull.set_curve_secretkey(common::CURVE_SERVER_SECRET).unwrap();
            }
            pull.bind(cmd.str(0)).await.unwrap();
            common::ready();
            // In a spawned task, as the echo loops below (see there): from the `block_on` future
            // each wake costs a zero-timeout `epoll_wait` first.
            let (size, count) = (cmd.num(1), cmd.num(2));
            tokio::spawn(async move { thr_recv(&pull, size, count).await }).await.unwrap();
        }
        "thr-send" => {
            let push = Socket::new(SocketType::Push);
            if common::curve() {
                push.set_curve_secretkey(common::CURVE_CLIENT_SECRET).unwrap();
                push.set_curve_serverkey(common::CURVE_SERVER_PUBLIC).unwrap();
            }
            push.connect(cmd.str(0)).await.unwrap();
            // Spawned too: a sender at its HWM waits for its connection's writer once per 1,000
            // messages (SNDHWM), and from `block_on` each of those waits cost a zero-timeout
            // `epoll_wait` (batch API, 64 B: 22.3-22.6 -> 23.3-23.8 M/s, 3 alternations).
            let (size, count, sender) = (cmd.num(1), cmd.num(2), push.clone());
            tokio::spawn(async move { thr_send(&sender, size, count).await }).await.unwrap();
            common::hold().await;
            push.close().await;
        }
        // The echo loops run in a spawned task, as a tokio server's work does (zmtp's own perf tools
        // too): in the `block_on` future itself, each wake from zmtp's connection tasks costs a
        // zero-timeout `epoll_wait` first (the current-thread scheduler polls its driver before it
        // polls a `block_on` future a task woke), two poll syscalls per round trip instead of one.
        "lat-server" => {
            let (ep, dr, count) = (cmd.str(0).to_owned(), cmd.str(1) == "dr", cmd.num(3));
            tokio::spawn(async move { lat_server(&ep, dr, count).await }).await.unwrap()
        }
        "lat-client" => {
            let (ep, dr, size, count) = (cmd.str(0).to_owned(), cmd.str(1) == "dr", cmd.num(2), cmd.num(3));
            tokio::spawn(async move { lat_client(&ep, dr, size, count).await }).await.unwrap()
        }
        "pub" => publisher(cmd.str(0), cmd.num(1), cmd.num(2), cmd.num(3) as u16).await,
        "subs" => subscribers(cmd.str(0), cmd.num(1), cmd.num(3) as u16).await,
        "mem-router" => mem_router(cmd.str(0), cmd.num(1)).await,
        "mem-dealers" => mem_dealers(cmd.str(0), cmd.num(1)).await,
        m => panic!("unknown mode {m}"),
    }
}

/// `BENCH_ZMTP_BATCH=1`: the batch API (`send_many` to send, `recv_many` to receive; `sink`: the
/// coalescing `Sink` to send), the counterpart of monocoque's opt-in write coalescing.
fn batched() -> bool {
    std::env::var("BENCH_ZMTP_BATCH").is_ok_and(|v| v == "1" || v == "many" || v == "sink")
}

async fn thr_recv(pull: &Socket, size: usize, count: usize) {
    if batched() {
        return thr_recv_many(pull, size, count).await;
    }
    let first = pull.recv().await.unwrap();
    assert_eq!(first.byte_len(), size);
    let start = Instant::now();
    for _ in 1..count {
        let m = pull.recv().await.unwrap();
        debug_assert_eq!(m.byte_len(), size);
    }
    common::report_thr(count, start.elapsed());
}

async fn thr_recv_many(pull: &Socket, size: usize, count: usize) {
    let mut got = Vec::with_capacity(1024);
    let mut seen = pull.recv_many(&mut got, 1024).await.unwrap();
    assert_eq!(got[0].byte_len(), size);
    let start = Instant::now();
    while seen < count {
        got.clear();
        seen += pull.recv_many(&mut got, 1024).await.unwrap();
    }
    common::report_thr(count, start.elapsed());
}

async fn thr_send(push: &Socket, size: usize, count: usize) {
    let payload = Bytes::from(vec![0u8; size]);
    // The batch API: `send_many` of a reused Vec, 256 messages a call. `BENCH_ZMTP_BATCH=sink`
    // feeds the coalescing Sink instead (futures' `feed` moves each message through an `Option`
    // in its future: about a tenth more CPU per 64-byte message on the sender).
    if std::env::var("BENCH_ZMTP_BATCH").is_ok_and(|v| v == "1" || v == "many") {
        let mut batch = Vec::with_capacity(256);
        for sent in 0..count {
            batch.push(Message::single(payload.clone()));
            if batch.len() == 256 || sent + 1 == count {
                push.send_many(&mut batch).await.unwrap();
            }
        }
        return;
    }
    if batched() {
        use futures::SinkExt;
        let mut sink = push.sink();
        for _ in 0..count {
            sink.feed(Message::single(payload.clone())).await.unwrap();
        }
        sink.flush().await.unwrap();
        return;
    }
    for _ in 0..count {
        push.send(Message::single(payload.clone())).await.unwrap();
    }
}

fn thr_inproc(size: usize, count: usize) {
    let ep = format!("inproc://bench-thr-{}", std::process::id());
    let (tx, rx) = std::sync::mpsc::channel();
    let ep2 = ep.clone();
    let receiver = std::thread::spawn(move || {
        common::runtime(DEFAULT_RT).block_on(async move {
            let pull = Socket::new(SocketType::Pull);
            pull.bind(&ep2).await.unwrap();
            tx.send(()).unwrap();
            thr_recv(&pull, size, count).await;
        })
    });
    rx.recv().unwrap();
    common::runtime(DEFAULT_RT).block_on(async move {
        let push = Socket::new(SocketType::Push);
        push.connect(&ep).await.unwrap();
        thr_send(&push, size, count).await;
        push.close().await;
    });
    receiver.join().unwrap();
}

/// `BENCH_ZMTP_BUSY_POLL=<µs>`: receives spin that long before parking (`Socket::set_busy_poll`).
fn busy_poll(s: &Socket) {
    if let Some(us) = std::env::var("BENCH_ZMTP_BUSY_POLL").ok().and_then(|v| v.parse().ok()) {
        s.set_busy_poll(Some(Duration::from_micros(us)));
    }
}

async fn lat_server(ep: &str, dealer_router: bool, count: usize) {
    let s = Socket::new(if dealer_router { SocketType::Router } else { SocketType::Rep });
    busy_poll(&s);
    s.bind(ep).await.unwrap();
    common::ready();
    for _ in 0..count + common::lat_warmup(count) {
        let m = s.recv().await.unwrap();
        s.send(m).await.unwrap();
    }
    s.close().await;
}

async fn lat_client(ep: &str, dealer_router: bool, size: usize, count: usize) {
    let s = Socket::new(if dealer_router { SocketType::Dealer } else { SocketType::Req });
    busy_poll(&s);
    s.connect(ep).await.unwrap();
    let payload = Bytes::from(vec![0u8; size]);
    for _ in 0..common::lat_warmup(count) {
        s.send(Message::single(payload.clone())).await.unwrap();
        s.recv().await.unwrap();
    }
    let mut rtts = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        s.send(Message::single(payload.clone())).await.unwrap();
        let r = s.recv().await.unwrap();
        rtts.push(t.elapsed().as_nanos() as u64);
        debug_assert_eq!(r.byte_len(), size);
    }
    common::report_lat(&mut rtts);
    s.close().await;
}

async fn publisher(ep: &str, size: usize, count: usize, ctrl: u16) {
    let p = Socket::new(SocketType::Pub);
    p.set_sndhwm(0);
    p.bind(ep).await.unwrap();
    let ctrl = CtrlServer::start(ctrl);
    common::ready();
    let warm = Bytes::from(common::tagged(common::WARMUP, size));
    while !ctrl.go() {
        p.send(Message::single(warm.clone())).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let data = Bytes::from(common::tagged(common::DATA, size));
    for _ in 0..count {
        p.send(Message::single(data.clone())).await.unwrap();
    }
    let end = Bytes::from(common::tagged(common::END, size));
    let deadline = Instant::now() + common::END_TIMEOUT;
    while !ctrl.done() && Instant::now() < deadline {
        p.send(Message::single(end.clone())).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn subscribers(ep: &str, n: usize, ctrl: u16) {
    let mut ctrl = CtrlClient::connect(ctrl);
    let (warm_tx, mut warm_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let s = Socket::new(SocketType::Sub);
        s.set_rcvhwm(0);
        s.subscribe(b"").unwrap();
        s.connect(ep).await.unwrap();
        let warm_tx = warm_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut st = SubStats::default();
            let m = s.recv().await.unwrap();
            let _ = warm_tx.send(());
            if st.on_message(m[0][0]) {
                return st;
            }
            loop {
                let m = s.recv().await.unwrap();
                if st.on_message(m[0][0]) {
                    return st;
                }
            }
        }));
    }
    for _ in 0..n {
        warm_rx.recv().await.unwrap();
    }
    ctrl.go();
    let mut stats = Vec::new();
    for t in tasks {
        stats.push(t.await.unwrap());
    }
    ctrl.done();
    common::report_fanout(&stats);
}

async fn mem_router(ep: &str, n: usize) {
    let r = Socket::new(SocketType::Router);
    r.set_rcvhwm(0);
    r.bind(ep).await.unwrap();
    let base = common::rss_kib();
    common::ready();
    for _ in 0..n {
        let m = r.recv().await.unwrap();
        r.send(m).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    common::say(&format!("RESULT base_kib={base} kib={}", common::rss_kib()));
    tokio::task::spawn_blocking(common::wait_stdin_eof).await.unwrap();
}

async fn mem_dealers(ep: &str, n: usize) {
    let base = common::rss_kib();
    let mut all = Vec::with_capacity(n);
    let mut left = n;
    while left > 0 {
        let batch = left.min(100);
        let mut socks = Vec::with_capacity(batch);
        for _ in 0..batch {
            let d = Socket::new(SocketType::Dealer);
            d.connect(ep).await.unwrap();
            d.send("hi").await.unwrap();
            socks.push(d);
        }
        for d in &socks {
            d.recv().await.unwrap();
        }
        all.extend(socks);
        left -= batch;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    common::say(&format!("RESULT base_kib={base} kib={}", common::rss_kib()));
    tokio::task::spawn_blocking(common::wait_stdin_eof).await.unwrap();
    drop(all);
}
