//! What every stack's bench binary shares: the command line, the output protocol the driver reads,
//! latency statistics, RSS, and the out-of-band control channel that the PUB/SUB fan-out uses to
//! start timing only once every subscriber is connected and subscribed.
//!
//! Every stack binary (`bench-zmtp`, `bench-libzmq`, ...) takes the same modes:
//!
//! ```text
//! thr-recv   <endpoint> <size> <count>          PULL binds; prints RESULT msgs_per_s=
//! thr-send   <endpoint> <size> <count>          PUSH connects and sends <count> messages
//! thr-inproc <size> <count>                     PUSH and PULL on two threads of one process
//! lat-server <endpoint> <rr|dr> <size> <count>  REP (rr) or ROUTER (dr) binds and echoes
//! lat-client <endpoint> <rr|dr> <size> <count>  REQ or DEALER; prints RESULT p50_us= p99_us= (one-way)
//! pub        <endpoint> <size> <count> <ctrl>   PUB (SNDHWM 0) binds; warm-up until the subscribers
//!                                               say go, then sends <count> messages
//! subs       <endpoint> <n> <size> <ctrl>       n SUBs (RCVHWM 0); prints RESULT delivered_per_s=
//! mem-router <endpoint> <n>                     ROUTER; prints RESULT base_kib= kib= once n peers said hi
//! mem-dealers <endpoint> <n>                    n DEALERs, each says hi and waits for the answer
//! ```
//!
//! Servers print `READY` once bound; the driver starts the client only then (no sleeps). With
//! `BENCH_CURVE=1` a stack that has CURVE runs the throughput modes over it ([`curve`]); one that
//! has not exits with code 3 (unsupported).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// First byte of a fan-out warm-up message.
pub const WARMUP: u8 = b'W';
/// First byte of a fan-out data message.
pub const DATA: u8 = b'D';
/// First byte of the fan-out end marker (sent repeatedly until the subscribers say done).
pub const END: u8 = b'E';

/// `BENCH_CURVE=1`: the throughput modes run CURVE (the PULL is the server), with these fixed key
/// pairs (Z85; made once with `zmq.curve_keypair()`, test keys of no value).
pub fn curve() -> bool {
    std::env::var("BENCH_CURVE").is_ok_and(|v| v == "1")
}
pub const CURVE_SERVER_PUBLIC: &str = "7>+0G^.<H$>3[:SwnZlA/}>SMq3XdG=!Fi9@@8?j";
pub const CURVE_SERVER_SECRET: &str = "/[4:RQWQC1iDQN&*mO0rCM+E?7f7+<vh#:ZdW3D4";
pub const CURVE_CLIENT_PUBLIC: &str = "KD?Pxj]W[RVrhNxn#RG{Z}rRZ1i-*AcG-Tt5@P?c";
pub const CURVE_CLIENT_SECRET: &str = "3Q@@3flE=Bb1^rl[o%lG(G#f^EPw]pNk6Qs?MIE-";

/// Parsed command line.
pub struct Cmd {
    pub mode: String,
    pub args: Vec<String>,
}

impl Cmd {
    pub fn from_env() -> Cmd {
        let mut it = std::env::args().skip(1);
        let mode = it.next().unwrap_or_else(|| usage());
        Cmd { mode, args: it.collect() }
    }
    pub fn str(&self, i: usize) -> &str {
        self.args.get(i).map(String::as_str).unwrap_or_else(|| usage())
    }
    pub fn num(&self, i: usize) -> usize {
        self.str(i).parse().unwrap_or_else(|_| usage())
    }
}

fn usage() -> ! {
    eprintln!("see bench/common/src/lib.rs for the modes");
    std::process::exit(2)
}

/// Prints a line and flushes it (the driver reads stdout through a pipe).
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub fn ready() {
    say("READY");
}

/// Resident set size of this process in KiB (VmRSS).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Throughput as the receiver saw it: `count` messages, timed from the first to the last.
pub fn report_thr(count: usize, elapsed: Duration) {
    let secs = elapsed.as_secs_f64().max(1e-6);
    say(&format!("RESULT msgs_per_s={:.0}", count as f64 / secs));
}

/// One-way latency from round-trip times in nanoseconds: half of each round trip.
pub fn report_lat(rtts_ns: &mut [u64]) {
    rtts_ns.sort_unstable();
    let pct = |p: f64| {
        let i = ((rtts_ns.len() as f64 * p) as usize).min(rtts_ns.len() - 1);
        rtts_ns[i] as f64 / 2.0 / 1000.0
    };
    let mean = rtts_ns.iter().sum::<u64>() as f64 / rtts_ns.len() as f64 / 2.0 / 1000.0;
    say(&format!("RESULT p50_us={:.2} p99_us={:.2} mean_us={:.2}", pct(0.50), pct(0.99), mean));
}

/// Warm-up round trips before the timed ones.
pub fn lat_warmup(count: usize) -> usize {
    (count / 10).clamp(100, 2000)
}

