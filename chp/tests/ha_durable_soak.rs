//! Soak: both `chp server` processes of a durable pair (`--data-dir`, `always`) killed with
//! SIGKILL, in either order, at once or one after the other with a failover between (so either
//! may hold the newer map), while clients write without pause; then both restarted, in either
//! order, up to 0.6 s apart (a primary restarted first waits for its peer). Five rounds. Every write a client saw confirmed is in the map served at the end, and the
//! sequence a fresh client syncs at never goes below the last one confirmed before a kill.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bstar::Side;
use bytes::Bytes;
use chp::Client;
use common::pair::{PairPorts, ServerProc};
use common::synced;
use rand::Rng;
use zmtp_testkit::{STEP, unique};

const ROUNDS: usize = 5;
const WRITERS: usize = 3;

/// Servers that stepped aside for their peer's newer map, over the whole soak.
static STEPPED_ASIDE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct DataDir(PathBuf);

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_servers_killed_and_restarted_five_times_while_clients_write() {
    tokio::time::timeout(Duration::from_secs(120), soak()).await.expect("soak exceeded its time limit");
}

fn spawn(side: Side, ports: &PairPorts, dir: &DataDir) -> ServerProc {
    let name = if side == Side::Primary { "primary" } else { "backup" };
    let dir = dir.0.to_str().unwrap();
    ServerProc::spawn_logging(name, side, ports, &["--data-dir", dir, "--durability", "always"])
}

