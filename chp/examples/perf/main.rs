//! Measures the CHP server and client on loopback:
//!
//! 1. memory per stored key (the server's state alone, RSS before/after);
//! 2. updates/s through one server: N publishing clients, M whole-map subscribers, 100-byte values;
//! 3. latency from `set` to a watcher receiving the change;
//! 4. time to deliver a snapshot of 100k and 1M keys (raw transfer, and a client's full sync);
//! 5. updates/s with publishers and subscribers in processes of their own (see `procs.rs`): a
//!    replay of pre-encoded KVSETs (what the server alone sustains) and real `chp::Client`s, with
//!    the server's CPU per update;
//! 6. a durable server's restart with 1M keys: from a log alone, and from a snapshot and the
//!    longest log the server lets grow before it compacts.
//!
//! The server runs on a runtime of its own with one worker thread (`--server-threads`), as the
//! `chp server` command runs a single server; the clients of this process on another.
//!
//! `cargo run --release --example perf -- [--keys 1000000] [--updates 200000] [--publishers 4] [--subscribers 2]
//! [--data-dir DIR] [--process-updates 1000000]`

mod procs;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chp::command::{IcanHaz, KvSet, SnapshotReply, Subtree};
use chp::server::ServerState;
use chp::{Client, ClientOptions, Event, KvMsg, Server, ServerConfig};
use clap::Parser;
use zmtp::{Socket, SocketType};

#[derive(Parser)]
struct Args {
    /// Keys for the snapshot and memory measurements (largest size).
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Updates for the throughput measurement.
    #[arg(long, default_value_t = 200_000)]
    updates: usize,
    /// Publishing clients.
    #[arg(long, default_value_t = 4)]
    publishers: usize,
    /// Subscribing clients.
    #[arg(long, default_value_t = 2)]
    subscribers: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value: usize,
    /// Keep the server's map in this (fresh) directory, fsynced before each update is published
    /// (`Durability::Always`): the throughput and latency of a durable server.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Updates for the multi-process measurement (5.); 0 skips it.
    #[arg(long, default_value_t = 1_000_000)]
    process_updates: usize,
    /// Repeat the largest snapshot measurement this many times (to profile it).
    #[arg(long, default_value_t = 1)]
    snapshot_runs: usize,
    /// Run only these parts (comma-separated: memory, throughput, processes, latency, snapshot,
    /// restart);
    /// all by default. One part alone is what to profile.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Run as a child of the multi-process measurement (internal).
    #[arg(long, hide = true)]
    role: Option<procs::Role>,
    /// The server a child talks to; for the latency part, a server running in a process of its
    /// own (`chp server`) to measure against instead of the one in this process.
    #[arg(long)]
    server: Option<chp::ServerAddress>,
    /// Run this process on tokio's current-thread runtime (clients and server on one thread:
    /// no wake-ups across threads) instead of the multi-thread one.
    #[arg(long)]
    current_thread: bool,
    /// Worker threads of the server's own runtime, apart from the clients' (1: as `chp server`
    /// runs a single server). Ignored with `--current-thread`.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// A child's number (internal).
    #[arg(long, hide = true, default_value_t = 0)]
    id: usize,
    /// Updates a child publishes or expects (internal).
    #[arg(long, hide = true, default_value_t = 0)]
    count: usize,
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn key(i: usize) -> String {
    format!("/k/{i:07}")
}

fn options(address: &chp::ServerAddress, subtree: &str) -> ClientOptions {
    ClientOptions::for_servers(vec![address.clone()])
        .subtree(subtree.parse().unwrap())
        .server_ttl(Duration::from_secs(30))
        .set_timing(Duration::from_secs(10), Duration::from_secs(60))
}

/// Background writes per second while the latency is measured "at a moderate load": a few percent
/// of what one server confirms (BENCHMARKS.md).
const BACKGROUND_RATE: u64 = 50_000;

/// 2,000 samples of the time from a `set` to a watcher's event for it (writer and watcher on one
/// subtree, one set at a time).
async fn latency_samples(
    addr: &chp::ServerAddress,
    value: &Bytes,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let writer = Client::start(options(addr, "/lat/"))?;
    let watcher = Client::start(options(addr, "/lat/"))?;
    writer.synced().await?;
    watcher.synced().await?;
    let mut events = watcher.events();
    let mut samples = Vec::with_capacity(2000);
    for i in 0..2000u64 {
        let key = format!("/lat/{}", i % 100);
        let t0 = Instant::now();
        // `submit` hands the write to the client's agent and returns: the clock runs from the
        // call to the watcher's event, with no task of the measurement's own in between.
        let confirmation = writer.submit(key, value.clone(), None).await?;
        loop {
            if let Some(Event::Set { .. }) = events.next().await {
                break;
            }
        }
        samples.push(t0.elapsed());
        confirmation.await?;
    }
    writer.close().await;
    watcher.close().await;
    Ok(samples)
}

/// Writes `rate` updates per second under `/bg/` until aborted (confirmations awaited with up to
/// a second's worth in flight), counting the submitted ones in `submitted`. Paced every `step`:
/// each tick submits what is due by then. Steps under a millisecond (tokio's timer resolution)
/// come from a thread of their own that sleeps between ticks.
async fn background_writes(
    addr: chp::ServerAddress,
    value: Bytes,
    rate: u64,
    step: Duration,
    submitted: Arc<AtomicU64>,
) {
    let c = Client::start(options(&addr, "/bg/")).expect("client");
    c.synced().await.expect("synced");
    let (tick, mut ticks) = tokio::sync::mpsc::channel::<()>(1);
    if step < Duration::from_millis(1) {
        std::thread::spawn(move || {
            while !tick.is_closed() {
                std::thread::sleep(step);
                let _ = tick.try_send(());
            }
        });
    } else {
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(step);
            while tick.send(()).await.is_ok() {
                interval.tick().await;
            }
        });
    }
    let mut inflight = std::collections::VecDeque::new();
    let mut i = 0u64;
    let t0 = Instant::now();
    while ticks.recv().await.is_some() {
        let due = (t0.elapsed().as_secs_f64() * rate as f64) as u64;
        while i < due {
            while inflight.len() as u64 >= rate {
                let confirmation: chp::Confirmation = inflight.pop_front().expect("in flight");
                confirmation.await.expect("set confirmed");
            }
            inflight.push_back(c.submit(format!("/bg/{}", i % 10_000), value.clone(), None).await.expect("submitted"));
            i += 1;
        }
        submitted.store(i, Ordering::Relaxed);
    }
}

