//! The `ppp` binary as separate processes: the queue killed and restarted under a running client
//! (behaviour 3), a worker killed mid-request (behaviour 5), simulated crashes, and the CLI's help
//! and error messages.

mod common;

use common::*;
use tokio::time::{Instant, timeout};
use zmtp_testkit::{STEP, bounded, ipc_endpoint};

fn reply_number(line: &Line) -> Option<u64> {
    let rest = line.text.strip_prefix("reply ")?;
    rest.split(':').next()?.parse().ok()
}

/// Checks a client's stdout: replies numbered 1..=n, in order, each exactly once, each an echo.
fn assert_replies_in_order(lines: &[Line]) -> u64 {
    let mut expected = 1;
    for line in lines.iter().filter(|l| !l.stderr && l.text.starts_with("reply ")) {
        let n = reply_number(line).unwrap_or_else(|| panic!("bad line {:?}", line.text));
        assert_eq!(n, expected, "replies out of order or duplicated at {:?}", line.text);
        assert_eq!(line.text, format!("reply {n}: {n}"), "not an echo");
        expected += 1;
    }
    expected - 1
}

async fn start_queue(name: &str, args: &[&str]) -> (Proc, String, String) {
    let mut q = Proc::ppp(name, &[&["queue"], args].concat());
    let front = q.wait_for("frontend line", |l| l.text.starts_with("frontend: ")).await;
    let back = q.wait_for("backend line", |l| l.text.starts_with("backend: ")).await;
    let front = after(&front.text, "frontend:").unwrap().to_owned();
    let back = after(&back.text, "backend:").unwrap().to_owned();
    (q, front, back)
}

async fn wait_registered(q: &mut Proc) {
    q.wait_for("worker ready", |l| l.stderr && l.text.contains("worker ready")).await;
}

/// Behaviour 3 with processes: kill the queue; the worker notices after ~LIVENESS intervals,
/// reconnects with backoff 1, 2, 4 … (scaled: 50 ms → 400 ms cap), READY each time; a new queue on
/// the same endpoints gets service going again, and the client — never restarted — gets every
/// reply exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_killed_and_restarted_under_a_running_client() {
    bounded(async {
        let (front, back) = (ipc_endpoint("pq-front"), ipc_endpoint("pq-back"));
        let queue_args = ["--frontend", &front, "--backend", &back, "--interval-ms", "50", "--liveness", "3"];
        let (mut q1, _, _) = start_queue("queue-1", &queue_args).await;
        let mut worker = Proc::ppp(
            "worker",
            &[
                "worker",
                "--connect",
                &back,
                "--interval-ms",
                "50",
                "--liveness",
                "3",
                "--reconnect-init-ms",
                "50",
                "--reconnect-max-ms",
                "400",
            ],
        );
        wait_registered(&mut q1).await;
        worker.wait_for("first READY", |l| l.text.contains("worker ready")).await;
        let mut client = Proc::ppp(
            "client",
            &["client", "--connect", &front, "--requests", "1000000", "--timeout-ms", "250", "--retries", "40"],
        );
        client.wait_for("steady replies", |l| reply_number(l).is_some_and(|n| n >= 50)).await;

        q1.kill().await;
        let killed = Instant::now();
        let mut backoffs = Vec::new();
        let mut readies_after_kill = 0;
        while backoffs.len() < 5 {
            let line = worker
                .wait_for("reconnect cycle", |l| {
                    l.text.contains("heartbeat failure") || l.text.contains("worker ready")
                })
                .await;
            if line.text.contains("worker ready") {
                readies_after_kill += 1;
                continue;
            }
            if backoffs.is_empty() {
                let noticed = line.at - killed;
                assert!(noticed >= ms(100), "worker noticed after {noticed:?}");
            }
            assert_eq!(readies_after_kill, backoffs.len(), "READY on each new socket: {:?}", line.text);
            backoffs.push(field(&line.text, "backoff_ms").expect("backoff_ms field"));
        }
        assert_eq!(backoffs, [50, 100, 200, 400, 400]);

        let (mut q2, _, _) = start_queue("queue-2", &queue_args).await;
        wait_registered(&mut q2).await;
        let restarted = Instant::now();
        let resumed =
            client.wait_for("replies after the restart", |l| l.at > restarted && reply_number(l).is_some()).await;
        let n = reply_number(&resumed).unwrap();
        client.wait_for("more replies", |l| reply_number(l).is_some_and(|m| m >= n + 50)).await;
        client.kill().await;
        client.drain().await;
        let total = assert_replies_in_order(&client.seen);
        assert!(total >= n + 50);
        assert!(client.seen.iter().any(|l| l.stderr && l.text.contains("resending")), "the client retried");
        worker.kill().await;
        q2.kill().await;
        remove_ipc(&front);
        remove_ipc(&back);
    })
    .await;
}

