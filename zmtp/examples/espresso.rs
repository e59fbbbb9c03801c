//! Espresso (ZeroMQ Guide, chapter 5): tracing a pub-sub network through a proxy's capture socket.
//!
//! ```text
//!   publisher PUB ──tcp──▶ XSUB ═proxy═ XPUB ──tcp──▶ SUB subscriber ("A", "B")
//!                                 ║
//!                        capture PAIR ══inproc══▶ PAIR listener (prints everything)
//! ```
//!
//! The proxy copies every message it forwards to its capture socket, in both directions: the
//! subscriptions coming upstream (`\x01A`, later `\x00A` when the subscriber leaves) and the data
//! going downstream. The listener prints each frame as the Guide's `zframe_print` does — `[size]` then
//! text, or hex for binary frames — followed by what it is.
//!
//! The publisher sends a random `X-NNNNN` message (X in `A`..`J`) every `--interval-ms`; the subscriber
//! takes `--count` messages on topics A and B, then leaves. Note that C..J never reach the proxy: the
//! XSUB forwarded the subscriptions upstream, so the publisher filters them out.
//!
//! Run: `cargo run --example espresso` (optionally `-- --count 5 --interval-ms 10 --seed 1`).
//!
//! Line formats, for scripts: `publisher: sent <msg>`, `subscriber: got <msg>`, and per captured
//! message `trace: [<size>] <frame>  <kind>` with kind `subscribe <topic>`, `unsubscribe <topic>` or
//! `data`; last, `ESPRESSO published=<n> captured_data=<n> subscriptions=<n> unsubscriptions=<n> received=<n>`.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::oneshot;
use tokio::time::timeout;
use zmtp::{Proxy, Socket, SocketType};

const SUBSCRIPTIONS: [&str; 2] = ["A", "B"];
const RUN_LIMIT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: espresso [--count N] [--interval-ms N] [--seed N]
  --count N        messages the subscriber reads before leaving (default 5)
  --interval-ms N  the publisher sends one message every N ms (default 10)
  --seed N         seed for the publisher's random messages (default 1)";

#[derive(Clone, Copy, Debug)]
struct Config {
    count: usize,
    interval: Duration,
    seed: u64,
}

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config { count: 5, interval: Duration::from_millis(10), seed: 1 };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value: u64 =
            args.next().ok_or_else(|| format!("{flag} needs a value"))?.parse().map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--count" => cfg.count = value.max(1) as usize,
            "--interval-ms" => cfg.interval = Duration::from_millis(value.max(1)),
            "--seed" => cfg.seed = value,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(cfg)
}

/// The publisher: a random message on a random topic every tick, whether or not anybody listens.
async fn publisher(endpoint_tx: oneshot::Sender<String>, cfg: Config, mut stop: oneshot::Receiver<()>) -> usize {
    let publisher = Socket::new(SocketType::Pub);
    let endpoint = publisher.bind("tcp://127.0.0.1:*").await.expect("bind publisher");
    let _ = endpoint_tx.send(endpoint);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut ticker = tokio::time::interval(cfg.interval);
    let mut sent = 0;
    loop {
        tokio::select! {
            _ = &mut stop => return sent,
            _ = ticker.tick() => {}
        }
        let msg = format!("{}-{:05}", (b'A' + rng.gen_range(0..10)) as char, rng.gen_range(0..100_000));
        println!("publisher: sent {msg}");
        if publisher.send(msg).await.is_err() {
            return sent;
        }
        sent += 1;
    }
}

/// The subscriber: takes `count` messages on A and B, then closes its socket and so leaves.
async fn subscriber(endpoint: String, count: usize) -> zmtp::Result<Vec<String>> {
    let sub = Socket::new(SocketType::Sub);
    for topic in SUBSCRIPTIONS {
        sub.subscribe(topic)?;
    }
    sub.connect(&endpoint).await?;
    let mut got = Vec::new();
    while got.len() < count {
        let msg = sub.recv().await?;
        let text = String::from_utf8_lossy(&msg[0]).into_owned();
        println!("subscriber: got {text}");
        got.push(text);
    }
    println!("subscriber: leaving after {count} messages");
    sub.close().await;
    Ok(got)
}