/// Returns once a background writer at `rate` has written for 200 ms.
async fn wait_until_steady(submitted: &AtomicU64, rate: u64) {
    while submitted.load(Ordering::Relaxed) < rate / 5 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(role) = args.role {
        // A child is one small client process: one thread, as such a process would run (six
        // children with two runtime threads each spent much of their time switching threads).
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(procs::child(role, args.server.expect("--server"), args.id, args.count, args.value));
        return Ok(());
    }
    if args.current_thread {
        return tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(measure(args, None));
    }
    // The server on a runtime of its own, as `chp server` runs it (one worker thread by default);
    // the clients of this process on tokio's default multi-thread runtime beside it.
    let server_runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.server_threads.max(1)).enable_all().build()?;
    let handle = server_runtime.handle().clone();
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(measure(args, Some(handle)))
}

async fn measure(args: Args, server_runtime: Option<tokio::runtime::Handle>) -> Result<(), Box<dyn std::error::Error>> {
    let value = Bytes::from(vec![b'v'; args.value]);
    let part = |name: &str| args.only.is_empty() || args.only.iter().any(|p| p == name);

    // 1. Memory per stored key: the state machine alone.
    if part("memory") {
        let before = rss_bytes();
        let t0 = Instant::now();
        let mut state = ServerState::new(Instant::now());
        let now = Instant::now();
        for i in 0..args.keys {
            state.apply(KvSet(KvMsg::new(key(i), value.clone())), now).unwrap();
        }
        let elapsed = t0.elapsed();
        let after = rss_bytes();
        // Updates of existing keys in a scattered order, as a busy map sees them.
        let t1 = Instant::now();
        let now = Instant::now();
        let mut i = 0usize;
        for _ in 0..args.keys {
            i = (i + 7_919) % args.keys;
            state.apply(KvSet(KvMsg::new(key(i), value.clone())), now).unwrap();
        }
        println!(
            "map: {:.2} M updates/s of existing keys in scattered order ({} keys)",
            args.keys as f64 / t1.elapsed().as_secs_f64() / 1e6,
            args.keys
        );
        let per_key = (after.saturating_sub(before)) as f64 / args.keys as f64;
        let payload = state.payload_bytes() as f64 / args.keys as f64;
        println!(
            "memory: {} keys ({payload:.0} B key+value each) take {:.1} MiB RSS = {per_key:.0} B per key \
             ({:.0} B overhead); stored at {:.2} M keys/s",
            args.keys,
            (after - before) as f64 / (1 << 20) as f64,
            per_key - payload,
            args.keys as f64 / elapsed.as_secs_f64() / 1e6
        );
    }

    // 6. (first, on a server of its own) A durable server's restart.
    if part("restart") {
        restart(&args, &value, server_runtime.as_ref()).await?;
    }

    let config = ServerConfig {
        bind: "127.0.0.1".into(),
        hugz_interval: Duration::from_millis(200),
        queue_limit: 1_000_000,
        data_dir: args.data_dir.clone(),
        ..ServerConfig::default()
    };
    // Bound on the server's runtime, so that its tasks run there.
    let server = match &server_runtime {
        Some(runtime) => runtime.spawn(Server::bind(config)).await??,
        None => Server::bind(config).await?,
    };
    // The latency part may measure a server in a process of its own (`--server`), as deployed.
    let addr = args.server.clone().unwrap_or_else(|| server.address().clone());

    // 2. Throughput: publishers (each its own subtree, so it only hears its own echoes) send
    // confirmed sets with many in flight; subscribers take the whole map.
    if part("throughput") {
        let subscribers: Vec<Client> = futures::future::join_all((0..args.subscribers).map(|_| async {
            let c = Client::start(options(&addr, "")).unwrap();
            c.synced().await.unwrap();
            c
        }))
        .await;
        let per = args.updates / args.publishers;
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..args.publishers)
            .map(|p| {
                let (addr, value) = (addr.clone(), value.clone());
                tokio::spawn(async move {
                    let c = Client::start(options(&addr, &format!("/p{p}/"))).unwrap();
                    c.synced().await.unwrap();
                    // Pipelined: up to 2000 writes in flight, their confirmations awaited in order.
                    let mut inflight = std::collections::VecDeque::with_capacity(2000);
                    for i in 0..per {
                        if inflight.len() >= 2000 {
                            let confirmation: chp::Confirmation = inflight.pop_front().expect("in flight");
                            confirmation.await.expect("set confirmed");
                        }
                        let key = format!("/p{p}/{}", i % 10_000);
                        inflight.push_back(c.submit(key, value.clone(), None).await.expect("submitted"));
                    }
                    for confirmation in inflight {
                        confirmation.await.expect("set confirmed");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await?;
        }
        let published = t0.elapsed();
        let target = server.sequence();
        for s in &subscribers {
            while s.sequence() < target {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let delivered = t0.elapsed();
        let n = (per * args.publishers) as f64;
        println!(
            "throughput: {} updates of {} B from {} publishing clients: {:.0} updates/s confirmed by the server, \
             {:.0} updates/s delivered to all {} subscribers",
            per * args.publishers,
            args.value,
            args.publishers,
            n / published.as_secs_f64(),
            n / delivered.as_secs_f64(),
            args.subscribers
        );
        for s in subscribers {
            s.close().await;
        }
    }

    // 5 (run here, on a server with an empty map). Separate processes.
    if args.process_updates > 0 && part("processes") {
        let per = args.process_updates / args.publishers;
        for (replay, what) in [(true, "replay"), (false, "clients")] {
            let m = procs::measure(replay, &addr, args.publishers, args.subscribers, per, args.value).await;
            println!(
                "multi-process {what}: {} updates of {} B from {} publisher processes, {} subscriber processes: \
                 {:.0} updates/s confirmed, {:.0} updates/s delivered ({} of {}); server CPU {:.2} µs per update",
                m.confirmed,
                args.value,
                args.publishers,
                args.subscribers,
                m.confirmed as f64 / m.confirmed_in.as_secs_f64(),
                m.delivered as f64 / m.delivered_in.as_secs_f64(),
                m.delivered,
                per * args.publishers,
                m.server_cpu.as_secs_f64() * 1e6 / m.confirmed.max(1) as f64,
            );
        }
    }

    // 3. Latency from set() to a watcher's event: on an idle server, and at a moderate load
    // (another client writing at a steady rate meanwhile, as a server in use sees).
    if part("latency") {
        // Idle, then at a moderate load from another client: 50,000 updates/s in steps of about
        // 150 µs (a 100 µs sleep and its timer slack: 7 or 8 updates a step), and the same rate in
        // 1 ms bursts of 50 (tokio's timer resolution). Against bursts the tail is the time the server
        // and the clients take to serve a burst of 50 queued at once.
        let loads: [Option<(Duration, &str)>; 3] = [
            None,
            Some((Duration::from_micros(100), "in steps of about 150 µs")),
            Some((Duration::from_millis(1), "in 1 ms bursts")),
        ];
        for load in loads {
            // Sampled at the steady rate, once the background client has connected, synced and
            // written for 200 ms: started together, the samples (2,000 back to back, ~60 ms)
            // fell on its start.
            let background = match load {
                Some((step, _)) => {
                    let submitted = Arc::new(AtomicU64::new(0));
                    let task = tokio::spawn(background_writes(
                        addr.clone(),
                        value.clone(),
                        BACKGROUND_RATE,
                        step,
                        submitted.clone(),
                    ));
                    wait_until_steady(&submitted, BACKGROUND_RATE).await;
                    Some(task)
                }
                None => None,
            };
            let mut samples = latency_samples(&addr, &value).await?;
            if let Some(task) = background {
                task.abort();
            }
            let load = match load {
                Some((_, shape)) => format!(" at {BACKGROUND_RATE} updates/s of background writes {shape}"),
                None => String::new(),
            };
            samples.sort();
            let pct = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
            println!(
                "latency set -> watcher event{load} ({} samples): p50 {:?}, p99 {:?}, max {:?}",
                samples.len(),
                pct(0.5),
                pct(0.99),
                samples[samples.len() - 1]
            );
        }
    }

    // 4. Snapshots of 100k and 1M keys.
    if !part("snapshot") {
        server.close().await;
        return Ok(());
    }
    let loader = Socket::new(SocketType::Pub);
    // Unbounded on our side (messages and bytes: zmtp's 128 MiB default per peer would drop part of
    // a million 100 B updates queued at once); the server's collector applies backpressure.
    loader.set_sndhwm(0);
    loader.set_sndhwm_bytes(0);
    loader.connect(&addr.collector()).await?;
    let watcher = Client::start(options(&addr, "/lat/"))?;
    watcher.synced().await?;
    // Prove the loader's connection live with a first update, then bulk-load.
    let mut events = watcher.events();
    loop {
        loader.send(KvMsg::new("/lat/probe", "1").to_message()).await?;
        if let Ok(Some(Event::Set { .. })) = tokio::time::timeout(Duration::from_millis(100), events.next()).await {
            break;
        }
    }
    let mut loaded = 0;
    for size in [100_000, args.keys] {
        if size < loaded {
            continue;
        }
        let before = server.len();
        let t0 = Instant::now();
        for i in loaded..size {
            loader.send(KvMsg::new(key(i), value.clone()).to_message()).await?;
            if i % 1000 == 0 {
                tokio::task::yield_now().await;
            }
        }
        while server.len() < before + (size - loaded) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!(
            "loaded {} more keys through the collector in {:?} ({:.0} updates/s, single raw publisher)",
            size - loaded,
            t0.elapsed(),
            (size - loaded) as f64 / t0.elapsed().as_secs_f64()
        );
        loaded = size;

        let runs = if size == args.keys { args.snapshot_runs.max(1) } else { 1 };
        for _ in 0..runs {
            // Raw transfer: ICANHAZ? to KTHXBAI on a bare DEALER.
            let dealer = Socket::new(SocketType::Dealer);
            dealer.set_rcvhwm(100_000);
            dealer.connect(&addr.snapshot()).await?;
            let t0 = Instant::now();
            dealer.send(IcanHaz { subtree: "/k/".parse::<Subtree>()? }.to_message()).await?;
            let (mut n, mut received, mut ended) = (0usize, Vec::with_capacity(1024), false);
            while !ended {
                dealer.recv_many(&mut received, 1024).await?;
                for msg in received.drain(..) {
                    match SnapshotReply::parse(msg.frames())? {
                        SnapshotReply::KvSync(_) => n += 1,
                        _ => ended = true,
                    }
                }
            }
            let raw = t0.elapsed();
            // A client's full sync: connect, prove the subscription, snapshot, build its replica.
            let t0 = Instant::now();
            let c = Client::start(options(&addr, "/k/"))?;
            c.synced().await?;
            let full = t0.elapsed();
            assert_eq!(c.len(), size);
            println!(
                "snapshot of {n} keys ({} B values): raw ICANHAZ?->KTHXBAI {raw:?} ({:.0} keys/s); client connect+sync {full:?}",
                args.value,
                n as f64 / raw.as_secs_f64()
            );
            c.close().await;
            dealer.close().await;
        }
    }
    println!("server stats: {:?}", server.stats());
    server.close().await;
    Ok(())
}

/// Binds a server on `runtime` (its tasks run there), or on the caller's.
async fn bind_on(
    runtime: Option<&tokio::runtime::Handle>,
    config: ServerConfig,
) -> Result<Server, Box<dyn std::error::Error>> {
    Ok(match runtime {
        Some(runtime) => runtime.spawn(Server::bind(config)).await??,
        None => Server::bind(config).await?,
    })
}

/// Bytes of the data directory's files whose names begin with `prefix` (`log-`, `snapshot-`).
fn dir_bytes(dir: &std::path::Path, prefix: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Part 6: a durable server (`Durability::Always`, the default) restarted with `args.keys` keys: the
/// time `Server::bind` takes to recover them, first from a log of one update per key, then from a
/// snapshot and a log grown to just under the size that makes the server compact (twice the map's
/// payload): the longest recovery the server lets build up.
async fn restart(
    args: &Args,
    value: &Bytes,
    runtime: Option<&tokio::runtime::Handle>,
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("chp-perf-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = ServerConfig {
        bind: "127.0.0.1".into(),
        queue_limit: 1_000_000,
        data_dir: Some(dir.clone()),
        ..ServerConfig::default()
    };
    let keys = args.keys;
    let mut server = bind_on(runtime, config.clone()).await?;
    // Updates through the collector from a raw PUB, `count` of them cycling over the keys; returns
    // once the server has applied them all.
    async fn write(
        server: &Server,
        keys: usize,
        from: usize,
        count: usize,
        value: &Bytes,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let loader = Socket::new(SocketType::Pub);
        loader.set_sndhwm(0);
        loader.set_sndhwm_bytes(0);
        loader.connect(&server.address().collector()).await?;
        // The subscription reaches the PUB some time after the connect: until the first update
        // shows, resend it.
        let before = server.sequence();
        while server.sequence() == before {
            loader.send(KvMsg::new(key(from % keys), value.clone()).to_message()).await?;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let target = server.sequence() + count as u64;
        for i in from..from + count {
            loader.send(KvMsg::new(key(i % keys), value.clone()).to_message()).await?;
            if i % 1000 == 0 {
                tokio::task::yield_now().await;
            }
        }
        while server.sequence() < target {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        loader.close().await;
        Ok(())
    }
    let recover = |server: Server, what: String| {
        let (config, dir) = (config.clone(), dir.clone());
        async move {
            server.close().await;
            let (log, snapshot) = (dir_bytes(&dir, "log-"), dir_bytes(&dir, "snapshot-"));
            let t0 = Instant::now();
            let server = bind_on(runtime, config).await?;
            let took = t0.elapsed();
            assert_eq!(server.len(), keys, "keys recovered");
            println!(
                "restart: {keys} keys recovered in {took:?} from {what} ({:.0} MB of snapshot, {:.0} MB of log)",
                snapshot as f64 / 1e6,
                log as f64 / 1e6
            );
            Ok::<_, Box<dyn std::error::Error>>(server)
        }
    };
    write(&server, keys, 0, keys, value).await?;
    server = recover(server, "a log".into()).await?;
    // Past the first compaction, then up to just under the next one: the server compacts once
    // the log passes twice the map's payload (key and value bytes).
    let payload = (keys * (key(0).len() + value.len())) as u64;
    let round = keys / 10;
    let mut written = keys;
    let mut compacted = false;
    loop {
        let before = dir_bytes(&dir, "log-");
        write(&server, keys, written, round, value).await?;
        written += round;
        let after = dir_bytes(&dir, "log-");
        // A compaction starts a new log (the old one goes once the snapshot is in place).
        compacted |= after < before;
        // Stop while two more rounds would still stay under the next compaction.
        if compacted && after + 2 * after.saturating_sub(before) > 2 * payload {
            break;
        }
    }
    server = recover(server, "a snapshot and the longest log before a compaction".into()).await?;
    server.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
