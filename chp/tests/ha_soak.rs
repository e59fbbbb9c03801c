//! Soak: 20 SIGKILL / restart cycles alternating between the two `chp server` processes of a pair
//! while 4 clients write without pause. At the end every client's map equals the survivor's and
//! what the writers were confirmed; no client ever saw a sequence gap, or a sequence twice or out
//! of order within one sync.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bstar::Side;
use bytes::Bytes;
use chp::{Client, ClientOptions, Event, ServerAddress};
use common::pair::{PairPorts, ServerProc};
use common::synced;
use tokio::sync::mpsc;
use zmtp_testkit::step;

const CYCLES: usize = 20;
const CLIENTS: usize = 4;

/// What one client's event stream showed.
#[derive(Debug, Default)]
struct Seen {
    updates: u64,
    syncs: u64,
    gaps: Vec<Event>,
    /// A sequence at or below the previous one within one sync.
    disorder: Vec<(u64, u64)>,
}

// It once failed about one run in fifty under load: a server killed between echoing a KVSET to its
// clients and passing it to its peer lost a confirmed write. Clients now send such writes again after
// a failover (chp/src/client/recent.rs); 0 failures in 84 runs since, half of them beside full builds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill_restart_cycles_while_four_clients_write() {
    tokio::time::timeout(Duration::from_secs(80), soak()).await.expect("soak exceeded its time limit");
}

