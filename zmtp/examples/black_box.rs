//! Black Box (ZeroMQ Guide, chapter 5): high-speed subscribers that never do the work themselves.
//!
//! A subscriber that works on each message falls behind a fast feed. So the subscriber only reads
//! and hands each message to a pool of workers over `inproc` PUSH/PULL, which load-balances them:
//!
//! ```text
//!   simple:   publisher ──tcp──▶ SUB ─▶ PUSH ══inproc══▶ PULL workers (×W)
//!
//!   sharded:  publisher ──tcp──▶ SUB (topics A–D) ─▶ PUSH ══╗
//!                     └──tcp──▶ SUB (topics E–H) ─▶ PUSH ══╩══▶ PULL workers (×W, each on both)
//! ```
//!
//! One reading task eventually saturates one core, so the sharded ("mad") variant splits the topics
//! into two independent streams, each with its own SUB socket and reading task; every worker pulls
//! from both.
//!
//! The publisher sends `--messages` messages `[topic, sequence]` round-robin over topics `A`..`H`,
//! then an `END` marker per topic. Its XPUB socket waits until every topic has a subscriber and uses
//! XPUB_NODROP, so nothing is lost and the run can check that every message was handled exactly once.
//!
//! Run: `cargo run --example black_box` (simple) or `cargo run --example black_box -- sharded`.
//!
//! Stdout ends with one `shard <i> topics=<…> forwarded=<n>` line per subscriber, one
//! `worker <i> handled=<n> from_shards=<n0>,<n1>` line per worker, and the verdict
//! `BLACKBOX mode=<m> published=<n> forwarded=<n> handled=<n> unique=<n> duplicates=<n> missing=<n> misrouted=<n>`;
//! the exit status is 0 only if every message was handled exactly once by a worker of the right shard.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio::time::timeout;
use zmtp::{Message, MonitorEvent, Socket, SocketType};

const TOPICS: [&str; 8] = ["A", "B", "C", "D", "E", "F", "G", "H"];
const END: &str = "END";
const RUN_LIMIT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: black_box [simple|sharded] [--messages N] [--workers N]
  simple         one subscriber feeds the workers (default)
  sharded        two subscribers, topics A-D and E-H, feed the same workers
  --messages N   messages to publish (default 20000)
  --workers N    worker tasks (default 4)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Simple,
    Sharded,
}

#[derive(Clone, Copy, Debug)]
struct Config {
    mode: Mode,
    messages: u64,
    workers: usize,
}

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config { mode: Mode::Simple, messages: 20_000, workers: 4 };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| -> Result<u64, String> {
            let v = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            v.parse().map_err(|e| format!("{flag}: {e}"))
        };
        match arg.as_str() {
            "simple" => cfg.mode = Mode::Simple,
            "sharded" => cfg.mode = Mode::Sharded,
            "--messages" => cfg.messages = value(&arg)?,
            "--workers" => cfg.workers = value(&arg)?.max(1) as usize,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    Ok(cfg)
}

/// The topics each subscriber (shard) takes: all of them, or one half each.
fn shards(mode: Mode) -> Vec<Vec<&'static str>> {
    match mode {
        Mode::Simple => vec![TOPICS.to_vec()],
        Mode::Sharded => vec![TOPICS[..4].to_vec(), TOPICS[4..].to_vec()],
    }
}

fn text(frame: &Bytes) -> &str {
    std::str::from_utf8(frame).unwrap_or("<binary>")
}

