//! A server with a data directory: what it published survives a restart — a clean close, or the
//! process killed with SIGKILL — with its ttl deadlines, and its sequence carries on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chp::durable::Durability;
use chp::{Client, Server, ServerConfig};
use tokio::process::Command;
use zmtp_testkit::{bounded, eventually, step, unique};

mod common;

use common::process::{BIN, spawn_server};

/// A fresh, empty data directory (removed when dropped).
struct DataDir(PathBuf);

impl DataDir {
    fn new() -> DataDir {
        let dir = std::env::temp_dir().join(unique("chp-data"));
        std::fs::create_dir_all(&dir).unwrap();
        DataDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn server_on(dir: &DataDir, durability: Durability) -> Server {
    let config = ServerConfig {
        bind: "127.0.0.1".into(),
        hugz_interval: Duration::from_millis(50),
        data_dir: Some(dir.path().to_owned()),
        durability,
        ..ServerConfig::default()
    };
    Server::bind(config).await.expect("server with a data directory")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_serves_the_map_deadlines_and_sequence_it_had() {
    bounded(async {
        let dir = DataDir::new();
        for durability in [Durability::Always, Durability::Interval(Duration::from_millis(20)), Durability::Never] {
            let server = server_on(&dir, durability).await;
            let base = server.sequence();
            let client = Client::connect(&server.address().to_string()).await.unwrap();
            for i in 0..50 {
                client.set(format!("/k/{i}"), format!("v{i}-{base}"), None).await.unwrap();
            }
            client.delete("/k/0").await.unwrap();
            client.set("/ttl/long", "stays", Some(Duration::from_secs(3600))).await.unwrap();
            let before = server.map();
            let deadline = server.with_state(|s| s.expiry_of(b"/ttl/long")).expect("a deadline");
            client.close().await;
            server.close().await;

            let server = server_on(&dir, durability).await;
            assert_eq!(server.map(), before, "{durability:?}");
            // The deadline is the one set before the restart (to the millisecond of clock
            // conversion), not an hour from now.
            let after = server.with_state(|s| s.expiry_of(b"/ttl/long")).expect("a deadline");
            let drift = if after > deadline { after - deadline } else { deadline - after };
            assert!(drift < Duration::from_secs(60), "{durability:?}: deadline moved by {drift:?}");
            // The sequence carries on from the recovered one.
            let client = Client::connect(&server.address().to_string()).await.unwrap();
            assert_eq!(client.set("/next", "1", None).await.unwrap(), Some(before.0 + 1));
            client.close().await;
            server.close().await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_that_passed_while_the_server_was_down_expires_after_the_restart() {
    bounded(async {
        let dir = DataDir::new();
        let server = server_on(&dir, Durability::Always).await;
        let client = Client::connect(&server.address().to_string()).await.unwrap();
        client.set("/short", "gone soon", Some(Duration::from_millis(300))).await.unwrap();
        let set_at = server.sequence();
        client.close().await;
        server.close().await;

        let server = server_on(&dir, Durability::Always).await;
        // Expired at its original deadline: deleted, and the delete published (and journaled)
        // with a sequence of its own.
        eventually("the key expires", || server.get(b"/short").is_none()).await;
        assert!(server.sequence() > set_at);
        assert_eq!(server.stats().expired, 1);
        let sequence = server.sequence();
        server.close().await;
        let server = server_on(&dir, Durability::Always).await;
        assert_eq!((server.sequence(), server.get(b"/short")), (sequence, None));
        server.close().await;
    })
    .await
}

async fn chp(args: &[&str], address: &str) -> String {
    let out = step("chp finishes", Command::new(BIN).args(args).args(["--server", address]).output()).await.unwrap();
    assert!(out.status.success(), "chp {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_confirmed_set_survives_sigkill() {
    bounded(async {
        let dir = DataDir::new();
        let mut expected = String::new();
        for round in 0..3 {
            let data_dir = dir.path().to_str().unwrap();
            let server_args = ["--port", "0", "--hugz-ms", "50", "--data-dir", data_dir];
            let common::process::ServerProcess { mut child, address } = spawn_server(&server_args).await;
            for i in 0..5 {
                let key = format!("/r{round}/k{i}");
                // `chp set` returns once the server published the update: under the default
                // durability (always), after its fsync.
                chp(&["set", &key, "v"], &address).await;
                expected.push_str(&format!("{key}=v\n"));
            }
            // No clean shutdown: the process is killed outright.
            child.start_kill().unwrap();
            child.wait().await.unwrap();
            let restarted = spawn_server(&server_args).await;
            let (mut child, address) = (restarted.child, restarted.address);
            let mut dumped: Vec<&str> = Vec::new();
            let out = chp(&["dump"], &address).await;
            dumped.extend(out.lines());
            let mut wanted: Vec<&str> = expected.lines().collect();
            wanted.sort_unstable();
            dumped.sort_unstable();
            assert_eq!(dumped, wanted, "round {round}");
            // Killed and waited for, not only dropped: dropping sends SIGKILL without waiting,
            // and the next round's server would find the directory still locked.
            child.start_kill().unwrap();
            child.wait().await.unwrap();
        }
    })
    .await
}

/// Two servers on one data directory would interleave their records: the second is refused while
/// the first runs, and starts once it has closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_directory_is_refused() {
    bounded(async {
        let dir = DataDir::new();
        let first = server_on(&dir, Durability::Always).await;
        let config =
            ServerConfig { bind: "127.0.0.1".into(), data_dir: Some(dir.path().to_owned()), ..ServerConfig::default() };
        match Server::bind(config).await {
            Err(chp::server::ServerError::Journal(chp::durable::JournalError::Locked { dir: locked })) => {
                assert_eq!(locked, dir.path())
            }
            Err(other) => panic!("expected Locked, got {other}"),
            Ok(_) => panic!("a second server opened a directory in use"),
        }
        first.close().await;
        server_on(&dir, Durability::Always).await.close().await;
    })
    .await;
}
