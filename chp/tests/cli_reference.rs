//! The `chp` one-shot commands as a new user meets them (issue 13): a pair whose first server is
//! down (the normal state after a failover), and a server that HUGZes rarely (the Guide's once a
//! second). Each command must answer within its own `--timeout`, which is set below the server ttl
//! (5 s) or the HUGZ interval: before, the client waited those out and the command failed.

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::process::Command;

mod common;

use common::process::{BIN, spawn_server};

const STEP: Duration = Duration::from_secs(20);

async fn chp(args: &[&str]) -> Output {
    let run = Command::new(BIN).args(args).stdin(Stdio::null()).kill_on_drop(true).output();
    tokio::time::timeout(STEP, run).await.expect("chp finishes").expect("chp runs")
}

async fn ok(args: &[&str]) -> String {
    let out = chp(args).await;
    assert!(out.status.success(), "chp {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// An address where nothing listens: a port just taken and released (its two neighbours, the
/// publisher and collector ports, are as good as free).
fn dead_address() -> String {
    format!("tcp://127.0.0.1:{}", zmtp_testkit::free_port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_commands_answer_when_the_first_server_is_down() {
    let live = spawn_server(&["--port", "0", "--hugz-ms", "50"]).await;
    let dead = dead_address();
    let servers = ["--server", dead.as_str(), "--server", live.address.as_str(), "--timeout", "3"];
    let set: Vec<&str> = ["set", "/pair/k", "v"].iter().chain(servers.iter()).copied().collect();
    ok(&set).await;
    let get: Vec<&str> = ["get", "/pair/k"].iter().chain(servers.iter()).copied().collect();
    assert_eq!(ok(&get).await, "v\n");
    let dump: Vec<&str> = ["dump"].iter().chain(servers.iter()).copied().collect();
    assert_eq!(ok(&dump).await, "/pair/k=v\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_commands_do_not_wait_for_a_hugz() {
    // HUGZ once every ten minutes: a client that waits for a first published message before asking
    // for the snapshot cannot answer within its 3 s timeout.
    let server = spawn_server(&["--port", "0", "--hugz-ms", "600000"]).await;
    let at = ["--server", server.address.as_str(), "--timeout", "3"];
    let set: Vec<&str> = ["set", "/rare/k", "v"].iter().chain(at.iter()).copied().collect();
    ok(&set).await;
    let get: Vec<&str> = ["get", "/rare/k"].iter().chain(at.iter()).copied().collect();
    assert_eq!(ok(&get).await, "v\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_without_room_for_p_plus_two_is_named_as_the_problem() {
    for port in ["65534", "65535"] {
        let out = chp(&["server", "--port", port, "--bind", "127.0.0.1"]).await;
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(&format!("port {port} is too high: the server uses P, P+1 and P+2, so P must be 1..=65533")),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_the_wrong_length_is_named_as_the_problem() {
    // 39 and 45 characters: before, "Z85 length 45 is not a multiple of 40" (and 39 "… of 5").
    for key in ["rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yfabcdef"] {
        let out = chp(&["get", "/a", "--curve-serverkey", key, "--server", "tcp://127.0.0.1:9"]).await;
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        let want = format!("a CURVE key is 40 Z85 characters, this one has {}", key.len());
        assert!(err.contains(&want), "{err}");
    }
}