/// The feed: waits until every topic is covered by some subscription (its XPUB hears them), then
/// publishes `[topic, seq]` round-robin over the topics and an END marker on each topic.
async fn publisher(xpub: Socket, messages: u64) -> zmtp::Result<(u64, Instant)> {
    let mut prefixes: Vec<Bytes> = Vec::new();
    while !TOPICS.iter().all(|t| prefixes.iter().any(|p| t.as_bytes().starts_with(p))) {
        let event = xpub.recv().await?;
        if event[0].first() == Some(&1) {
            prefixes.push(event[0].slice(1..));
        }
    }
    println!("publisher: every topic has a subscriber, publishing {messages} messages");
    let start = Instant::now();
    for seq in 0..messages {
        let topic = TOPICS[(seq % TOPICS.len() as u64) as usize];
        xpub.send(Message::from(vec![topic.to_string(), seq.to_string()])).await?;
    }
    for topic in TOPICS {
        xpub.send(Message::from(vec![topic, END])).await?;
    }
    Ok((messages, start))
}

/// One subscriber (shard): reads its topics and hands each message to the workers through `push`,
/// tagged with the shard number. Does no work itself. Returns how many messages it forwarded.
async fn subscriber(
    shard: usize,
    topics: Vec<&'static str>,
    publisher: String,
    push: Socket,
    mut push_events: zmtp::Monitor,
    workers: usize,
) -> zmtp::Result<u64> {
    // Start reading only once every worker is connected, so PUSH spreads the load over all of them.
    let mut ready = 0;
    while ready < workers {
        if let Some(MonitorEvent::HandshakeSucceeded { .. }) = push_events.next_event().await {
            ready += 1;
        }
    }
    let sub = Socket::new(SocketType::Sub);
    for topic in &topics {
        sub.subscribe(topic)?;
    }
    sub.connect(&publisher).await?;
    println!("shard {shard}: subscribed to {}, feeding {workers} workers", topics.join(" "));
    let tag = Bytes::from(shard.to_string());
    let mut ended = HashSet::new();
    let mut forwarded = 0;
    while ended.len() < topics.len() {
        let mut msg = sub.recv().await?;
        if msg[1] == END {
            ended.insert(msg[0].clone());
            continue;
        }
        msg.push(tag.clone()); // [topic, seq, shard]
        push.send(msg).await?; // waits at the HWM: the workers set the pace, nothing is dropped
        forwarded += 1;
    }
    Ok(forwarded)
}

/// What a worker reports for each message it handled.
struct Handled {
    worker: usize,
    shard: usize,
    topic: Bytes,
    seq: u64,
}

/// A worker: pulls messages from every shard's PUSH socket and "processes" them (here: reports them
/// to the checker). On `stop` it takes what is still queued, then ends.
async fn worker(
    id: usize,
    endpoints: Vec<String>,
    report: mpsc::UnboundedSender<Handled>,
    mut stop: watch::Receiver<bool>,
) -> zmtp::Result<()> {
    let pull = Socket::new(SocketType::Pull);
    for endpoint in &endpoints {
        pull.connect(endpoint).await?;
    }
    let handle = |msg: Message| {
        let seq = text(&msg[1]).parse().expect("sequence number");
        let shard = text(&msg[2]).parse().expect("shard number");
        let _ = report.send(Handled { worker: id, shard, topic: msg[0].clone(), seq });
    };
    loop {
        tokio::select! {
            msg = pull.recv() => handle(msg?),
            _ = stop.wait_for(|stop| *stop) => break,
        }
    }
    while let Ok(msg) = pull.try_recv() {
        handle(msg); // anything still queued now would be a message delivered twice
    }
    Ok(())
}

