//! Last Value Cache (ZeroMQ Guide, chapter 5): a proxy that gives each new subscriber the current
//! value of its topics at once, instead of making it wait for the publisher's next update.
//!
//! ```text
//!   publisher ──tcp──▶ SUB (everything) ═ cache ═ XPUB ──tcp──▶ subscribers
//!                                          ▲        │
//!                                          └────────┘  "\x01topic": replay the cached value
//! ```
//!
//! The "pathological publisher" sends one value for each of `--topics` topics (`000`, `001`, …) at
//! start, then a single update of a random topic every `--update-ms`. Without a cache, a subscriber
//! joining later waits on average `topics × update interval / 2` for its topic. The cache proxy
//! remembers the last value per topic and, when its XPUB reports a subscription (`\x01<prefix>`),
//! resends every cached topic matching the prefix.
//!
//! The XPUB is VERBOSE: by default it reports only the first subscription to a prefix, and a second
//! subscriber to the same topic would get nothing. Replays go through the XPUB like any message, so a
//! subscriber already on that topic gets the value again; that is the Guide's design too.
//!
//! Run: `cargo run --example last_value_cache` (optionally `-- --topics 1000 --update-ms 1000 --seed 7`).
//!
//! Line formats, for scripts: `UPDATE n=<n> topic=<t>` before each publisher update; for each late
//! subscriber `LATE subscriber=<i> prefix=<p> values=<n> value="<first value>" first_ms=<ms>`; then
//! `SNAPSHOT subscriber=4 topics=<n> ms=<ms>`, `LIVE topic=<t> value="<v>"` when the first update made it
//! through the cache, and last `LVC ok` (exit status 0) or `LVC failed` (1).

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{oneshot, watch};
use tokio::time::timeout;
use zmtp::{Message, Socket, SocketType};

const INITIAL: &str = "Save Roger";
const UPDATE: &str = "Off with his head!";
const RUN_LIMIT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: last_value_cache [--topics N] [--update-ms N] [--seed N]
  --topics N     topics the publisher announces at start, 1..=1000 (default 1000)
  --update-ms N  the publisher then updates one random topic every N ms (default 1000)
  --seed N       seed for the random topics (default 7)";

#[derive(Clone, Copy, Debug)]
struct Config {
    topics: usize,
    update: Duration,
    seed: u64,
}

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config { topics: 1000, update: Duration::from_millis(1000), seed: 7 };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value: u64 =
            args.next().ok_or_else(|| format!("{flag} needs a value"))?.parse().map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--topics" => cfg.topics = value.clamp(1, 1000) as usize,
            "--update-ms" => cfg.update = Duration::from_millis(value.max(1)),
            "--seed" => cfg.seed = value,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(cfg)
}

fn topic(n: usize) -> String {
    format!("{n:03}")
}

fn text(frame: &Bytes) -> String {
    String::from_utf8_lossy(frame).into_owned()
}

/// The pathological publisher: every topic once, then one random update per interval. It uses XPUB to
/// wait until the cache has subscribed, so the initial burst is not lost to the slow-joiner effect.
async fn publisher(cache: String, cfg: Config, mut stop: oneshot::Receiver<()>) -> zmtp::Result<()> {
    let publisher = Socket::new(SocketType::XPub);
    publisher.set_xpub_nodrop(true); // the burst waits for the network instead of overflowing the HWM
    publisher.connect(&cache).await?;
    while publisher.recv().await?[0].first() != Some(&1) {}
    for n in 0..cfg.topics {
        publisher.send(Message::from(vec![topic(n), INITIAL.to_owned()])).await?;
    }
    println!("publisher: sent {} topics ({INITIAL:?}); now one update every {:?}", cfg.topics, cfg.update);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + cfg.update, cfg.update);
    for n in 1.. {
        tokio::select! {
            _ = &mut stop => break,
            _ = ticker.tick() => {}
        }
        let t = topic(rng.gen_range(0..cfg.topics));
        println!("UPDATE n={n} topic={t}");
        publisher.send(Message::from(vec![t, format!("{UPDATE} (update {n})")])).await?;
    }
    Ok(())
}

