//! libzmq (Debian's libzmq3-dev, through the `zmq` crate's thin FFI) under the common bench modes.
//! Written the way libzmq's own perf tools are: blocking calls on the application thread, one I/O
//! thread per context (libzmq's default), messages reused where the C tools reuse them.

use std::time::{Duration, Instant};

use bench_common::{self as common, Cmd, CtrlClient, CtrlServer, SubStats};

fn main() {
    let cmd = Cmd::from_env();
    let ctx = zmq::Context::new();
    match cmd.mode.as_str() {
        "version" => {
            let (a, b, c) = zmq::version();
            common::say(&format!("{a}.{b}.{c}"));
        }
        "thr-recv" => {
            let pull = ctx.socket(zmq::PULL).unwrap();
            if common::curve() {
                pull.set_curve_server(true).unwrap();
                pull.set_curve_secretkey(&zmq::z85_decode(common::CURVE_SERVER_SECRET).unwrap()).unwrap();
            }
            pull.bind(cmd.str(0)).unwrap();
            common::ready();
            thr_recv(&pull, cmd.num(1), cmd.num(2));
        }
        "thr-send" => {
            let push = ctx.socket(zmq::PUSH).unwrap();
            if common::curve() {
                push.set_curve_serverkey(&zmq::z85_decode(common::CURVE_SERVER_PUBLIC).unwrap()).unwrap();
                push.set_curve_publickey(&zmq::z85_decode(common::CURVE_CLIENT_PUBLIC).unwrap()).unwrap();
                push.set_curve_secretkey(&zmq::z85_decode(common::CURVE_CLIENT_SECRET).unwrap()).unwrap();
            }
            push.connect(cmd.str(0)).unwrap();
            thr_send(&push, cmd.num(1), cmd.num(2));
            common::wait_stdin_eof();
        }
        "thr-inproc" => {
            let (size, count) = (cmd.num(0), cmd.num(1));
            let pull = ctx.socket(zmq::PULL).unwrap();
            pull.bind("inproc://bench-thr").unwrap();
            let ctx2 = ctx.clone();
            let sender = std::thread::spawn(move || {
                let push = ctx2.socket(zmq::PUSH).unwrap();
                push.connect("inproc://bench-thr").unwrap();
                thr_send(&push, size, count);
            });
            thr_recv(&pull, size, count);
            sender.join().unwrap();
        }
        "lat-server" => {
            let dr = cmd.str(1) == "dr";
            let s = ctx.socket(if dr { zmq::ROUTER } else { zmq::REP }).unwrap();
            s.bind(cmd.str(0)).unwrap();
            common::ready();
            let count = cmd.num(3);
            let mut msg = zmq::Message::new();
            for _ in 0..count + common::lat_warmup(count) {
                // Echo every frame (ROUTER: routing id, then body).
                loop {
                    s.recv(&mut msg, 0).unwrap();
                    let more = msg.get_more();
                    s.send(std::mem::replace(&mut msg, zmq::Message::new()), if more { zmq::SNDMORE } else { 0 })
                        .unwrap();
                    if !more {
                        break;
                    }
                }
            }
        }
        "lat-client" => {
            let dr = cmd.str(1) == "dr";
            let s = ctx.socket(if dr { zmq::DEALER } else { zmq::REQ }).unwrap();
            s.connect(cmd.str(0)).unwrap();
            let (size, count) = (cmd.num(2), cmd.num(3));
            let payload = vec![0u8; size];
            let mut msg = zmq::Message::new();
            for _ in 0..common::lat_warmup(count) {
                s.send(&payload[..], 0).unwrap();
                s.recv(&mut msg, 0).unwrap();
            }
            let mut rtts = Vec::with_capacity(count);
            for _ in 0..count {
                let t = Instant::now();
                s.send(&payload[..], 0).unwrap();
                s.recv(&mut msg, 0).unwrap();
                rtts.push(t.elapsed().as_nanos() as u64);
            }
            common::report_lat(&mut rtts);
        }
        "pub" => {
            let size = cmd.num(1);
            let p = ctx.socket(zmq::PUB).unwrap();
            p.set_sndhwm(0).unwrap();
            p.bind(cmd.str(0)).unwrap();
            let ctrl = CtrlServer::start(cmd.num(3) as u16);
            common::ready();
            let warm = common::tagged(common::WARMUP, size);
            while !ctrl.go() {
                p.send(&warm[..], 0).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            let data = common::tagged(common::DATA, size);
            for _ in 0..cmd.num(2) {
                p.send(&data[..], 0).unwrap();
            }
            let end = common::tagged(common::END, size);
            let deadline = Instant::now() + common::END_TIMEOUT;
            while !ctrl.done() && Instant::now() < deadline {
                p.send(&end[..], 0).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        "subs" => {
            let n = cmd.num(1);
            let mut ctrl = CtrlClient::connect(cmd.num(3) as u16);
            let subs: Vec<zmq::Socket> = (0..n)
                .map(|_| {
                    let s = ctx.socket(zmq::SUB).unwrap();
                    s.set_rcvhwm(0).unwrap();
                    s.set_subscribe(b"").unwrap();
                    s.connect(cmd.str(0)).unwrap();
                    s
                })
                .collect();
            let mut stats = vec![SubStats::default(); n];
            let mut warm = vec![false; n];
            let mut ended = vec![false; n];
            let (mut n_warm, mut n_ended) = (0, 0);
            let mut msg = zmq::Message::new();
            while n_ended < n {
                let mut items: Vec<zmq::PollItem> = subs.iter().map(|s| s.as_poll_item(zmq::POLLIN)).collect();
                zmq::poll(&mut items, 1000).unwrap();
                for (i, s) in subs.iter().enumerate() {
                    if ended[i] {
                        continue;
                    }
                    // Drain what is there without blocking.
                    while s.recv(&mut msg, zmq::DONTWAIT).is_ok() {
                        if !warm[i] {
                            warm[i] = true;
                            n_warm += 1;
                            if n_warm == n {
                                ctrl.go();
                            }
                        }
                        if stats[i].on_message(msg[0]) {
                            ended[i] = true;
                            n_ended += 1;
                            break;
                        }
                    }
                }
            }
            ctrl.done();
            common::report_fanout(&stats);
        }
        "mem-router" => {
            let r = ctx.socket(zmq::ROUTER).unwrap();
            r.set_rcvhwm(0).unwrap();
            r.bind(cmd.str(0)).unwrap();
            let base = common::rss_kib();
            common::ready();
            for _ in 0..cmd.num(1) {
                let m = r.recv_multipart(0).unwrap();
                r.send_multipart(m, 0).unwrap();
            }
            std::thread::sleep(Duration::from_millis(200));
            common::say(&format!("RESULT base_kib={base} kib={}", common::rss_kib()));
            common::wait_stdin_eof();
        }
        "mem-dealers" => {
            let n = cmd.num(1);
            let base = common::rss_kib();
            // A context holds at most 1023 sockets (ZMQ_MAX_SOCKETS, which the `zmq` crate does not
            // expose): one context per 1000 DEALERs, each with libzmq's default single I/O thread.
            let mut ctxs = vec![ctx.clone()];
            let mut all = Vec::with_capacity(n);
            let mut left = n;
            while left > 0 {
                let batch = left.min(100);
                if all.len() + batch > ctxs.len() * 1000 {
                    ctxs.push(zmq::Context::new());
                }
                let c = ctxs.last().unwrap();
                let socks: Vec<zmq::Socket> = (0..batch)
                    .map(|_| {
                        let d = c.socket(zmq::DEALER).unwrap();
                        d.connect(cmd.str(0)).unwrap();
                        d.send("hi", 0).unwrap();
                        d
                    })
                    .collect();
                for d in &socks {
                    d.recv_bytes(0).unwrap();
                }
                all.extend(socks);
                left -= batch;
            }
            std::thread::sleep(Duration::from_millis(200));
            common::say(&format!("RESULT base_kib={base} kib={}", common::rss_kib()));
            common::wait_stdin_eof();
            drop(all);
        }
        m => panic!("unknown mode {m}"),
    }
}

fn thr_recv(pull: &zmq::Socket, size: usize, count: usize) {
    let mut msg = zmq::Message::new();
    pull.recv(&mut msg, 0).unwrap();
    assert_eq!(msg.len(), size);
    let start = Instant::now();
    for _ in 1..count {
        pull.recv(&mut msg, 0).unwrap();
    }
    common::report_thr(count, start.elapsed());
}

fn thr_send(push: &zmq::Socket, size: usize, count: usize) {
    // As libzmq's remote_thr: a fresh message of `size` bytes per send.
    let payload = vec![0u8; size];
    for _ in 0..count {
        push.send(&payload[..], 0).unwrap();
    }
}
