//! The example binaries as separate OS processes: servers killed with SIGKILL, the failover client
//! resending the same request (patterns.md §D Binary Star 3, 4, 5, 6).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{WAIT, ep};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use zmtp::security::KeyPair;
use zmtp::{Socket, SocketType};
use zmtp_testkit::bounded;

/// A child process whose stdout lines arrive, time-stamped, on a channel.
struct Proc {
    name: &'static str,
    child: Child,
    lines: mpsc::UnboundedReceiver<(Instant, String)>,
    seen: Vec<String>,
}

impl Proc {
    fn spawn(name: &'static str, program: &str, args: &[&str]) -> Proc {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Proc { name, child, lines, seen: Vec::new() }
    }

    fn server(name: &'static str, side: &str, frontend: &str, state: &str, peer: &str, heartbeat: u64) -> Proc {
        Proc::server_with(name, side, frontend, state, peer, heartbeat, &[])
    }

    /// [`server`](Self::server) with extra arguments.
    fn server_with(
        name: &'static str,
        side: &str,
        frontend: &str,
        state: &str,
        peer: &str,
        heartbeat: u64,
        extra: &[&str],
    ) -> Proc {
        let hb = heartbeat.to_string();
        let args = [side, "--frontend", frontend, "--state", state, "--peer", peer, "--heartbeat", hb.as_str()];
        Proc::spawn(name, env!("CARGO_BIN_EXE_bstarsrv"), &[&args[..], extra].concat())
    }

    /// The next line (bounded by `limit`), or `None` when the process closed its stdout.
    async fn next_line_within(&mut self, limit: Duration) -> Option<(Instant, String)> {
        match timeout(limit, self.lines.recv()).await {
            Ok(Some((at, line))) => {
                self.seen.push(line.clone());
                Some((at, line))
            }
            Ok(None) => None,
            Err(_) => panic!("{}: no output within {limit:?}; so far: {:#?}", self.name, self.seen),
        }
    }

    async fn next_line(&mut self) -> (Instant, String) {
        let name = self.name;
        self.next_line_within(WAIT).await.unwrap_or_else(|| panic!("{name}: stdout closed"))
    }

    /// Reads lines until one starts with `prefix`; returns it.
    async fn expect(&mut self, prefix: &str) -> (Instant, String) {
        loop {
            let (at, line) = self.next_line().await;
            if line.starts_with(prefix) {
                return (at, line);
            }
        }
    }

    /// SIGKILL, and wait until it is gone.
    async fn kill9(&mut self) -> Instant {
        self.child.start_kill().unwrap();
        let at = Instant::now();
        timeout(WAIT, self.child.wait()).await.expect("kill -9 did not end the process").unwrap();
        at
    }

    /// Everything still buffered, without waiting.
    fn drain(&mut self) -> Vec<String> {
        while let Ok((_, line)) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.clone()
    }
}

/// ipc endpoints for processes that may die by SIGKILL (and so leave their socket files behind):
/// the files are removed when the test ends.
struct Endpoints(Vec<String>);

impl Endpoints {
    fn new<const N: usize>(tags: [&str; N]) -> ([String; N], Endpoints) {
        let eps = tags.map(ep);
        let guard = Endpoints(eps.to_vec());
        (eps, guard)
    }
}

impl Drop for Endpoints {
    fn drop(&mut self) {
        for endpoint in &self.0 {
            let _ = std::fs::remove_file(endpoint.trim_start_matches("ipc://"));
        }
    }
}

fn ok_seq(line: &str) -> Option<u64> {
    line.strip_prefix("I: server replied OK (")?.strip_suffix(')')?.parse().ok()
}

/// Reads the client until `count` more OK lines, asserting no failover happens meanwhile.
async fn oks_without_failover(client: &mut Proc, count: usize, mut last: u64) -> u64 {
    for _ in 0..count {
        let (_, line) = client.next_line().await;
        let seq = ok_seq(&line).unwrap_or_else(|| panic!("expected a reply, got {line:?}"));
        assert_eq!(seq, last + 1, "requests are numbered without gaps");
        last = seq;
    }
    last
}

