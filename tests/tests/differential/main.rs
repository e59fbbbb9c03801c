//! Differential tests: libzmq is the oracle.
//!
//! Every seeded scenario (see `scenario.rs`) runs three ways — all sockets on libzmq (4.3.5, via
//! pyzmq and tests/py/diff_peer.py), all on zmtp, and mixed (alternate sockets on each side) —
//! and what every socket observed must be the same: each answer to a send or receive (a message,
//! EAGAIN, EFSM, EHOSTUNREACH…), and each drained sequence of messages. A mismatch is re-run once
//! (both sides, a longer quiet window) before it counts, so a stalled machine does not fail the
//! test; a confirmed one fails it with the scenario printed, unless it is listed in
//! [`INTENTIONAL`] (also in the README, "Where zmtp differs from libzmq").
//!
//! Run more locally: `DIFF_SCENARIOS=20000 DIFF_SEED=1000000 cargo test -p zmtp-tests --test differential -- --nocapture`.
//! One scenario: `DIFF_SCENARIOS=1 DIFF_SEED=<seed>` (its steps and traces are printed on failure).

mod executor;
mod scenario;

use std::collections::BTreeMap;

use executor::{Libzmq, Zmtp};
use scenario::{Scenario, Step};
use zmtp_testkit::{free_port, ipc_endpoint};

/// Confirmed divergences we keep on purpose: (family, what differs, why). Empty: every scenario
/// family matches libzmq.
const INTENTIONAL: &[(&str, &str, &str)] = &[];

/// How a run places sockets: all on libzmq (the reference), all on zmtp, or alternating, the
/// socket created `parity`-th first on zmtp.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Libzmq,
    Zmtp,
    Mixed(usize),
}

