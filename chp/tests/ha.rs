//! The CHP high-availability pair (Clone Model Six over Binary Star): patterns.md §D Clone
//! behaviours 8–11 with `chp server --primary|--backup` processes killed with SIGKILL, the Binary
//! Star behaviours as seen through CHP, and regression tests for the reference's bugs (§B).
//!
//! Timings: heartbeat 100 ms (peer expiry 200 ms), HUGZ 50 ms, clients' server ttl 400 ms.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use bstar::{Liveness, Side, State};
use bytes::Bytes;
use chp::command::{HUGZ as HUGZ_KEY, PEERSYNC, hugz_message};
use chp::kvmsg::sequence_frame;
use chp::server::ha::{HaEvent, HaServer};
use chp::{Client, ClientOptions, Event, Events, ServerAddress, ServerLoss, Status};
use common::pair::{
    HEARTBEAT, Observer, PairPorts, SERVER_TTL, ServerProc, caught_up, collector_publisher, in_process_pair, kvset,
};
use common::{Fake, map, server_with, synced, wait_event};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::{bounded, eventually, step};

/// One writer's operations in order: key → value (`None`: deleted).
type OpLog = Vec<(String, Option<String>)>;

/// Writes keys `{prefix}k0..k11` (sets, sets with a 60 s ttl, deletes); every operation must be
/// confirmed.
async fn write_ops(client: &Client, prefix: &str, from: usize, to: usize, log: &mut OpLog) {
    for j in from..to {
        let key = format!("{prefix}k{}", j % 12);
        let value = format!("{j}");
        let result = match j % 5 {
            3 => client.delete(key.clone()).await.map(|_| None),
            1 => client.set(key.clone(), value.clone(), Some(Duration::from_secs(60))).await.map(|_| Some(value)),
            _ => client.set(key.clone(), value.clone(), None).await.map(|_| Some(value)),
        };
        log.push((key.clone(), result.unwrap_or_else(|e| panic!("{key}: {e}"))));
    }
}

/// A writer task: `phases[i]` operations once `go` reaches `i`; reports each finished phase.
fn spawn_writer(
    client: Client,
    prefix: String,
    phases: Vec<usize>,
    mut go: watch::Receiver<usize>,
    done: mpsc::UnboundedSender<usize>,
) -> JoinHandle<OpLog> {
    tokio::spawn(async move {
        let (mut log, mut j) = (OpLog::new(), 0);
        for (phase, count) in phases.into_iter().enumerate() {
            go.wait_for(|p| *p >= phase).await.expect("test alive");
            write_ops(&client, &prefix, j, j + count, &mut log).await;
            j += count;
            let _ = done.send(phase);
        }
        log
    })
}

/// Waits until `n` writers reported finishing a phase.
async fn phase_done(done: &mut mpsc::UnboundedReceiver<usize>, n: usize) {
    for _ in 0..n {
        step("writers finish a phase", done.recv()).await.expect("writers alive");
    }
}

/// The map the op logs imply (writers own disjoint keys).
fn expected(logs: &[&OpLog]) -> BTreeMap<Bytes, Bytes> {
    let mut m = BTreeMap::new();
    for log in logs {
        for (k, v) in log.iter() {
            let key = Bytes::from(k.clone());
            match v {
                Some(v) => m.insert(key, Bytes::from(v.clone())),
                None => m.remove(&key),
            };
        }
    }
    m
}

/// The map of the server at `address`, as a fresh client of it alone receives it.
async fn survivor_map(address: &ServerAddress) -> (u64, BTreeMap<Bytes, Bytes>) {
    let c = synced(Client::start(ClientOptions::for_servers(vec![address.clone()])).unwrap()).await;
    let snap = c.snapshot();
    c.close().await;
    (snap.sequence, snap.map)
}

/// Waits for a Failover event to `to`.
async fn failed_over(events: &mut Events, to: &ServerAddress) -> Duration {
    match wait_event(events, |e| matches!(e, Event::Failover { to: t, .. } if t == to)).await.0 {
        Event::Failover { outage, .. } => outage,
        _ => unreachable!(),
    }
}

fn restrict(m: &BTreeMap<Bytes, Bytes>, prefix: &str) -> BTreeMap<Bytes, Bytes> {
    m.iter().filter(|(k, _)| k.starts_with(prefix.as_bytes())).map(|(k, v)| (k.clone(), v.clone())).collect()
}

// ---------------------------------------------------------------------------------------------
// Clone behaviour 8, with processes and SIGKILL.

