//! monocoque-rs 0.4 under the common bench modes, on its tokio backend (current-thread runtime with a
//! LocalSet: monocoque's sockets are !Send). Its sockets are one connection each (a bound socket
//! accepts one peer), its PUB accepts subscribers one by one, and it has no socket-level inproc.
//! Default eager mode (one write per send); `BENCH_MONO_COALESCE=1` turns on its opt-in write
//! coalescing for the PUSH side (flushed once at the end), its documented throughput mode.

use std::time::{Duration, Instant};

use bench_common::{self as common, Cmd, CtrlClient, CtrlServer, SubStats};
use bytes::Bytes;
use monocoque::rt::{LocalRuntime, TcpListener, UnixListener, UnixStream};
use monocoque::zmq::{
    DealerSocket, PubSocket, PullSocket, PushSocket, RepSocket, ReqSocket, RouterSocket, SocketOptions, SubSocket,
};

// The socket types are distinct per stream type, so the loops are macros rather than generic fns.
macro_rules! thr_recv {
    ($pull:ident, $size:ident, $count:ident) => {{
        let first = $pull.recv().await.unwrap().unwrap();
        assert_eq!(first[0].len(), $size);
        let start = Instant::now();
        for _ in 1..$count {
            $pull.recv().await.unwrap().unwrap();
        }
        common::report_thr($count, start.elapsed());
    }};
}

macro_rules! thr_send {
    ($push:ident, $size:ident, $count:ident) => {{
        let payload = Bytes::from(vec![0u8; $size]);
        for _ in 0..$count {
            $push.send(vec![payload.clone()]).await.unwrap();
        }
        $push.flush().await.unwrap();
        common::hold().await;
    }};
}

macro_rules! lat_loop {
    ($s:ident, $payload:ident, $count:ident) => {{
        for _ in 0..common::lat_warmup($count) {
            $s.send(vec![$payload.clone()]).await.unwrap();
            $s.recv().await.unwrap().unwrap();
        }
        let mut rtts = Vec::with_capacity($count);
        for _ in 0..$count {
            let t = Instant::now();
            $s.send(vec![$payload.clone()]).await.unwrap();
            $s.recv().await.unwrap().unwrap();
            rtts.push(t.elapsed().as_nanos() as u64);
        }
        common::report_lat(&mut rtts);
    }};
}

fn main() {
    let cmd = Cmd::from_env();
    if cmd.mode == "thr-inproc" {
        eprintln!("monocoque has no socket-level inproc transport");
        std::process::exit(3);
    }
    LocalRuntime::new().unwrap().block_on(run(cmd));
}

fn ipc_path(ep: &str) -> Option<&str> {
    ep.strip_prefix("ipc://")
}

fn push_options() -> SocketOptions {
    let mut o = SocketOptions::default();
    if std::env::var("BENCH_MONO_COALESCE").is_ok_and(|v| v == "1") {
        o.write_coalescing = true;
    }
    o
}