/// Per-subscriber counters in the fan-out.
#[derive(Clone, Copy, Debug, Default)]
pub struct SubStats {
    pub count: u64,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
    /// Messages received up to and including the one `last` was read at: the rate's numerator,
    /// so that it covers the span the clock saw and no more.
    pub counted: u64,
}

impl SubStats {
    /// Account one received message; returns true when it was the end marker.
    #[inline]
    pub fn on_message(&mut self, first_byte: u8) -> bool {
        match first_byte {
            DATA => {
                // The clock is read on the first message and on every 16th after it, not on each:
                // a read per message was 16% of a subscriber process's CPU (the same for every
                // stack), measuring the harness rather than the stack. The span it misses, at most
                // 15 messages' worth per subscriber, is under 0.1% of the 20,000 a subscriber gets
                // in the 100-subscriber cell, and is left out of the rate's count too.
                self.count += 1;
                if self.first.is_none() {
                    self.first = Some(Instant::now());
                } else if self.count.is_multiple_of(16) {
                    self.last = Some(Instant::now());
                    self.counted = self.count;
                }
                false
            }
            END => true,
            _ => false,
        }
    }
}

/// Delivered messages per second over all subscribers, from the first delivery to the last.
pub fn report_fanout(stats: &[SubStats]) {
    let total: u64 = stats.iter().map(|s| s.count).sum();
    let first = stats.iter().filter_map(|s| s.first).min();
    let last = stats.iter().filter_map(|s| s.last).max();
    // The messages the clock's span covers: each subscriber's up to its last reading (all of
    // them when it never read the clock twice).
    let in_span: u64 = stats.iter().map(|s| if s.last.is_some() { s.counted } else { s.count }).sum();
    let secs = match (first, last) {
        (Some(f), Some(l)) => (l - f).as_secs_f64().max(1e-6),
        _ => 1.0,
    };
    say(&format!("RESULT delivered_per_s={:.0} delivered={total}", in_span as f64 / secs));
}

/// Publisher side of the fan-out control channel (plain TCP on 127.0.0.1:<port>): the subscriber
/// process writes `G` once every subscriber has received a warm-up message, then `D` when done.
pub struct CtrlServer {
    pub go: Arc<AtomicBool>,
    pub done: Arc<AtomicBool>,
}

impl CtrlServer {
    pub fn start(port: u16) -> CtrlServer {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind control port");
        let go = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (g, d) = (go.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept control");
            let mut b = [0u8; 1];
            while s.read_exact(&mut b).is_ok() {
                match b[0] {
                    b'G' => g.store(true, Ordering::Release),
                    _ => {
                        d.store(true, Ordering::Release);
                        break;
                    }
                }
            }
            d.store(true, Ordering::Release);
        });
        CtrlServer { go, done }
    }
    pub fn go(&self) -> bool {
        self.go.load(Ordering::Acquire)
    }
    pub fn done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// Subscriber side of the control channel.
pub struct CtrlClient(TcpStream);

impl CtrlClient {
    pub fn connect(port: u16) -> CtrlClient {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => return CtrlClient(s),
                Err(e) if Instant::now() > deadline => panic!("control connect: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
    pub fn go(&mut self) {
        self.0.write_all(b"G").unwrap();
    }
    pub fn done(&mut self) {
        let _ = self.0.write_all(b"D");
    }
}

/// How long the publisher keeps sending end markers before giving up.
pub const END_TIMEOUT: Duration = Duration::from_secs(30);

/// Payload of a fan-out message of `size` bytes whose first byte is `kind`.
pub fn tagged(kind: u8, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size.max(1)];
    v[0] = kind;
    v
}

/// Blocks until stdin is closed (the driver keeps memory-test processes alive this way).
pub fn wait_stdin_eof() {
    let mut line = String::new();
    let mut r = BufReader::new(std::io::stdin());
    while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        line.clear();
    }
}

/// The sender side of a throughput run: after its last send it keeps its socket open until the
/// driver closes its stdin (after the receiver reported), so stacks whose close does not linger
/// (zeromq drops what is queued) are measured on what they deliver, not on how they close.
pub async fn hold() {
    tokio::task::spawn_blocking(wait_stdin_eof).await.unwrap();
}

/// Tokio runtime: `BENCH_RT=ct` (current-thread) or `mt` (multi-thread, 2 workers); `default` otherwise.
pub fn runtime(default: &str) -> tokio::runtime::Runtime {
    let flavor = std::env::var("BENCH_RT").unwrap_or_else(|_| default.to_string());
    let mut b = if flavor == "mt" {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    b.enable_all().build().expect("tokio runtime")
}

/// tcp://127.0.0.1:PORT -> 127.0.0.1:PORT (for stacks that take bare addresses).
pub fn bare_addr(ep: &str) -> &str {
    ep.strip_prefix("tcp://").unwrap_or(ep)
}
