//! The raw TCP baseline of the 64 KiB row: a tokio TCP stream with no framing at all, on a
//! current-thread runtime. The sender writes `count` buffers of `size` bytes; the receiver reads
//! `size * count` bytes into a 256 KiB buffer, timed from the first byte, and reports the result as
//! "messages" of `size` bytes per second so it lines up with the ZeroMQ rows.

use std::time::Instant;

use bench_common::{self as common, Cmd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() {
    let cmd = Cmd::from_env();
    common::runtime("ct").block_on(async move {
        let (size, count) = (cmd.num(1), cmd.num(2));
        match cmd.mode.as_str() {
            "thr-recv" => {
                let l = TcpListener::bind(common::bare_addr(cmd.str(0))).await.unwrap();
                common::ready();
                let (mut s, _) = l.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                let mut buf = vec![0u8; 256 * 1024];
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
                let mut s = TcpStream::connect(common::bare_addr(cmd.str(0))).await.unwrap();
                s.set_nodelay(true).unwrap();
                let buf = vec![0u8; size];
                for _ in 0..count {
                    s.write_all(&buf).await.unwrap();
                }
                s.shutdown().await.unwrap();
            }
            m => {
                eprintln!("rawtcp: mode {m} not supported");
                std::process::exit(3);
            }
        }
    });
}
