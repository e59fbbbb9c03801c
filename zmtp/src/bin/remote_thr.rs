//! `remote_thr <connect-to> <message-size> <message-count> [--batch]`: PUSH throughput sender, as
//! libzmq's perf tool. `--batch` sends through the coalescing sink (`Socket::sink`, fed, flushed
//! once at the end) instead of one `send` per message.

use bytes::Bytes;
use zmtp::{Message, Socket, SocketType};

// One thread per process does the application's work and the connection's I/O, handing over whole
// batches instead of waking another core per batch (libzmq's perf tools use an application thread and
// one I/O thread; on a 2-core machine this is the faster arrangement for us).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let batch = args.len() == 5 && args[4] == "--batch";
    if args.len() != 4 && !batch {
        eprintln!("usage: remote_thr <connect-to> <message-size> <message-count> [--batch]");
        std::process::exit(1);
    }
    let (size, count): (usize, usize) = (args[2].parse()?, args[3].parse()?);
    let push = Socket::new(SocketType::Push);
    push.connect(&args[1]).await?;
    // One payload shared by every message: sending never copies it (the writer batches small ones).
    let payload = Bytes::from(vec![0u8; size]);
    if batch {
        use futures::SinkExt;
        let mut sink = push.sink();
        for _ in 0..count {
            sink.feed(Message::single(payload.clone())).await?;
        }
        sink.flush().await?;
    } else {
        for _ in 0..count {
            push.send(Message::single(payload.clone())).await?;
        }
    }
    push.close().await;
    Ok(())
}