/// The cache proxy: forwards `[topic, value]` from the publisher and remembers the last value of
/// each topic; replays cached values to the XPUB side when a subscription arrives there.
async fn cache_proxy(frontend: Socket, backend: Socket, size: watch::Sender<usize>) -> zmtp::Result<()> {
    let mut cache: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    loop {
        tokio::select! {
            msg = frontend.recv() => {
                let msg = msg?;
                cache.insert(msg[0].clone(), msg[1].clone());
                size.send_replace(cache.len());
                backend.send(msg).await?;
            }
            event = backend.recv() => {
                let event = event?;
                // "\x01<prefix>" = a subscription; "\x00<prefix>" (unsubscribe) needs nothing.
                if event[0].first() != Some(&1) {
                    continue;
                }
                let prefix = event[0].slice(1..);
                let hits: Vec<(Bytes, Bytes)> = cache
                    .range(prefix.clone()..)
                    .take_while(|(t, _)| t.starts_with(&prefix))
                    .map(|(t, v)| (t.clone(), v.clone()))
                    .collect();
                println!("lvc: subscription to {:?}: replaying {} cached value(s)", text(&prefix), hits.len());
                for (t, v) in hits {
                    backend.send(Message::from(vec![t, v])).await?;
                }
            }
        }
    }
}

/// A subscriber joining late: subscribes to `prefix`, waits for `expected` values, and reports how
/// long the first one took.
async fn late_subscriber(id: usize, endpoint: &str, prefix: &str, expected: usize) -> zmtp::Result<bool> {
    let start = Instant::now();
    let sub = Socket::new(SocketType::Sub);
    sub.subscribe(prefix)?;
    sub.connect(endpoint).await?;
    let first = sub.recv().await?;
    let first_ms = start.elapsed().as_secs_f64() * 1000.0;
    let mut topics = BTreeSet::from([first[0].clone()]);
    while topics.len() < expected {
        topics.insert(sub.recv().await?[0].clone());
    }
    let ok = topics.iter().all(|t| t.starts_with(prefix.as_bytes())) && topics.len() == expected;
    println!(
        "LATE subscriber={id} prefix={prefix} values={} value={:?} first_ms={first_ms:.2}",
        topics.len(),
        text(&first[1])
    );
    Ok(ok)
}

/// A subscriber to everything: gets the whole cache at once, then waits for a live update.
async fn watcher(endpoint: &str, topics: usize) -> zmtp::Result<()> {
    let start = Instant::now();
    let sub = Socket::new(SocketType::Sub);
    sub.subscribe("")?;
    sub.connect(endpoint).await?;
    let mut seen = BTreeSet::new();
    loop {
        let msg = sub.recv().await?;
        let complete = seen.len() == topics;
        seen.insert(msg[0].clone());
        if !complete && seen.len() == topics {
            println!("SNAPSHOT subscriber=4 topics={topics} ms={}", start.elapsed().as_millis());
        }
        if msg[1].starts_with(UPDATE.as_bytes()) {
            println!("LIVE topic={} value={:?}", text(&msg[0]), text(&msg[1]));
            return Ok(());
        }
    }
}

async fn run(cfg: Config) -> zmtp::Result<bool> {
    // The cache: SUB to everything upstream, VERBOSE XPUB downstream with room for a full replay.
    let frontend = Socket::new(SocketType::Sub);
    frontend.subscribe("")?;
    let upstream = frontend.bind("tcp://127.0.0.1:*").await?;
    let backend = Socket::new(SocketType::XPub);
    backend.set_xpub_verbose(true);
    backend.set_sndhwm(10_000);
    let downstream = backend.bind("tcp://127.0.0.1:*").await?;
    let (size_tx, mut size) = watch::channel(0);
    let caching = tokio::spawn(cache_proxy(frontend, backend, size_tx));
    println!("lvc: publishers connect to {upstream}, subscribers to {downstream}");

    let (stop_publisher, stop_rx) = oneshot::channel();
    let publishing = tokio::spawn(publisher(upstream, cfg, stop_rx));
    size.wait_for(|&n| n == cfg.topics).await.expect("cache running");
    println!(
        "lvc: cache holds {} topics; without it a late subscriber would wait ~{:?} for its topic",
        cfg.topics,
        cfg.update * cfg.topics as u32 / 2
    );

    // Late joiners: one topic, the same topic again (needs XPUB_VERBOSE), and a prefix of ten topics.
    let chosen = topic(StdRng::seed_from_u64(cfg.seed ^ 0x5eed).gen_range(0..cfg.topics));
    let mut ok = late_subscriber(1, &downstream, &chosen, 1).await?;
    ok &= late_subscriber(2, &downstream, &chosen, 1).await?;
    ok &= late_subscriber(3, &downstream, "00", cfg.topics.min(10)).await?;
    // And one for everything, which then sees a live update pass through the cache.
    watcher(&downstream, cfg.topics).await?;

    let _ = stop_publisher.send(());
    publishing.await.expect("publisher task")?;
    caching.abort();
    println!("LVC {}", if ok { "ok" } else { "failed" });
    Ok(ok)
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
        Ok(Ok(false)) => ExitCode::FAILURE,
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
