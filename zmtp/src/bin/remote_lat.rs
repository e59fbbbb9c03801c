//! `remote_lat <connect-to> <message-size> <roundtrip-count> [--busy-poll <µs>]`: REQ side; prints one-way latency.
//! `--busy-poll` spins that long in each receive before parking (`Socket::set_busy_poll`).

use std::time::Instant;

use bytes::Bytes;
use zmtp::{Message, Socket, SocketType};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The loop runs in a spawned task, as a tokio server's work does. In the `block_on` future
    // itself, every wake from zmtp's connection tasks costs a zero-timeout `epoll_wait` first: the
    // current-thread scheduler polls its driver before it polls a `block_on` future a task woke.
    tokio::spawn(run()).await?
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args: Vec<String> = std::env::args().collect();
    let busy_poll: Option<u64> = match &args[..] {
        [_, _, _, _, flag, us] if flag == "--busy-poll" => Some(us.parse()?),
        [_, _, _, _] => None,
        _ => {
            eprintln!("usage: remote_lat <endpoint> <message-size> <roundtrip-count> [--busy-poll <µs>]");
            std::process::exit(1);
        }
    };
    let (size, count): (usize, usize) = (args[2].parse()?, args[3].parse()?);
    let req = Socket::new(SocketType::Req);
    req.set_busy_poll(busy_poll.map(std::time::Duration::from_micros));
    req.connect(&args[1]).await?;
    let payload = Bytes::from(vec![0u8; size]);
    let start = Instant::now();
    for _ in 0..count {
        req.send(Message::single(payload.clone())).await?;
        let reply = req.recv().await?;
        if reply.byte_len() != size {
            eprintln!("message of incorrect size received");
            std::process::exit(1);
        }
    }
    let elapsed_us = start.elapsed().as_secs_f64() * 1e6;
    println!("message size: {size} [B]");
    println!("roundtrip count: {count}");
    println!("average latency: {:.3} [us]", elapsed_us / (count as f64 * 2.0));
    Ok(())
}
