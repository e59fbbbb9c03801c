//! Runs every row of the side-by-side benchmark for every stack binary that was built, in one run on
//! one machine (rows interleaved across stacks, repeated `--runs` times), then writes BENCHMARKS.md
//! and the throughput plot. Started by bench/run.sh; see there for the one command.
//!
//! Each measurement is one or two fresh processes of a stack binary (bench/stacks/*), talking over
//! the common protocol in bench/common: servers print READY once bound, results come back as
//! `RESULT key=value ...` lines.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

mod plot;

// ---------------------------------------------------------------------------------------------
// What is measured

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Transport {
    Tcp,
    /// TCP with CURVE (the PULL is the server); only the stacks in [`CURVE_STACKS`] run it.
    TcpCurve,
    Ipc,
    Inproc,
}

#[derive(Clone, Debug)]
enum Kind {
    Thr { transport: Transport, size: usize, count: usize },
    Lat { dealer_router: bool, size: usize, count: usize },
    Fanout { subs: usize, size: usize, count: usize },
    Mem { n: usize, procs: usize },
}

#[derive(Clone, Debug)]
struct Row {
    id: String,
    label: String,
    kind: Kind,
}

/// One column: a stack binary, perhaps with an environment that selects a mode of it.
#[derive(Clone, Debug)]
struct Variant {
    name: &'static str,
    bin: &'static str,
    env: Vec<(&'static str, &'static str)>,
    /// Rows it takes part in (None: all).
    only: Option<fn(&Row) -> bool>,
}

fn variants() -> Vec<Variant> {
    fn thr_net(r: &Row) -> bool {
        matches!(r.kind, Kind::Thr { transport: Transport::Tcp | Transport::Ipc, .. })
    }
    fn latency_rows(r: &Row) -> bool {
        matches!(r.kind, Kind::Lat { .. })
    }
    fn raw_rows(r: &Row) -> bool {
        matches!(
            r.kind,
            Kind::Thr { transport: Transport::Tcp, size: 65536, .. } | Kind::Lat { dealer_router: false, .. }
        )
    }
    vec![
        Variant { name: "zmtp", bin: "bench-zmtp", env: vec![], only: None },
        Variant { name: "zmtp+batch", bin: "bench-zmtp", env: vec![("BENCH_ZMTP_BATCH", "1")], only: Some(thr_net) },
        Variant {
            name: "zmtp+busy-poll",
            bin: "bench-zmtp",
            env: vec![("BENCH_ZMTP_BUSY_POLL", "200")],
            only: Some(latency_rows),
        },
        Variant { name: "libzmq", bin: "bench-libzmq", env: vec![], only: None },
        Variant { name: "zeromq", bin: "bench-zeromq", env: vec![], only: None },
        Variant { name: "rzmq", bin: "bench-rzmq", env: vec![], only: None },
        Variant { name: "omq", bin: "bench-omq", env: vec![], only: None },
        Variant { name: "monocoque", bin: "bench-monocoque", env: vec![], only: None },
        Variant {
            name: "monocoque+coalesce",
            bin: "bench-monocoque",
            env: vec![("BENCH_MONO_COALESCE", "1")],
            only: Some(thr_net),
        },
        Variant { name: "raw TCP", bin: "bench-rawtcp", env: vec![], only: Some(raw_rows) },
    ]
}

fn rows(quick: bool, mem_n: usize) -> Vec<Row> {
    let q = |n: usize| if quick { (n / 8).max(1) } else { n };
    let mut rows = Vec::new();
    let thr = |t: Transport, size: usize, count: usize| {
        let tname = match t {
            Transport::Tcp => "tcp",
            Transport::TcpCurve => "curve",
            Transport::Ipc => "ipc",
            Transport::Inproc => "inproc",
        };
        let lname = if t == Transport::TcpCurve { "tcp+CURVE" } else { tname };
        Row {
            id: format!("thr/{tname}/{size}"),
            label: format!("PUSH/PULL {lname} {}", size_label(size)),
            kind: Kind::Thr { transport: t, size, count },
        }
    };
    rows.push(thr(Transport::Tcp, 16, q(2_000_000)));
    rows.push(thr(Transport::Tcp, 64, q(2_000_000)));
    rows.push(thr(Transport::Tcp, 1024, q(1_000_000)));
    rows.push(thr(Transport::Tcp, 65536, q(60_000)));
    rows.push(thr(Transport::Ipc, 16, q(2_000_000)));
    rows.push(thr(Transport::Ipc, 64, q(2_000_000)));
    rows.push(thr(Transport::Ipc, 65536, q(60_000)));
    rows.push(thr(Transport::TcpCurve, 64, q(1_000_000)));
    rows.push(thr(Transport::TcpCurve, 65536, q(20_000)));
    rows.push(thr(Transport::Inproc, 64, q(2_000_000)));
    rows.push(thr(Transport::Inproc, 65536, q(100_000)));
    for dr in [false, true] {
        let name = if dr { "DEALER/ROUTER" } else { "REQ/REP" };
        rows.push(Row {
            id: format!("lat/{}/64", if dr { "dr" } else { "rr" }),
            label: format!("{name} tcp 64 B"),
            kind: Kind::Lat { dealer_router: dr, size: 64, count: q(20_000) },
        });
    }
    for subs in [1, 10, 32, 100] {
        rows.push(Row {
            id: format!("fanout/{subs}"),
            label: format!("PUB/SUB tcp 64 B, {subs} sub{}", if subs == 1 { "" } else { "s" }),
            kind: Kind::Fanout { subs, size: 64, count: q(2_000_000) / subs },
        });
    }
    rows.push(Row {
        id: format!("mem/{mem_n}"),
        label: format!("{mem_n} idle DEALERs → 1 ROUTER"),
        kind: Kind::Mem { n: mem_n, procs: mem_n.div_ceil(2500).max(1) },
    });
    rows
}

