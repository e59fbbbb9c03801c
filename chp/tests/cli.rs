//! The `chp` CLI end to end, as processes: `chp server` plus `chp set/get/del/dump/watch`.

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};
use zmtp_testkit::{bounded, free_port, step};

mod common;

use common::process::{BIN, ServerProcess, spawn_server};

async fn chp(args: &[&str]) -> Output {
    let run = Command::new(BIN).args(args).stdin(Stdio::null()).kill_on_drop(true).output();
    step("chp finishes", run).await.expect("chp runs")
}

/// Runs `chp ARGS --server ADDRESS`, expecting success; returns stdout.
async fn ok(server: &ServerProcess, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--server", &server.address]);
    let out = chp(&all).await;
    assert!(out.status.success(), "chp {all:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `chp ARGS`, expecting failure; returns stderr.
async fn fails(args: &[&str]) -> String {
    let out = chp(args).await;
    assert!(!out.status.success(), "chp {args:?} should fail");
    assert!(out.stdout.is_empty());
    String::from_utf8(out.stderr).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_get_del_dump() {
    bounded(async {
        let s = spawn_server(&["--port", "0", "--hugz-ms", "50"]).await;
        assert_eq!(ok(&s, &["set", "/a/x", "1"]).await, "");
        ok(&s, &["set", "/a/y", "two words"]).await;
        ok(&s, &["set", "/b/z", "3", "--ttl", "60"]).await;
        ok(&s, &["set", "plain", "line\nbreak"]).await;
        assert_eq!(ok(&s, &["get", "/a/x"]).await, "1\n");
        assert_eq!(ok(&s, &["get", "/a/y"]).await, "two words\n");
        assert_eq!(ok(&s, &["dump"]).await, "/a/x=1\n/a/y=two words\n/b/z=3\nplain=line\\nbreak\n");
        assert_eq!(ok(&s, &["dump", "--subtree", "/a/"]).await, "/a/x=1\n/a/y=two words\n");
        assert_eq!(ok(&s, &["del", "/a/x"]).await, "");
        let err = fails(&["get", "/a/x", "--server", &s.address]).await;
        assert_eq!(err, "chp: no such key: /a/x\n");
        ok(&s, &["set", "/a/y", "changed"]).await;
        assert_eq!(ok(&s, &["dump"]).await, "/a/y=changed\n/b/z=3\nplain=line\\nbreak\n");
    })
    .await;
}

/// The server runs on one thread by default (every other test here); `--threads N` runs it on a
/// pool of N, with the same behaviour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_a_pool_of_threads_serves_the_same() {
    bounded(async {
        let s = spawn_server(&["--port", "0", "--hugz-ms", "50", "--threads", "2"]).await;
        ok(&s, &["set", "/a/x", "1"]).await;
        ok(&s, &["set", "/a/y", "2"]).await;
        ok(&s, &["del", "/a/x"]).await;
        assert_eq!(ok(&s, &["dump"]).await, "/a/y=2\n");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_with_ttl_expires() {
    bounded(async {
        let s = spawn_server(&["--port", "0", "--hugz-ms", "50"]).await;
        // A ttl long enough that no loaded machine reaches it between two commands: it is there.
        ok(&s, &["set", "/long", "v", "--ttl", "60"]).await;
        assert_eq!(ok(&s, &["get", "/long"]).await, "v\n");
        ok(&s, &["set", "/t", "v", "--ttl", "0.3"]).await;
        ok(&s, &["set", "/kept", "v"]).await;
        // The short one goes, whenever the machine gets to it; the others stay.
        loop {
            let dump = ok(&s, &["dump"]).await;
            if dump == "/kept=v\n/long=v\n" {
                break;
            }
            assert!(dump.contains("/kept=v\n") && dump.contains("/long=v\n"), "{dump}");
            tokio::time::sleep(Duration::from_millis(50)).await; // retry until the ttl has run out
        }
    })
    .await;
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    step("watch prints", lines.next_line()).await.unwrap().expect("watch still running")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_snapshot_then_every_change() {
    bounded(async {
        let s = spawn_server(&["--port", "0", "--hugz-ms", "50"]).await;
        ok(&s, &["set", "/w/a", "1"]).await;
        ok(&s, &["set", "/w/b", "2"]).await;
        ok(&s, &["set", "/other/c", "3"]).await;
        let mut watch = Command::new(BIN)
            .args(["watch", "--subtree", "/w/", "--server", &s.address])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
        assert_eq!(next_line(&mut lines).await, "/w/a=1");
        assert_eq!(next_line(&mut lines).await, "/w/b=2");
        assert_eq!(next_line(&mut lines).await, "-- synced at sequence 3 (2 keys)");
        ok(&s, &["set", "/w/a", "changed"]).await;
        ok(&s, &["set", "/other/c", "4"]).await;
        ok(&s, &["del", "/w/b"]).await;
        ok(&s, &["set", "/w/new", "x", "--ttl", "0.2"]).await;
        assert_eq!(next_line(&mut lines).await, "set 4 /w/a=changed");
        assert_eq!(next_line(&mut lines).await, "del 6 /w/b");
        assert_eq!(next_line(&mut lines).await, "set 7 /w/new=x");
        assert_eq!(next_line(&mut lines).await, "del 8 /w/new");
        watch.kill().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_readable_errors() {
    bounded(async {
        let err = fails(&["get", "k", "--server", "tcp://127.0.0.1:9", "--timeout", "0.5"]).await;
        assert_eq!(err, "chp: no CHP server answered at tcp://127.0.0.1:9 within 0.5s (is one running there?)\n");
        let err = fails(&["get", "k", "--server", "localhost:5556"]).await;
        assert!(err.starts_with("chp: invalid server address \"localhost:5556\": expected tcp://host:port"), "{err}");
        let err = fails(&["dump", "--subtree", "/a", "--server", "tcp://127.0.0.1:9"]).await;
        assert!(err.starts_with("chp: invalid subtree \"/a\""), "{err}");
        let s = spawn_server(&["--port", "0", "--hugz-ms", "50"]).await;
        let err = fails(&["set", "HUGZ", "x", "--server", &s.address]).await;
        assert!(err.starts_with("chp: invalid key \"HUGZ\""), "{err}");
        let err = fails(&["set", "k", "x", "--ttl=-1", "--server", &s.address]).await;
        assert!(err.starts_with("chp: invalid --ttl -1"), "{err}");
        let port = s.address.rsplit_once(':').unwrap().1;
        let err = fails(&["server", "--port", port, "--bind", "127.0.0.1"]).await;
        assert!(err.contains(&format!("chp: cannot bind tcp://127.0.0.1:{port}")), "{err}");
    })
    .await;
}

/// Exit statuses (issue 19): 2 for every usage error — clap's own and the combinations it cannot
/// check — 1 for a failure while running (here: no server answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_2_and_failures_exit_1() {
    bounded(async {
        let usage: [&[&str]; 7] = [
            &["no-such-command"],
            &["server", "--threads", "0"],
            &["set", "k", "v", "--ttl", "-1"],
            &["server", "--state", "tcp://*:5003"],
            &["server", "--primary", "--port", "0"],
            &["get", "k", "--server", "not an address"],
            &["get", "k", "--timeout", "-1"],
        ];
        for args in usage {
            let out = chp(args).await;
            assert_eq!(out.status.code(), Some(2), "chp {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let nobody = format!("tcp://127.0.0.1:{}", free_port());
        let out = chp(&["get", "k", "--server", &nobody, "--timeout", "0.3"]).await;
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    })
    .await;
}