/// Behaviour 5 with processes: the worker holding a request is killed (SIGKILL); the queue
/// re-dispatches to the other worker; the client gets all replies once, in order, without resending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_mid_request_is_replaced_without_duplicates() {
    bounded(async {
        let (mut q, front, back) = start_queue(
            "queue",
            &["--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*", "--interval-ms", "100"],
        )
        .await;
        let worker_args = ["worker", "--connect", &back, "--interval-ms", "100", "-v"];
        let mut slow = Proc::ppp("slow worker", &[&worker_args[..], &["--slow-ms", "60000"]].concat());
        wait_registered(&mut q).await;
        let mut good = Proc::ppp("good worker", &worker_args);
        wait_registered(&mut q).await;

        let mut client =
            Proc::ppp("client", &["client", "--connect", &front, "--requests", "20", "--timeout-ms", "5000"]);
        slow.wait_for("request at the slow worker", |l| l.text.contains("request received")).await;
        slow.kill().await;
        client.wait_for("reply 1", |l| reply_number(l) == Some(1)).await;
        let status = client.wait_exit().await;
        client.drain().await;
        assert!(status.success(), "client failed: {}", client.report("success"));
        assert_eq!(assert_replies_in_order(&client.seen), 20);
        let summary = client.seen.iter().find(|l| l.text.starts_with("summary:")).expect("summary line");
        for (key, value) in [("replies", 20), ("resends", 0), ("stale_replies", 0), ("mismatches", 0)] {
            assert_eq!(field(&summary.text, key), Some(value), "{}", summary.text);
        }
        // Order and counts, not wall clock: resends 0 means the queue re-dispatched before the
        // client's own timeout fired.
        q.wait_for("re-dispatch logged", |l| l.text.contains("re-dispatching")).await;
        good.kill().await;
        q.kill().await;
    })
    .await;
}

/// `--crash-after`: the worker exits by itself mid-request (status 3), as in the Guide's
/// simulation; the client still gets every reply once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_crash_is_survived() {
    bounded(async {
        let (mut q, front, back) = start_queue(
            "queue",
            &["--frontend", "tcp://127.0.0.1:*", "--backend", "tcp://127.0.0.1:*", "--interval-ms", "100"],
        )
        .await;
        let mut crashing =
            Proc::ppp("crashing worker", &["worker", "--connect", &back, "--interval-ms", "100", "--crash-after", "2"]);
        wait_registered(&mut q).await;
        let mut good = Proc::ppp("good worker", &["worker", "--connect", &back, "--interval-ms", "100"]);
        wait_registered(&mut q).await;
        let mut client =
            Proc::ppp("client", &["client", "--connect", &front, "--requests", "20", "--timeout-ms", "5000"]);
        let status = client.wait_exit().await;
        client.drain().await;
        assert!(status.success(), "{}", client.report("success"));
        assert_eq!(assert_replies_in_order(&client.seen), 20);
        assert_eq!(crashing.wait_exit().await.code(), Some(3));
        crashing.drain().await;
        assert!(crashing.seen.iter().any(|l| l.text.contains("simulating a crash")));
        good.kill().await;
        q.kill().await;
    })
    .await;
}

async fn run_to_end(args: &[&str]) -> (std::process::Output, String, String) {
    let out = timeout(
        STEP,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_ppp")).args(args).env_remove("RUST_LOG").output(),
    )
    .await
    .expect("ppp exits")
    .expect("ppp runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// Help that explains the pieces; errors that say what went wrong, with a failing exit status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_help_and_errors_are_readable() {
    bounded(async {
        let (out, stdout, _) = run_to_end(&["--help"]).await;
        assert!(out.status.success());
        for needle in ["Paranoid Pirate", "queue", "worker", "client", "ppp client --requests 10"] {
            assert!(stdout.contains(needle), "help lacks {needle:?}:\n{stdout}");
        }
        for (sub, options) in [
            ("queue", &["--frontend", "--backend", "--liveness", "--interval-ms", "--max-pending", "--overflow"][..]),
            (
                "worker",
                &[
                    "--connect",
                    "--liveness",
                    "--interval-ms",
                    "--reconnect-init-ms",
                    "--reconnect-max-ms",
                    "--slow-ms",
                    "--crash-after",
                ],
            ),
            ("client", &["--connect", "--requests", "--timeout-ms", "--retries"]),
        ] {
            let (out, stdout, _) = run_to_end(&[sub, "--help"]).await;
            assert!(out.status.success());
            for option in options {
                assert!(stdout.contains(option), "`ppp {sub} --help` lacks {option}:\n{stdout}");
            }
        }

        let (out, _, stderr) = run_to_end(&["queue", "--frontend", "nonsense"]).await;
        assert_eq!(out.status.code(), Some(2), "an endpoint that does not parse is a usage error");
        assert!(stderr.contains("ppp: error: cannot bind the frontend endpoint \"nonsense\""), "{stderr}");

        let (out, stdout, stderr) = run_to_end(&[
            "client",
            "--connect",
            "tcp://127.0.0.1:1",
            "--requests",
            "3",
            "--timeout-ms",
            "100",
            "--retries",
            "2",
        ])
        .await;
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr.contains("ppp: error: no reply from tcp://127.0.0.1:1 after 2 attempt(s) of 100 ms each"),
            "{stderr}"
        );
        assert!(stdout.contains("summary: requests=3 replies=0"), "{stdout}");

        let (out, _, stderr) = run_to_end(&["worker", "--liveness", "0"]).await;
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr.contains("--liveness"), "{stderr}");
    })
    .await;
}
