//! Many CHP clients in one process, for measuring a server under a crowd (issue 17's "thousands
//! of clients"): `bench/chp_crowd.py` starts a `chp server` and several of these processes.
//!
//! Each client holds what a `chp::Client` that reads holds on the wire: a SUB on the publisher
//! (subscribed to its subtree and HUGZ), and a DEALER on the snapshot port only from its request
//! (ICANHAZ?) to the snapshot's end (KTHXBAI). The process connects `--clients` of them, has every
//! one take a snapshot, prints `synced N in T`, then reads commands from stdin:
//!
//! - `storm`: every client connects a fresh DEALER and asks again at once (what all clients do
//!   after a failover); prints `stormed N in T` once every KTHXBAI is back;
//! - end of input: exit.
//!
//! With `--load K` it first publishes K keys (`/k/0000001` …, 100 B values) into the collector and
//! waits until a snapshot holds them. `--keep-dealers` keeps every DEALER connected between
//! snapshots (the Guide's clients, and `chp::Client` before it let go of its snapshot connection):
//! two server connections per client instead of one.
//!
//! `cargo run --release -p zmtp-chp --example crowd -- --server tcp://127.0.0.1:5556 --clients 1000`

use std::time::{Duration, Instant};

use bytes::Bytes;
use chp::command::{IcanHaz, SnapshotReply, Subtree};
use chp::{KvMsg, ServerAddress};
use clap::Parser;
use futures::future::try_join_all;
use zmtp::{Socket, SocketType};

#[derive(Parser)]
struct Args {
    /// The server's snapshot endpoint (port P; the publisher is P+1, the collector P+2).
    #[arg(long)]
    server: String,
    /// Clients in this process.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Keep each client's DEALER connected between snapshots.
    #[arg(long)]
    keep_dealers: bool,
    /// Keys to load first.
    #[arg(long, default_value_t = 0)]
    load: usize,
    /// The subtree every client asks for.
    #[arg(long, default_value = "/k/")]
    subtree: String,
}

type Fallible<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One ICANHAZ? on `dealer`, read up to its KTHXBAI; returns the KVSYNCs.
async fn snapshot(dealer: &Socket, subtree: &Subtree) -> Fallible<usize> {
    dealer.send(IcanHaz { subtree: subtree.clone() }.to_message()).await?;
    let mut keys = 0;
    loop {
        match SnapshotReply::parse(dealer.recv().await?.frames())? {
            SnapshotReply::KvSync(_) => keys += 1,
            SnapshotReply::KthxBai(_) => return Ok(keys),
        }
    }
}

async fn dealer(address: &ServerAddress) -> Fallible<Socket> {
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_linger(Some(Duration::ZERO));
    dealer.connect(&address.snapshot()).await?;
    Ok(dealer)
}

async fn load(address: &ServerAddress, keys: usize, subtree: &Subtree) -> Fallible {
    let publisher = Socket::new(SocketType::Pub);
    publisher.set_sndhwm(0);
    publisher.set_sndhwm_bytes(0);
    publisher.connect(&address.collector()).await?;
    let probe = dealer(address).await?;
    let value = Bytes::from(vec![b'v'; 100]);
    // A PUB drops what it sends before the collector's subscription arrives: repeat until a
    // snapshot holds every key (the keys are the same each time).
    loop {
        for i in 0..keys {
            let key = format!("{}{i:07}", String::from_utf8_lossy(subtree.as_bytes()));
            publisher.send(KvMsg::new(key, value.clone()).to_message()).await?;
            if i % 1000 == 0 {
                tokio::task::yield_now().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if snapshot(&probe, subtree).await? >= keys {
            return Ok(());
        }
    }
}

#[tokio::main]
async fn main() -> Fallible {
    let args = Args::parse();
    let host_port = args.server.trim_start_matches("tcp://");
    let (host, port) = host_port.rsplit_once(':').ok_or("--server tcp://host:port")?;
    let address = ServerAddress::new(host, port.parse()?)?;
    let subtree: Subtree = args.subtree.parse()?;
    if args.load > 0 {
        load(&address, args.load, &subtree).await?;
        println!("loaded {}", args.load);
    }

    let t0 = Instant::now();
    let mut subscribers = Vec::with_capacity(args.clients);
    for _ in 0..args.clients {
        let sub = Socket::new(SocketType::Sub);
        sub.set_linger(Some(Duration::ZERO));
        sub.subscribe(subtree.as_bytes())?;
        sub.subscribe("HUGZ")?;
        sub.connect(&address.publisher()).await?;
        subscribers.push(sub);
    }
    let mut dealers = Vec::new();
    let keys = snapshots(&address, &subtree, args.clients, args.keep_dealers.then_some(&mut dealers)).await?;
    println!("synced {} in {:.3} s ({} keys each)", args.clients, t0.elapsed().as_secs_f64(), keys);

    let (tx, mut lines) = tokio::sync::mpsc::channel::<String>(4);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = lines.recv().await {
        if line.trim() != "storm" {
            continue;
        }
        let t0 = Instant::now();
        for d in dealers.drain(..) {
            d.close().await;
        }
        snapshots(&address, &subtree, args.clients, args.keep_dealers.then_some(&mut dealers)).await?;
        println!("stormed {} in {:.3} s", args.clients, t0.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Every client connects a DEALER and takes a snapshot, all at once; each DEALER is closed once
/// its KTHXBAI is in, or kept in `keep`. Returns the keys of one snapshot.
async fn snapshots(
    address: &ServerAddress,
    subtree: &Subtree,
    clients: usize,
    keep: Option<&mut Vec<Socket>>,
) -> Fallible<usize> {
    let keeping = keep.is_some();
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        connected.push(dealer(address).await?);
    }
    let done = try_join_all(connected.into_iter().map(|d| async move {
        let keys = snapshot(&d, subtree).await?;
        let kept = match keeping {
            true => Some(d),
            false => {
                d.close().await;
                None
            }
        };
        Fallible::Ok((keys, kept))
    }))
    .await?;
    let keys = done.first().map_or(0, |(keys, _)| *keys);
    if let Some(keep) = keep {
        keep.extend(done.into_iter().filter_map(|(_, kept)| kept));
    }
    Ok(keys)
}