/// The Guide's frame dump: `[size] text`, or hex when the frame is not printable.
fn dump(frame: &Bytes) -> String {
    let printable = frame.iter().all(|b| (0x20..0x7f).contains(b));
    let body = if printable {
        String::from_utf8_lossy(frame).into_owned()
    } else {
        frame.iter().map(|b| format!("{b:02X}")).collect()
    };
    format!("[{:03}] {body}", frame.len())
}

/// What the listener saw.
#[derive(Debug, Default)]
struct Trace {
    subscriptions: usize,
    unsubscriptions: usize,
    data: usize,
}

/// The listener: prints everything arriving on the capture pipe, and returns once every topic it was
/// told about has been subscribed and unsubscribed again (the subscriber has come and gone).
async fn listener(pipe: Socket, topics: &[&str]) -> zmtp::Result<Trace> {
    let mut trace = Trace::default();
    let mut open: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut closed: BTreeSet<Vec<u8>> = BTreeSet::new();
    while closed.len() < topics.len() {
        let msg = pipe.recv().await?;
        for (i, frame) in msg.iter().enumerate() {
            // A one-frame message starting with 0/1 is a subscription change travelling upstream.
            let kind = match (msg.len(), frame.first()) {
                (1, Some(&1)) => {
                    trace.subscriptions += 1;
                    open.insert(frame[1..].to_vec());
                    format!("subscribe {}", String::from_utf8_lossy(&frame[1..]))
                }
                (1, Some(&0)) => {
                    trace.unsubscriptions += 1;
                    if open.remove(&frame[1..]) {
                        closed.insert(frame[1..].to_vec());
                    }
                    format!("unsubscribe {}", String::from_utf8_lossy(&frame[1..]))
                }
                _ if i == 0 => {
                    trace.data += 1;
                    "data".to_owned()
                }
                _ => "data (more)".to_owned(),
            };
            println!("trace: {}  {kind}", dump(frame));
        }
    }
    println!("trace: every subscription is gone; the proxy is idle");
    Ok(trace)
}

async fn run(cfg: Config) -> zmtp::Result<bool> {
    let (endpoint_tx, endpoint_rx) = oneshot::channel();
    let (stop_publisher, stop_rx) = oneshot::channel();
    let publishing = tokio::spawn(publisher(endpoint_tx, cfg, stop_rx));
    let upstream = endpoint_rx.await.expect("publisher bound");

    // The proxy: XSUB towards the publisher, XPUB for subscribers, a PAIR pipe as capture.
    let xsub = Socket::new(SocketType::XSub);
    xsub.connect(&upstream).await?;
    let xpub = Socket::new(SocketType::XPub);
    let downstream = xpub.bind("tcp://127.0.0.1:*").await?;
    let capture = Socket::new(SocketType::Pair);
    let pipe_name = capture.bind(&format!("inproc://espresso-capture-{}", std::process::id())).await?;
    let pipe = Socket::new(SocketType::Pair);
    pipe.connect(&pipe_name).await?;
    let proxy = Proxy::new(xsub, xpub).with_capture(capture);
    let control = proxy.control();
    let proxying = tokio::spawn(proxy.run());
    println!("proxy: {upstream} (publisher) -> {downstream} (subscribers), capture on {pipe_name}");

    let listening = pipe.clone();
    let tracing = tokio::spawn(async move { listener(listening, &SUBSCRIPTIONS).await });
    let received = subscriber(downstream, cfg.count).await?;
    let trace = tracing.await.expect("listener task")?;

    // Stop the proxy before closing the pipe: a message still in flight from the publisher would
    // otherwise wait for a capture peer that is gone.
    control.terminate();
    proxying.await.expect("proxy task")?;
    drop(pipe);
    let _ = stop_publisher.send(());
    let published = publishing.await.expect("publisher task");
    println!(
        "ESPRESSO published={published} captured_data={} subscriptions={} unsubscriptions={} received={}",
        trace.data,
        trace.subscriptions,
        trace.unsubscriptions,
        received.len()
    );
    Ok(received.len() == cfg.count && trace.data >= cfg.count)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cfg = match parse_args() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    match timeout(RUN_LIMIT, run(cfg)).await {
        Ok(Ok(true)) => ExitCode::SUCCESS,
        Ok(Ok(false)) => {
            eprintln!("E: the trace missed messages the subscriber received");
            ExitCode::FAILURE
        }
        Ok(Err(e)) => {
            eprintln!("E: {e}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("E: not finished within {RUN_LIMIT:?}");
            ExitCode::FAILURE
        }
    }
}
