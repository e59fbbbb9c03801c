//! `remote_thr <connect-to> <message-size> <message-count>`: PUSH throughput sender, as libzmq's perf tool.

use bytes::Bytes;
use zmtp::{Message, Socket, SocketType};

// One thread per process does the application's work and the connection's I/O, handing over whole
// batches instead of waking another core per batch (libzmq's perf tools use an application thread and
// one I/O thread; on a 2-core machine this is the faster arrangement for us).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: remote_thr <connect-to> <message-size> <message-count>");
        std::process::exit(1);
    }
    let (size, count): (usize, usize) = (args[2].parse()?, args[3].parse()?);
    let push = Socket::new(SocketType::Push);
    push.connect(&args[1]).await?;
    // One payload shared by every message: sending never copies it (the writer batches small ones).
    let payload = Bytes::from(vec![0u8; size]);
    for _ in 0..count {
        push.send(Message::single(payload.clone())).await?;
    }
    push.close().await;
    Ok(())
}