async fn soak() {
    let ports = PairPorts::new();
    let (primary, backup) = ServerProc::formed_pair(&ports).await;
    let mut procs = [Some(primary), Some(backup)];
    let sides = [Side::Primary, Side::Backup];
    let mut active = 0;

    // Clients, each with an event recorder that also reports failovers.
    let (failovers_tx, mut failovers) = mpsc::unbounded_channel::<ServerAddress>();
    let mut clients = Vec::new();
    let mut recorders = Vec::new();
    for _ in 0..CLIENTS {
        let client = synced(Client::start(ports.options()).unwrap()).await;
        let mut events = client.events();
        let tx = failovers_tx.clone();
        recorders.push(tokio::spawn(async move {
            let mut seen = Seen::default();
            let (mut last, mut resyncing) = (0u64, false);
            while let Some(e) = events.next().await {
                match e {
                    Event::Set { sequence, .. } | Event::Deleted { sequence, .. } => {
                        // The differences a re-sync reports all carry the snapshot's sequence.
                        if !resyncing {
                            if sequence <= last {
                                seen.disorder.push((last, sequence));
                            }
                            last = sequence;
                        }
                        seen.updates += 1;
                    }
                    Event::Synced { sequence, .. } => {
                        seen.syncs += 1;
                        (last, resyncing) = (sequence, false);
                    }
                    Event::Failover { to, .. } => {
                        let _ = tx.send(to);
                    }
                    Event::ServerLost { .. } => resyncing = true,
                    e @ (Event::Gap { .. } | Event::Lagged { .. }) => seen.gaps.push(e),
                }
            }
            seen
        }));
        clients.push(client);
    }

    // Writers: own keys, sets (some with a long ttl) and deletes, without pause.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (c, stop) = (c.clone(), stop.clone());
            tokio::spawn(async move {
                let mut log: Vec<(String, Option<String>)> = Vec::new();
                let mut j = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("/s/c{i}/k{}", j % 16);
                    let value = j.to_string();
                    let r = match j % 6 {
                        4 => c.delete(key.clone()).await.map(|_| None),
                        1 => {
                            c.set(key.clone(), value.clone(), Some(Duration::from_secs(120))).await.map(|_| Some(value))
                        }
                        _ => c.set(key.clone(), value.clone(), None).await.map(|_| Some(value)),
                    };
                    log.push((key.clone(), r.unwrap_or_else(|e| panic!("client {i}: {key}: {e}"))));
                    j += 1;
                }
                log
            })
        })
        .collect();

    let mut failover_times = Vec::new();
    for cycle in 0..CYCLES {
        let survivor = 1 - active;
        let address = ports.address(sides[survivor]).clone();
        let killed = procs[active].as_mut().unwrap().kill9().await;
        procs[survivor].as_mut().unwrap().expect("role: ACTIVE").await;
        let mut moved = 0;
        while moved < CLIENTS {
            let to = step("clients fail over", failovers.recv()).await.unwrap();
            assert_eq!(to, address, "cycle {cycle}: failover to the survivor");
            moved += 1;
        }
        failover_times.push(killed.elapsed());
        // Restart the killed server: it comes back passive and copies the survivor.
        let name = if sides[active] == Side::Primary { "primary" } else { "backup" };
        let mut restarted = ServerProc::spawn(name, sides[active], &ports, &[]);
        restarted.expect("role: PASSIVE").await;
        restarted.expect("peer: synced").await;
        procs[active] = Some(restarted);
        active = survivor;
    }

    stop.store(true, Ordering::Relaxed);
    let mut want: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    let mut writes = 0;
    for w in writers {
        for (k, v) in w.await.unwrap() {
            writes += 1;
            match v {
                Some(v) => want.insert(Bytes::from(k), Bytes::from(v)),
                None => want.remove(k.as_bytes()),
            };
        }
    }
    let survivor = procs[active].as_mut().unwrap();
    let converged = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let seq = survivor.status().map(|s| s.sequence).unwrap_or(0);
            if clients.iter().all(|c| c.sequence() == seq && c.snapshot().map == want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    if converged.is_err() {
        // Say exactly what differs before failing: which client, which keys, which sequences.
        let mut report = format!("survivor status: {:?}\n", survivor.status());
        let fresh = Client::start(ClientOptions::for_servers(vec![ports.address(sides[active]).clone()])).unwrap();
        let fresh = tokio::time::timeout(Duration::from_secs(5), synced(fresh)).await;
        let server_map = fresh.as_ref().ok().map(|f| f.snapshot().map);
        report += &format!("fresh client on the survivor: {}\n", describe_diff(server_map.as_ref(), &want));
        for (i, c) in clients.iter().enumerate() {
            let snap = c.snapshot();
            report += &format!(
                "client {i}: sequence {} vs want: {}; vs survivor: {}\n",
                c.sequence(),
                describe_diff(Some(&snap.map), &want),
                describe_diff(Some(&snap.map), server_map.as_ref().unwrap_or(&want))
            );
        }
        panic!("clients did not converge within 10 s after {CYCLES} cycles:\n{report}");
    }
    let fresh =
        synced(Client::start(ClientOptions::for_servers(vec![ports.address(sides[active]).clone()])).unwrap()).await;
    assert_eq!(fresh.snapshot().map, want, "the survivor holds exactly what the writers were confirmed");
    fresh.close().await;
    for c in clients {
        c.close().await;
    }
    drop(failovers_tx);
    for (i, r) in recorders.into_iter().enumerate() {
        let seen = r.await.unwrap();
        assert!(seen.gaps.is_empty(), "client {i} saw gaps: {:?}", seen.gaps);
        assert!(seen.disorder.is_empty(), "client {i} saw sequences out of order: {:?}", seen.disorder);
        assert_eq!(seen.syncs, CYCLES as u64, "client {i}: one re-sync per failover");
    }
    failover_times.sort();
    let ms = |d: Duration| d.as_millis();
    eprintln!(
        "soak: {CYCLES} cycles, {writes} confirmed writes by {CLIENTS} clients, {} keys at the end; \
         kill -> all clients re-synced: min {} ms, median {} ms, max {} ms",
        want.len(),
        ms(failover_times[0]),
        ms(failover_times[CYCLES / 2]),
        ms(failover_times[CYCLES - 1])
    );
}

/// The keys on which `got` and `want` differ, at most a few of them, for a failure message.
fn describe_diff(got: Option<&BTreeMap<Bytes, Bytes>>, want: &BTreeMap<Bytes, Bytes>) -> String {
    let Some(got) = got else { return "no map".into() };
    let keys: std::collections::BTreeSet<&Bytes> = got.keys().chain(want.keys()).collect();
    let differing: Vec<String> = keys
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .map(|k| format!("{:?}: {:?} != {:?}", k, got.get(k), want.get(k)))
        .collect();
    if differing.is_empty() {
        "equal".into()
    } else {
        format!("{} keys differ, e.g. {:?}", differing.len(), &differing[..differing.len().min(4)])
    }
}
