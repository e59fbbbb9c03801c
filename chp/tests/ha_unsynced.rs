//! An unsynced standby never serves an incomplete map as the truth (issue 14): the active dies
//! while a just-restarted peer is still copying its map (200,000 keys). Before, the peer became
//! active with what it had (often 0 keys), clients replaced their full copies with it and
//! `chp dump` exited 0 with 0 keys. Now a server that never held a complete copy refuses to take
//! over: afterwards either all 200,000 keys are served or every request fails with an error.

mod common;

use bstar::Side;
use chp::Client;
use common::pair::{PairPorts, ServerProc, collector_publisher, kvset};
use common::synced;
use tokio::process::Command;
use zmtp_testkit::{bounded, step};

const KEYS: usize = 200_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_active_dies_while_its_restarted_peer_copies_the_map() {
    bounded(async {
        let ports = PairPorts::new();
        let (mut primary, mut backup) = ServerProc::formed_pair(&ports).await;
        backup.kill9().await;
        let publisher = collector_publisher(&ports.primary).await;
        for i in 0..KEYS {
            publisher.send(kvset(&format!("/u/{i:06}"), "v", false).to_message()).await.unwrap();
        }
        step("the primary holds the map", primary.status_until("map loaded", |s| s.keys == KEYS)).await;
        let client = synced(Client::start(ports.options()).unwrap()).await;
        assert_eq!(client.snapshot().map.len(), KEYS);

        // Restart the backup; the moment it is passive (its copy has barely started), stop the
        // active and kill it.
        let mut backup = ServerProc::spawn_logging("backup (restarted)", Side::Backup, &ports, &[]);
        backup.expect("role: PASSIVE").await;
        primary.signal("STOP");
        let synced_before_the_kill = backup.status().is_some_and(|s| s.synced);
        primary.kill9().await;

        let out = Command::new(env!("CARGO_BIN_EXE_chp"))
            .args(["dump", "--server", &ports.primary.to_string(), "--server", &ports.backup.to_string()])
            .args(["--timeout", "3"])
            .kill_on_drop(true)
            .output();
        let out = step("chp dump", out).await.unwrap();
        let lines = out.stdout.iter().filter(|b| **b == b'\n').count();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "backup synced before the kill: {synced_before_the_kill}; dump: {:?}, {lines} keys, {err}",
            out.status
        );
        if out.status.success() {
            assert_eq!(lines, KEYS, "a dump that succeeds serves the whole map");
        } else {
            assert_eq!(lines, 0);
            assert!(err.contains("no CHP server answered"), "{err}");
            assert!(!synced_before_the_kill);
            let log = backup.log.lock().unwrap().join("\n");
            assert!(log.contains("holds no complete copy"), "the backup says why it does not take over:\n{log}");
            assert_eq!(backup.status().map(|s| s.state), Some("PASSIVE".to_owned()));
        }
        // The client that held the whole map still holds it: it was never handed a partial one.
        assert_eq!(client.snapshot().map.len(), KEYS);
        client.close().await;
    })
    .await;
}