/// After a kill: the client times out once, reconnects to `to`, and its first retry — the same
/// request — succeeds. Returns (sequence, time of the successful reply).
async fn failover(client: &mut Proc, to: &str, mut last_ok: u64) -> (u64, Instant) {
    loop {
        let (_, line) = client.next_line().await;
        if let Some(seq) = ok_seq(&line) {
            assert_eq!(seq, last_ok + 1);
            last_ok = seq;
            continue; // replies that raced with the kill
        }
        assert_eq!(line, "W: no response from server, failing over");
        break;
    }
    assert_eq!(client.next_line().await.1, format!("I: connecting to server at {to}..."));
    let (at, line) = client.next_line().await;
    assert_eq!(
        ok_seq(&line),
        Some(last_ok + 1),
        "the first retry after the kill succeeds with the same request: {line:?}"
    );
    (last_ok + 1, at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_fails_over_on_sigkill_and_a_restarted_primary_stays_passive() {
    bounded(async {
        let heartbeat = 100;
        let ([pf, ps, bf, bs], _cleanup) = Endpoints::new(["pf", "ps", "bf", "bs"]);
        let mut primary = Proc::server("primary", "-p", &pf, &ps, &bs, heartbeat);
        let mut backup = Proc::server("backup", "-b", &bf, &bs, &ps, heartbeat);
        primary.expect("I: became ACTIVE").await;
        backup.expect("I: became PASSIVE").await;

        let client_args = ["--server", &pf, "--server", &bf, "--timeout", "500", "--settle", "300", "--interval", "20"];
        let mut client = Proc::spawn("client", env!("CARGO_BIN_EXE_bstarcli"), &client_args);
        assert_eq!(client.next_line().await.1, format!("I: connecting to server at {pf}..."));
        let last = oks_without_failover(&mut client, 3, 0).await;

        // kill -9 the active primary: the client's first retry on the backup succeeds.
        let killed = primary.kill9().await;
        let (last, served) = failover(&mut client, &bf, last).await;
        let first = served - killed;
        backup.expect("W: peer silent").await;
        backup.expect("I: became ACTIVE").await;

        // The primary comes back: passive, and the client stays on the backup.
        let mut primary = Proc::server("primary (restarted)", "-p", &pf, &ps, &bs, heartbeat);
        primary.expect("I: became PASSIVE").await;
        let last = oks_without_failover(&mut client, 10, last).await;
        assert!(!primary.drain().iter().any(|l| l.contains("became ACTIVE")), "no fail-back: {:?}", primary.seen);

        // Kill the backup: the client returns to the (now only) primary, again on its first retry.
        let killed = backup.kill9().await;
        let (last, served) = failover(&mut client, &pf, last).await;
        let second = served - killed;
        primary.expect("I: became ACTIVE").await;
        oks_without_failover(&mut client, 3, last).await;
        eprintln!(
            "failover (SIGKILL → first successful reply), heartbeat {heartbeat} ms, client timeout 500 ms, \
             settle 300 ms: primary→backup {first:?}, backup→primary {second:?}"
        );
        assert!(first < Duration::from_secs(2) && second < Duration::from_secs(2), "{first:?} {second:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_at_the_guides_timings() {
    bounded(async {
        // Heartbeat 1000 ms, REQUEST_TIMEOUT 1000 ms, SETTLE_DELAY 2000 ms, 1 s between requests.
        let ([pf, ps, bf, bs], _cleanup) = Endpoints::new(["pf", "ps", "bf", "bs"]);
        let mut primary = Proc::server("primary", "-p", &pf, &ps, &bs, 1000);
        let mut backup = Proc::server("backup", "-b", &bf, &bs, &ps, 1000);
        primary.expect("I: became ACTIVE").await;
        backup.expect("I: became PASSIVE").await;
        let mut client = Proc::spawn("client", env!("CARGO_BIN_EXE_bstarcli"), &["--server", &pf, "--server", &bf]);
        client.expect("I: connecting").await;
        let last = oks_without_failover(&mut client, 1, 0).await;
        let killed = primary.kill9().await;
        let (_, served) = failover(&mut client, &bf, last).await;
        let took = served - killed;
        eprintln!("failover (SIGKILL → first successful reply) at the Guide's timings: {took:?}");
        // At most: the 1 s pause, the 1 s request timeout, the 2 s settle delay, and slack.
        assert!(took < Duration::from_millis(4800), "{took:?}");
        backup.expect("I: became ACTIVE").await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bstarsrv_aborts_with_an_error_on_dual_actives() {
    bounded(async {
        let ([pf, ps, fake_ep], _cleanup) = Endpoints::new(["pf", "ps", "fake"]);
        let fake = Socket::new(SocketType::Pub);
        fake.bind(&fake_ep).await.unwrap();
        let mut primary = Proc::server("primary", "-p", &pf, &ps, &fake_ep, 50);
        primary.expect("I: primary ready").await;
        // Pose as a waiting backup until the primary is active …
        loop {
            fake.try_send("2").unwrap();
            if let Some((_, line)) = next_line_or_none(&mut primary, Duration::from_millis(50)).await
                && line == "I: became ACTIVE"
            {
                break;
            }
        }
        // … then claim to be active too.
        let fatal = loop {
            fake.try_send("3").unwrap();
            if let Some((_, line)) = next_line_or_none(&mut primary, Duration::from_millis(50)).await
                && line.starts_with("E:")
            {
                break line;
            }
        };
        assert!(fatal.starts_with("E: fatal: dual actives"), "{fatal}");
        let status = timeout(WAIT, primary.child.wait()).await.unwrap().unwrap();
        assert_eq!(status.code(), Some(3), "a fatal pair failure exits 3 (2 is a usage error)");
    })
    .await;
}

/// A line if one comes within `limit` (a bounded poll used while driving a fake peer).
async fn next_line_or_none(proc: &mut Proc, limit: Duration) -> Option<(Instant, String)> {
    match timeout(limit, proc.lines.recv()).await {
        Ok(Some((at, line))) => {
            proc.seen.push(line.clone());
            Some((at, line))
        }
        Ok(None) => panic!("{}: exited early: {:?}", proc.name, proc.seen),
        Err(_) => None,
    }
}

/// Both servers and the client over CURVE (one key pair shared by the pair): a client with the
/// wrong server key gets no answer from either server (and says the handshake failed), while a
/// client with the right key is served and fails over on SIGKILL as without CURVE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curve_pair_fails_over_and_a_client_with_the_wrong_key_gets_no_answer() {
    bounded(async {
        let keys = KeyPair::generate();
        let (secret, public) = (keys.secret_z85(), keys.public_z85());
        let curve = ["--curve-server", secret.as_str()];
        let ([pf, ps, bf, bs], _cleanup) = Endpoints::new(["pf", "ps", "bf", "bs"]);
        let mut primary = Proc::server_with("primary", "-p", &pf, &ps, &bs, 100, &curve);
        let mut backup = Proc::server_with("backup", "-b", &bf, &bs, &ps, 100, &curve);
        assert_eq!(primary.expect("I: CURVE public key").await.1, format!("I: CURVE public key {public}"));
        primary.expect("I: became ACTIVE").await;
        backup.expect("I: became PASSIVE").await;

        // The wrong server key: refused by both servers in turn, never a reply.
        let wrong = KeyPair::generate().public_z85();
        let timing = ["--timeout", "800", "--settle", "50", "--interval", "20"];
        let servers = ["--server", pf.as_str(), "--server", bf.as_str()];
        let mut intruder = Proc::spawn(
            "intruder",
            env!("CARGO_BIN_EXE_bstarcli"),
            &[&servers[..], &timing, &["--curve-serverkey", &wrong]].concat(),
        );
        for server in [&pf, &bf, &pf] {
            assert_eq!(intruder.next_line().await.1, format!("I: connecting to server at {server}..."));
            let (_, line) = intruder.next_line().await;
            assert!(line.starts_with("W: security handshake with server failed: "), "{line}");
            assert_eq!(intruder.next_line().await.1, "W: no response from server, failing over");
        }
        intruder.kill9().await;
        assert!(!intruder.drain().iter().any(|l| l.starts_with("I: server replied OK")), "{:?}", intruder.seen);
        let (_, refusal) = primary.expect("W: security handshake failed on the voter").await;
        assert!(refusal.contains("HELLO"), "{refusal}");
        backup.expect("W: security handshake failed on the voter").await;

        // The right key: served, and failover on SIGKILL works as without CURVE.
        let mut client = Proc::spawn(
            "client",
            env!("CARGO_BIN_EXE_bstarcli"),
            &[&servers[..], &["--timeout", "500", "--settle", "300", "--interval", "20", "--curve-serverkey", &public]]
                .concat(),
        );
        assert_eq!(client.next_line().await.1, format!("I: connecting to server at {pf}..."));
        let last = oks_without_failover(&mut client, 3, 0).await;
        primary.kill9().await;
        let (last, _) = failover(&mut client, &bf, last).await;
        backup.expect("I: became ACTIVE").await;
        oks_without_failover(&mut client, 3, last).await;
        assert!(
            !primary.drain().iter().any(|l| l.contains("security handshake failed on the state")),
            "{:?}",
            primary.seen
        );
        assert!(
            !backup.drain().iter().any(|l| l.contains("security handshake failed on the state")),
            "{:?}",
            backup.seen
        );
    })
    .await;
}

/// bstarsrv refuses a key that is not 40 Z85 characters, and bstarcli a key count that does not
/// match the servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_curve_arguments_are_refused() {
    bounded(async {
        let out = Command::new(env!("CARGO_BIN_EXE_bstarsrv"))
            .args(["-p", "--curve-server", "short"])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("40 Z85 characters"), "{out:?}");
        let key = KeyPair::generate().public_z85();
        let args =
            ["--server", "1", "--server", "2", "--server", "3", "--curve-serverkey", &key, "--curve-serverkey", &key];
        let out = Command::new(env!("CARGO_BIN_EXE_bstarcli")).args(args).output().await.unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("once per --server"), "{out:?}");
        // An endpoint that does not parse is a usage error too (2), not a failure (1).
        let out = Command::new(env!("CARGO_BIN_EXE_bstarsrv"))
            .args(["-p", "--frontend", "nonsense://x", "--state", "0", "--peer", "1"])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
    })
    .await;
}
