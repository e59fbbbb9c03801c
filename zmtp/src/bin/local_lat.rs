//! `local_lat <bind-to> <message-size> <roundtrip-count> [--busy-poll <µs>]`: REP echo for latency, as libzmq's perf tool.
//! `--busy-poll` spins that long in each receive before parking (`Socket::set_busy_poll`).

use zmtp::{Socket, SocketType};

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
            eprintln!("usage: local_lat <endpoint> <message-size> <roundtrip-count> [--busy-poll <µs>]");
            std::process::exit(1);
        }
    };
    let (size, count): (usize, usize) = (args[2].parse()?, args[3].parse()?);
    let rep = Socket::new(SocketType::Rep);
    rep.set_busy_poll(busy_poll.map(std::time::Duration::from_micros));
    rep.bind(&args[1]).await?;
    for _ in 0..count {
        let msg = rep.recv().await?;
        if msg.byte_len() != size {
            eprintln!("message of incorrect size received");
            std::process::exit(1);
        }
        rep.send(msg).await?;
    }
    rep.close().await;
    Ok(())
}