async fn run(cfg: Config) -> zmtp::Result<bool> {
    let shards = shards(cfg.mode);
    let mode = format!("{:?}", cfg.mode).to_lowercase();
    println!("black box ({mode}): {} subscriber(s), {} workers, {} messages", shards.len(), cfg.workers, cfg.messages);

    let xpub = Socket::new(SocketType::XPub);
    xpub.set_xpub_nodrop(true); // wait for slow subscribers instead of dropping: every message counts here
    let feed = xpub.bind("tcp://127.0.0.1:*").await?;

    // One PUSH socket per shard, bound on inproc; the monitor tells when the workers are in.
    let mut pushes = Vec::new();
    for shard in 0..shards.len() {
        let push = Socket::new(SocketType::Push);
        let events = push.monitor();
        let endpoint = push.bind(&format!("inproc://black-box-{}-shard-{shard}", std::process::id())).await?;
        pushes.push((push, events, endpoint));
    }
    let endpoints: Vec<String> = pushes.iter().map(|(_, _, e)| e.clone()).collect();

    let (report_tx, mut reports) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let workers: Vec<_> = (0..cfg.workers)
        .map(|id| tokio::spawn(worker(id, endpoints.clone(), report_tx.clone(), stop_rx.clone())))
        .collect();
    drop(report_tx);

    let subscribers: Vec<_> = shards
        .iter()
        .cloned()
        .zip(pushes)
        .enumerate()
        .map(|(shard, (topics, (push, events, _)))| {
            tokio::spawn(subscriber(shard, topics, feed.clone(), push, events, cfg.workers))
        })
        .collect();
    let publishing = tokio::spawn(publisher(xpub, cfg.messages));

    // Collect reports while the subscribers run; once they are done we know how many messages are in
    // flight, and wait for exactly that many reports.
    let mut handled = Vec::new();
    let mut forwarded_by_shard = Vec::new();
    for subscriber in subscribers {
        let done = subscriber;
        tokio::pin!(done);
        loop {
            tokio::select! {
                result = &mut done => {
                    forwarded_by_shard.push(result.expect("subscriber task")?);
                    break;
                }
                Some(h) = reports.recv() => handled.push(h),
            }
        }
    }
    let (published, start) = publishing.await.expect("publisher task")?;
    let forwarded: u64 = forwarded_by_shard.iter().sum();
    while (handled.len() as u64) < forwarded {
        match reports.recv().await {
            Some(h) => handled.push(h),
            None => break,
        }
    }
    let elapsed = start.elapsed();
    println!(
        "throughput: {} messages published and handled in {elapsed:.2?} ({:.0} msg/s)",
        handled.len(),
        handled.len() as f64 / elapsed.as_secs_f64()
    );
    // Stop the workers; they drain their queues and hang up, which closes the report channel.
    stop_tx.send_replace(true);
    for w in workers {
        w.await.expect("worker task")?;
    }
    while let Some(h) = reports.recv().await {
        handled.push(h);
    }

    // Check: every published sequence number handled once, by a worker fed by the shard owning its topic.
    let mut seen = vec![0u32; published as usize];
    let mut per_worker = vec![vec![0u64; shards.len()]; cfg.workers];
    let mut misrouted = 0;
    for h in &handled {
        if let Some(n) = seen.get_mut(h.seq as usize) {
            *n += 1;
        }
        per_worker[h.worker][h.shard] += 1;
        let expected_topic = TOPICS[(h.seq % TOPICS.len() as u64) as usize];
        if h.topic != expected_topic || !shards[h.shard].contains(&expected_topic) {
            misrouted += 1;
        }
    }
    let unique = seen.iter().filter(|&&n| n > 0).count();
    let duplicates: u64 = seen.iter().map(|&n| n.saturating_sub(1) as u64).sum();
    let missing = seen.iter().filter(|&&n| n == 0).count();

    for (shard, topics) in shards.iter().enumerate() {
        println!("shard {shard} topics={} forwarded={}", topics.join(","), forwarded_by_shard[shard]);
    }
    for (id, counts) in per_worker.iter().enumerate() {
        let total: u64 = counts.iter().sum();
        let from: Vec<String> = counts.iter().map(u64::to_string).collect();
        println!("worker {id} handled={total} from_shards={}", from.join(","));
    }
    println!(
        "BLACKBOX mode={mode} published={published} forwarded={forwarded} handled={} unique={unique} \
         duplicates={duplicates} missing={missing} misrouted={misrouted}",
        handled.len()
    );
    Ok(duplicates == 0 && missing == 0 && misrouted == 0 && handled.len() as u64 == published)
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
            eprintln!("E: some messages were not handled exactly once");
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
