//! rzmq 0.5 under the common bench modes. Runtime: tokio multi-thread by default, as its examples and
//! benches (`BENCH_RT=ct` to compare); epoll sessions (its io_uring backend is opt-in and not used).
//! rzmq clamps HWM 0 to 1, so the fan-out uses 100,000 (what its own benches use).

use std::time::{Duration, Instant};

use bench_common::{self as common, Cmd, CtrlClient, CtrlServer, SubStats};
use bytes::Bytes;
use rzmq::socket::options::{RCVHWM, SNDHWM, SUBSCRIBE};
use rzmq::{Context, Msg, Socket, SocketType};

const DEFAULT_RT: &str = "mt";
const FANOUT_HWM: i32 = 100_000;

fn main() {
    let cmd = Cmd::from_env();
    common::runtime(DEFAULT_RT).block_on(run(cmd));
}

async fn run(cmd: Cmd) {
    let ctx = Context::new().unwrap();
    match cmd.mode.as_str() {
        "thr-recv" => {
            let pull = ctx.socket(SocketType::Pull).unwrap();
            pull.bind(cmd.str(0)).await.unwrap();
            common::ready();
            thr_recv(&pull, cmd.num(1), cmd.num(2)).await;
        }
        "thr-send" => {
            let push = ctx.socket(SocketType::Push).unwrap();
            push.connect(cmd.str(0)).await.unwrap();
            thr_send(&push, cmd.num(1), cmd.num(2)).await;
            common::hold().await;
        }
        "thr-inproc" => {
            let (size, count) = (cmd.num(0), cmd.num(1));
            let pull = ctx.socket(SocketType::Pull).unwrap();
            pull.bind("inproc://bench-thr").await.unwrap();
            let push = ctx.socket(SocketType::Push).unwrap();
            push.connect("inproc://bench-thr").await.unwrap();
            let sender = tokio::spawn(async move { thr_send(&push, size, count).await });
            thr_recv(&pull, size, count).await;
            sender.await.unwrap();
        }
        "lat-server" => {
            let dr = cmd.str(1) == "dr";
            let s = ctx.socket(if dr { SocketType::Router } else { SocketType::Rep }).unwrap();
            s.bind(cmd.str(0)).await.unwrap();
            common::ready();
            let count = cmd.num(3);
            for _ in 0..count + common::lat_warmup(count) {
                let m = s.recv_multipart().await.unwrap();
                s.send_multipart(m).await.unwrap();
            }
        }
        "lat-client" => {
            let dr = cmd.str(1) == "dr";
            let s = ctx.socket(if dr { SocketType::Dealer } else { SocketType::Req }).unwrap();
            s.connect(cmd.str(0)).await.unwrap();
            let (size, count) = (cmd.num(2), cmd.num(3));
            let payload = Bytes::from(vec![0u8; size]);
            for _ in 0..common::lat_warmup(count) {
                s.send(Msg::from_bytes(payload.clone())).await.unwrap();
                s.recv().await.unwrap();
            }
            let mut rtts = Vec::with_capacity(count);
            for _ in 0..count {
                let t = Instant::now();
                s.send(Msg::from_bytes(payload.clone())).await.unwrap();
                s.recv().await.unwrap();
                rtts.push(t.elapsed().as_nanos() as u64);
            }
            common::report_lat(&mut rtts);
        }
        "pub" => {
            let size = cmd.num(1);
            let p = ctx.socket(SocketType::Pub).unwrap();
            p.set_option(SNDHWM, FANOUT_HWM).await.unwrap();
            p.bind(cmd.str(0)).await.unwrap();
            let ctrl = CtrlServer::start(cmd.num(3) as u16);
            common::ready();
            let warm = Bytes::from(common::tagged(common::WARMUP, size));
            while !ctrl.go() {
                p.send(Msg::from_bytes(warm.clone())).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let data = Bytes::from(common::tagged(common::DATA, size));
            for _ in 0..cmd.num(2) {
                p.send(Msg::from_bytes(data.clone())).await.unwrap();
            }
            let end = Bytes::from(common::tagged(common::END, size));
            let deadline = Instant::now() + common::END_TIMEOUT;
            while !ctrl.done() && Instant::now() < deadline {
                p.send(Msg::from_bytes(end.clone())).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        "subs" => {
            let n = cmd.num(1);
            let mut ctrl = CtrlClient::connect(cmd.num(3) as u16);
            let (warm_tx, mut warm_rx) = tokio::sync::mpsc::unbounded_channel();
            let mut tasks = Vec::new();
            for _ in 0..n {
                let s = ctx.socket(SocketType::Sub).unwrap();
                s.set_option(RCVHWM, FANOUT_HWM).await.unwrap();
                s.set_option_raw(SUBSCRIBE, b"").await.unwrap();
                s.connect(cmd.str(0)).await.unwrap();
                let warm_tx = warm_tx.clone();
                tasks.push(tokio::spawn(async move {
                    let mut st = SubStats::default();
                    let m = s.recv().await.unwrap();
                    let _ = warm_tx.send(());
                    if st.on_message(m.data().unwrap()[0]) {
                        return st;
                    }
                    loop {
                        let m = s.recv().await.unwrap();
                        if st.on_message(m.data().unwrap()[0]) {
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
            let r = ctx.socket(SocketType::Router).unwrap();
            r.bind(cmd.str(0)).await.unwrap();
            let base = common::rss_kib();
            common::ready();
            for _ in 0..cmd.num(1) {
                let m = r.recv_multipart().await.unwrap();
                r.send_multipart(m).await.unwrap();
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
                    let d = ctx.socket(SocketType::Dealer).unwrap();
                    d.connect(cmd.str(0)).await.unwrap();
                    d.send(Msg::from_static(b"hi")).await.unwrap();
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
    // Deliver what is queued (LINGER -1 by default) and stop the actors.
    let _ = tokio::time::timeout(Duration::from_secs(30), ctx.term()).await;
}

async fn thr_recv(pull: &Socket, size: usize, count: usize) {
    let first = pull.recv().await.unwrap();
    assert_eq!(first.size(), size);
    let start = Instant::now();
    for _ in 1..count {
        pull.recv().await.unwrap();
    }
    common::report_thr(count, start.elapsed());
}

async fn thr_send(push: &Socket, size: usize, count: usize) {
    let payload = Bytes::from(vec![0u8; size]);
    for _ in 0..count {
        push.send(Msg::from_bytes(payload.clone())).await.unwrap();
    }
}