/// Waits until one server is ACTIVE and the other PASSIVE with a complete copy. A server whose
/// map was the older one steps aside without stopping (it falls silent, then follows): neither
/// may exit.
async fn formed(procs: &mut [ServerProc; 2]) -> usize {
    let deadline = tokio::time::Instant::now() + 2 * STEP;
    loop {
        for proc in procs.iter_mut() {
            if !proc.running() {
                let code = proc.exit_code().await;
                let name = proc.name;
                panic!("{name} exited ({code:?}): {}", proc.report());
            }
        }
        let status = [procs[0].status(), procs[1].status()];
        for i in 0..2 {
            if let (Some(a), Some(p)) = (&status[i], &status[1 - i])
                && a.state == "ACTIVE"
                && p.state == "PASSIVE"
                && p.synced
            {
                return i;
            }
        }
        if tokio::time::Instant::now() > deadline {
            panic!("the pair did not form again:\n{}\n{}", procs[0].report(), procs[1].report());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A server never served its own map without hearing how new its peer's was.
fn assert_no_fallback(proc: &ServerProc) {
    let log = proc.log.lock().unwrap();
    assert!(!log.iter().any(|l| l.contains("went silent before saying")), "{}: {log:?}", proc.name);
}

async fn soak() {
    let ports = PairPorts::new();
    let sides = [Side::Primary, Side::Backup];
    let dirs =
        [DataDir(std::env::temp_dir().join(unique("soak-a"))), DataDir(std::env::temp_dir().join(unique("soak-b")))];
    let mut procs = [spawn(sides[0], &ports, &dirs[0]), spawn(sides[1], &ports, &dirs[1])];
    formed(&mut procs).await;

    // Writers: each its own keys, each write confirmed before the next (a set waits out the
    // outage: the client holds it until a server answers).
    let stop = Arc::new(AtomicBool::new(false));
    let highest = Arc::new(AtomicU64::new(0));
    // Every key's last confirmed write (a writer's counter, which is also the value it wrote).
    let latest: Arc<std::sync::Mutex<BTreeMap<String, u64>>> = Arc::default();
    let mut clients = Vec::new();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client =
            synced(Client::start(ports.options().set_timing(Duration::from_millis(300), 4 * STEP)).unwrap()).await;
        clients.push(client.clone());
        let (stop, highest, latest) = (stop.clone(), highest.clone(), latest.clone());
        writers.push(tokio::spawn(async move {
            let mut confirmed: BTreeMap<Bytes, Bytes> = BTreeMap::new();
            let mut j = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (key, value) = (format!("/w{w}/{}", j % 50), format!("{j}"));
                let sequence =
                    client.set(key.clone(), value.clone(), None).await.unwrap_or_else(|e| panic!("{key}: {e}"));
                highest.fetch_max(sequence.unwrap(), Ordering::Relaxed);
                latest.lock().unwrap().insert(key.clone(), j);
                confirmed.insert(key.into(), value.into());
                j += 1;
            }
            confirmed
        }));
    }

    for round in 0..ROUNDS {
        // Every combination of who dies first and how: at once, or the second only after the
        // first's peer has taken over and confirmed writes of its own (its map is then the newer
        // one, whichever side it is). The restart order and spacing are random.
        let (first, long) = [(0, true), (1, false), (1, true), (0, false), (0, true)][round];
        let (pause, gap, restart_first, restart_gap) = {
            let mut rng = rand::thread_rng();
            let gap = if long { rng.gen_range(700..1000) } else { rng.gen_range(0..50) };
            (rng.gen_range(100..400), gap, rng.gen_range(0..2), rng.gen_range(0..600))
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        procs[first].kill9().await;
        tokio::time::sleep(Duration::from_millis(gap)).await;
        procs[1 - first].kill9().await;
        let confirmed_before = highest.load(Ordering::Relaxed);
        let confirmed = latest.lock().unwrap().clone();
        procs[restart_first] = spawn(sides[restart_first], &ports, &dirs[restart_first]);
        tokio::time::sleep(Duration::from_millis(restart_gap)).await;
        procs[1 - restart_first] = spawn(sides[1 - restart_first], &ports, &dirs[1 - restart_first]);
        let active = formed(&mut procs).await;
        // Both were restarted this round: a log that says so stepped aside in it.
        let stepped_aside =
            |p: &ServerProc| p.log.lock().unwrap().iter().any(|l| l.contains("the peer's map is newer than ours"));
        STEPPED_ASIDE.fetch_add(procs.iter().filter(|p| stepped_aside(p)).count(), Ordering::Relaxed);
        let address = ports.address(sides[active]).clone();
        let fresh = synced(Client::start(chp::ClientOptions::for_servers(vec![address])).unwrap()).await;
        assert!(
            fresh.sequence() >= confirmed_before,
            "round {round}: the pair serves sequence {} after {confirmed_before} was confirmed",
            fresh.sequence()
        );
        // Every write confirmed before the kills is served, or a later one of the same key.
        for (key, j) in &confirmed {
            let served = fresh.get(key.as_str()).map(|v| String::from_utf8_lossy(&v).parse::<u64>().unwrap());
            assert!(served >= Some(*j), "round {round}: {key} confirmed at write {j}, served {served:?}");
        }
        fresh.close().await;
    }

    stop.store(true, Ordering::Relaxed);
    let mut want: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    for w in writers {
        want.extend(w.await.unwrap());
    }
    let active = formed(&mut procs).await;
    let fresh =
        synced(Client::start(chp::ClientOptions::for_servers(vec![ports.address(sides[active]).clone()])).unwrap())
            .await;
    let served = fresh.snapshot().map;
    for (k, v) in &want {
        assert_eq!(served.get(k), Some(v), "confirmed write {k:?} = {v:?} after {ROUNDS} rounds of killing both");
    }
    assert_eq!(served.len(), want.len());
    assert!(
        STEPPED_ASIDE.load(Ordering::Relaxed) >= 1,
        "a round where the backup took over and confirmed writes makes the primary step aside"
    );
    for proc in &procs {
        assert_no_fallback(proc);
    }
    eprintln!(
        "durable soak: {ROUNDS} rounds, {} keys confirmed, final sequence {}, {} restarts stepped aside for a newer map",
        want.len(),
        fresh.sequence(),
        STEPPED_ASIDE.load(Ordering::Relaxed)
    );
    fresh.close().await;
    for c in clients {
        c.close().await;
    }
}