/// One lane: an executor of each kind, reused scenario after scenario.
struct Lane {
    id: usize,
    libzmq: Libzmq,
    zmtp: Zmtp,
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn is_fence(answer: &str) -> bool {
    let first = answer.strip_prefix("msg ").unwrap_or("");
    first.starts_with("ff") || first.starts_with("01ff") || first.starts_with("00ff")
}

impl Lane {
    /// Runs `scenario` in `mode`; `reference` is the libzmq trace (for how many messages each
    /// drain waits for), `quiet` how long a reference drain waits for one more message.
    async fn run(&mut self, scenario: &Scenario, mode: Mode, reference: Option<&[String]>, quiet: u64) -> Vec<String> {
        let mut owner: BTreeMap<String, bool> = BTreeMap::new(); // socket -> on zmtp?
        let mut endpoints: BTreeMap<String, String> = BTreeMap::new();
        let mut trace = Vec::new();
        let mut fences = 0u32;
        // Messages a fence received that belong to the next drain of their socket.
        let mut stash: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for step in &scenario.steps {
            match step {
                Step::Cmd(line) => {
                    let (command, mask) = match line.split_once(" #mask") {
                        Some((c, n)) => (c, n.parse::<usize>().ok()),
                        None => (line.as_str(), None),
                    };
                    let mut words: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
                    if words[0] == "new" {
                        let zmtp = match mode {
                            Mode::Libzmq => false,
                            Mode::Zmtp => true,
                            Mode::Mixed(parity) => owner.len() % 2 == parity,
                        };
                        owner.insert(words[1].clone(), zmtp);
                    }
                    let mut bound_as = None;
                    // `@name` endpoints (a STREAM's send names a routing id alias `@N` there).
                    let takes_endpoint =
                        ["bind", "connect", "connectpeer", "disconnect", "unbind"].contains(&&*words[0]);
                    if let Some(ep) = words.get(2).filter(|w| takes_endpoint && w.starts_with('@')).cloned() {
                        let resolved = endpoints.entry(ep.clone()).or_insert_with(|| match &ep[1..2] {
                            "p" => format!("tcp://127.0.0.1:{}", free_port()),
                            "i" => ipc_endpoint("diff"),
                            _ => "tcp://127.0.0.1:*".into(),
                        });
                        words[2] = resolved.clone();
                        if words[0] == "bind" {
                            bound_as = Some(ep);
                        }
                    }
                    let answer = self.exec(&owner, &words.join(" ")).await;
                    if let Some(ep) = bound_as
                        && let Some(actual) = answer.strip_prefix("ok ")
                    {
                        endpoints.insert(ep, actual.to_owned());
                    }
                    let shown = match (answer.strip_prefix("msg "), mask) {
                        // A bound endpoint differs run to run (connectpeer's "ok @N" does not).
                        _ if words[0] == "bind" && answer.starts_with("ok ") => "ok".into(),
                        (Some(frames), Some(n)) => {
                            let masked: Vec<String> = frames
                                .split(' ')
                                .enumerate()
                                .map(|(i, f)| if i == n { format!("<{} bytes>", f.len() / 2) } else { f.to_owned() })
                                .collect();
                            format!("msg {}", masked.join(" "))
                        }
                        _ => answer,
                    };
                    trace.push(format!("{line} => {shown}"));
                }
                Step::Settle(counts) => {
                    for (socket, n) in counts {
                        let answer = self.exec(&owner, &format!("handshakes {socket} {n} 10000")).await;
                        trace.push(format!("settle {socket} {n} => {answer}"));
                    }
                }
                Step::Disconnected(socket, n) => {
                    let answer = self.exec(&owner, &format!("disconnects {socket} {n} 10000")).await;
                    trace.push(format!("disconnected {socket} {n} => {answer}"));
                }
                Step::Fence { publisher, sub, xsub, xpub } => {
                    fences += 1;
                    let topic = format!("ff{fences:02x}");
                    let subscribe = if *xsub { format!("send {sub} 01{topic}") } else { format!("sub {sub} {topic}") };
                    self.exec(&owner, &subscribe).await;
                    let outcome = match xpub {
                        true => self.fence(&owner, &mut stash, publisher, None, &format!("msg 01{topic}"), 20).await,
                        false => {
                            let probe = format!("send {publisher} {topic}");
                            self.fence(&owner, &mut stash, sub, Some(&probe), &format!("msg {topic}"), 20).await
                        }
                    };
                    trace.push(format!("fence {publisher} {sub} => {outcome}"));
                }
                Step::GroupFence { radio, dish } => {
                    fences += 1;
                    let group = scenario::hex(&format!("f{fences:02}"));
                    let joined = self.exec(&owner, &format!("join {dish} {group}")).await;
                    let probe = format!("send {radio} ff{fences:02x} #{group}");
                    let wanted = format!("msg ff{fences:02x} #{group}");
                    // Probed often at first: a JOIN takes a moment to arrive, and extra probes
                    // are only skipped.
                    let outcome = self.fence(&owner, &mut stash, dish, Some(&probe), &wanted, 3).await;
                    trace.push(format!("fence {radio} {dish} => {joined}, {outcome}"));
                }
                Step::Drain { socket, sorted } => {
                    let index = trace.len();
                    let expected = reference.map(|r| drained_count(&r[index]));
                    let mut got: Vec<String> = stash.remove(socket).unwrap_or_default();
                    loop {
                        let wait = match expected {
                            None => quiet,
                            Some(n) if got.len() < n => 5_000,
                            Some(_) => 5,
                        };
                        let answer = self.exec(&owner, &format!("recvwait {socket} {wait}")).await;
                        if !answer.starts_with("msg") {
                            break;
                        }
                        if !is_fence(&answer) {
                            got.push(answer["msg ".len()..].to_owned());
                        }
                    }
                    if *sorted {
                        got.sort();
                    }
                    trace.push(format!("drain {socket} => {} [{}]", got.len(), got.join(" | ")));
                }
            }
        }
        self.libzmq.ask("reset").await;
        self.zmtp.ask("reset").await;
        trace
    }

    /// Sends `probe` (if any) and receives on `watcher` (up to `wait` ms, 20 after the first 10
    /// tries) until it gets `wanted`; what else it receives (but fences' own messages) is kept in
    /// `stash` for its next drain.
    async fn fence(
        &mut self,
        owner: &BTreeMap<String, bool>,
        stash: &mut BTreeMap<String, Vec<String>>,
        watcher: &str,
        probe: Option<&str>,
        wanted: &str,
        wait: u64,
    ) -> &'static str {
        for attempt in 0..500 {
            if let Some(probe) = probe {
                self.exec(owner, probe).await;
            }
            let wait = if attempt < 10 { wait } else { 20 };
            let got = self.exec(owner, &format!("recvwait {watcher} {wait}")).await;
            if got == wanted {
                return "fenced";
            }
            if got.starts_with("msg") && !is_fence(&got) {
                stash.entry(watcher.to_owned()).or_default().push(got["msg ".len()..].to_owned());
            }
        }
        "fence timeout"
    }

