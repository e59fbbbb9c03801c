//! zeromq 0.7 (zmq.rs) under the common bench modes. Runtime: tokio multi-thread by default, as its
//! examples (`BENCH_RT=ct` to compare). No inproc transport; HWM is not configurable (its queues are
//! fixed), so the fan-out counts what arrives.

use std::time::{Duration, Instant};

use bench_common::{self as common, Cmd, CtrlClient, CtrlServer, SubStats};
use bytes::Bytes;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

const DEFAULT_RT: &str = "mt";

macro_rules! lat_loop {
    ($s:ident, $payload:ident, $count:ident) => {{
        for _ in 0..common::lat_warmup($count) {
            $s.send(ZmqMessage::from($payload.clone())).await.unwrap();
            $s.recv().await.unwrap();
        }
        let mut rtts = Vec::with_capacity($count);
        for _ in 0..$count {
            let t = Instant::now();
            $s.send(ZmqMessage::from($payload.clone())).await.unwrap();
            $s.recv().await.unwrap();
            rtts.push(t.elapsed().as_nanos() as u64);
        }
        common::report_lat(&mut rtts);
        $s.close().await;
    }};
}

fn main() {
    let cmd = Cmd::from_env();
    if cmd.mode == "thr-inproc" {
        eprintln!("zeromq has no inproc transport");
        std::process::exit(3);
    }
    common::runtime(DEFAULT_RT).block_on(run(cmd));
}

async fn run(cmd: Cmd) {
    match cmd.mode.as_str() {
        "thr-recv" => {
            let mut pull = zeromq::PullSocket::new();
            pull.bind(cmd.str(0)).await.unwrap();
            common::ready();
            let (size, count) = (cmd.num(1), cmd.num(2));
            let first = pull.recv().await.unwrap();
            assert_eq!(first.get(0).unwrap().len(), size);
            let start = Instant::now();
            for _ in 1..count {
                pull.recv().await.unwrap();
            }
            common::report_thr(count, start.elapsed());
        }
        "thr-send" => {
            let mut push = zeromq::PushSocket::new();
            push.connect(cmd.str(0)).await.unwrap();
            let payload = Bytes::from(vec![0u8; cmd.num(1)]);
            for _ in 0..cmd.num(2) {
                push.send(ZmqMessage::from(payload.clone())).await.unwrap();
            }
            common::hold().await;
            push.close().await;
        }
        "lat-server" => {
            let count = cmd.num(3);
            let total = count + common::lat_warmup(count);
            if cmd.str(1) == "dr" {
                let mut s = zeromq::RouterSocket::new();
                s.bind(cmd.str(0)).await.unwrap();
                common::ready();
                for _ in 0..total {
                    let m = s.recv().await.unwrap();
                    s.send(m).await.unwrap();
                }
                s.close().await;
            } else {
                let mut s = zeromq::RepSocket::new();
                s.bind(cmd.str(0)).await.unwrap();
                common::ready();
                for _ in 0..total {
                    let m = s.recv().await.unwrap();
                    s.send(m).await.unwrap();
                }
                s.close().await;
            }
        }
        "lat-client" => {
            let (size, count) = (cmd.num(2), cmd.num(3));
            let payload = Bytes::from(vec![0u8; size]);
            if cmd.str(1) == "dr" {
                let mut s = zeromq::DealerSocket::new();
                s.connect(cmd.str(0)).await.unwrap();
                lat_loop!(s, payload, count);
            } else {
                let mut s = zeromq::ReqSocket::new();
                s.connect(cmd.str(0)).await.unwrap();
                lat_loop!(s, payload, count);
            }
        }
        "pub" => {
            let size = cmd.num(1);
            let mut p = zeromq::PubSocket::new();
            p.bind(cmd.str(0)).await.unwrap();
            let ctrl = CtrlServer::start(cmd.num(3) as u16);
            common::ready();
            let warm = Bytes::from(common::tagged(common::WARMUP, size));
            while !ctrl.go() {
                p.send(ZmqMessage::from(warm.clone())).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let data = Bytes::from(common::tagged(common::DATA, size));
            for _ in 0..cmd.num(2) {
                p.send(ZmqMessage::from(data.clone())).await.unwrap();
            }
            let end = Bytes::from(common::tagged(common::END, size));
            let deadline = Instant::now() + common::END_TIMEOUT;
            while !ctrl.done() && Instant::now() < deadline {
                p.send(ZmqMessage::from(end.clone())).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        "subs" => {
            let n = cmd.num(1);
            let mut ctrl = CtrlClient::connect(cmd.num(3) as u16);
            let (warm_tx, mut warm_rx) = tokio::sync::mpsc::unbounded_channel();
            let mut tasks = Vec::new();
            for _ in 0..n {
                let mut s = zeromq::SubSocket::new();
                s.subscribe("").await.unwrap();
                s.connect(cmd.str(0)).await.unwrap();
                let warm_tx = warm_tx.clone();
                tasks.push(tokio::spawn(async move {
                    let mut st = SubStats::default();
                    let m = s.recv().await.unwrap();
                    let _ = warm_tx.send(());
                    if st.on_message(m.get(0).unwrap()[0]) {
                        return st;
                    }
                    loop {
                        let m = s.recv().await.unwrap();
                        if st.on_message(m.get(0).unwrap()[0]) {
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
            let mut r = zeromq::RouterSocket::new();
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
            let mut all = Vec::with_capacity(n);
            let mut left = n;
            while left > 0 {
                let batch = left.min(100);
                let mut socks = Vec::with_capacity(batch);
                for _ in 0..batch {
                    let mut d = zeromq::DealerSocket::new();
                    d.connect(cmd.str(0)).await.unwrap();
                    d.send(ZmqMessage::from("hi")).await.unwrap();
                    socks.push(d);
                }
                for d in &mut socks {
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
