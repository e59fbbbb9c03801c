//! The Guide's chapter-5 patterns in `zmtp/examples/`, each run as a process with its behaviour
//! asserted from its output lines and exit status.
//!
//! `cargo test` builds the examples next to this test binary (`target/<profile>/examples/`); when one
//! is missing or older than its source (e.g. `cargo test --test examples`), it is built first.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

/// No example run may take longer than this (they finish in a few seconds).
const RUN_LIMIT: Duration = Duration::from_secs(40);

/// The example binary `name`, built with this test's profile if it is missing or stale.
fn example(name: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let binary = profile_dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(format!("{name}.rs"));
    let _one_build_at_a_time = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let fresh = matches!((modified(&binary), modified(&source)), (Some(b), Some(s)) if b >= s);
    if !fresh {
        let profile = profile_dir.file_name().and_then(|p| p.to_str()).expect("profile directory name");
        // target/<profile> or, when cross-building, target/<triple>/<profile>; cargo marks the root.
        let mut root = profile_dir.parent().expect("target directory");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "--quiet", "-p", "zmtp-tokio", "--example", name]).current_dir(env!("CARGO_MANIFEST_DIR"));
        if !root.join("CACHEDIR.TAG").exists()
            && let (Some(triple), Some(parent)) = (root.file_name(), root.parent())
        {
            cmd.arg("--target").arg(triple);
            root = parent;
        }
        cmd.arg("--target-dir").arg(root);
        match profile {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let status = cmd.status().expect("run cargo build");
        assert!(status.success(), "building example {name} failed");
    }
    assert!(binary.exists(), "example binary {} not found", binary.display());
    binary
}

/// One finished run of an example.
struct Run {
    code: Option<i32>,
    stdout: Vec<String>,
    stderr: String,
}

impl Run {
    /// The only stdout line starting with `prefix`.
    fn line(&self, prefix: &str) -> &str {
        let found: Vec<&String> = self.stdout.iter().filter(|l| l.starts_with(prefix)).collect();
        assert_eq!(found.len(), 1, "expected one line starting with {prefix:?}:\n{}", self.dump());
        found[0]
    }

    /// Stdout lines starting with `prefix`, in order.
    fn lines(&self, prefix: &str) -> Vec<&str> {
        self.stdout.iter().filter(|l| l.starts_with(prefix)).map(String::as_str).collect()
    }

    /// Index of the first stdout line starting with `prefix`.
    fn position(&self, prefix: &str) -> usize {
        self.stdout
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting with {prefix:?}:\n{}", self.dump()))
    }

    fn dump(&self) -> String {
        format!("exit: {:?}\nstdout:\n{}\nstderr:\n{}", self.code, self.stdout.join("\n"), self.stderr)
    }
}

/// Runs an example to completion (killed and failed after [`RUN_LIMIT`]).
fn run(name: &str, args: &[&str]) -> Run {
    let mut child = Command::new(example(name))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start example {name}: {e}"));
    let pid = child.id();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        let read = |mut pipe: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let (out, err) = (read(Box::new(stdout)), read(Box::new(stderr)));
        let status = child.wait();
        let _ = done_tx.send((status, out.join().unwrap_or_default(), err.join().unwrap_or_default()));
    });
    let Ok((status, out, err)) = done.recv_timeout(RUN_LIMIT) else {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("example {name} {args:?} still running after {RUN_LIMIT:?}");
    };
    let status = status.expect("wait for example");
    Run { code: status.code(), stdout: out.lines().map(str::to_owned).collect(), stderr: err }
}

/// The value of `key=` in a `key=value key2="quoted value"` line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let start = line
        .split_whitespace()
        .find(|w| w.starts_with(&format!("{key}=")))
        .map(|w| w.as_ptr() as usize - line.as_ptr() as usize + key.len() + 1)
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"));
    let rest = &line[start..];
    match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"').expect("closing quote")],
        None => rest.split_whitespace().next().unwrap_or(""),
    }
}

fn num<T: std::str::FromStr>(line: &str, key: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    field(line, key).parse().unwrap_or_else(|e| panic!("{key} in {line:?}: {e:?}"))
}

// ---------------------------------------------------------------------------------------------
// Suicidal Snail

#[test]
fn suicidal_snail_too_slow_subscriber_croaks() {
    // Publisher: a message every 1 ms, 5000 in all. Subscriber: 5 ms of work per message, so each
    // message waits ≥4 ms longer than the one before; it must give up at 200 ms of lag.
    let r = run("suicidal_snail", &["--interval-ms", "1", "--work-ms", "5", "--max-lag-ms", "200", "--count", "5000"]);
    assert_eq!(r.code, Some(3), "a croaking snail exits with status 3\n{}", r.dump());
    let verdict = r.line("SNAIL ");
    assert!(verdict.starts_with("SNAIL too-slow "), "{}", r.dump());
    assert!(num::<f64>(verdict, "lag_ms") >= 200.0, "croaked only once past the limit: {verdict}");
    assert_eq!(num::<u64>(verdict, "limit_ms"), 200);
    let received: u64 = num(verdict, "received");
    assert!((1..5000).contains(&received), "croaked long before the end of the stream: {verdict}");
    assert!(r.stderr.contains("E: subscriber cannot keep up"), "a loud message on stderr:\n{}", r.dump());
    // The publisher was told to halt once the subscriber died, well before its 5000 messages.
    let stopped: u64 =
        r.line("publisher: stopped after ").split_whitespace().nth(3).and_then(|n| n.parse().ok()).expect("count");
    assert!(stopped < 5000, "{}", r.dump());
}