/// Kill the active: every client re-syncs from the backup and holds exactly its map; nothing a
/// client saw is missing; updates sent during the gap are published after the promotion (once);
/// nothing the old active published is published again; ttls keep running across the takeover;
/// a subtree client stays inside its subtree throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_the_active_clients_resync_from_the_backup_nothing_lost_gap_updates_published() {
    bounded(async {
        let ports = PairPorts::new();
        let (mut primary, mut backup) = ServerProc::formed_pair(&ports).await;
        let seen_by_primary = Observer::start(&ports.primary).await;
        let seen_by_backup = Observer::start(&ports.backup).await;
        let gap_writer = collector_publisher(&ports.backup).await;

        // Three whole-map clients and one subtree client, each writing its own keys.
        let mut clients = Vec::new();
        for i in 0..4 {
            let options = if i == 0 { ports.options().subtree("/w/c0/".parse().unwrap()) } else { ports.options() };
            clients.push(synced(Client::start(options).unwrap()).await);
        }
        let mut events: Vec<Events> = clients.iter().map(Client::events).collect();
        let ephemeral = clients[1].set("/w/eph", "short", Some(Duration::from_millis(600))).await.unwrap();
        assert!(ephemeral.is_some());
        let (go, go_rx) = watch::channel(0);
        let (done_tx, mut done) = mpsc::unbounded_channel();
        let writers: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| spawn_writer(c.clone(), format!("/w/c{i}/"), vec![30, 30], go_rx.clone(), done_tx.clone()))
            .collect();
        phase_done(&mut done, 4).await;

        // Fence: the backup holds everything the primary published.
        let p = caught_up(&mut primary, &mut backup).await;
        let before: Vec<BTreeMap<Bytes, Bytes>> = clients.iter().map(|c| c.snapshot().map).collect();
        let published_by_primary: Vec<_> = seen_by_primary.all();

        let killed = primary.kill9().await;
        // An update sent during the gap (straight to the backup's collector, as a client's
        // publisher would): held while passive, published after the promotion.
        let mut gap = kvset("/w/gap", "sent during the gap", true);
        gap_writer.send(gap.to_message()).await.unwrap();
        backup.status_until("holding the gap update", |s| s.state == "PASSIVE" && s.pending == 1).await;
        go.send_replace(1);

        let promoted = backup.expect("role: ACTIVE").await;
        assert!(promoted.contains("replayed"), "{promoted}");
        for (i, e) in events.iter_mut().enumerate() {
            // How long is a matter of load (BENCHMARKS.md measures it); that it happened is the test.
            let outage = failed_over(e, &ports.backup).await;
            eprintln!("client {i} outage {outage:?}");
        }
        phase_done(&mut done, 4).await;
        let mut logs = Vec::new();
        for w in writers {
            logs.push(w.await.unwrap());
        }
        let failover = killed.elapsed();

        // Convergence: every whole-map client equals the survivor, at its sequence; the ephemeral
        // key expired (on whichever server was active at its deadline).
        let mut want = expected(&logs.iter().collect::<Vec<_>>());
        gap.sequence = 0;
        want.insert(Bytes::from("/w/gap"), Bytes::from("sent during the gap"));
        eventually("clients converge on the survivor", || {
            let want_seq = backup.status().map(|s| s.sequence).unwrap_or(0);
            clients[1..].iter().all(|c| c.snapshot().map == want && c.sequence() == want_seq)
        })
        .await;
        let (seq, survivor) = survivor_map(&ports.backup).await;
        assert_eq!(survivor, want, "the survivor holds exactly what the writers were confirmed");
        for c in &clients[1..] {
            assert_eq!(c.snapshot().map, survivor);
            assert_eq!(c.sequence(), seq);
        }
        assert_eq!(clients[0].snapshot().map, restrict(&survivor, "/w/c0/"));

        // Nothing a client saw before the kill is missing: each key holds what it saw, or a later
        // write of its single writer changed it.
        for (i, seen) in before.iter().enumerate() {
            for (k, v) in seen {
                let later = logs.iter().flat_map(|l| l.iter().skip(30)).any(|(key, _)| key.as_bytes() == k);
                assert!(later || survivor.get(k) == Some(v) || k == "/w/eph", "client {i} saw {k:?}={v:?}");
            }
        }

        // Published at most once: nothing the primary published comes again from the backup, the
        // backup publishes each UUID once, with contiguous sequences; the gap update exactly once.
        let by_backup = seen_by_backup.all();
        let primary_uuids: HashSet<_> = published_by_primary.iter().filter_map(|s| s.uuid).collect();
        let mut backup_uuids = HashSet::new();
        for s in &by_backup {
            if let Some(u) = s.uuid {
                assert!(!primary_uuids.contains(&u), "republished after takeover: {s:?}");
                assert!(backup_uuids.insert(u), "published twice by the backup: {s:?}");
            }
        }
        assert_eq!(by_backup.iter().filter(|s| s.uuid == gap.uuid).count(), 1);
        assert!(by_backup.windows(2).all(|w| w[1].sequence == w[0].sequence + 1), "contiguous sequences");
        assert!(by_backup.first().is_some_and(|s| s.sequence == p.sequence + 1), "continues the primary's sequence");

        // The subtree client never saw a key outside its subtree.
        for e in std::iter::from_fn(|| events[0].try_next()) {
            if let Event::Set { key, .. } | Event::Deleted { key, .. } = &e {
                assert!(key.starts_with(b"/w/c0/"), "subtree client saw {e:?}");
            }
        }
        eprintln!("behaviour 8: kill -> all writers done in {failover:?}");
        for c in clients {
            c.close().await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Clone behaviour 9 and the pending-list bugs (2, 3, 5, 10), with processes.

/// An update reaching the passive from both a client and the active, in either order, with or
/// without a UUID, is published at most once after takeover; one that only the passive received
/// just before the kill is published after it; one the active never published while alive is
/// dropped from the pending list and never replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_from_both_client_and_active_is_published_at_most_once_after_takeover() {
    bounded(async {
        let ports = PairPorts::new();
        let (mut primary, mut backup) = ServerProc::formed_pair(&ports).await;
        let to_primary = collector_publisher(&ports.primary).await;
        let to_backup = collector_publisher(&ports.backup).await;
        let seen_by_primary = Observer::start(&ports.primary).await;
        let seen_by_backup = Observer::start(&ports.backup).await;

        // Bug 2: an update only the passive got (the client's link to the active is down) does
        // not stay pending forever: dropped once the active was heard for the window.
        let orphan = kvset("/orphan", "never published by the active", true);
        to_backup.send(orphan.to_message()).await.unwrap();
        backup.status_until("holding the orphan", |s| s.pending == 1).await;
        backup.status_until("orphan pruned", |s| s.pending == 0 && s.pruned == 1).await;

        // Client first, then the active (with a UUID).
        let u1 = kvset("/u1", "client first", true);
        to_backup.send(u1.to_message()).await.unwrap();
        backup.status_until("u1 held", |s| s.pending == 1).await;
        to_primary.send(u1.to_message()).await.unwrap();
        let s1 = seen_by_primary.wait_for("/u1", u1.uuid).await.sequence;
        backup.status_until("u1 matched", |s| s.sequence >= s1 && s.pending == 0 && s.matched >= 1).await;

        // The active first, then the client's copy (a late copy: dropped, not held).
        let u2 = kvset("/u2", "active first", true);
        to_primary.send(u2.to_message()).await.unwrap();
        let s2 = seen_by_primary.wait_for("/u2", u2.uuid).await.sequence;
        backup.status_until("u2 followed", |s| s.sequence >= s2).await;
        to_backup.send(u2.to_message()).await.unwrap();
        backup.status_until("u2's late copy dropped", |s| s.late == 1 && s.pending == 0).await;

        // Bug 5: empty UUIDs (12/CHP allows them) neither crash the passive nor all match each
        // other: matched by content, both orders.
        let u3 = kvset("/u3", "no uuid, client first", false);
        let u4 = kvset("/u4", "no uuid, active first", false);
        to_backup.send(u3.to_message()).await.unwrap();
        backup.status_until("u3 held", |s| s.pending == 1).await;
        to_primary.send(u3.to_message()).await.unwrap();
        let s3 = seen_by_primary.wait_for("/u3", None).await.sequence;
        backup.status_until("u3 matched", |s| s.sequence >= s3 && s.pending == 0).await;
        to_primary.send(u4.to_message()).await.unwrap();
        let s4 = seen_by_primary.wait_for("/u4", None).await.sequence;
        backup.status_until("u4 followed", |s| s.sequence >= s4).await;
        to_backup.send(u4.to_message()).await.unwrap();
        backup.status_until("u4's late copy dropped", |s| s.late == 2 && s.pending == 0).await;

        // Only the passive gets this one, and the active dies at once: it must be published.
        let last = kvset("/last", "only the passive got it", true);
        to_backup.send(last.to_message()).await.unwrap();
        backup.status_until("last held", |s| s.pending == 1).await;
        primary.kill9().await;

        let client = synced(Client::start(ports.options()).unwrap()).await;
        let promoted = backup.expect("role: ACTIVE").await;
        assert!(promoted.contains("replayed 1 pending"), "{promoted}");
        let published = seen_by_backup.wait_for("/last", last.uuid).await;
        assert!(published.sequence > s4);
        // Bug 3 / bug 10: the replay is published, and it is the only thing published.
        let by_backup = seen_by_backup.all();
        assert_eq!(by_backup.len(), 1, "the backup published only the replay: {by_backup:?}");
        let _ = seen_by_primary;
        assert_eq!(
            client.snapshot().map,
            map(&[
                ("/last", "only the passive got it"),
                ("/u1", "client first"),
                ("/u2", "active first"),
                ("/u3", "no uuid, client first"),
                ("/u4", "no uuid, active first"),
            ])
        );
        // A client retransmitting an update the old active had published is not published again.
        to_backup.send(u1.to_message()).await.unwrap();
        to_backup.send(last.to_message()).await.unwrap();
        backup.status_until("retransmits dropped", |s| s.duplicates == 2).await;
        client.set("/after", "x", None).await.unwrap();
        seen_by_backup.wait_for("/after", None).await;
        let keys: Vec<_> = seen_by_backup.all().into_iter().map(|s| s.key).collect();
        assert_eq!(keys, ["/last", "/after"], "the retransmits were not published");
        client.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Clone behaviour 10 and Binary Star behaviour 4, with processes.

/// A restarted primary comes back PASSIVE (no fail-back), pulls a snapshot and converges on the
/// backup while clients write; killing the backup then brings the clients back to the primary
/// with nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_primary_comes_back_passive_converges_and_takes_over_when_the_backup_dies() {
    bounded(async {
        let ports = PairPorts::new();
        let (mut primary, mut backup) = ServerProc::formed_pair(&ports).await;
        let clients: Vec<Client> = {
            let mut v = Vec::new();
            for _ in 0..2 {
                v.push(synced(Client::start(ports.options()).unwrap()).await);
            }
            v
        };
        let mut events: Vec<Events> = clients.iter().map(Client::events).collect();
        let (go, go_rx) = watch::channel(0);
        let (done_tx, mut done) = mpsc::unbounded_channel();
        let writers: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                spawn_writer(c.clone(), format!("/r/c{i}/"), vec![20, 20, 20], go_rx.clone(), done_tx.clone())
            })
            .collect();
        phase_done(&mut done, 2).await;

        primary.kill9().await;
        for e in &mut events {
            failed_over(e, &ports.backup).await;
        }
        backup.expect("role: ACTIVE").await;

        // Restart the primary while the clients write: it stays passive and converges.
        let mut primary = ServerProc::spawn("primary (restarted)", Side::Primary, &ports, &[]);
        go.send_replace(1);
        primary.expect("role: PASSIVE").await;
        primary.expect("peer: synced").await;
        phase_done(&mut done, 2).await;
        let converged = caught_up(&mut backup, &mut primary).await;
        assert_eq!(converged.state, "ACTIVE");
        assert_eq!(primary.status().unwrap().state, "PASSIVE");
        assert!(
            !primary.drain().iter().any(|l| l.starts_with("role: ACTIVE")),
            "no automatic fail-back: {:?}",
            primary.seen
        );

        // Kill the backup in the middle of the next writes.
        go.send_replace(2);
        backup.kill9().await;
        for e in &mut events {
            failed_over(e, &ports.primary).await;
        }
        primary.expect("role: ACTIVE").await;
        phase_done(&mut done, 2).await;
        let mut logs = Vec::new();
        for w in writers {
            logs.push(w.await.unwrap());
        }
        let want = expected(&logs.iter().collect::<Vec<_>>());
        eventually("clients converge on the primary", || {
            let seq = primary.status().map(|s| s.sequence).unwrap_or(0);
            clients.iter().all(|c| c.snapshot().map == want && c.sequence() == seq)
        })
        .await;
        let (_, survivor) = survivor_map(&ports.primary).await;
        assert_eq!(survivor, want, "nothing lost across two failovers");
        for c in clients {
            c.close().await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Clone behaviour 11 and Binary Star behaviour 2, with processes.

/// Both servers down: the client keeps cycling over both without crashing; a backup that comes
/// back alone never serves (the client's votes are rejected); when the primary returns the pair
/// forms and the client re-syncs, its map replaced by the new (empty) one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_servers_down_the_client_keeps_cycling_and_resyncs_when_they_return() {
    bounded(async {
        let ports = PairPorts::new();
        let (mut primary, mut backup) = ServerProc::formed_pair(&ports).await;
        let client = synced(Client::start(ports.options()).unwrap()).await;
        client.set("/before", "1", None).await.unwrap();
        let mut events = client.events();

        backup.kill9().await;
        primary.kill9().await;
        let mut lost = BTreeMap::<String, usize>::new();
        while lost.len() < 2 || lost.values().any(|n| *n < 2) {
            if let (Event::ServerLost { server, .. }, _) =
                wait_event(&mut events, |e| matches!(e, Event::ServerLost { .. })).await
            {
                *lost.entry(server.to_string()).or_default() += 1;
            }
        }
        assert!(matches!(client.status(), Status::Connecting(_) | Status::Syncing(_)));

        // The backup alone: the client reaches it and votes, but it never serves.
        let mut backup = ServerProc::spawn("backup (restarted)", Side::Backup, &ports, &[]);
        backup.expect("listening on").await;
        let mut rejected = 0;
        while rejected < 2 {
            if let (Event::ServerLost { server, reason }, _) =
                wait_event(&mut events, |e| matches!(e, Event::ServerLost { .. })).await
                && server == ports.backup
                && matches!(reason, ServerLoss::NoSnapshot(_))
            {
                rejected += 1;
            }
        }
        assert_eq!(backup.status_until("reporting", |_| true).await.state, "BACKUP");

        // The primary returns: the pair forms, the client re-syncs with an empty map.
        let mut primary = ServerProc::spawn("primary (restarted)", Side::Primary, &ports, &[]);
        primary.expect("role: ACTIVE").await;
        backup.expect("role: PASSIVE").await;
        let (_, skipped) = wait_event(&mut events, |e| matches!(e, Event::Synced { .. })).await;
        assert!(skipped.contains(&Event::Deleted { key: "/before".into(), sequence: 0 }), "{skipped:?}");
        assert!(client.snapshot().map.is_empty());
        assert_eq!(client.set("/after", "2", None).await, Ok(Some(1)));
        client.close().await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Binary Star behaviours through CHP (in-process servers).

/// Any start order: the primary ends ACTIVE, the backup PASSIVE with a copy; each role change is
/// reported once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn either_start_order_forms_the_pair_with_one_role_change_each() {
    bounded(async {
        let ports = PairPorts::new();
        let backup = HaServer::bind(ports.config(Side::Backup)).await.unwrap();
        let mut backup_events = backup.events();
        let primary = HaServer::bind(ports.config(Side::Primary)).await.unwrap();
        let mut primary_events = primary.events();
        step("primary active", primary.wait_for(|s| s.state == State::Active)).await.unwrap();
        step("backup passive", backup.wait_for(|s| s.state == State::Passive && s.peer_synced)).await.unwrap();
        let client = synced(Client::start(ports.options()).unwrap()).await;
        assert_eq!(client.status(), Status::Active(ports.primary.clone()));
        client.set("/x", "1", None).await.unwrap();
        eventually("backup follows", || backup.sequence() == 1).await;
        let count = |events: &mut zmtp::task::Events<HaEvent>| {
            let (mut active, mut passive) = (0, 0);
            while let Some(e) = events.try_next() {
                match e {
                    HaEvent::BecameActive { .. } => active += 1,
                    HaEvent::BecamePassive => passive += 1,
                    _ => {}
                }
            }
            (active, passive)
        };
        // The primary may turn active before `events()` subscribes (its driver runs as soon as
        // `bind` returns, and the backup is already there), so its one promotion is read from its
        // counters; its events may show that promotion or not, but nothing more.
        assert_eq!(primary.status().stats.promotions, 1);
        let (active, passive) = count(&mut primary_events);
        assert!(active <= 1 && passive == 0, "primary: {active} BecameActive, {passive} BecamePassive");
        assert_eq!(count(&mut backup_events), (0, 1));
        assert_eq!(backup.status().stats.promotions, 0);
        client.close().await;
    })
    .await;
}

/// A primary alone serves only once its peer has expired (2 × heartbeat): the client's earlier
/// votes are rejected. A backup alone never serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_alone_serves_after_peer_expiry_and_a_backup_alone_never() {
    bounded(async {
        let ports = PairPorts::new();
        let started = Instant::now();
        let primary = HaServer::bind(ports.config(Side::Primary)).await.unwrap();
        let client =
            Client::start(ClientOptions::for_servers(vec![ports.primary.clone()]).server_ttl(SERVER_TTL)).unwrap();
        let client = synced(client).await;
        assert!(started.elapsed() >= 2 * HEARTBEAT, "served after {:?}", started.elapsed());
        assert_eq!(primary.state(), State::Active);
        assert!(primary.star().status().rejected >= 1, "an early vote was rejected");
        client.close().await;
        primary.close().await;

        let ports = PairPorts::new();
        let backup = HaServer::bind(ports.config(Side::Backup)).await.unwrap();
        let client =
            Client::start(ClientOptions::for_servers(vec![ports.backup.clone()]).server_ttl(SERVER_TTL)).unwrap();
        let mut events = client.events();
        for _ in 0..2 {
            let (lost, _) = wait_event(&mut events, |e| matches!(e, Event::ServerLost { .. })).await;
            assert!(matches!(&lost, Event::ServerLost { reason: ServerLoss::NoSnapshot(_), .. }), "{lost:?}");
        }
        assert_eq!(backup.state(), State::Backup);
        let votes = backup.star().status();
        assert!(votes.rejected >= 2 && votes.accepted == 0, "{votes:?}");
        assert!(!matches!(client.status(), Status::Active(_)));
        client.close().await;
    })
    .await;
}

/// Kill the active: the passive reports its peer silent but stays passive until a client votes;
/// the first client then makes it active and syncs from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_passive_promotes_only_on_a_client_vote_after_the_active_died() {
    bounded(async {
        let ports = PairPorts::new();
        let (primary, backup) = in_process_pair(&ports).await;
        let writer = synced(Client::start(ports.options()).unwrap()).await;
        writer.set("/k", "v", None).await.unwrap();
        writer.close().await;
        eventually("backup follows", || backup.sequence() == 1).await;
        drop(primary);
        let silent = step("peer silent", backup.wait_for(|s| s.peer == Liveness::Silent)).await.unwrap();
        assert_eq!(silent.state, State::Passive, "no takeover without a vote");
        assert_eq!(backup.star().status().accepted, 0);
        let client = synced(Client::start(ports.options()).unwrap()).await;
        assert_eq!(client.status(), Status::Active(ports.backup.clone()));
        assert_eq!(backup.state(), State::Active);
        assert_eq!(client.snapshot().map, map(&[("/k", "v")]));
        client.close().await;
    })
    .await;
}

/// Binary Star behaviour 5 through `chp server`, healed: a pair server that finds its peer ACTIVE
/// while it is ACTIVE itself, without having taken over from it, yields (the peer holds the newer
/// truth) instead of stopping; told that the peer is PASSIVE too, the primary serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_actives_make_a_pair_server_that_did_not_take_over_yield() {
    bounded(async {
        let ports = PairPorts::new();
        // A fake peer: announces BACKUP (the primary takes the active role), then ACTIVE.
        let peer = Socket::new(SocketType::Pub);
        peer.bind(&ports.backup_state).await.unwrap();
        let (say, said) = watch::channel("2");
        let beat = tokio::spawn({
            let peer = peer.clone();
            async move {
                loop {
                    let state = *said.borrow();
                    let _ = peer.send(state).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        let mut primary = ServerProc::spawn("primary", Side::Primary, &ports, &[]);
        primary.expect("role: ACTIVE").await;
        say.send_replace("3");
        primary.expect("role: PASSIVE").await;
        say.send_replace("4");
        primary.expect("role: ACTIVE").await;
        assert!(primary.running());
        beat.abort();
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Regression tests for the reference's bugs (patterns.md §B) not covered above.

/// Bug 1: the passive stores ttls as deadlines on its own clock (not the active's relative
/// value), so keys neither vanish on the passive nor outlive their ttl after a takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_survive_a_takeover_as_deadlines_on_the_passives_clock() {
    bounded(async {
        let ports = PairPorts::new();
        let (primary, backup) = in_process_pair(&ports).await;
        let client = synced(Client::start(ports.options()).unwrap()).await;
        let mut events = client.events();
        let sent = std::time::Instant::now();
        client.set("/t/long", "1", Some(Duration::from_secs(30))).await.unwrap();
        client.set("/t/short", "2", Some(Duration::from_millis(1200))).await.unwrap();
        let set_at = Instant::now();
        eventually("backup follows", || backup.sequence() == 2).await;
        let now = std::time::Instant::now();
        let long = backup.with_state(|s| s.expiry_of(b"/t/long")).expect("deadline on the passive");
        let short = backup.with_state(|s| s.expiry_of(b"/t/short")).expect("deadline on the passive");
        // Deadlines: the ttl counted from when the passive followed the update (rounded up to the
        // millisecond): after the set was sent, and no later than `now` (it had followed by then).
        // Order only, so a loaded machine cannot break it.
        let ms = Duration::from_millis;
        assert!(long >= sent + ms(30_000) && long <= now + ms(30_001), "{:?}", long.saturating_duration_since(now));
        assert!(short >= sent + ms(1_200) && short <= now + ms(1_201), "{:?}", short.saturating_duration_since(now));
        assert_eq!(backup.len(), 2);

        drop(primary);
        failed_over(&mut events, &ports.backup).await;
        let (deleted, _) =
            wait_event(&mut events, |e| matches!(e, Event::Deleted { key, .. } if key == "/t/short")).await;
        let after = set_at.elapsed();
        // Never before its ttl (order); how late depends on load and is not asserted.
        assert!(after >= Duration::from_millis(1150), "expired {after:?} after the set ({deleted:?})");
        assert_eq!(client.snapshot().map, map(&[("/t/long", "1")]));
        assert_eq!(backup.map().1, map(&[("/t/long", "1")]));
        client.close().await;
    })
    .await;
}

/// Bugs 7 and 8: the passive's snapshot of the active never blocks (heartbeats keep their
/// interval), times out and is asked again on a fresh socket; when the active dies in the middle
/// of it, the server neither crashes nor serves the part it has as the truth (issue 14).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_peer_snapshot_times_out_without_blocking_heartbeats_and_a_partial_copy_is_never_served() {
    bounded(async {
        let ports = PairPorts::new();
        // The fake active: state "3" on the primary's state endpoint, HUGZ on its P+1, a ROUTER on
        // its P that reads snapshot requests and does not answer.
        let state = Socket::new(SocketType::Pub);
        state.bind(&ports.primary_state).await.unwrap();
        let router = Socket::new(SocketType::Router);
        router.bind(&ports.primary.snapshot()).await.unwrap();
        let publisher = Socket::new(SocketType::Pub);
        publisher.bind(&ports.primary.publisher()).await.unwrap();
        let fake_active = tokio::spawn({
            let (state, publisher) = (state.clone(), publisher.clone());
            async move {
                loop {
                    let _ = state.send("3").await;
                    let _ = publisher.send(hugz_message(0)).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        // The backup's heartbeats, time-stamped.
        let heartbeats = Socket::new(SocketType::Sub);
        heartbeats.subscribe("").unwrap();
        heartbeats.connect(&ports.backup_state).await.unwrap();

        let backup = HaServer::bind(ports.config(Side::Backup)).await.unwrap();
        let mut backup_events = backup.events();
        step("passive", backup.wait_for(|s| s.state == State::Passive)).await.unwrap();
        let first = step("PEERSYNC?", router.recv()).await.unwrap();
        let asked = Instant::now();
        assert_eq!(first.len(), 2);
        assert_eq!(first[1], PEERSYNC);
        // Heartbeats keep coming while the snapshot is stuck.
        let mut last = step("heartbeat", heartbeats.recv()).await.unwrap();
        let mut beat_at = Instant::now();
        let mut widest = Duration::ZERO;
        let mut beats = 0;
        let second = loop {
            tokio::select! {
                msg = heartbeats.recv() => {
                    let now = Instant::now();
                    widest = widest.max(now - beat_at);
                    beat_at = now;
                    beats += 1;
                    last = msg.unwrap();
                }
                msg = router.recv() => break msg.unwrap(),
                _ = tokio::time::sleep(Duration::from_secs(5)) => panic!("no second PEERSYNC?"),
            }
        };
        assert!(asked.elapsed() >= Duration::from_millis(450), "asked again after {:?}", asked.elapsed());
        assert_ne!(second[0], first[0], "asked again on a fresh socket");
        // Counts, not intervals: heartbeats went on while the snapshot was stuck (a blocking fetch
        // stopped them all until its timeout).
        assert!(beats >= 2, "{beats} heartbeats while the snapshot was stuck (widest gap {widest:?})");
        assert_eq!(last[0], "4", "the backup heartbeats PASSIVE");
        let status = backup.status();
        assert!(!status.peer_synced && status.stats.peer_sync_timeouts >= 1, "{status:?}");

        // Part of a snapshot arrives, then the active dies.
        let kvsync = Message::from(vec![
            second[0].clone(),
            Bytes::from("/early"),
            sequence_frame(5),
            Bytes::new(),
            Bytes::new(),
            Bytes::from("1"),
        ]);
        router.send(kvsync).await.unwrap();
        fake_active.abort();
        for s in [state, router, publisher] {
            s.close().await;
        }
        // The backup never held the truth (it was never active and its copy is partial), so it
        // does not take over with the part it has (issue 14): once the active has expired, votes
        // are still rejected and it stays passive; the client gets no map at all.
        let client =
            Client::start(ClientOptions::for_servers(vec![ports.backup.clone()]).server_ttl(SERVER_TTL)).unwrap();
        step("the active expires", async {
            while backup.star().status().peer != Liveness::Silent {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        let rejected = backup.star().status().rejected;
        step("a vote after the expiry is rejected", async {
            while backup.star().status().rejected == rejected {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert_eq!(backup.state(), State::Passive);
        assert_eq!(backup.status().stats.promotions, 0);
        assert!(client.is_empty() && !matches!(client.status(), Status::Active(_)), "{:?}", client.status());
        while let Some(event) = backup_events.try_next() {
            assert!(!matches!(event, HaEvent::BecameActive { .. }), "{event:?}");
        }
        client.close().await;
    })
    .await;
}

/// Bug 11: on failover the client's map is *replaced* by the new server's: keys the old server
/// had (even with a higher sequence) and the client's unacknowledged sets do not survive; an
/// unacknowledged set only enters the map once the new server publishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_replaces_the_client_map_and_drops_unacknowledged_sets() {
    bounded(async {
        let (a, b, client, mut events, a_alive) = client_of_two_fakes(&[("/a", "1"), ("/b", "2")], 10, true).await;
        let pending = tokio::spawn({
            let client = client.clone();
            async move { client.set("/c", "3", None).await }
        });
        let sent = step("KVSET at A", a.collector.recv()).await.unwrap();
        assert_eq!(sent[0], "/c");
        assert!(client.get("/c").is_none(), "not in the map before the server publishes it");

        // A goes silent; B has a different (and lower-sequenced) map.
        a_alive.abort();
        let (id, _) = b.await_icanhaz().await;
        b.reply(&id, &[("/a", "1")], 3).await;
        let (_, skipped) = wait_event(&mut events, |e| matches!(e, Event::Failover { .. })).await;
        assert!(skipped.contains(&Event::Deleted { key: "/b".into(), sequence: 3 }), "{skipped:?}");
        assert_eq!(client.snapshot().map, map(&[("/a", "1")]));
        assert_eq!(client.sequence(), 3);
        assert!(!pending.is_finished(), "the set is still unconfirmed");

        // The set is retransmitted to B; once B publishes it, it is confirmed and in the map.
        let resent = loop {
            let msg = step("KVSET at B", b.collector.recv()).await.unwrap();
            if msg[0] == "/c" {
                break msg;
            }
        };
        let mut echo = chp::KvMsg::parse(resent.frames()).unwrap();
        echo.sequence = 4;
        b.publisher.send(echo.to_message()).await.unwrap();
        assert_eq!(step("set confirmed", pending).await.unwrap(), Ok(Some(4)));
        assert_eq!(client.snapshot().map, map(&[("/a", "1"), ("/c", "3")]));
        client.close().await;
    })
    .await;
}

/// A server killed between echoing a KVSET to its clients and passing it to its peer leaves a write
/// the client saw confirmed but the new server never got (found by the soak test). After the
/// failover the client sends that write again, with its UUID, and the new server's echo puts it back
/// in every map. A key someone else changed since is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_write_the_new_server_never_got_is_sent_again() {
    bounded(async {
        // B's collector hears nothing before the failover: the client's publisher sends every KVSET
        // to every collector, and copies of the two writes below still on their way to B when the
        // test looked were taken for writes sent again (seen once, on i686 in CI).
        let (a, b, client, mut events, a_alive) =
            client_of_two_fakes(&[("/mine", "1"), ("/theirs", "x")], 10, false).await;
        // Two writes, both echoed (confirmed) by A.
        for (key, value, sequence) in [("/mine", "2", 11), ("/theirs", "y", 12)] {
            let set = tokio::spawn({
                let client = client.clone();
                async move { client.set(key, value, None).await }
            });
            let sent = step("KVSET at A", a.collector.recv()).await.unwrap();
            let mut echo = chp::KvMsg::parse(sent.frames()).unwrap();
            echo.sequence = sequence;
            a.publisher.send(echo.to_message()).await.unwrap();
            assert_eq!(step("confirmed by A", set).await.unwrap(), Ok(Some(sequence)));
        }
        assert_eq!(client.snapshot().map, map(&[("/mine", "2"), ("/theirs", "y")]));

        a_alive.abort();
        // A dies. B never got "/mine" = 2 (it holds the value from before it), and "/theirs" was
        // changed by another client since.
        let (id, _) = b.await_icanhaz().await;
        b.reply(&id, &[("/mine", "1"), ("/theirs", "z")], 5).await;
        wait_event(&mut events, |e| matches!(e, Event::Failover { .. })).await;
        // From here B hears the client (a write sent before this subscription reaches the client's
        // publisher is dropped there, and retransmitted).
        b.collector.subscribe("").unwrap();
        let resent = loop {
            let msg = step("the lost write at B", b.collector.recv()).await.unwrap();
            if msg[0] == "/mine" {
                break chp::KvMsg::parse(msg.frames()).unwrap();
            }
            assert_ne!(msg[0], "/theirs", "another client's newer value is not overwritten");
        };
        assert_eq!(resent.body, "2");
        assert!(resent.uuid.is_some(), "sent with its UUID, so a server that has it drops it");
        let mut echo = resent.clone();
        echo.sequence = 6;
        b.publisher.send(echo.to_message()).await.unwrap();
        eventually("the write is back in the map", || client.get("/mine").as_deref() == Some(&b"2"[..])).await;
        assert_eq!(client.snapshot().map, map(&[("/mine", "2"), ("/theirs", "z")]));
        assert_eq!(client.sequence(), 6);
        assert!(b.collector.try_recv().is_err(), "nothing else was sent again");
        client.close().await;
    })
    .await;
}

/// A client of two fake servers (300 ms server ttl), synced with the first on `map` at `sequence`.
/// Unless `b_hears` is set, the second server's collector is not subscribed when the client
/// connects to it: it receives nothing until the test subscribes it. The first sends HUGZ (at
/// `sequence`) until the returned task is aborted, which is how the test makes it go silent:
/// before, a KVSET the client's publisher dropped (the first server's collector subscribed late:
/// ZeroMQ's slow joiner) could find the client gone to the second server, the first one silent
/// for its 300 ms ttl, before the 200 ms retransmit came (the clone test's failure at stop 35).
async fn client_of_two_fakes(
    map: &[(&str, &str)],
    sequence: u64,
    b_hears: bool,
) -> (Fake, Fake, Client, Events, JoinHandle<()>) {
    let (a, b) = (Fake::bind().await, Fake::bind().await);
    if !b_hears {
        b.collector.unsubscribe("").unwrap();
    }
    let a_alive = tokio::spawn({
        let publisher = a.publisher.clone();
        async move {
            loop {
                let _ = publisher.send(hugz_message(sequence)).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    let options = ClientOptions::for_servers(vec![a.address.clone(), b.address.clone()])
        .server_ttl(Duration::from_millis(300))
        .set_timing(Duration::from_millis(200), Duration::from_secs(10));
    let client = Client::start(options).unwrap();
    let events = client.events();
    let (id, _) = a.await_icanhaz().await;
    a.reply(&id, map, sequence).await;
    step("sync", client.loaded()).await.unwrap();
    (a, b, client, events, a_alive)
}

/// Bug 12: nothing from a server the client left reaches it. A server that sends HUGZ but never
/// a snapshot (a passive one) does not hold the client: it asks again on the same socket, then
/// moves on; that server's late answer to the old socket never arrives; coming back later, the
/// client asks on a fresh socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_left_and_its_late_answer_never_arrives() {
    bounded(async {
        let a = Fake::bind().await;
        let b = server_with(|_| {}).await;
        let hugz = tokio::spawn({
            let publisher = a.publisher.clone();
            async move {
                loop {
                    let _ = publisher.send(hugz_message(0)).await;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        // A TTL that a loaded machine's sync with B fits in: at 300 ms the client once gave B up
        // too (1 run in 26 under load), came back to A on a fresh socket, and A saw two.
        let options = ClientOptions::for_servers(vec![a.address.clone(), b.address().clone()])
            .server_ttl(Duration::from_millis(1000));
        let client = Client::start(options).unwrap();
        let mut events = client.events();
        let (lost, _) = wait_event(&mut events, |e| matches!(e, Event::ServerLost { .. })).await;
        assert!(matches!(&lost, Event::ServerLost { reason: ServerLoss::NoSnapshot(_), .. }), "{lost:?}");
        step("synced with B", client.synced()).await.unwrap();
        assert_eq!(client.status(), Status::Active(b.address().clone()));
        let mut old_ids = BTreeSet::new();
        while let Ok(msg) = a.router.try_recv() {
            old_ids.insert(msg[0].clone());
        }
        assert_eq!(old_ids.len(), 1, "asked again on the same socket, then left");

        // A's answer to the old request comes late: it must not reach the client.
        let old = old_ids.first().unwrap().clone();
        a.reply(&old, &[("/stale", "x")], 99).await;
        client.set("/from-b", "1", None).await.unwrap();
        assert_eq!(client.snapshot().map, b.map().1);
        assert!(client.get("/stale").is_none());

        // B goes away: the client comes back to A with a fresh socket. A now answers every
        // ICANHAZ? on it, as a real server does: when A's first HUGZ (which gives no sequence)
        // reaches the client before the snapshot, the client cannot prove that snapshot exact
        // and asks again (seen under load: one answer only, and the failover never came).
        b.close().await;
        let failover = wait_event(&mut events, |e| matches!(e, Event::Failover { .. }));
        tokio::pin!(failover);
        let mut answered = 0;
        loop {
            tokio::select! {
                _ = &mut failover => break,
                msg = a.router.recv() => {
                    let mut msg = msg.unwrap();
                    let id = msg.pop_front().unwrap();
                    if !old_ids.contains(&id) {
                        a.reply(&id, &[("/from-a", "1")], 1).await;
                        answered += 1;
                    }
                }
            }
        }
        assert!(answered >= 1, "the failover came from A's snapshot");
        assert_eq!(client.snapshot().map, map(&[("/from-a", "1")]));
        hugz.abort();
        client.close().await;
        let _ = HUGZ_KEY;
    })
    .await;
}

/// The `chp` CLI against a pair: client commands take `--server` twice and find the active
/// server whichever is listed first, before and after the active is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_talks_to_a_pair_through_either_server() {
    bounded(async {
        let ports = PairPorts::new();
        let (mut primary, mut backup) = ServerProc::formed_pair(&ports).await;
        let (a, b) = (ports.primary.to_string(), ports.backup.to_string());
        let chp = |args: Vec<&str>| {
            let mut all = args;
            all.extend(["--server-ttl", "0.5", "--timeout", "8"]);
            let all: Vec<String> = all.into_iter().map(str::to_owned).collect();
            async move {
                let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_chp"))
                    .args(&all)
                    .stdin(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .output();
                let out = step("chp finishes", out).await.unwrap();
                assert!(out.status.success(), "chp {all:?}: {}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8(out.stdout).unwrap()
            }
        };
        // The passive listed first: its HUGZ are not a snapshot; the client moves on.
        chp(vec!["set", "/cli/k", "v", "--server", &b, "--server", &a]).await;
        assert_eq!(chp(vec!["get", "/cli/k", "--server", &a, "--server", &b]).await, "v\n");
        primary.kill9().await;
        assert_eq!(chp(vec!["get", "/cli/k", "--server", &a, "--server", &b]).await, "v\n");
        backup.expect("role: ACTIVE").await;
        chp(vec!["del", "/cli/k", "--server", &a, "--server", &b]).await;
        assert_eq!(chp(vec!["dump", "--server", &b]).await, "");
    })
    .await;
}

/// A `chp server` whose stdout stops being read (a paused terminal, a stalled pipe) keeps
/// serving: its status lines block on the full pipe, but on a thread apart from the server's
/// tasks, so its Binary Star heartbeat goes on and the backup never takes over. (When the printing
/// shared the server's one thread, the primary froze as the pipe filled: the client failed over,
/// and the backup became active.)
#[cfg(target_os = "linux")] // reads /proc
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_stdout_is_not_read_keeps_serving() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    bounded(async {
        let ports = PairPorts::new();
        let mut args = ports.args(Side::Primary, &[]);
        let at = args.iter().position(|a| a == "--status-ms").expect("a status interval") + 1;
        args[at] = "1".into(); // about 100 KB of status lines a second: the pipe fills at once
        let mut primary = tokio::process::Command::new(env!("CARGO_BIN_EXE_chp"))
            .args(&args)
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("primary starts");
        let mut backup = ServerProc::spawn("backup", Side::Backup, &ports, &[]);
        let mut out = BufReader::new(primary.stdout.take().unwrap()).lines();
        step("primary active", async {
            while let Some(line) = out.next_line().await.unwrap() {
                if line.starts_with("role: ACTIVE") {
                    return;
                }
            }
            panic!("the primary's stdout closed");
        })
        .await;
        backup.expect("peer: synced").await;
        // From here nothing reads the primary's stdout (kept open: closed, its writes would fail).
        // Its status lines fill the pipe at once; the test goes on when the kernel shows a thread
        // of the primary asleep in that pipe write.
        let pid = primary.id().expect("the primary runs");
        step("the primary blocked on its full stdout", blocked_in_a_pipe_write(pid)).await;
        let client = synced(Client::start(ports.options()).unwrap()).await;
        for i in 0..20 {
            client.set(format!("/k/{i}"), "v", None).await.unwrap();
        }
        assert_eq!(client.status(), Status::Active(ports.primary.clone()), "served by the primary");
        let lines = backup.drain();
        assert!(!lines.iter().any(|l| l.starts_with("role: ACTIVE")), "the backup took over: {lines:#?}");
        client.close().await;
        drop(out);
    })
    .await;
}

/// Returns once a thread of process `pid` sleeps in a pipe write: its wait channel (Linux's
/// `/proc/<pid>/task/<tid>/wchan`) is `pipe_write` (`anon_pipe_write` on newer kernels).
#[cfg(target_os = "linux")]
async fn blocked_in_a_pipe_write(pid: u32) {
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads");
        for task in tasks.flatten() {
            if std::fs::read_to_string(task.path().join("wchan")).is_ok_and(|w| w.ends_with("pipe_write")) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