fn size_label(size: usize) -> String {
    if size >= 1024 { format!("{} KiB", size / 1024) } else { format!("{size} B") }
}

// ---------------------------------------------------------------------------------------------
// Results

#[derive(Clone, Debug)]
enum Outcome {
    Values(BTreeMap<String, f64>),
    Unsupported,
    Failed(String),
}

struct Results {
    /// (row id, variant name) -> one outcome per run
    runs: BTreeMap<(String, String), Vec<Outcome>>,
    notes: Vec<String>,
    load_start: String,
    load_end: String,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" / ")
}

impl Results {
    fn samples(&self, row: &str, variant: &str, key: &str) -> Vec<f64> {
        self.runs
            .get(&(row.to_string(), variant.to_string()))
            .map(|v| {
                v.iter()
                    .filter_map(|o| match o {
                        Outcome::Values(m) => m.get(key).copied(),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
    fn median(&self, row: &str, variant: &str, key: &str) -> Option<f64> {
        median(&self.samples(row, variant, key))
    }
    fn unsupported(&self, row: &str, variant: &str) -> bool {
        self.runs
            .get(&(row.to_string(), variant.to_string()))
            .is_some_and(|v| v.iter().any(|o| matches!(o, Outcome::Unsupported)))
    }
    fn failures(&self, row: &str, variant: &str) -> Vec<String> {
        self.runs
            .get(&(row.to_string(), variant.to_string()))
            .map(|v| {
                v.iter()
                    .filter_map(|o| match o {
                        Outcome::Failed(e) => Some(e.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    Some(if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 })
}

// ---------------------------------------------------------------------------------------------
// Running processes

struct Proc {
    child: Child,
    lines: Receiver<String>,
    stdin: Option<ChildStdin>,
}

impl Proc {
    fn spawn(bin: &Path, args: &[String], env: &[(&str, &str)], log: &Path, keep_stdin: bool) -> std::io::Result<Proc> {
        Self::spawn_counted(bin, args, env, log, keep_stdin, None)
    }

    /// `spawn`, under `perf stat` counting poll syscalls into `perf_out` when it is given. Every
    /// process leads a process group of its own, so a kill also reaches the program perf started.
    fn spawn_counted(
        bin: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: &Path,
        keep_stdin: bool,
        perf_out: Option<&Path>,
    ) -> std::io::Result<Proc> {
        use std::os::unix::process::CommandExt;
        let err = std::fs::File::create(log)?;
        let mut cmd = match perf_out {
            Some(out) => {
                let mut c = Command::new("perf");
                c.args(["stat", "-x", ",", "-o"]).arg(out).args(["-e", &POLL_EVENTS.join(","), "--"]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.process_group(0);
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::from(err));
        cmd.stdin(if keep_stdin { Stdio::piped() } else { Stdio::null() });
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc { child, lines: rx, stdin })
    }

    /// Waits for a line starting with `prefix`; Err on timeout or if the process ended first.
    fn expect(&mut self, prefix: &str, deadline: Instant) -> Result<String, String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(l) if l.starts_with(prefix) => return Ok(l),
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => return Err(format!("timeout waiting for {prefix}")),
                Err(RecvTimeoutError::Disconnected) => {
                    let code = self.child.wait().ok().and_then(|s| s.code());
                    return Err(format!("exited ({code:?}) before {prefix}"));
                }
            }
        }
    }

    /// Waits for the exit; kills at the deadline. Returns the exit code.
    fn finish(&mut self, deadline: Instant) -> Option<i32> {
        self.stdin.take();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            if Instant::now() >= deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Proc {
    /// Kills the whole process group (perf and the program it counts), then reaps the child.
    fn kill(&mut self) {
        // Through the `kill` command: the driver keeps no `unsafe`. The group is ours (process_group(0)
        // at spawn); if it is gone already this fails with ESRCH and nothing else happens.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// The stack binaries whose throughput modes speak CURVE (`BENCH_CURVE=1`, keys in bench/common).
const CURVE_STACKS: [&str; 2] = ["bench-zmtp", "bench-libzmq"];

/// The poll-family syscalls counted in the poll pass (tokio and mio use epoll_wait; libzmq epoll_wait;
/// the rest for completeness).
const POLL_EVENTS: [&str; 7] = [
    "syscalls:sys_enter_epoll_wait",
    "syscalls:sys_enter_epoll_pwait",
    "syscalls:sys_enter_epoll_pwait2",
    "syscalls:sys_enter_poll",
    "syscalls:sys_enter_ppoll",
    "syscalls:sys_enter_select",
    "syscalls:sys_enter_pselect6",
];

/// The poll syscalls a `perf stat -x ,` output file counted (None if the file is missing or says
/// nothing was counted, e.g. perf ended before its program).
fn perf_polls(path: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut total = 0.0;
    let mut seen = false;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut fields = line.split(',');
        let (Some(value), Some(event)) = (fields.next(), fields.nth(1)) else { continue };
        if event.starts_with("syscalls:sys_enter_")
            && let Ok(v) = value.trim().parse::<f64>()
        {
            total += v;
            seen = true;
        }
    }
    seen.then_some(total)
}

/// CPU time (user + system, seconds) of every child reaped so far: /proc/self/stat's cutime and
/// cstime, in clock ticks (100 per second on Linux), so 10 ms resolution — a cell spends 0.3–3 s.
fn children_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name in parentheses; cutime and cstime are fields 16 and 17.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    // `after` starts at field 3 (state), so field n is f[n - 3].
    (f.get(13).copied().unwrap_or(0.0) + f.get(14).copied().unwrap_or(0.0)) / 100.0
}

fn parse_result(line: &str) -> BTreeMap<String, f64> {
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
        .collect()
}

fn return_value(r: Result<BTreeMap<String, f64>, String>) -> Result<Outcome, String> {
    r.map(Outcome::Values)
}

/// A port that is free now, below Linux's ephemeral range (32768–60999 by default). A port the
/// kernel picks for `bind(0)` comes from that range, and once released it can be taken as the
/// source port of any outgoing connection before the cell binds it: a fan-out cell's control
/// port failed so ("bind control port": address in use).
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    for _ in 0..1000 {
        // SplitMix64 over a per-process counter mixed with the clock.
        let mut z = seed.wrapping_add(STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let port = 20_000 + ((z ^ (z >> 31)) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Runner {
    bin_dir: PathBuf,
    log_dir: PathBuf,
    timeout: Duration,
    seq: usize,
    /// Memory row: the N a stack falls back to after failing the full N.
    mem_fallback: BTreeMap<String, usize>,
    /// Remarks for the report.
    notes: Vec<String>,
    /// The poll pass: every process runs under `perf stat` counting poll syscalls (not timed rows).
    count_polls: bool,
}

/// One memory measurement: a ROUTER and `procs` DEALER processes holding `n` connections.
fn mem_once(
    bin: &Path,
    env: &[(&str, &str)],
    ep: &str,
    n: usize,
    procs: usize,
    deadline: Instant,
    log: &dyn Fn(&str) -> PathBuf,
) -> Result<BTreeMap<String, f64>, String> {
    let s = |x: usize| x.to_string();
    let mut srv = Proc::spawn(bin, &["mem-router".into(), ep.to_string(), s(n)], env, &log("router"), true)
        .map_err(|e| e.to_string())?;
    srv.expect("READY", deadline)?;
    let mut dealers = Vec::new();
    let mut left = n;
    for i in 0..procs {
        let k = left / (procs - i);
        left -= k;
        dealers.push(
            Proc::spawn(bin, &["mem-dealers".into(), ep.to_string(), s(k)], env, &log(&format!("dealers{i}")), true)
                .map_err(|e| e.to_string())?,
        );
    }
    let mut dealer_kib = 0.0;
    for d in &mut dealers {
        let m = parse_result(&d.expect("RESULT", deadline)?);
        dealer_kib += m["kib"] - m["base_kib"];
    }
    let m = parse_result(&srv.expect("RESULT", deadline)?);
    let router_kib = m["kib"] - m["base_kib"];
    let short = Instant::now() + Duration::from_secs(5);
    for d in &mut dealers {
        d.finish(short);
    }
    srv.finish(short);
    let nf = n as f64;
    let mut out = BTreeMap::new();
    out.insert("router_kib".into(), router_kib / nf);
    out.insert("dealer_kib".into(), dealer_kib / nf);
    out.insert("total_kib".into(), (router_kib + dealer_kib) / nf);
    out.insert("n".into(), nf);
    Ok(out)
}

impl Runner {
    fn run(&mut self, row: &Row, v: &Variant, run: usize) -> Outcome {
        self.seq += 1;
        let bin = self.bin_dir.join(v.bin);
        let pass = if self.count_polls { "polls".to_string() } else { run.to_string() };
        let tag = format!("{}-{}-{pass}", v.name.replace([' ', '+'], "_"), row.id.replace('/', "_"));
        let log = |role: &str| self.log_dir.join(format!("{tag}-{role}.log"));
        let perf_out = |role: &str| self.log_dir.join(format!("{tag}-{role}.perf"));
        let counting = self.count_polls;
        let mut env = v.env.clone();
        if matches!(row.kind, Kind::Thr { transport: Transport::TcpCurve, .. }) {
            env.push(("BENCH_CURVE", "1"));
        }
        let spawn = |args: &[String], role: &str, keep_stdin: bool| {
            let out = perf_out(role);
            let _ = std::fs::remove_file(&out);
            Proc::spawn_counted(&bin, args, &env, &log(role), keep_stdin, counting.then_some(out.as_path()))
                .map_err(|e| e.to_string())
        };
        let cpu_before = children_cpu_s();
        let deadline = Instant::now() + self.timeout;
        let s = |x: usize| x.to_string();
        let ep_for = |t: Transport, seq: usize| match t {
            Transport::Tcp | Transport::TcpCurve => format!("tcp://127.0.0.1:{}", free_port()),
            Transport::Ipc => format!("ipc:///tmp/zmtp-bench-{}-{seq}.ipc", std::process::id()),
            Transport::Inproc => unreachable!(),
        };
        let result = (|| -> Result<Outcome, String> {
            match &row.kind {
                Kind::Thr { transport: Transport::Inproc, size, count } => {
                    let mut p = spawn(&["thr-inproc".into(), s(*size), s(*count)], "inproc", false)?;
                    match p.expect("RESULT", deadline) {
                        Ok(l) => {
                            p.finish(deadline);
                            Ok(Outcome::Values(parse_result(&l)))
                        }
                        Err(e) => {
                            if p.finish(deadline) == Some(3) {
                                Ok(Outcome::Unsupported)
                            } else {
                                Err(e)
                            }
                        }
                    }
                }
                Kind::Thr { transport: Transport::TcpCurve, .. } if !CURVE_STACKS.contains(&v.bin) => {
                    Ok(Outcome::Unsupported)
                }
                Kind::Thr { transport, size, count } => {
                    let ep = ep_for(*transport, self.seq);
                    let a = |m: &str| vec![m.to_string(), ep.clone(), s(*size), s(*count)];
                    let mut srv = spawn(&a("thr-recv"), "recv", false)?;
                    srv.expect("READY", deadline)?;
                    let mut cli = spawn(&a("thr-send"), "send", true)?;
                    let l = srv.expect("RESULT", deadline)?;
                    cli.finish(deadline);
                    srv.finish(deadline);
                    if let Some(path) = ep.strip_prefix("ipc://") {
                        let _ = std::fs::remove_file(path);
                    }
                    Ok(Outcome::Values(parse_result(&l)))
                }
                Kind::Lat { dealer_router, size, count } => {
                    let ep = ep_for(Transport::Tcp, self.seq);
                    let k = if *dealer_router { "dr" } else { "rr" };
                    let a = |m: &str| vec![m.to_string(), ep.clone(), k.to_string(), s(*size), s(*count)];
                    let mut srv = spawn(&a("lat-server"), "server", false)?;
                    srv.expect("READY", deadline)?;
                    let mut cli = spawn(&a("lat-client"), "client", false)?;
                    let l = cli.expect("RESULT", deadline)?;
                    cli.finish(deadline);
                    srv.finish(Instant::now() + Duration::from_secs(5));
                    Ok(Outcome::Values(parse_result(&l)))
                }
                Kind::Fanout { subs, size, count } => {
                    let ep = ep_for(Transport::Tcp, self.seq);
                    let ctrl = free_port();
                    let pa = vec!["pub".into(), ep.clone(), s(*size), s(*count), s(ctrl as usize), s(*subs)];
                    let mut srv = spawn(&pa, "pub", false)?;
                    srv.expect("READY", deadline)?;
                    let sa = vec!["subs".into(), ep.clone(), s(*subs), s(*size), s(ctrl as usize)];
                    let mut cli = spawn(&sa, "subs", false)?;
                    let l = cli.expect("RESULT", deadline)?;
                    cli.finish(deadline);
                    srv.finish(Instant::now() + Duration::from_secs(10));
                    let mut m = parse_result(&l);
                    if let Some(d) = m.get("delivered").copied() {
                        m.insert("delivered_pct".into(), d * 100.0 / (*count as f64 * *subs as f64));
                    }
                    Ok(Outcome::Values(m))
                }
                Kind::Mem { n, procs } => {
                    // 10,000 connections where the stack copes. One that does not is tried with N/4 and then
                    // N/10 (one DEALER process, 45 s each); the N that worked is kept for the later runs.
                    let attempt = |k: usize, deadline: Instant| {
                        let ep = ep_for(Transport::Tcp, self.seq);
                        mem_once(&bin, &v.env, &ep, k, if k == *n { *procs } else { 1 }, deadline, &log)
                    };
                    if let Some(&k) = self.mem_fallback.get(v.name) {
                        return_value(attempt(k, Instant::now() + Duration::from_secs(45)))
                    } else {
                        let mut errors = Vec::new();
                        let mut found = None;
                        for k in [*n, *n / 4, *n / 10] {
                            match attempt(k, deadline.min(Instant::now() + Duration::from_secs(45))) {
                                Ok(m) => {
                                    found = Some((k, m));
                                    break;
                                }
                                Err(e) => errors.push(format!("N={k}: {e}")),
                            }
                        }
                        match found {
                            Some((k, m)) => {
                                if k != *n {
                                    self.mem_fallback.insert(v.name.to_string(), k);
                                    self.notes.push(format!(
                                        "{}: the memory row could not hold N = {n} (run {}: `{}`), so it is measured with N = {k} (one DEALER process).",
                                        v.name,
                                        run + 1,
                                        errors.join("; ").replace('`', "'")
                                    ));
                                }
                                Ok(Outcome::Values(m))
                            }
                            None => Err(format!("timeout or failure at every N tried: {}", errors.join("; "))),
                        }
                    }
                }
            }
        })();
        let cpu_s = children_cpu_s() - cpu_before;
        match result {
            Ok(Outcome::Values(mut m)) => {
                // What one message (or round trip) cost: CPU of every process of the cell, and in the
                // poll pass the poll syscalls they made.
                let per = match row.kind {
                    Kind::Thr { count, .. } => count as f64,
                    Kind::Lat { count, .. } => (count + bench_common::lat_warmup(count)) as f64,
                    Kind::Fanout { subs, count, .. } => {
                        m.get("delivered").copied().unwrap_or((subs * count) as f64).max(1.0)
                    }
                    Kind::Mem { .. } => 0.0,
                };
                if per > 0.0 {
                    m.insert("cpu_us_per_msg".into(), cpu_s * 1e6 / per);
                    if self.count_polls {
                        let roles = ["inproc", "recv", "send", "server", "client", "pub", "subs"];
                        let polls: Vec<f64> = roles.iter().filter_map(|r| perf_polls(&perf_out(r))).collect();
                        if !polls.is_empty() {
                            m.insert("polls_per_k".into(), polls.iter().sum::<f64>() * 1000.0 / per);
                        }
                        if let Some(c) = perf_polls(&perf_out("client")) {
                            m.insert("client_polls_per_rt".into(), c / per);
                        }
                    }
                }
                Outcome::Values(m)
            }
            Ok(o) => o,
            Err(e) => {
                let tail = ["recv", "send", "server", "client", "pub", "subs", "router", "dealers0", "inproc"]
                    .iter()
                    .filter_map(|r| std::fs::read_to_string(log(r)).ok())
                    .filter_map(|t| {
                        t.lines().find(|l| l.contains("panicked") || l.contains("rror")).map(str::to_string)
                    })
                    .next()
                    .unwrap_or_default();
                Outcome::Failed(format!("{e} {tail}").trim().to_string())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Main

struct Opts {
    quick: bool,
    runs: usize,
    mem_n: usize,
    out: PathBuf,
    svg: PathBuf,
    raw: PathBuf,
    bin_dir: PathBuf,
    command: String,
    only: Option<String>,
    stacks: Option<Vec<String>>,
    /// Skip the poll pass.
    no_polls: bool,
}

fn opts() -> Opts {
    let mut o = Opts {
        quick: false,
        runs: 0,
        mem_n: 0,
        out: "BENCHMARKS.md".into(),
        svg: "bench/throughput.svg".into(),
        raw: "bench/results.tsv".into(),
        bin_dir: "bench/target/release".into(),
        command: "bench/run.sh".into(),
        only: None,
        stacks: None,
        no_polls: false,
    };
    let mut it = std::env::args().skip(1);
    let (mut svg_set, mut raw_set) = (false, false);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--runs" => o.runs = it.next().unwrap().parse().unwrap(),
            "--mem-n" => o.mem_n = it.next().unwrap().parse().unwrap(),
            "--out" => o.out = it.next().unwrap().into(),
            "--svg" => (o.svg, svg_set) = (it.next().unwrap().into(), true),
            "--raw" => (o.raw, raw_set) = (it.next().unwrap().into(), true),
            "--bin-dir" => o.bin_dir = it.next().unwrap().into(),
            "--command" => o.command = it.next().unwrap(),
            "--only" => o.only = it.next(),
            "--no-polls" => o.no_polls = true,
            "--stacks" => o.stacks = it.next().map(|s| s.split(',').map(str::to_string).collect()),
            _ => panic!("unknown argument {a}"),
        }
    }
    // A report written elsewhere (a partial run, say) keeps its plot and raw table beside it
    // instead of overwriting the committed ones.
    if o.out != Path::new("BENCHMARKS.md") {
        if !svg_set {
            o.svg = o.out.with_extension("svg");
        }
        if !raw_set {
            o.raw = o.out.with_extension("tsv");
        }
    }
    if o.runs == 0 {
        o.runs = if o.quick { 1 } else { 5 };
    }
    if o.mem_n == 0 {
        o.mem_n = if o.quick { 1000 } else { 10_000 };
    }
    o
}

fn main() {
    let o = opts();
    let log_dir = o.bin_dir.join("../bench-logs");
    std::fs::create_dir_all(&log_dir).unwrap();
    let mut all_variants = variants();
    if let Some(keep) = &o.stacks {
        all_variants.retain(|v| keep.iter().any(|k| k == v.name));
    }
    let (present, missing): (Vec<Variant>, Vec<Variant>) =
        all_variants.into_iter().partition(|v| o.bin_dir.join(v.bin).exists());
    let mut rows = rows(o.quick, o.mem_n);
    if let Some(only) = &o.only {
        rows.retain(|r| r.id.starts_with(only.as_str()));
    }
    let mut runner = Runner {
        bin_dir: o.bin_dir.clone(),
        log_dir,
        timeout: Duration::from_secs(if o.quick { 60 } else { 120 }),
        seq: 0,
        mem_fallback: BTreeMap::new(),
        notes: Vec::new(),
        count_polls: false,
    };
    let mut results =
        Results { runs: BTreeMap::new(), notes: Vec::new(), load_start: loadavg(), load_end: String::new() };
    let started = Instant::now();
    for run in 0..o.runs {
        for row in &rows {
            for v in &present {
                if v.only.is_some_and(|f| !f(row)) || results.unsupported(&row.id, v.name) {
                    continue;
                }
                // A cell that hit the time limit is not tried again: it would only cost the limit again.
                if results.failures(&row.id, v.name).iter().any(|e| e.contains("timeout")) {
                    eprintln!(
                        "          run {}/{} {:<22} {:<20} skipped (timed out before)",
                        run + 1,
                        o.runs,
                        row.id,
                        v.name
                    );
                    continue;
                }
                let t = Instant::now();
                let outcome = runner.run(row, v, run);
                eprintln!(
                    "[{:>5.0}s] run {}/{} {:<22} {:<20} {:>6.1}s  {:?}",
                    started.elapsed().as_secs_f64(),
                    run + 1,
                    o.runs,
                    row.id,
                    v.name,
                    t.elapsed().as_secs_f64(),
                    outcome
                );
                results.runs.entry((row.id.clone(), v.name.to_string())).or_default().push(outcome);
            }
        }
        let chp_bin = o.bin_dir.join("bench-chp");
        if o.only.as_deref().is_none_or(|p| "chp".starts_with(p)) && chp_bin.exists() {
            let t = Instant::now();
            let outcome = run_chp(&chp_bin, o.quick, &runner.log_dir.join(format!("chp-{run}.log")), runner.timeout);
            eprintln!(
                "[{:>5.0}s] run {}/{} chp {:>6.1}s  {:?}",
                started.elapsed().as_secs_f64(),
                run + 1,
                o.runs,
                t.elapsed().as_secs_f64(),
                outcome
            );
            results.runs.entry(("chp".into(), "zmtp".into())).or_default().push(outcome);
        }
    }
    // The poll pass: one more run of every throughput, latency and fan-out cell with each process under
    // `perf stat`, counting poll syscalls (kept apart from the timed runs: tracing syscalls slows them).
    if !o.no_polls && perf_can_count() {
        runner.count_polls = true;
        for row in rows.iter().filter(|r| !matches!(r.kind, Kind::Mem { .. })) {
            for v in &present {
                if v.only.is_some_and(|f| !f(row))
                    || results.unsupported(&row.id, v.name)
                    || results.failures(&row.id, v.name).iter().any(|e| e.contains("timeout"))
                {
                    continue;
                }
                let t = Instant::now();
                let outcome = runner.run(row, v, 0);
                eprintln!(
                    "[{:>5.0}s] polls {:<22} {:<20} {:>6.1}s  {:?}",
                    started.elapsed().as_secs_f64(),
                    row.id,
                    v.name,
                    t.elapsed().as_secs_f64(),
                    outcome
                );
                results.runs.entry((polls_row(&row.id), v.name.to_string())).or_default().push(outcome);
            }
        }
    } else if !o.no_polls {
        runner.notes.push("poll syscalls not counted: `perf stat -e syscalls:sys_enter_epoll_wait` does not work here (install linux-perf; needs root or perf_event_paranoid ≤ 1).".into());
    }
    let elapsed = started.elapsed();
    results.notes = std::mem::take(&mut runner.notes);
    results.load_end = loadavg();
    write_raw(&o.raw, &rows, &present, &results);
    plot::throughput_svg(&o.svg, &rows_of_tcp_thr(&rows), &present, &results, o.runs);
    let md = report::markdown(&o, &rows, &present, &missing, &results, elapsed);
    std::fs::write(&o.out, md).unwrap();
    eprintln!("wrote {}, {}, {}", o.out.display(), o.svg.display(), o.raw.display());
}

/// The chp crate's own perf example (chp/examples/perf.rs, built as bench-chp): its output lines parsed.
fn run_chp(bin: &Path, quick: bool, log: &Path, timeout: Duration) -> Outcome {
    let updates = if quick { "50000" } else { "200000" };
    let process_updates = if quick { "200000" } else { "1000000" };
    let args: Vec<String> = ["--keys", "1000000", "--updates", updates, "--process-updates", process_updates]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = match Proc::spawn(bin, &args, &[], log, false) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let deadline = Instant::now() + timeout;
    let mut m = BTreeMap::new();
    let num_before = |l: &str, pat: &str| -> Option<f64> {
        let i = l.find(pat)?;
        l[..i].split_whitespace().last()?.parse().ok()
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(l) = p.lines.recv_timeout(left.max(Duration::from_millis(1))) else { break };
        if l.starts_with("throughput:") {
            if let Some(v) = num_before(&l, "updates/s confirmed") {
                m.insert("confirmed_per_s".to_string(), v);
            }
            if let Some(v) = num_before(&l, "updates/s delivered") {
                m.insert("delivered_per_s".to_string(), v);
            }
        } else if let Some(rest) = l.strip_prefix("multi-process ") {
            // "multi-process replay: … X updates/s confirmed, Y updates/s delivered (…); server CPU Z µs per update"
            let kind = if rest.starts_with("replay") { "replay" } else { "clients" };
            for (pat, what) in [("updates/s confirmed", "confirmed_per_s"), ("updates/s delivered", "delivered_per_s")]
            {
                if let Some(v) = num_before(&l, pat) {
                    m.insert(format!("procs_{kind}_{what}"), v);
                }
            }
            if let Some(v) = num_before(&l, "µs per update") {
                m.insert(format!("procs_{kind}_server_cpu_us"), v);
            }
        } else if l.starts_with("latency set") {
            // Three lines: on an idle server, then "at N updates/s of background writes" paced
            // in steps of about 150 µs, then in 1 ms bursts.
            let loaded = match (l.contains("background writes"), l.contains("bursts")) {
                (false, _) => "",
                (true, false) => "loaded_",
                (true, true) => "burst_",
            };
            for (k, pat) in [("p50_us", "p50 "), ("p99_us", "p99 ")] {
                if let Some(d) = l.split(pat).nth(1).and_then(|r| parse_debug_duration(r.split(',').next()?)) {
                    m.insert(format!("{loaded}{k}"), d * 1e6);
                }
            }
        } else if let Some(rest) = l.strip_prefix("memory: ") {
            // "memory: N keys (P B key+value each) take X MiB RSS = B B per key (…)"
            if let Some(v) = num_before(rest, "B per key") {
                m.insert("memory_per_key_b".to_string(), v);
            }
        } else if l.starts_with("restart: ") {
            // "restart: N keys recovered in D from a log (…)", then "… from a snapshot and the
            // longest log before a compaction (…)".
            let what = if l.contains("from a snapshot") { "restart_worst_s" } else { "restart_log_s" };
            if let Some(d) =
                l.split(" recovered in ").nth(1).and_then(|r| parse_debug_duration(r.split_whitespace().next()?))
            {
                m.insert(what.to_string(), d);
            }
        } else if l.starts_with("snapshot of 1000000 keys") {
            if let Some(d) = l.split("KTHXBAI ").nth(1).and_then(|r| parse_debug_duration(r.split_whitespace().next()?))
            {
                m.insert("snapshot_raw_s".to_string(), d);
            }
            if let Some(d) = l.split("connect+sync ").nth(1).and_then(|r| parse_debug_duration(r.trim())) {
                m.insert("snapshot_sync_s".to_string(), d);
            }
        }
    }
    p.finish(Instant::now() + Duration::from_secs(5));
    if m.len() < 19 {
        return Outcome::Failed(format!("chp perf output incomplete ({} of 19 figures)", m.len()));
    }
    // The failover row: the HA demo (bench-chp-ha) at the Guide's 1 s heartbeat and at 100 ms.
    let ha_bin = bin.with_file_name("bench-chp-ha");
    for (heartbeat, key) in [(1000, "failover_hb1000_ms"), (100, "failover_hb100_ms")] {
        if let Some(ms) = run_chp_failover(&ha_bin, heartbeat, &log.with_extension(format!("ha{heartbeat}.log"))) {
            m.insert(key.to_string(), ms);
        }
    }
    // The crowd row: bench/chp_crowd.py with the chp command's server and the crowd example.
    m.extend(run_chp_crowd(bin, quick, &log.with_extension("crowd.log")));
    Outcome::Values(m)
}

/// Clients per crowd process: 2,500 (4 processes: 10,000 clients, each one server connection
/// between snapshots and two while it takes one), fewer if the open-files limit the server
/// inherits would not hold them; 250 with `--quick`.
fn crowd_clients_per_process(quick: bool) -> usize {
    if quick {
        return 250;
    }
    // "Max open files  20000  20000  files": the soft limit (run.sh raises it to the hard one).
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines().find(|l| l.starts_with("Max open files"))?.split_whitespace().nth(3)?.parse::<usize>().ok()
        })
        .unwrap_or(1024);
    (limit.saturating_sub(200) / 4).min(2500)
}

/// One `bench/chp_crowd.py` run: every `key: value` line it prints, as `crowd_<key>`.
fn run_chp_crowd(bin: &Path, quick: bool, log: &Path) -> BTreeMap<String, f64> {
    let clients = crowd_clients_per_process(quick);
    let (server, crowd) = (bin.with_file_name("bench-chp-server"), bin.with_file_name("bench-chp-crowd"));
    let mut m = BTreeMap::new();
    if !server.exists() || !crowd.exists() {
        return m;
    }
    let args: Vec<String> = vec![
        "bench/chp_crowd.py".into(),
        "--processes".into(),
        "4".into(),
        "--clients".into(),
        clients.to_string(),
        "--binary".into(),
        server.display().to_string(),
        "--crowd".into(),
        crowd.display().to_string(),
    ];
    let Ok(mut p) = Proc::spawn(Path::new("python3"), &args, &[], log, false) else { return m };
    let deadline = Instant::now() + Duration::from_secs(600);
    while let Ok(l) =
        p.lines.recv_timeout(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)))
    {
        if let Some((key, value)) = l.split_once(": ")
            && let Ok(v) = value.trim().parse::<f64>()
        {
            m.insert(format!("crowd_{key}"), v);
        }
    }
    p.finish(Instant::now() + Duration::from_secs(5));
    m
}

/// One HA demo run (primary killed while clients write): the "failover time: N ms" it prints.
fn run_chp_failover(bin: &Path, heartbeat_ms: u64, log: &Path) -> Option<f64> {
    let after = (heartbeat_ms * 5).max(1500).to_string();
    let args: Vec<String> =
        ["--clients", "3", "--heartbeat-ms", &heartbeat_ms.to_string(), "--before-ms", "500", "--after-ms", &after]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let mut p = Proc::spawn(bin, &args, &[], log, false).ok()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut found = None;
    while let Ok(l) =
        p.lines.recv_timeout(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1)))
    {
        if let Some(rest) = l.trim().strip_prefix("failover time: ") {
            found = rest.split_whitespace().next().and_then(|v| v.parse().ok());
        }
    }
    p.finish(Instant::now() + Duration::from_secs(5));
    found
}

/// `Duration`'s Debug form (`1.5s`, `893.1ms`, `39.7µs`, `120ns`) in seconds.
fn parse_debug_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    for (suffix, scale) in [("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9), ("s", 1.0)] {
        if let Some(v) = s.strip_suffix(suffix) {
            return v.parse::<f64>().ok().map(|v| v * scale);
        }
    }
    None
}

/// Where a row's poll-pass outcome is kept in `Results`.
fn polls_row(id: &str) -> String {
    format!("{id}#polls")
}

/// Whether `perf stat` can count syscall tracepoints here.
fn perf_can_count() -> bool {
    Command::new("perf")
        .args(["stat", "-x", ",", "-e", POLL_EVENTS[0], "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn rows_of_tcp_thr(rows: &[Row]) -> Vec<(usize, String)> {
    rows.iter()
        .filter_map(|r| match r.kind {
            Kind::Thr { transport: Transport::Tcp, size, .. } => Some((size, r.id.clone())),
            _ => None,
        })
        .collect()
}

fn write_raw(path: &Path, rows: &[Row], variants: &[Variant], results: &Results) {
    let mut f = std::fs::File::create(path).unwrap();
    writeln!(f, "row\tstack\trun\toutcome").unwrap();
    for row in rows {
        for v in variants {
            if let Some(outs) = results.runs.get(&(row.id.clone(), v.name.to_string())) {
                for (i, o) in outs.iter().enumerate() {
                    let text = match o {
                        Outcome::Values(m) => {
                            m.iter().map(|(k, v)| format!("{k}={v:.3}")).collect::<Vec<_>>().join(" ")
                        }
                        Outcome::Unsupported => "unsupported".into(),
                        Outcome::Failed(e) => format!("failed: {e}"),
                    };
                    writeln!(f, "{}\t{}\t{}\t{}", row.id, v.name, i + 1, text).unwrap();
                }
            }
        }
    }
}

mod report;
