//! Dual actives after a stall (issue 13): the active is stopped (SIGSTOP, a long GC-like pause)
//! for longer than the peer expiry, the backup takes over, then the active resumes (SIGCONT) and
//! finds its peer ACTIVE. The Guide's pair stops both servers there (a total outage from one
//! pause); ours heals: the server that took over stays active, the stalled one yields to passive,
//! says so in its log, re-syncs from the active, and no confirmed write is lost.

mod common;

use std::collections::BTreeMap;

use bstar::Side;
use bytes::Bytes;
use chp::{Client, Event};
use common::pair::{PairPorts, ServerProc, caught_up};
use common::{synced, wait_event};
use zmtp_testkit::{bounded, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_active_resumes_as_passive_and_the_pair_keeps_exactly_one_active() {
    bounded(async {
        let ports = PairPorts::new();
        let mut primary = ServerProc::spawn_logging("primary", Side::Primary, &ports, &[]);
        let mut backup = ServerProc::spawn_logging("backup", Side::Backup, &ports, &[]);
        primary.expect("role: ACTIVE").await;
        backup.expect("peer: synced").await;
        let client = synced(Client::start(ports.options()).unwrap()).await;
        let mut events = client.events();
        let mut confirmed: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        for i in 0..10 {
            let key = format!("/stall/{i}");
            client.set(key.clone(), "before", None).await.unwrap();
            confirmed.insert(key.into(), Bytes::from_static(b"before"));
        }

        primary.signal("STOP");
        wait_event(&mut events, |e| matches!(e, Event::Failover { to, .. } if *to == ports.backup)).await;
        backup.expect("role: ACTIVE").await;
        for i in 5..15 {
            let key = format!("/stall/{i}");
            client.set(key.clone(), "during", None).await.unwrap();
            confirmed.insert(key.into(), Bytes::from_static(b"during"));
        }

        primary.signal("CONT");
        primary.expect("role: PASSIVE").await;
        let active = caught_up(&mut backup, &mut primary).await;
        assert_eq!(active.state, "ACTIVE");
        assert_eq!(primary.status().unwrap().state, "PASSIVE");
        assert!(primary.running() && backup.running(), "both servers still up");
        let log = primary.log.lock().unwrap().join("\n");
        assert!(log.contains("dual actives") && log.contains("yielding"), "the primary says why it yielded:\n{log}");
        let log = backup.log.lock().unwrap().join("\n");
        // (The backup may or may not have heard the conflict: if the primary heard it first and
        // yielded, the backup only ever heard PASSIVE.) It never yields.
        assert!(!log.contains("yielding"), "the backup stays:\n{log}");

        // Every confirmed write is served, by the active and by a fresh client.
        eventually("the client holds every confirmed write", || client.snapshot().map == confirmed).await;
        let fresh = synced(Client::start(ports.options()).unwrap()).await;
        assert_eq!(fresh.snapshot().map, confirmed);

        // The healed pair still fails over: kill the backup, the primary serves the whole map.
        backup.kill9().await;
        wait_event(&mut events, |e| matches!(e, Event::Failover { to, .. } if *to == ports.primary)).await;
        primary.expect("role: ACTIVE").await;
        client.set("/stall/after", "1", None).await.unwrap();
        confirmed.insert(Bytes::from_static(b"/stall/after"), Bytes::from_static(b"1"));
        eventually("the client holds every write after the second failover", || client.snapshot().map == confirmed)
            .await;
        client.close().await;
        fresh.close().await;
    })
    .await;
}
