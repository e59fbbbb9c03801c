//! The CHP high-availability pair in one process, on loopback: a primary and a backup server
//! (Binary Star, Clone Model Six), three clients streaming updates (sets with and without ttl,
//! deletes), then the primary is killed while they keep writing. Prints the failover time and
//! checks that every client's map equals the survivor's.
//!
//! ```sh
//! cargo run --release -p zmtp-chp --example ha_demo [-- --clients 3 --heartbeat-ms 100 --before-ms 2000 --after-ms 2000]
//! ```
//!
//! Exit status 0 only if every client converged on the survivor's map.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bstar::{Side, State};
use bytes::Bytes;
use chp::server::ha::{HaConfig, HaEvent, HaServer};
use chp::server::pending::PendingConfig;
use chp::{Client, ClientOptions, Event, ServerAddress};
use tokio::time::Instant;

struct Settings {
    clients: usize,
    heartbeat: Duration,
    hugz: Duration,
    server_ttl: Duration,
    before: Duration,
    after: Duration,
}

fn settings() -> Result<Settings, String> {
    let mut s = Settings {
        clients: 3,
        heartbeat: Duration::from_millis(100),
        hugz: Duration::from_millis(50),
        server_ttl: Duration::from_millis(300),
        before: Duration::from_millis(2000),
        after: Duration::from_millis(2000),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let n: u64 = value.parse().map_err(|_| format!("{flag}: not a number: {value}"))?;
        let ms = Duration::from_millis(n.max(1));
        match flag.as_str() {
            "--clients" => s.clients = (n as usize).clamp(1, 64),
            "--heartbeat-ms" => s.heartbeat = ms,
            "--hugz-ms" => s.hugz = ms,
            "--server-ttl-ms" => s.server_ttl = ms,
            "--before-ms" => s.before = ms,
            "--after-ms" => s.after = ms,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(s)
}

/// Free loopback ports: `triples` runs of three consecutive ports (P, P+1, P+2) and `singles`
/// more, all held until every one is found, then released for the servers to bind.
fn free_ports(triples: usize, singles: usize) -> (Vec<u16>, Vec<u16>) {
    let bind = |port: u16| TcpListener::bind(("127.0.0.1", port));
    let mut held = Vec::new();
    let mut found = Vec::new();
    while found.len() < triples {
        let a = bind(0).expect("bind a loopback port");
        let p = a.local_addr().expect("address").port();
        if p > u16::MAX - 2 {
            continue;
        }
        if let (Ok(b), Ok(c)) = (bind(p + 1), bind(p + 2)) {
            held.extend([a, b, c]);
            found.push(p);
        }
    }
    let mut single = Vec::new();
    for _ in 0..singles {
        let l = bind(0).expect("bind a loopback port");
        single.push(l.local_addr().expect("address").port());
        held.push(l);
    }
    drop(held);
    (found, single)
}

async fn start_pair(s: &Settings) -> Result<(HaServer, HaServer), String> {
    let mut last = String::new();
    for _ in 0..5 {
        let (p, states) = free_ports(2, 2);
        let addr = |port| ServerAddress::new("127.0.0.1", port).expect("valid");
        let state = |port: u16| format!("tcp://127.0.0.1:{port}");
        let config = |side, port, own, peer_state, peer| {
            let mut c = HaConfig::new(side, port, state(own), state(peer_state), addr(peer))
                .bind("127.0.0.1")
                .heartbeat(s.heartbeat)
                .hugz(s.hugz);
            c.pending = PendingConfig { window: Duration::from_secs(2), ..PendingConfig::default() };
            c.peer_sync_timeout = Duration::from_millis(500);
            c
        };
        let primary = match HaServer::bind(config(Side::Primary, p[0], states[0], states[1], p[1])).await {
            Ok(server) => server,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        match HaServer::bind(config(Side::Backup, p[1], states[1], states[0], p[0])).await {
            Ok(backup) => return Ok((primary, backup)),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("cannot start the pair: {last}"))
}

/// FNV-1a over the entries in key order.
fn hash(map: &BTreeMap<Bytes, Bytes>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in map {
        for part in [&k[..], &[0xff][..], &v[..], &[0xfe][..]] {
            for b in part {
                h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    h
}

#[derive(Default)]
struct Log {
    /// Confirmed sets (time confirmed).
    confirmed: AtomicU64,
    errors: AtomicU64,
    /// Confirmations at or after the kill.
    after_kill: Mutex<Vec<Instant>>,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ha_demo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<bool, String> {
    let s = settings()?;
    let started = Instant::now();
    println!("CHP high-availability pair demo (Binary Star + Clone Model Six), one process, loopback");
    println!(
        "settings: heartbeat {} ms (peer expiry {} ms), HUGZ {} ms, client server ttl {} ms, {} clients, \
         streaming {} ms before and {} ms after the kill",
        s.heartbeat.as_millis(),
        2 * s.heartbeat.as_millis(),
        s.hugz.as_millis(),
        s.server_ttl.as_millis(),
        s.clients,
        s.before.as_millis(),
        s.after.as_millis()
    );
    let bound = Duration::from_secs(10);
    let (primary, backup) = start_pair(&s).await?;
    let mut backup_events = backup.events();
    let (pa, ba) = (primary.address().clone(), backup.address().clone());
    println!("primary {pa} and backup {ba} started");
    tokio::time::timeout(bound, async {
        primary.wait_for(|st| st.state == State::Active).await;
        backup.wait_for(|st| st.state == State::Passive && st.peer_synced).await;
    })
    .await
    .map_err(|_| "the pair did not form within 10 s")?;
    println!("pair formed: primary ACTIVE, backup PASSIVE and following ({} ms)", started.elapsed().as_millis());

    // Clients: both servers, short server ttl.
    let mut clients = Vec::new();
    for _ in 0..s.clients {
        let options = ClientOptions::for_servers(vec![pa.clone(), ba.clone()])
            .server_ttl(s.server_ttl)
            .set_timing(Duration::from_millis(250), Duration::from_secs(10));
        clients.push(Client::start(options).map_err(|e| e.to_string())?);
    }
    for c in &clients {
        tokio::time::timeout(bound, c.synced())
            .await
            .map_err(|_| "a client did not sync")?
            .map_err(|e| e.to_string())?;
    }
    let mut client_events: Vec<_> = clients.iter().map(|c| c.events()).collect();

    // Writers: each client its own keys; sets with and without ttl, and deletes.
    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Log::default());
    let kill_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let mut writers = Vec::new();
    for (n, c) in clients.iter().enumerate() {
        let (c, stop, log, kill_at) = (c.clone(), stop.clone(), log.clone(), kill_at.clone());
        writers.push(tokio::spawn(async move {
            let mut i: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("/demo/c{n}/k{}", i % 40);
                let result = match i % 10 {
                    // A short-lived key: it expires on whichever server is active by then.
                    3 => {
                        c.set(format!("/demo/c{n}/eph{}", i % 7), format!("v{i}"), Some(Duration::from_millis(700)))
                            .await
                    }
                    7 => c.delete(key).await,
                    5 => c.set(key, format!("v{i}"), Some(Duration::from_secs(60))).await,
                    _ => c.set(key, format!("v{i}"), None).await,
                };
                match result {
                    Ok(_) => {
                        log.confirmed.fetch_add(1, Ordering::Relaxed);
                        let now = Instant::now();
                        let killed = kill_at.lock().unwrap().is_some_and(|k| now >= k);
                        if killed {
                            log.after_kill.lock().unwrap().push(now);
                        }
                    }
                    Err(e) => {
                        log.errors.fetch_add(1, Ordering::Relaxed);
                        eprintln!("client {n}: set failed: {e}");
                    }
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(2)).await; // pace: ~500 updates/s per client
            }
        }));
    }

    tokio::time::sleep(s.before).await;
    let before = log.confirmed.load(Ordering::Relaxed);
    let seq_before = primary.sequence();
    println!("streamed {before} confirmed updates (sequence {seq_before}); killing the primary");
    let killed = Instant::now();
    *kill_at.lock().unwrap() = Some(killed);
    drop(primary); // sockets close, heartbeats stop: to its peer and clients it is dead

    // The backup's promotion.
    let promoted = tokio::time::timeout(bound, async {
        loop {
            match backup_events.next().await {
                Some(HaEvent::BecameActive { replayed, sequence, complete, .. }) => {
                    return Some((Instant::now(), replayed, sequence, complete));
                }
                Some(_) => {}
                None => return None,
            }
        }
    })
    .await
    .ok()
    .flatten()
    .ok_or("the backup did not take over within 10 s")?;

    // Every client's failover (event stream).
    let mut outages = Vec::new();
    for (n, events) in client_events.iter_mut().enumerate() {
        let failover = tokio::time::timeout(bound, async {
            loop {
                match events.next().await {
                    Some(Event::Failover { outage, to, .. }) => return Some((Instant::now(), outage, to)),
                    Some(_) => {}
                    None => return None,
                }
            }
        })
        .await
        .ok()
        .flatten()
        .ok_or_else(|| format!("client {n} did not fail over within 10 s"))?;
        outages.push(failover);
    }
    tokio::time::sleep(s.after).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let total = log.confirmed.load(Ordering::Relaxed);

    // Convergence: every client's map equals the survivor's, at the same sequence.
    let converged = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let (seq, survivor) = backup.map();
            if clients.iter().all(|c| {
                let snap = c.snapshot();
                snap.sequence == seq && snap.map == survivor
            }) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok();

    println!();
    println!("results");
    let (replayed_at, replayed, seq_after, complete) = promoted;
    println!(
        "  backup promoted {} ms after the kill (vote after peer expiry); replayed {replayed} pending updates, \
         sequence {seq_after}{}",
        (replayed_at - killed).as_millis(),
        if complete { "" } else { " (incomplete copy!)" }
    );
    // The old primary's last echoes may still arrive just after the kill: the new active's
    // first confirmation is the first one after its promotion.
    let first = log.after_kill.lock().unwrap().iter().copied().filter(|t| *t >= replayed_at).min();
    match first {
        Some(at) => println!(
            "  failover time: {} ms from the kill to the first update confirmed by the new active",
            (at - killed).as_millis()
        ),
        None => println!("  failover time: no update was confirmed after the kill"),
    }
    let last_resync = outages.iter().map(|(at, _, _)| *at).max().expect("clients");
    println!(
        "  all {} clients re-synced with {ba} {} ms after the kill",
        s.clients,
        (last_resync - killed).as_millis()
    );
    for (n, (at, outage, to)) in outages.iter().enumerate() {
        println!(
            "    client {n}: Failover to {to} at +{} ms (no updates for {} ms)",
            (*at - killed).as_millis(),
            outage.as_millis()
        );
    }
    println!(
        "  updates confirmed: {total} ({before} before the kill), set errors: {}",
        log.errors.load(Ordering::Relaxed)
    );
    let (seq, survivor) = backup.map();
    println!("  survivor (backup): sequence {seq}, {} keys, hash {:016x}", survivor.len(), hash(&survivor));
    let mut all_equal = converged;
    for (n, c) in clients.iter().enumerate() {
        let snap = c.snapshot();
        let equal = snap.sequence == seq && snap.map == survivor;
        all_equal &= equal;
        println!(
            "  client {n}:          sequence {}, {} keys, hash {:016x} {}",
            snap.sequence,
            snap.map.len(),
            hash(&snap.map),
            if equal { "= survivor" } else { "DIFFERS" }
        );
    }
    let status = backup.status();
    println!(
        "  backup: duplicates dropped {}, pending matched {}, late copies {}, pruned {}",
        status.stats.duplicates,
        status.stats.pending.matched,
        status.stats.pending.late_copies,
        status.stats.pending.pruned
    );
    let ok = all_equal && log.errors.load(Ordering::Relaxed) == 0 && first.is_some();
    println!(
        "verdict: {} (total {} ms)",
        if ok { "PASS: every client's map equals the survivor's" } else { "FAIL" },
        started.elapsed().as_millis()
    );
    for c in clients {
        c.close().await;
    }
    backup.close().await;
    Ok(ok)
}