#[test]
fn suicidal_snail_fast_subscriber_keeps_up() {
    let r = run("suicidal_snail", &["--interval-ms", "1", "--work-ms", "0", "--max-lag-ms", "1000", "--count", "500"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let verdict = r.line("SNAIL ");
    assert!(verdict.starts_with("SNAIL kept-up "), "{}", r.dump());
    assert_eq!(num::<u64>(verdict, "received"), 500, "every message arrives: {verdict}");
    assert_eq!(num::<u64>(verdict, "gaps"), 0, "no sequence gaps: {verdict}");
    assert!(num::<u64>(verdict, "max_lag_ms") <= 1000, "{verdict}");
    assert!(!r.stderr.contains("cannot keep up"), "{}", r.dump());
}

// ---------------------------------------------------------------------------------------------
// Black Box

/// Checks the common verdict of a Black Box run and returns the per-worker `from_shards` counts.
fn black_box_verdict(r: &Run, mode: &str, messages: u64, workers: usize) -> Vec<Vec<u64>> {
    assert_eq!(r.code, Some(0), "{}", r.dump());
    let verdict = r.line("BLACKBOX ");
    assert_eq!(field(verdict, "mode"), mode);
    for key in ["published", "forwarded", "handled", "unique"] {
        assert_eq!(num::<u64>(verdict, key), messages, "{key}: {verdict}");
    }
    for key in ["duplicates", "missing", "misrouted"] {
        assert_eq!(num::<u64>(verdict, key), 0, "{key}: {verdict}");
    }
    let per_worker: Vec<Vec<u64>> = r
        .lines("worker ")
        .iter()
        .map(|l| field(l, "from_shards").split(',').map(|n| n.parse().expect("count")).collect())
        .collect();
    assert_eq!(per_worker.len(), workers, "{}", r.dump());
    assert_eq!(per_worker.iter().flatten().sum::<u64>(), messages);
    per_worker
}

#[test]
fn black_box_workers_handle_every_message_exactly_once() {
    let r = run("black_box", &["simple", "--messages", "20000", "--workers", "3"]);
    let per_worker = black_box_verdict(&r, "simple", 20_000, 3);
    let shard = r.line("shard 0 topics=");
    assert_eq!(field(shard, "topics"), "A,B,C,D,E,F,G,H");
    assert_eq!(num::<u64>(shard, "forwarded"), 20_000);
    for (id, counts) in per_worker.iter().enumerate() {
        assert!(counts[0] > 0, "PUSH spreads the load over every worker, but worker {id} got none\n{}", r.dump());
    }
}

#[test]
fn black_box_sharded_two_subscribers_split_the_topics() {
    let r = run("black_box", &["sharded", "--messages", "20000", "--workers", "3"]);
    let per_worker = black_box_verdict(&r, "sharded", 20_000, 3);
    let (first, second) = (r.line("shard 0 topics="), r.line("shard 1 topics="));
    assert_eq!(field(first, "topics"), "A,B,C,D");
    assert_eq!(field(second, "topics"), "E,F,G,H");
    // Topics are published round-robin, so each half of them carries half the messages.
    assert_eq!(num::<u64>(first, "forwarded"), 10_000);
    assert_eq!(num::<u64>(second, "forwarded"), 10_000);
    for (id, counts) in per_worker.iter().enumerate() {
        assert_eq!(counts.len(), 2);
        assert!(counts.iter().all(|&n| n > 0), "worker {id} pulls from both subscribers: {counts:?}\n{}", r.dump());
    }
}

// ---------------------------------------------------------------------------------------------
// Espresso

#[test]
fn espresso_traces_subscriptions_upstream_and_messages_downstream() {
    let r = run("espresso", &["--count", "5", "--interval-ms", "5", "--seed", "3"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    // "trace: [002] 0141  subscribe A" → ("0141", "subscribe A")
    let traces: Vec<(String, String)> = r
        .lines("trace: [")
        .iter()
        .map(|l| {
            let (frame, kind) = l["trace: [000] ".len()..].split_once("  ").expect("frame and kind");
            (frame.to_owned(), kind.to_owned())
        })
        .collect();
    let kinds: Vec<&str> = traces.iter().map(|(_, k)| k.as_str()).collect();

    // Subscriptions travel upstream through the proxy first: nothing flows before them.
    let mut subscribes = kinds[..2].to_vec();
    subscribes.sort_unstable();
    assert_eq!(subscribes, ["subscribe A", "subscribe B"], "{}", r.dump());
    let frames: Vec<&str> = traces[..2].iter().map(|(f, _)| f.as_str()).collect();
    assert!(frames.contains(&"0141") && frames.contains(&"0142"), "shown as hex like the Guide: {frames:?}");

    // Then data going down, only on the subscribed topics; the subscriber got the first five of it.
    let data: Vec<&str> = traces.iter().filter(|(_, k)| k == "data").map(|(f, _)| f.as_str()).collect();
    assert!(data.len() >= 5, "{}", r.dump());
    assert!(data.iter().all(|d| d.starts_with("A-") || d.starts_with("B-")), "{data:?}");
    let received: Vec<&str> = r.lines("subscriber: got ").iter().map(|l| &l["subscriber: got ".len()..]).collect();
    assert_eq!(received, data[..5], "the subscriber receives exactly what the proxy captured");

    // Everything captured was published; what was published on other topics never reached the proxy.
    let published: Vec<&str> = r.lines("publisher: sent ").iter().map(|l| &l["publisher: sent ".len()..]).collect();
    assert!(data.iter().all(|d| published.contains(d)), "{}", r.dump());
    let others = published.iter().filter(|p| !p.starts_with("A-") && !p.starts_with("B-")).count();
    assert!(others > 0, "the publisher also sends C..J messages\n{}", r.dump());
    assert!(!kinds.iter().any(|k| k.starts_with("data") && k.len() > 4), "single-frame messages only");

    // When the subscriber leaves, its XPUB reports the unsubscriptions, which go upstream too.
    let mut last = kinds[kinds.len() - 2..].to_vec();
    last.sort_unstable();
    assert_eq!(last, ["unsubscribe A", "unsubscribe B"], "{}", r.dump());
    let leaving = r.position("subscriber: leaving");
    let first_unsubscribe = r.position("trace: [002] 004");
    assert!(leaving < first_unsubscribe, "unsubscriptions follow the subscriber's departure\n{}", r.dump());

    let summary = r.line("ESPRESSO ");
    assert_eq!(num::<usize>(summary, "subscriptions"), 2);
    assert_eq!(num::<usize>(summary, "unsubscriptions"), 2);
    assert_eq!(num::<usize>(summary, "received"), 5);
    assert_eq!(num::<usize>(summary, "captured_data"), data.len());
    assert_eq!(num::<usize>(summary, "published"), published.len());
}

// ---------------------------------------------------------------------------------------------
// Last Value Cache

#[test]
fn last_value_cache_serves_late_subscribers_at_once() {
    // Updates only every 2.5 s: a late subscriber served within milliseconds, before any update,
    // can only have been served from the cache.
    let r = run("last_value_cache", &["--topics", "1000", "--update-ms", "2500", "--seed", "11"]);
    assert_eq!(r.code, Some(0), "{}", r.dump());
    assert_eq!(r.stdout.last().map(String::as_str), Some("LVC ok"), "{}", r.dump());
    let late = r.lines("LATE ");
    assert_eq!(late.len(), 3, "{}", r.dump());
    let first_update = r.position("UPDATE ");
    let last_late = r.stdout.iter().rposition(|l| l.starts_with("LATE ")).expect("LATE lines");
    assert!(last_late < first_update, "late subscribers were served before any update\n{}", r.dump());
    for line in &late {
        assert_eq!(field(line, "value"), "Save Roger", "the current value: {line}");
        let ms: f64 = num(line, "first_ms");
        assert!(ms < 1000.0, "the first value arrives at once, not after the next update: {line}");
    }
    // Two subscribers to the same topic: both served (the cache's XPUB is VERBOSE).
    let topic = field(late[0], "prefix");
    assert_eq!(topic.len(), 3);
    assert_eq!(field(late[1], "prefix"), topic);
    assert_eq!(num::<usize>(late[0], "values"), 1);
    assert_eq!(num::<usize>(late[1], "values"), 1);
    let replays = r.lines(&format!("lvc: subscription to \"{topic}\": replaying 1 cached value(s)"));
    assert_eq!(replays.len(), 2, "the cache saw both subscriptions\n{}", r.dump());
    // A prefix subscription gets every cached topic under it.
    assert_eq!(field(late[2], "prefix"), "00");
    assert_eq!(num::<usize>(late[2], "values"), 10);
    // A subscriber to everything gets the whole cache, then live updates still pass through.
    let snapshot = r.line("SNAPSHOT ");
    assert_eq!(num::<usize>(snapshot, "topics"), 1000);
    assert!(r.position("SNAPSHOT ") < first_update, "{}", r.dump());
    let live = r.line("LIVE ");
    let update = r.stdout[first_update].as_str();
    assert!(r.position("LIVE ") > first_update, "{}", r.dump());
    assert_eq!(field(live, "topic"), field(update, "topic"));
    assert_eq!(field(live, "value"), format!("Off with his head! (update {})", field(update, "n")));
}