async fn run(cmd: Cmd) {
    match cmd.mode.as_str() {
        "thr-recv" => {
            let (size, count) = (cmd.num(1), cmd.num(2));
            if let Some(path) = ipc_path(cmd.str(0)) {
                let l = UnixListener::bind(path).await.unwrap();
                common::ready();
                let (s, _) = l.accept().await.unwrap();
                let mut pull = PullSocket::from_unix_stream(s).await.unwrap();
                thr_recv!(pull, size, count);
            } else {
                let l = TcpListener::bind(common::bare_addr(cmd.str(0))).await.unwrap();
                common::ready();
                let (s, _) = l.accept().await.unwrap();
                let mut pull = PullSocket::from_tcp(s).await.unwrap();
                thr_recv!(pull, size, count);
            }
        }
        "thr-send" => {
            let (size, count) = (cmd.num(1), cmd.num(2));
            if let Some(path) = ipc_path(cmd.str(0)) {
                let s = UnixStream::connect(path).await.unwrap();
                let mut push = PushSocket::from_unix_stream_with_options(s, push_options()).await.unwrap();
                thr_send!(push, size, count);
            } else {
                let mut push =
                    PushSocket::connect_with_options(common::bare_addr(cmd.str(0)), push_options()).await.unwrap();
                thr_send!(push, size, count);
            }
        }
        "lat-server" => {
            let count = cmd.num(3);
            let total = count + common::lat_warmup(count);
            let l = TcpListener::bind(common::bare_addr(cmd.str(0))).await.unwrap();
            common::ready();
            let (s, _) = l.accept().await.unwrap();
            if cmd.str(1) == "dr" {
                let mut r = RouterSocket::from_tcp(s).await.unwrap();
                for _ in 0..total {
                    let m = r.recv().await.unwrap().unwrap();
                    r.send(m).await.unwrap();
                }
            } else {
                let mut r = RepSocket::from_tcp(s).await.unwrap();
                for _ in 0..total {
                    let m = r.recv().await.unwrap().unwrap();
                    r.send(m).await.unwrap();
                }
            }
        }
        "lat-client" => {
            let (size, count) = (cmd.num(2), cmd.num(3));
            let payload = Bytes::from(vec![0u8; size]);
            if cmd.str(1) == "dr" {
                let mut s = DealerSocket::connect(cmd.str(0)).await.unwrap();
                lat_loop!(s, payload, count);
            } else {
                let mut s = ReqSocket::connect(cmd.str(0)).await.unwrap();
                lat_loop!(s, payload, count);
            }
        }
        "pub" => {
            let size = cmd.num(1);
            let n_subs = cmd.num(4);
            let mut p = PubSocket::bind(common::bare_addr(cmd.str(0))).await.unwrap();
            let ctrl = CtrlServer::start(cmd.num(3) as u16);
            common::ready();
            for _ in 0..n_subs {
                p.accept_subscriber().await.unwrap();
            }
            let warm = Bytes::from(common::tagged(common::WARMUP, size));
            while !ctrl.go() {
                p.send(vec![warm.clone()]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let data = Bytes::from(common::tagged(common::DATA, size));
            for _ in 0..cmd.num(2) {
                p.send(vec![data.clone()]).await.unwrap();
            }
            let end = Bytes::from(common::tagged(common::END, size));
            let deadline = Instant::now() + common::END_TIMEOUT;
            while !ctrl.done() && Instant::now() < deadline {
                p.send(vec![end.clone()]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        "subs" => {
            let n = cmd.num(1);
            let mut ctrl = CtrlClient::connect(cmd.num(3) as u16);
            let (warm_tx, mut warm_rx) = tokio::sync::mpsc::unbounded_channel();
            let mut tasks = Vec::new();
            for _ in 0..n {
                let mut s = SubSocket::connect(cmd.str(0)).await.unwrap();
                s.subscribe(b"").await.unwrap();
                let warm_tx = warm_tx.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    let mut st = SubStats::default();
                    let m = s.recv().await.unwrap().unwrap();
                    let _ = warm_tx.send(());
                    if st.on_message(m[0][0]) {
                        return st;
                    }
                    loop {
                        let m = s.recv().await.unwrap().unwrap();
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
            // No multi-peer ROUTER: one RouterSocket per accepted connection, each in its own task.
            let n = cmd.num(1);
            let l = TcpListener::bind(common::bare_addr(cmd.str(0))).await.unwrap();
            let base = common::rss_kib();
            common::ready();
            let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
            for _ in 0..n {
                let (s, _) = l.accept().await.unwrap();
                let done_tx = done_tx.clone();
                tokio::task::spawn_local(async move {
                    let mut r = RouterSocket::from_tcp(s).await.unwrap();
                    let m = r.recv().await.unwrap().unwrap();
                    r.send(m).await.unwrap();
                    let _ = done_tx.send(());
                    std::future::pending::<()>().await;
                    drop(r);
                });
            }
            for _ in 0..n {
                done_rx.recv().await.unwrap();
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
                    let mut d = DealerSocket::connect(cmd.str(0)).await.unwrap();
                    d.send(vec![Bytes::from_static(b"hi")]).await.unwrap();
                    socks.push(d);
                }
                for d in &mut socks {
                    d.recv().await.unwrap().unwrap();
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
