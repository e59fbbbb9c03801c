//! The raw TCP baseline of the 64 KiB row: a tokio TCP stream with no framing at all, on a
//! current-thread runtime, moving the same bytes as `count` messages of `size` bytes. The sender
//! writes them `BENCH_RAW_WRITE` bytes at a time (default 1 MiB, i.e. 16 messages of 64 KiB per
//! write, as a batching writer would; `size` if smaller than that); the receiver reads into a buffer of
//! the same size, timed from the first byte, and reports "messages" of `size` bytes per second so it
//! lines up with the ZeroMQ rows.
//!
//! It is also the floor of the latency rows: the same 64-byte echo over a tokio TCP stream, with no
//! framing and no queues (the time the kernel and the runtime's wake-ups take on this machine).

use std::time::Instant;

use bench_common::{self as common, Cmd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn write_size(size: usize) -> usize {
    let w = std::env::var("BENCH_RAW_WRITE").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 20);
    w.max(size)
}

fn main() {
    let cmd = Cmd::from_env();
    common::runtime("ct").block_on(async move {
        let count = cmd.num(if cmd.mode.starts_with("lat") { 3 } else { 2 });
        match cmd.mode.as_str() {
            "thr-recv" => {
                let size = cmd.num(1);
                let l = TcpListener::bind(common::bare_addr(cmd.str(0))).await.unwrap();
                common::ready();
                let (mut s, _) = l.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                let mut buf = vec![0u8; write_size(size)];
                let total = size * count;
                let mut got = s.read(&mut buf).await.unwrap();
                let start = Instant::now();
                while got < total {
                    let n = s.read(&mut buf).await.unwrap();
                    assert!(n > 0, "sender closed early");
                    got += n;
                }
                common::report_thr(count, start.elapsed());
            }
            "thr-send" => {
                let size = cmd.num(1);
                let mut s = TcpStream::connect(common::bare_addr(cmd.str(0))).await.unwrap();
                s.set_nodelay(true).unwrap();
                let buf = vec![0u8; write_size(size)];
                let mut left = size * count;
                while left > 0 {
                    let n = left.min(buf.len());
                    s.write_all(&buf[..n]).await.unwrap();
                    left -= n;
                }
                s.shutdown().await.unwrap();
            }
            "lat-server" => {
                let l = TcpListener::bind(common::bare_addr(cmd.str(0))).await.unwrap();
                common::ready();
                let (mut s, _) = l.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                let size = cmd.num(2);
                let mut buf = vec![0u8; size];
                for _ in 0..count + common::lat_warmup(count) {
                    s.read_exact(&mut buf).await.unwrap();
                    s.write_all(&buf).await.unwrap();
                }
            }
            "lat-client" => {
                let mut s = TcpStream::connect(common::bare_addr(cmd.str(0))).await.unwrap();
                s.set_nodelay(true).unwrap();
                let size = cmd.num(2);
                let mut buf = vec![0u8; size];
                for _ in 0..common::lat_warmup(count) {
                    s.write_all(&buf).await.unwrap();
                    s.read_exact(&mut buf).await.unwrap();
                }
                let mut rtts = Vec::with_capacity(count);
                for _ in 0..count {
                    let t = Instant::now();
                    s.write_all(&buf).await.unwrap();
                    s.read_exact(&mut buf).await.unwrap();
                    rtts.push(t.elapsed().as_nanos() as u64);
                }
                common::report_lat(&mut rtts);
            }
            m => {
                eprintln!("rawtcp: mode {m} not supported");
                std::process::exit(3);
            }
        }
    });
}
