//! omq-tokio 0.33 under the common bench modes. Runtime: as omq's own benches, an omq `Context` with
//! its default single IO thread and the bench body run on it with `Context::block_on` (a
//! current-thread tokio runtime); `BENCH_RT=ct|mt` runs it on a plain tokio runtime instead.
//! HWM for the fan-out: 100,000 (large, finite; the same as rzmq).

use std::time::{Duration, Instant};

use bench_common::{self as common, Cmd, CtrlClient, CtrlServer, SubStats};
use bytes::Bytes;
use omq_tokio::{Context, Message, Options, Socket, SocketType};

const FANOUT_HWM: u32 = 100_000;

fn main() {
    let cmd = Cmd::from_env();
    if std::env::var("BENCH_RT").is_ok() {
        common::runtime("ct").block_on(run(cmd));
    } else {
        let ctx = Context::new();
        ctx.block_on(run(cmd));
    }
}

fn sock(t: SocketType) -> Socket {
    Socket::new(t, Options::default())
}

async fn run(cmd: Cmd) {
    match cmd.mode.as_str() {
        "thr-recv" => {
            let pull = sock(SocketType::Pull);
            pull.bind(cmd.str(0)).await.unwrap();
            common::ready();
            thr_recv(&pull, cmd.num(1), cmd.num(2)).await;
        }
        "thr-send" => {
            let push = sock(SocketType::Push);
            push.connect(cmd.str(0)).await.unwrap();
            thr_send(&push, cmd.num(1), cmd.num(2)).await;
            common::hold().await;
            push.close().await.unwrap();
        }
        "thr-inproc" => {
            // Two threads: the receiver on this runtime, the sender on a second omq context.
            let (size, count) = (cmd.num(0), cmd.num(1));
            let ep = format!("inproc://bench-thr-{}", std::process::id());
            let pull = sock(SocketType::Pull);
            pull.bind(ep.as_str()).await.unwrap();
            let sender = std::thread::spawn(move || {
                let ctx = Context::new();
                ctx.block_on(async move {
                    let push = sock(SocketType::Push);
                    push.connect(ep.as_str()).await.unwrap();
                    thr_send(&push, size, count).await;
                    push.close().await.unwrap();
                });
            });
            thr_recv(&pull, size, count).await;
            tokio::task::spawn_blocking(move || sender.join().unwrap()).await.unwrap();
        }
        "lat-server" => {
            let dr = cmd.str(1) == "dr";
            let s = sock(if dr { SocketType::Router } else { SocketType::Rep });
            s.bind(cmd.str(0)).await.unwrap();
            common::ready();
            let count = cmd.num(3);
            for _ in 0..count + common::lat_warmup(count) {
                let m = s.recv().await.unwrap();
                s.send(m).await.unwrap();
            }
            s.close().await.unwrap();
        }
        "lat-client" => {
            let dr = cmd.str(1) == "dr";
            let s = sock(if dr { SocketType::Dealer } else { SocketType::Req });
            s.connect(cmd.str(0)).await.unwrap();
            let (size, count) = (cmd.num(2), cmd.num(3));
            let payload = Bytes::from(vec![0u8; size]);
            for _ in 0..common::lat_warmup(count) {
                s.send(Message::single(payload.clone())).await.unwrap();
                s.recv().await.unwrap();
            }
            let mut rtts = Vec::with_capacity(count);
            for _ in 0..count {
                let t = Instant::now();
                s.send(Message::single(payload.clone())).await.unwrap();
                s.recv().await.unwrap();
                rtts.push(t.elapsed().as_nanos() as u64);
            }
            common::report_lat(&mut rtts);
            s.close().await.unwrap();
        }
        "pub" => {
            let size = cmd.num(1);
            let p = Socket::new(SocketType::Pub, Options::default().send_hwm(FANOUT_HWM));
            p.bind(cmd.str(0)).await.unwrap();
            let ctrl = CtrlServer::start(cmd.num(3) as u16);
            common::ready();
            let warm = Bytes::from(common::tagged(common::WARMUP, size));
            while !ctrl.go() {
                p.send(Message::single(warm.clone())).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let data = Bytes::from(common::tagged(common::DATA, size));
            for _ in 0..cmd.num(2) {
                p.send(Message::single(data.clone())).await.unwrap();
            }
            let end = Bytes::from(common::tagged(common::END, size));
            let deadline = Instant::now() + common::END_TIMEOUT;
            while !ctrl.done() && Instant::now() < deadline {
                p.send(Message::single(end.clone())).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        "subs" => {
            let n = cmd.num(1);
            let ep = cmd.str(0).to_string();
            let mut ctrl = CtrlClient::connect(cmd.num(3) as u16);
            let (warm_tx, mut warm_rx) = tokio::sync::mpsc::unbounded_channel();
            let mut tasks = Vec::new();
            for _ in 0..n {
                let s = Socket::new(SocketType::Sub, Options::default().recv_hwm(FANOUT_HWM));
                s.subscribe(Bytes::new()).await.unwrap();
                s.connect(ep.as_str()).await.unwrap();
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
        "mem-router" => {
            let r = sock(SocketType::Router);
            r.bind(cmd.str(0)).await.unwrap();
            let base = common::rss_kib();
            common::ready();
            for _ in 0..cmd.num(1) {
                let m = r.recv().await.unwrap();
                r.send(m).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            common::say(&format!("RESULT base_kib={base} kib={}", common::rss_kib()));
            tokio::task::spawn_blocking(common::wait_stdin_eof).await.unwrap();
        }
        "mem-dealers" => {
            let n = cmd.num(1);
            let base = common::rss_kib();
            let mut all: Vec<Socket> = Vec::with_capacity(n);
            let mut left = n;
            while left > 0 {
                let batch = left.min(100);
                let mut socks = Vec::with_capacity(batch);
                for _ in 0..batch {
                    let d = sock(SocketType::Dealer);
                    d.connect(cmd.str(0)).await.unwrap();
                    d.send(Message::single("hi")).await.unwrap();
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
        m => panic!("unknown mode {m}"),
    }
}

async fn thr_recv(pull: &Socket, size: usize, count: usize) {
    let first = pull.recv().await.unwrap();
    assert_eq!(first.byte_len(), size);
    let start = Instant::now();
    for _ in 1..count {
        pull.recv().await.unwrap();
    }
    common::report_thr(count, start.elapsed());
}

async fn thr_send(push: &Socket, size: usize, count: usize) {
    let payload = Bytes::from(vec![0u8; size]);
    for _ in 0..count {
        push.send(Message::single(payload.clone())).await.unwrap();
    }
}