    async fn exec(&mut self, owner: &BTreeMap<String, bool>, line: &str) -> String {
        let socket = line.split_whitespace().nth(1).expect("a socket name");
        match owner.get(socket) {
            Some(true) => self.zmtp.ask(line).await,
            Some(false) => self.libzmq.ask(line).await,
            None => panic!("no socket {socket} in {line:?}"),
        }
    }

    /// Runs `scenario` on libzmq and in `modes`; a confirmed mismatch is returned as a report.
    async fn check(&mut self, scenario: &Scenario) -> Option<String> {
        let reference = self.run(scenario, Mode::Libzmq, None, 30).await;
        let modes = [Mode::Zmtp, Mode::Mixed((scenario.seed % 2) as usize)];
        for mode in modes {
            let trace = self.run(scenario, mode, Some(&reference), 30).await;
            if trace == reference {
                continue;
            }
            // Confirm with a patient reference and a second try before calling it a divergence.
            let patient = self.run(scenario, Mode::Libzmq, None, 250).await;
            let again = self.run(scenario, mode, Some(&patient), 250).await;
            if again == patient || trace == patient {
                continue;
            }
            return Some(report(scenario, mode, &patient, &again));
        }
        None
    }
}

/// The message count of a drain's trace line ("drain s => 3 [...]").
fn drained_count(line: &str) -> usize {
    line.split(" => ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0)
}

fn report(scenario: &Scenario, mode: Mode, reference: &[String], ours: &[String]) -> String {
    let mut out = format!("{scenario}  divergence in mode {mode:?}:\n");
    for i in 0..reference.len().max(ours.len()) {
        let (r, o) = (reference.get(i).map_or("<none>", |s| s), ours.get(i).map_or("<none>", |s| s));
        let mark = if r == o { "  " } else { "≠ " };
        out.push_str(&format!("  {mark}libzmq: {r}\n"));
        if r != o {
            out.push_str(&format!("    {mark}ours: {o}\n"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zmtp_observes_what_libzmq_observes() {
    let count = env("DIFF_SCENARIOS", 1000);
    compare(count, scenario::generate, Libzmq::start).await;
}

/// The draft types' families against a libzmq built with drafts (`.ci/draft-pyzmq`); more with
/// `DIFF_DRAFT_SCENARIOS=5000`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draft_types_observe_what_libzmq_observes() {
    let count = env("DIFF_DRAFT_SCENARIOS", 170);
    compare(count, scenario::generate_draft, || Libzmq::start_with(zmtp_testkit::python_with_draft_pyzmq())).await;
}

/// Prints its scenario if the lane panics while running it (an executor that cannot run a
/// command), so the failure can be replayed.
struct ShownOnPanic<'a>(&'a Scenario);

impl Drop for ShownOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("while running {}", self.0);
        }
    }
}

/// Runs `count` scenarios from `DIFF_SEED` over `DIFF_LANES` lanes and fails on any divergence
/// not listed in [`INTENTIONAL`].
async fn compare(count: u64, generate: fn(u64) -> Scenario, start: fn() -> Libzmq) {
    let base = env("DIFF_SEED", 0);
    let lanes = env("DIFF_LANES", 4).max(1) as usize;
    let mut tasks = Vec::new();
    for id in 0..lanes {
        tasks.push(tokio::spawn(async move {
            let mut lane = Lane { id, libzmq: start(), zmtp: Zmtp::default() };
            let mut families: BTreeMap<&'static str, usize> = BTreeMap::new();
            let mut divergences = Vec::new();
            let mut seed = base + lane.id as u64;
            while seed < base + count {
                let scenario = generate(seed);
                let _shown = ShownOnPanic(&scenario);
                *families.entry(scenario.family).or_default() += 1;
                if let Some(report) = lane.check(&scenario).await {
                    divergences.push((scenario.family, report));
                }
                seed += lanes as u64;
            }
            (families, divergences)
        }));
    }
    let mut families: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut unexpected = Vec::new();
    for t in tasks {
        let (f, d) = t.await.expect("lane panicked");
        for (k, v) in f {
            *families.entry(k).or_default() += v;
        }
        for (family, report) in d {
            if !INTENTIONAL.iter().any(|(f, _, _)| *f == family) {
                unexpected.push(report);
            }
        }
    }
    println!("{count} scenarios from seed {base}, by family: {families:?}");
    let shown: Vec<&String> = unexpected.iter().take(5).collect();
    assert!(
        unexpected.is_empty(),
        "{} of {count} scenarios diverge from libzmq; the first {}:\n{}",
        unexpected.len(),
        shown.len(),
        shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
}
