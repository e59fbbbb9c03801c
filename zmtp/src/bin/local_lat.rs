//! `local_lat <bind-to> <message-size> <roundtrip-count>`: REP echo for latency, as libzmq's perf tool.

use zmtp::{Socket, SocketType};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: local_lat <bind-to> <message-size> <roundtrip-count>");
        std::process::exit(1);
    }
    let (size, count): (usize, usize) = (args[2].parse()?, args[3].parse()?);
    let rep = Socket::new(SocketType::Rep);
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
