//! Measures the Paranoid Pirate stack on loopback, everything in one process:
//!
//! - throughput: requests/s through the queue with 1 and 8 echo workers, for 1 and 16 concurrent
//!   Lazy Pirate clients (each client has one request in flight, as REQ semantics demand);
//! - recovery: time from a worker dying mid-request until the client has its reply from another
//!   worker, for a crash (connection closed: detected at once through the backend's connection
//!   monitor) and a hang (connection open but silent: detected by expiry after LIVENESS intervals).
//!
//! ```sh
//! cargo run --release -p zmtp-ppp --example bench              # full run (~1 min)
//! cargo run --release -p zmtp-ppp --example bench -- --quick   # fewer requests, short intervals only
//! ```

use std::time::Duration;

use clap::Parser;
use ppp::{Client, ClientConfig, Queue, QueueEvent, QueueHandle, Worker, WorkerHandle};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zmtp::{Message, Socket, SocketType};

#[derive(Parser, Debug)]
struct Args {
    /// Requests per throughput configuration.
    #[arg(long, default_value_t = 40_000)]
    requests: u64,
    /// Fewer requests, and skip the recovery runs at the reference 1 s heartbeat.
    #[arg(long)]
    quick: bool,
    /// Recovery trials per configuration.
    #[arg(long, default_value_t = 5)]
    trials: usize,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let requests = if args.quick { args.requests.min(5_000) } else { args.requests };
    println!("throughput ({requests} requests of 16 bytes per line, echo workers, tcp loopback, one process)");
    for workers in [1, 8] {
        for clients in [1, 16] {
            let rate = throughput(workers, clients, requests, Duration::ZERO).await;
            println!("  workers={workers:<2} clients={clients:<3} {rate:>9.0} requests/s");
        }
    }
    let work = Duration::from_millis(1);
    let slow_requests = requests.min(4_000);
    println!("throughput with 1 ms of (simulated) work per request, 16 clients, {slow_requests} requests");
    for workers in [1, 8] {
        let rate = throughput(workers, 16, slow_requests / if workers == 1 { 4 } else { 1 }, work).await;
        println!("  workers={workers:<2} clients=16  {rate:>9.0} requests/s");
    }
    let mut intervals = vec![Duration::from_millis(100)];
    if !args.quick {
        intervals.push(Duration::from_millis(1000));
    }
    println!("recovery after a worker dies mid-request (liveness 3; {} trials each)", args.trials);
    for interval in intervals {
        for hang in [false, true] {
            let mut times = Vec::new();
            for _ in 0..args.trials {
                times.push(recovery(interval, hang).await);
            }
            times.sort();
            let show = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
            println!(
                "  interval={:>4} ms {:<38} min {:>8}  median {:>8}  max {:>8}",
                interval.as_millis(),
                if hang { "hang (silent, connection open):" } else { "crash (connection closed):" },
                show(times[0]),
                show(times[times.len() / 2]),
                show(times[times.len() - 1])
            );
        }
    }
}

async fn start_queue(interval: Duration) -> QueueHandle {
    Queue { interval, max_pending: 100_000, ..Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") }
        .spawn()
        .await
        .expect("queue")
}

async fn wait_ready(q: &mut QueueHandle, n: usize) {
    let mut seen = 0;
    while seen < n {
        if let Some(QueueEvent::WorkerReady { .. }) = q.next_event().await {
            seen += 1;
        }
    }
}

async fn echo(request: Message) -> Message {
    request
}

async fn throughput(workers: usize, clients: u64, requests: u64, work: Duration) -> f64 {
    let mut q = start_queue(Duration::from_millis(1000)).await;
    let mut handles = Vec::new();
    for _ in 0..workers {
        let handler = move |request: Message| async move {
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            request
        };
        handles.push(Worker::new(q.backend()).spawn(handler).await.expect("worker"));
    }
    wait_ready(&mut q, workers).await;
    let per_client = requests / clients;
    let mut tasks = Vec::new();
    let started = Instant::now();
    for _ in 0..clients {
        let mut client = Client::connect(q.frontend(), ClientConfig::default()).await.expect("client");
        tasks.push(tokio::spawn(async move {
            for i in 0..per_client {
                let reply = client.request(format!("{i:016}")).await.expect("reply");
                assert_eq!(reply.len(), 1);
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let rate = (per_client * clients) as f64 / started.elapsed().as_secs_f64();
    for h in handles {
        h.close().await;
    }
    q.close().await;
    rate
}

/// One trial: the victim (registered first, so it gets the request) dies once it has the request;
/// the time until the client's reply arrives from the other worker.
async fn recovery(interval: Duration, hang: bool) -> Duration {
    let mut q = start_queue(interval).await;
    let (got_tx, mut got) = mpsc::unbounded_channel::<()>();
    let mut victim: Option<WorkerHandle> = None;
    let mut raw: Option<Socket> = None;
    if hang {
        // A hand-driven worker: READY, heartbeats until it has the request, then silence.
        let s = Socket::new(SocketType::Dealer);
        s.set_linger(Some(Duration::ZERO));
        s.connect(q.backend()).await.expect("connect");
        s.send(Message::single(ppp::Command::Ready.frame())).await.expect("ready");
        let socket = s.clone();
        tokio::spawn(async move {
            while let Ok(msg) = socket.recv().await {
                if msg.len() == 1 {
                    let _ = socket.try_send(ppp::Command::Heartbeat.message());
                } else {
                    let _ = got_tx.send(());
                    return;
                }
            }
        });
        raw = Some(s);
    } else {
        let w = Worker { interval, ..Worker::new(q.backend()) }
            .spawn(move |_request: Message| {
                let got_tx = got_tx.clone();
                async move {
                    let _ = got_tx.send(());
                    std::future::pending::<Message>().await
                }
            })
            .await
            .expect("victim");
        victim = Some(w);
    }
    wait_ready(&mut q, 1).await;
    let good = Worker { interval, ..Worker::new(q.backend()) }.spawn(echo).await.expect("worker");
    wait_ready(&mut q, 1).await;
    let config = ClientConfig { timeout: interval * 10, retries: 1 };
    let mut client = Client::connect(q.frontend(), config).await.expect("client");
    let call = tokio::spawn(async move { client.request("job").await.map(|_| Instant::now()) });
    got.recv().await.expect("the victim got the request");
    let died = Instant::now();
    if let Some(w) = victim {
        w.close().await; // the socket closes: like a killed process
    }
    let answered = call.await.expect("client task").expect("reply from the other worker");
    drop(raw);
    good.close().await;
    q.close().await;
    answered - died
}
