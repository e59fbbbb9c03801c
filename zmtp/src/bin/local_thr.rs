//! `local_thr <bind-to> <message-size> <message-count> [--batch]`: PULL throughput receiver, as
//! libzmq's perf tool. `--batch` receives with `Socket::recv_many` (up to 1,024 per call).

use std::time::Instant;

use zmtp::{Socket, SocketType};

// One thread per process does the application's work and the connection's I/O, handing over whole
// batches instead of waking another core per batch (libzmq's perf tools use an application thread and
// one I/O thread; on a 2-core machine this is the faster arrangement for us).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let batch = args.len() == 5 && args[4] == "--batch";
    if args.len() != 4 && !batch {
        eprintln!("usage: local_thr <bind-to> <message-size> <message-count> [--batch]");
        std::process::exit(1);
    }
    let (size, count): (usize, usize) = (args[2].parse()?, args[3].parse()?);
    let pull = Socket::new(SocketType::Pull);
    pull.bind(&args[1]).await?;
    let first = pull.recv().await?;
    check_size(first.byte_len(), size);
    let start = Instant::now();
    if batch {
        let mut received = Vec::with_capacity(1024);
        let mut seen = 1;
        while seen < count {
            received.clear();
            seen += pull.recv_many(&mut received, (count - seen).min(1024)).await?;
            for msg in &received {
                check_size(msg.byte_len(), size);
            }
        }
    } else {
        for _ in 1..count {
            let msg = pull.recv().await?;
            check_size(msg.byte_len(), size);
        }
    }
    let elapsed_us = (start.elapsed().as_micros() as f64).max(1.0);
    let throughput = count as f64 * 1e6 / elapsed_us;
    let megabits = throughput * size as f64 * 8.0 / 1e6;
    println!("message size: {size} [B]");
    println!("message count: {count}");
    println!("mean throughput: {} [msg/s]", throughput as u64);
    println!("mean throughput: {megabits:.3} [Mb/s]");
    Ok(())
}

fn check_size(got: usize, want: usize) {
    if got != want {
        eprintln!("message of incorrect size received: {got} (expected {want})");
        std::process::exit(1);
    }
}
