//! Hostile-peer hardening (issue 8): thousands of stalled handshakes, connect/disconnect floods,
//! oversized declared frame lengths, a slow consumer on every sending socket type, and a sender as
//! fast as it can be against a PULL with a tiny RCVHWM.
//!
//! Every test ends with a good peer served and checks that nothing leaked: the process's open file
//! descriptors (`/proc/self/fd`) and the runtime's alive tasks (`RuntimeMetrics::num_alive_tasks`)
//! must return to their values from the test's start, within a bounded wait, once the sockets are
//! closed. Memory bounds are asserted on the process RSS (`/proc/self/status`), using the peak
//! (`VmHWM`, reset through `/proc/self/clear_refs`) where the kernel allows it.
//!
//! Those are process-wide quantities, so the tests must not overlap: each takes a process-wide lock
//! and only then builds its runtime (two workers, as `#[tokio::test(flavor = "multi_thread",
//! worker_threads = 2)]` would), which it drops before releasing the lock.

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use zmtp::wire::FrameError;
use zmtp::{ConnectionError, Error, Message, Monitor, MonitorEvent, Socket, SocketType};
// TEST_LIMIT bounds every test body; STEP any single expected step (never a synchronisation sleep).
use zmtp_testkit::{STEP, TEST_LIMIT, eventually};

/// How long closed sockets get to release their fds and tasks.
const SETTLE: Duration = Duration::from_secs(10);
/// Polling interval for conditions checked against a deadline.
const POLL: Duration = Duration::from_millis(10);
const MIB: u64 = 1024 * 1024;

// ---------------------------------------------------------------------------------------------------
// Serial runner and leak accounting
// ---------------------------------------------------------------------------------------------------

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `body` alone in the process on a fresh two-worker runtime, bounded by [`TEST_LIMIT`], then
/// checks that the fds and tasks alive at its start are all that is left.
fn run_serial<F, Fut>(name: &str, body: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let fds = open_fds();
        let tasks = alive_tasks();
        tokio::time::timeout(TEST_LIMIT, body()).await.unwrap_or_else(|_| panic!("{name}: exceeded {TEST_LIMIT:?}"));
        assert_no_leaks(name, fds, tasks).await;
    });
    // `rt` is dropped here, before the lock.
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current().metrics().num_alive_tasks()
}

/// Polls until the open fds and alive tasks are back to their baseline, then reports them.
async fn assert_no_leaks(name: &str, fds_before: usize, tasks_before: usize) {
    let start = Instant::now();
    loop {
        let (fds, tasks) = (open_fds(), alive_tasks());
        if fds <= fds_before && tasks <= tasks_before {
            println!(
                "{name}: open fds {fds_before} -> {fds}, alive tasks {tasks_before} -> {tasks} (settled in {:?})",
                start.elapsed()
            );
            return;
        }
        assert!(
            start.elapsed() < SETTLE,
            "{name}: leak after every socket was closed: open fds {fds_before} -> {fds}, alive tasks \
             {tasks_before} -> {tasks}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The soft RLIMIT_NOFILE (`None` = unlimited or unknown).
fn nofile_soft_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

/// How many in-process TCP connections (two fds each: ours and the victim's) fit under the fd limit,
/// up to `wanted`. The test crate has no `libc`, so the limit is read, not raised.
fn connection_budget(wanted: usize) -> usize {
    let Some(limit) = nofile_soft_limit() else { return wanted };
    let spare = (limit.saturating_sub(open_fds() as u64 + 256) / 2) as usize;
    let n = wanted.min(spare);
    if n < wanted {
        println!("RLIMIT_NOFILE soft limit is {limit}: scaling {wanted} connections down to {n}");
    }
    assert!(n >= 50, "RLIMIT_NOFILE {limit} is too low for this test");
    n
}

// ---------------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------------

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field).and_then(|rest| rest.strip_prefix(':')))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// Process memory at the start of a measured phase.
struct MemProbe {
    rss: u64,
    vm: u64,
    /// `VmHWM` was reset to the current RSS, so it reports this phase's peak.
    peak: bool,
}

impl MemProbe {
    fn start() -> MemProbe {
        // Writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
        let peak = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        MemProbe { rss: status_kib("VmRSS") * 1024, vm: status_kib("VmSize") * 1024, peak }
    }

    /// RSS growth in bytes: the peak since `start` where measurable, else the current RSS.
    fn rss_growth(&self) -> u64 {
        let now = if self.peak { status_kib("VmHWM") } else { status_kib("VmRSS") } * 1024;
        now.saturating_sub(self.rss)
    }

    /// Growth of the virtual size in bytes (catches reservations sized by what a peer declares).
    fn vm_growth(&self) -> u64 {
        (status_kib("VmSize") * 1024).saturating_sub(self.vm)
    }

    fn what(&self) -> &'static str {
        if self.peak { "peak RSS (VmHWM)" } else { "RSS (VmRSS, peak not resettable)" }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// The kernel's maximum TCP send + receive buffer (tcp_wmem/tcp_rmem max): what a connection can hold
/// outside both sockets, on top of their queues.
fn kernel_tcp_buffers() -> u64 {
    let max = |path: &str| -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.split_whitespace().nth(2).and_then(|v| v.parse().ok()))
            .unwrap_or(32 * MIB)
    };
    max("/proc/sys/net/ipv4/tcp_wmem") + max("/proc/sys/net/ipv4/tcp_rmem")
}

// ---------------------------------------------------------------------------------------------------
// Raw ZMTP (zmtp-wire.md §1), as in hostile.rs
// ---------------------------------------------------------------------------------------------------

/// A valid ZMTP 3.1 NULL greeting.
fn greeting() -> [u8; 64] {
    let mut g = [0u8; 64];
    g[0] = 0xFF;
    g[8] = 1;
    g[9] = 0x7F;
    g[10] = 3;
    g[11] = 1;
    g[12..16].copy_from_slice(b"NULL");
    g
}

fn frame(flags: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 9);
    encode_frame(flags, body.len(), &mut out);
    out.extend_from_slice(body);
    out
}

/// A frame header for a body of `len` bytes, LONG iff `len > 255`.
fn encode_frame(flags: u8, len: usize, out: &mut Vec<u8>) {
    if len > 255 {
        out.push(flags | 0x02);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    } else {
        out.push(flags);
        out.push(len as u8);
    }
}

/// A long-frame header declaring `size` bytes, whatever follows.
fn long_header(flags: u8, size: u64) -> Vec<u8> {
    let mut out = vec![flags | 0x02];
    out.extend_from_slice(&size.to_be_bytes());
    out
}

fn ready(socket_type: &str) -> Vec<u8> {
    let mut body = vec![5];
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
    body.extend_from_slice(socket_type.as_bytes());
    frame(0x04, &body)
}

struct Raw {
    stream: TcpStream,
    buf: BytesMut,
}

impl Raw {
    async fn connect(endpoint: &str) -> Raw {
        let addr = endpoint.strip_prefix("tcp://").expect("tcp endpoint");
        let stream =
            tokio::time::timeout(STEP, TcpStream::connect(addr)).await.expect("connect timed out").expect("connect");
        stream.set_nodelay(true).unwrap();
        Raw { stream, buf: BytesMut::new() }
    }

    /// Our address as the victim's monitor reports it.
    fn local(&self) -> String {
        self.stream.local_addr().unwrap().to_string()
    }

    fn port(&self) -> u16 {
        self.stream.local_addr().unwrap().port()
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("raw write");
    }

    async fn read_exact(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            let read = tokio::time::timeout(STEP, self.stream.read_buf(&mut self.buf))
                .await
                .expect("raw read timed out")
                .expect("raw read failed");
            assert!(read > 0, "victim closed while {n} bytes were expected");
        }
        self.buf.split_to(n).to_vec()
    }

    async fn read_greeting(&mut self) {
        let g = self.read_exact(64).await;
        assert_eq!((g[0], g[9] & 1, g[10]), (0xFF, 1, 3), "a ZMTP 3 greeting");
    }

    async fn read_frame(&mut self) -> Vec<u8> {
        let head = self.read_exact(2).await;
        let size = if head[0] & 0x02 != 0 {
            let rest = self.read_exact(7).await;
            let mut be = [0u8; 8];
            be[0] = head[1];
            be[1..].copy_from_slice(&rest);
            u64::from_be_bytes(be) as usize
        } else {
            head[1] as usize
        };
        assert!(size < 1 << 20, "unexpectedly large frame from the victim");
        self.read_exact(size).await
    }

    /// A complete NULL handshake as a peer of `socket_type`.
    async fn handshake(&mut self, socket_type: &str) {
        self.send(&greeting()).await;
        self.read_greeting().await;
        self.send(&ready(socket_type)).await;
        let theirs = self.read_frame().await;
        assert!(theirs.starts_with(b"\x05READY"), "the victim's READY");
    }

    /// Resolves when the victim closes the connection (EOF or reset), discarding what it sent.
    async fn closed_by_victim(&mut self) {
        let mut scratch = [0u8; 4096];
        loop {
            match self.stream.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}

/// Receive-queue bytes of this process's TCP sockets with local port `local` and remote port in
/// `remotes` (from /proc/net/tcp): `(remote port, state, rx_queue)`.
fn victim_rx_queues(local: u16, remotes: &HashSet<u16>) -> Vec<(u16, u8, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (lp, rp) = (port(f.get(1)?)?, port(f.get(2)?)?);
            if lp != local || !remotes.contains(&rp) {
                return None;
            }
            let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
            let rx = u64::from_str_radix(f.get(4)?.split(':').nth(1)?, 16).ok()?;
            Some((rp, state, rx))
        })
        .collect()
}

fn port_of(endpoint: &str) -> u16 {
    endpoint.rsplit(':').next().and_then(|p| p.parse().ok()).expect("endpoint port")
}

// ---------------------------------------------------------------------------------------------------
// Monitor log and good peers
// ---------------------------------------------------------------------------------------------------

/// Drains a monitor in a task (so its 1024-event queue never fills) and keeps every event. The task
/// ends when the socket is gone, so it also takes part in the task-leak check.
#[derive(Clone, Default)]
struct EventLog {
    inner: Arc<(Mutex<Vec<MonitorEvent>>, Notify)>,
}

impl EventLog {
    fn start(mut monitor: Monitor) -> EventLog {
        let log = EventLog::default();
        let sink = log.clone();
        tokio::spawn(async move {
            while let Some(event) = monitor.next_event().await {
                sink.inner.0.lock().unwrap().push(event);
                sink.inner.1.notify_waiters();
            }
        });
        log
    }

    fn with<T>(&self, f: impl FnOnce(&[MonitorEvent]) -> T) -> T {
        f(&self.inner.0.lock().unwrap())
    }

    /// Waits (bounded by [`STEP`]) until `f` finds what it looks for in the events so far.
    async fn wait_for<T>(&self, what: &str, mut f: impl FnMut(&[MonitorEvent]) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            let notified = self.inner.1.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(found) = self.with(&mut f) {
                return found;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("monitor: no {what} within {STEP:?}");
            }
        }
    }

    /// The failure of the connection from `peer`: `(during the handshake, error)`.
    async fn failure_of(&self, peer: &str) -> (bool, Arc<ConnectionError>) {
        self.wait_for(&format!("failure event for {peer}"), |events| {
            events.iter().find_map(|e| match e {
                MonitorEvent::HandshakeFailed { peer: p, error, .. } if p == peer => Some((true, error.clone())),
                MonitorEvent::Disconnected { peer: p, error, .. } if p == peer => Some((false, error.clone())),
                _ => None,
            })
        })
        .await
    }
}

async fn recv_within(sock: &Socket) -> Message {
    tokio::time::timeout(STEP, sock.recv()).await.expect("recv timed out").expect("recv failed")
}

async fn send_within(sock: &Socket, msg: impl Into<Message>) {
    tokio::time::timeout(STEP, sock.send(msg)).await.expect("send timed out").expect("send failed");
}

/// A DEALER connected to `endpoint`.
async fn dealer(endpoint: &str) -> Socket {
    let d = Socket::new(SocketType::Dealer);
    d.set_linger(Some(Duration::ZERO));
    d.connect(endpoint).await.expect("connect");
    d
}

/// A request from `dealer` reaches `router`, whose reply comes back: the DEALER is served.
async fn round_trip(router: &Socket, dealer: &Socket, tag: &str) {
    send_within(dealer, format!("ping-{tag}")).await;
    let request = recv_within(router).await;
    assert_eq!(request.len(), 2, "routing id + body");
    assert_eq!(request[1], format!("ping-{tag}").as_bytes());
    send_within(router, Message::from(vec![request[0].clone(), Bytes::from(format!("pong-{tag}"))])).await;
    assert_eq!(recv_within(dealer).await[0], format!("pong-{tag}").as_bytes());
}

/// Polls until the ROUTER's routing table has exactly `n` peers.
async fn await_routes(router: &Socket, n: usize) {
    eventually(&format!("the ROUTER routing to exactly {n} peers"), || router.peer_routing_ids().len() == n).await;
}

// ---------------------------------------------------------------------------------------------------
// Thousands of stalled handshakes
// ---------------------------------------------------------------------------------------------------

#[test]
fn thousands_of_stalled_partial_greetings_time_out_while_a_good_peer_is_served() {
    run_serial("stalled_partial_greetings", || async {
        let n = connection_budget(2000);
        let ivl = Duration::from_secs(4);
        let router = Socket::new(SocketType::Router);
        router.set_handshake_ivl(Some(ivl));
        router.set_linger(Some(Duration::ZERO));
        let log = EventLog::start(router.monitor());
        let endpoint = router.bind("tcp://127.0.0.1:*").await.expect("bind");
        let good = dealer(&endpoint).await;
        round_trip(&router, &good, "before").await;

        // n connections, each sending 0..=63 bytes of a valid greeting, then nothing.
        let attack_start = Instant::now();
        let mut attackers: Vec<(Raw, Instant)> = futures::stream::iter(0..n)
            .map(|i| {
                let endpoint = endpoint.clone();
                async move {
                    // Taken before connecting: the victim's handshake timer cannot start earlier.
                    let since = Instant::now();
                    let mut a = Raw::connect(&endpoint).await;
                    a.send(&greeting()[..i % 64]).await;
                    (a, since)
                }
            })
            .buffered(64)
            .collect()
            .await;
        // The victim sends its greeting on accept: reading it from every one proves that all n are
        // accepted and pending at once.
        futures::stream::iter(attackers.iter_mut()).for_each_concurrent(64, |(a, _)| a.read_greeting()).await;
        let all_pending = attack_start.elapsed();

        // With all of them pending, the connected DEALER and a newly connected one are served promptly.
        let served_start = Instant::now();
        round_trip(&router, &good, "during").await;
        let fresh = dealer(&endpoint).await;
        round_trip(&router, &fresh, "fresh").await;
        let served = served_start.elapsed();
        let checked_at = attack_start.elapsed();
        println!(
            "{n} stalled connections pending after {all_pending:?}; good peers served in {served:?}, \
             {checked_at:?} into the attack (HANDSHAKE_IVL {ivl:?})"
        );
        // Order, not speed: served while every stall was still pending.
        let _ = served;
        assert!(checked_at < ivl, "the good peers must be checked while the stalls are pending");

        // Then every stalled connection is closed by the victim, no earlier than HANDSHAKE_IVL.
        let deadline = tokio::time::Instant::now() + ivl + STEP;
        let lived: Vec<Option<Duration>> = futures::future::join_all(attackers.iter_mut().map(|(a, since)| {
            let since = *since;
            async move {
                tokio::time::timeout_at(deadline, a.closed_by_victim()).await.ok()?;
                Some(since.elapsed())
            }
        }))
        .await;
        let open = lived.iter().filter(|l| l.is_none()).count();
        assert_eq!(open, 0, "{open} of {n} stalled connections were never closed");
        let lived: Vec<Duration> = lived.into_iter().flatten().collect();
        let (shortest, longest) = (*lived.iter().min().unwrap(), *lived.iter().max().unwrap());
        println!("stalled connections closed after {shortest:?} ..= {longest:?}");
        assert!(shortest + Duration::from_millis(5) >= ivl, "a stalled connection was closed after {shortest:?}");

        // The monitor saw them fail with HandshakeTimeout, and nothing else.
        let attackers_addrs: HashSet<String> = attackers.iter().map(|(a, _)| a.local()).collect();
        let timeouts = log
            .wait_for("HandshakeTimeout for every stalled connection", |events| {
                let mut timeouts = 0;
                for e in events {
                    match e {
                        MonitorEvent::HandshakeFailed { peer, error, .. } if attackers_addrs.contains(peer) => {
                            assert!(matches!(&**error, ConnectionError::HandshakeTimeout), "{peer}: {error:?}");
                            timeouts += 1;
                        }
                        MonitorEvent::HandshakeSucceeded { peer, .. } | MonitorEvent::Disconnected { peer, .. }
                            if attackers_addrs.contains(peer) =>
                        {
                            panic!("stalled peer {peer}: unexpected {e:?}")
                        }
                        _ => {}
                    }
                }
                (timeouts == n).then_some(timeouts)
            })
            .await;
        println!("monitor: {timeouts} HandshakeFailed(HandshakeTimeout)");

        // Good peers still served; only they are routed.
        round_trip(&router, &good, "after").await;
        round_trip(&router, &fresh, "fresh-after").await;
        assert_eq!(router.peer_routing_ids().len(), 2);
        drop(attackers);
        good.close().await;
        fresh.close().await;
        router.close().await;
    });
}

// ---------------------------------------------------------------------------------------------------
// Connect/disconnect flood
// ---------------------------------------------------------------------------------------------------

#[test]
fn connect_disconnect_flood_against_a_router() {
    run_serial("connect_disconnect_flood", || async {
        const CYCLES: usize = 2000;
        const KINDS: usize = 7;
        let router = Socket::new(SocketType::Router);
        router.set_linger(Some(Duration::ZERO));
        router.set_handshake_ivl(Some(Duration::from_secs(2)));
        let endpoint = router.bind("tcp://127.0.0.1:*").await.expect("bind");
        let good = dealer(&endpoint).await;
        round_trip(&router, &good, "before").await;

        // Cycle i does kind i % KINDS; kinds 4 and 5 deliver one message each before going away.
        let start = Instant::now();
        futures::stream::iter(0..CYCLES)
            .for_each_concurrent(16, |i| {
                let endpoint = endpoint.clone();
                async move {
                    match i % KINDS {
                        // TCP connect, then close at once.
                        0 => drop(Raw::connect(&endpoint).await),
                        // Part of a greeting, then close.
                        1 => {
                            let mut a = Raw::connect(&endpoint).await;
                            a.send(&greeting()[..1 + i % 40]).await;
                        }
                        // Whole greeting, then a reset (SO_LINGER 0) mid-handshake.
                        2 => {
                            let mut a = Raw::connect(&endpoint).await;
                            a.send(&greeting()).await;
                            a.read_greeting().await;
                            a.stream.set_zero_linger().unwrap();
                        }
                        // Greeting and half a READY, then close.
                        3 => {
                            let mut a = Raw::connect(&endpoint).await;
                            a.send(&greeting()).await;
                            a.send(&ready("DEALER")[..10]).await;
                        }
                        // Full raw handshake, one message, close.
                        4 => {
                            let mut a = Raw::connect(&endpoint).await;
                            a.handshake("DEALER").await;
                            a.send(&frame(0, format!("raw-{i}").as_bytes())).await;
                        }
                        // A zmtp DEALER that sends one message and closes (LINGER lets it flush).
                        5 => {
                            let d = Socket::new(SocketType::Dealer);
                            d.set_linger(Some(STEP));
                            d.connect(&endpoint).await.expect("connect");
                            send_within(&d, format!("dealer-{i}")).await;
                            d.close().await;
                        }
                        // A zmtp DEALER that closes right after connect (often mid-handshake).
                        _ => {
                            let d = Socket::new(SocketType::Dealer);
                            d.set_linger(Some(Duration::ZERO));
                            d.connect(&endpoint).await.expect("connect");
                            d.close().await;
                        }
                    }
                }
            })
            .await;
        println!("{CYCLES} connect/disconnect cycles in {:?}", start.elapsed());

        // Exactly the messages of kinds 4 and 5 arrive, each once.
        let mut expected: HashSet<String> = (0..CYCLES)
            .filter_map(|i| match i % KINDS {
                4 => Some(format!("raw-{i}")),
                5 => Some(format!("dealer-{i}")),
                _ => None,
            })
            .collect();
        let total = expected.len();
        while !expected.is_empty() {
            let msg = recv_within(&router).await;
            assert_eq!(msg.len(), 2);
            let body = String::from_utf8(msg[1].to_vec()).expect("utf-8 body");
            assert!(expected.remove(&body), "unexpected or duplicate message {body:?}");
        }
        println!("all {total} messages from flood peers delivered exactly once");

        // The good peer is served, nothing else is queued, and only it is routed.
        round_trip(&router, &good, "after").await;
        assert!(matches!(router.try_recv(), Err(Error::WouldBlock)));
        await_routes(&router, 1).await;
        good.close().await;
        router.close().await;
    });
}

// ---------------------------------------------------------------------------------------------------
// Oversized declared lengths
// ---------------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Refused: more than 2^63-1 bytes (or more than `usize`).
    SizeOverflow,
    /// Refused: more than MAXMSGSIZE.
    TooLarge,
    /// Legal on this platform with no MAXMSGSIZE: the connection waits for the body, and must cost
    /// only what actually arrived.
    Pending,
}

#[derive(Clone, Copy, Debug)]
struct Oversized {
    size: u64,
    /// In the READY command (during the handshake) rather than in a message after it.
    in_handshake: bool,
    expect: Expect,
}

/// Without MAXMSGSIZE, a size up to 2^63-1 that this platform can address is legal (on 32-bit
/// targets 2^33 and 2^40 are not).
fn unlimited_outcome(size: u64) -> Expect {
    if size > i64::MAX as u64 || usize::try_from(size).ok().and_then(|s| s.checked_add(9)).is_none() {
        Expect::SizeOverflow
    } else {
        Expect::Pending
    }
}

/// Body bytes a pending attacker sends after the header.
const PENDING_BODY: usize = 1000;

/// Throws `per_kind` peers of every kind at once at a ROUTER with `maxmsgsize`, checks each outcome
/// and the memory it cost, and that a good peer is still served.
async fn oversized_attack(maxmsgsize: Option<u64>, kinds: &[Oversized], per_kind: usize) {
    let router = Socket::new(SocketType::Router);
    router.set_maxmsgsize(maxmsgsize);
    router.set_linger(Some(Duration::ZERO));
    let log = EventLog::start(router.monitor());
    let endpoint = router.bind("tcp://127.0.0.1:*").await.expect("bind");
    let good = dealer(&endpoint).await;
    round_trip(&router, &good, "before").await;

    // Connect everyone and get them to the point of attack.
    let plan: Vec<Oversized> = kinds.iter().flat_map(|k| std::iter::repeat_n(*k, per_kind)).collect();
    let mut attackers: Vec<(Raw, Oversized)> = futures::stream::iter(plan)
        .map(|kind| {
            let endpoint = endpoint.clone();
            async move {
                let mut a = Raw::connect(&endpoint).await;
                if kind.in_handshake {
                    a.send(&greeting()).await;
                    a.read_greeting().await;
                } else {
                    a.handshake("DEALER").await;
                }
                (a, kind)
            }
        })
        .buffered(64)
        .collect()
        .await;

    // All attack at once.
    let mem = MemProbe::start();
    futures::stream::iter(attackers.iter_mut())
        .for_each_concurrent(None, |(a, kind)| async move {
            let flags = if kind.in_handshake { 0x04 } else { 0x00 };
            let mut bytes = long_header(flags, kind.size);
            if kind.expect == Expect::Pending {
                bytes.extend(std::iter::repeat_n(0x5A, PENDING_BODY));
            } else if kind.in_handshake {
                bytes.extend_from_slice(b"\x05READY");
            }
            // The victim may close before reading all of it.
            let _ = a.stream.write_all(&bytes).await;
        })
        .await;

    // Refused ones are closed with the typed reason.
    for (a, kind) in attackers.iter_mut().filter(|(_, k)| k.expect != Expect::Pending) {
        tokio::time::timeout(STEP, a.closed_by_victim()).await.unwrap_or_else(|_| panic!("{kind:?} not closed"));
        let (in_handshake, error) = log.failure_of(&a.local()).await;
        assert_eq!(in_handshake, kind.in_handshake, "{kind:?}: failure reported in the wrong phase: {error:?}");
        let size = kind.size;
        match kind.expect {
            Expect::SizeOverflow => assert!(
                matches!(&*error, ConnectionError::Frame(FrameError::SizeOverflow(s)) if *s == size),
                "{kind:?}: got {error:?}"
            ),
            Expect::TooLarge => assert!(
                matches!(&*error, ConnectionError::Frame(FrameError::TooLarge { size: s, max })
                    if *s == size && Some(*max) == maxmsgsize),
                "{kind:?}: got {error:?}"
            ),
            Expect::Pending => unreachable!(),
        }
        assert!(error.is_protocol());
    }

    // Pending ones stay connected, and the victim has read everything they sent.
    let pending: HashSet<u16> =
        attackers.iter().filter(|(_, k)| k.expect == Expect::Pending).map(|(a, _)| a.port()).collect();
    let victim_port = port_of(&endpoint);
    let deadline = Instant::now() + STEP;
    loop {
        let queues = victim_rx_queues(victim_port, &pending);
        let established = queues.iter().filter(|(_, state, _)| *state == 1).count();
        let unread: u64 = queues.iter().map(|(_, _, rx)| rx).sum();
        if established == pending.len() && unread == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pending oversized peers: {established}/{} established, {unread} bytes unread by the victim",
            pending.len()
        );
        tokio::time::sleep(POLL).await;
    }
    let pending_addrs: HashSet<String> =
        attackers.iter().filter(|(_, k)| k.expect == Expect::Pending).map(|(a, _)| a.local()).collect();
    log.with(|events| {
        for e in events {
            if let MonitorEvent::HandshakeFailed { peer, error, .. } | MonitorEvent::Disconnected { peer, error, .. } =
                e
            {
                assert!(!pending_addrs.contains(peer), "pending peer {peer} dropped: {error:?}");
            }
        }
    });

    // What it cost: bytes that arrived plus a small constant per connection, never the declared size.
    let (rss, vm) = (mem.rss_growth(), mem.vm_growth());
    println!(
        "oversized (maxmsgsize {maxmsgsize:?}): {} peers ({} pending); {} growth {:.1} MiB, VmSize growth {:.1} MiB",
        attackers.len(),
        pending.len(),
        mem.what(),
        mib(rss),
        mib(vm)
    );
    let rss_bound = 64 * MIB + attackers.len() as u64 * 64 * 1024;
    assert!(rss < rss_bound, "RSS grew {:.1} MiB (bound {:.1} MiB)", mib(rss), mib(rss_bound));
    assert!(vm < 4096 * MIB, "VmSize grew {:.1} MiB: memory reserved for declared sizes?", mib(vm));

    // A good peer is served (the connected one and a new one); then the pending peers leave.
    round_trip(&router, &good, "after").await;
    let fresh = dealer(&endpoint).await;
    round_trip(&router, &fresh, "fresh").await;
    drop(attackers);
    await_routes(&router, 2).await;
    round_trip(&router, &good, "last").await;
    fresh.close().await;
    good.close().await;
    router.close().await;
}

#[test]
fn oversized_declared_lengths_from_many_peers_at_once() {
    run_serial("oversized_declared_lengths", || async {
        // Nine kinds in all; both victims' peers are alive one victim at a time.
        let per_kind = connection_budget(5 * 60) / 5;
        let no_limit = [
            Oversized { size: 1 << 63, in_handshake: false, expect: Expect::SizeOverflow },
            Oversized { size: u64::MAX, in_handshake: false, expect: Expect::SizeOverflow },
            Oversized { size: 1 << 63, in_handshake: true, expect: Expect::SizeOverflow },
            Oversized { size: 1 << 40, in_handshake: false, expect: unlimited_outcome(1 << 40) },
            Oversized { size: 1 << 33, in_handshake: false, expect: unlimited_outcome(1 << 33) },
        ];
        oversized_attack(None, &no_limit, per_kind).await;
        let limited = [
            Oversized { size: 1 << 40, in_handshake: false, expect: Expect::TooLarge },
            Oversized { size: 1 << 63, in_handshake: false, expect: Expect::TooLarge },
            Oversized { size: u64::MAX, in_handshake: false, expect: Expect::TooLarge },
            Oversized { size: 1 << 40, in_handshake: true, expect: Expect::TooLarge },
        ];
        oversized_attack(Some(MIB), &limited, per_kind).await;
    });
}

// ---------------------------------------------------------------------------------------------------
// Slow consumers
// ---------------------------------------------------------------------------------------------------

/// SNDHWM = RCVHWM on both sides.
const HWM: usize = 100;
/// Size of each data message.
const MSG: usize = 64 * 1024;
/// Messages a dropping socket type is given (about 312 MiB): far more than any bound below.
const DROP_TOTAL: u64 = 5000;
/// Dropping types get DROP_BURST messages per millisecond (at most 500 MiB/s).
const DROP_BURST: u64 = 8;
/// A blocking `send` that makes no progress for this long is taken as blocked (then confirmed with
/// `try_send`).
const STALL: Duration = Duration::from_millis(500);

fn fill_of(seq: u64) -> u8 {
    b'a' + (seq % 26) as u8
}

/// A data message: `D`, the sequence number, filler derived from it; MSG bytes, freshly allocated so
/// that any unbounded queueing shows in the RSS.
fn data(seq: u64) -> Bytes {
    let mut v = vec![fill_of(seq); MSG];
    v[0] = b'D';
    v[1..9].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

/// The sequence number of an intact data frame; `None` for other messages (probes, markers).
fn data_seq(frame: &[u8]) -> Option<u64> {
    if frame.first() != Some(&b'D') {
        return None;
    }
    assert_eq!(frame.len(), MSG, "data frame truncated or extended");
    let seq = u64::from_be_bytes(frame[1..9].try_into().unwrap());
    assert!(frame[9..] == vec![fill_of(seq); MSG - 9][..], "data message {seq} corrupted");
    Some(seq)
}

/// What may legitimately be held for one slow connection, in messages: the sender's queue, the batch
/// its writer has taken out of it, the receiver's queue, and a read buffer's worth of decoded
/// messages waiting for room.
fn queued_bound() -> u64 {
    (2 * HWM + HWM + 64) as u64
}

/// RSS growth allowed while a slow consumer is flooded: twice what the queues may hold (allocator
/// slack), plus 32 MiB. Kernel socket buffers are not part of the RSS.
fn rss_bound() -> u64 {
    2 * queued_bound() * MSG as u64 + 32 * MIB
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Backpressure {
    /// `send` waits (`try_send`: WouldBlock) at the HWM.
    Blocks,
    /// `send` drops at the HWM.
    Drops,
}

/// The consumer's next message; a REP answers it at once (so it can receive the next).
async fn take(consumer: &Socket) -> Message {
    let msg = consumer.recv().await.expect("consumer recv");
    if consumer.socket_type() == SocketType::Rep {
        consumer.send("ok").await.expect("REP reply");
    }
    msg
}

fn last_frame(msg: &Message) -> &[u8] {
    msg.frames().last().expect("non-empty message")
}

/// A flood from `producer` (bound) to `consumer` (connected), which stops reading. The process RSS
/// must stay within [`rss_bound`]; a blocking type must stop accepting messages once the queues and
/// kernel buffers are full; afterwards the consumer gets every message it should, intact and in order,
/// and the producer serves it again.
async fn slow_consumer(producer_type: SocketType, consumer_type: SocketType, configure: impl FnOnce(&Socket)) {
    let name = format!("{producer_type:?} -> {consumer_type:?}");
    let producer = Socket::new(producer_type);
    let consumer = Socket::new(consumer_type);
    for s in [&producer, &consumer] {
        s.set_sndhwm(HWM);
        s.set_rcvhwm(HWM);
        s.set_linger(Some(Duration::ZERO));
    }
    configure(&producer);
    let backpressure = match producer_type {
        SocketType::Router if !producer.router_mandatory() => Backpressure::Drops,
        SocketType::XPub if !producer.xpub_nodrop() => Backpressure::Drops,
        SocketType::Pub | SocketType::XSub => Backpressure::Drops,
        _ => Backpressure::Blocks,
    };
    if consumer_type == SocketType::Sub {
        consumer.subscribe("").unwrap();
    }
    if producer_type == SocketType::Router {
        consumer.set_routing_id("consumer").unwrap();
    }
    let endpoint = producer.bind("tcp://127.0.0.1:*").await.expect("bind");
    consumer.connect(&endpoint).await.expect("connect");

    // A ROUTER learns the consumer's routing id from a first message.
    let route = if producer_type == SocketType::Router {
        send_within(&consumer, "hello").await;
        let hello = recv_within(&producer).await;
        assert_eq!(hello[0], "consumer");
        Some(hello[0].clone())
    } else {
        None
    };
    let envelope = |body: Bytes| match &route {
        Some(rid) => Message::from(vec![rid.clone(), body]),
        None => Message::single(body),
    };

    // Probes until one arrives: connected, subscribed, routed.
    let deadline = Instant::now() + STEP;
    loop {
        assert!(Instant::now() < deadline, "{name}: no probe got through");
        match producer.try_send(envelope(Bytes::from_static(b"probe"))) {
            Ok(()) | Err(Error::WouldBlock) => {}
            Err(e) => panic!("{name}: probe: {e}"),
        }
        if let Ok(msg) = tokio::time::timeout(Duration::from_millis(50), take(&consumer)).await {
            assert_eq!(last_frame(&msg), b"probe");
            break;
        }
    }

    // The flood; the consumer reads nothing.
    let mem = MemProbe::start();
    let started = Instant::now();
    let mut sent = 0u64;
    let cap = queued_bound() + kernel_tcp_buffers() / MSG as u64;
    match backpressure {
        Backpressure::Drops => {
            // Paced to what loopback TCP can carry, so that the consumer side is offered far more than
            // its HWM (a tight loop would mostly be dropped at the producer's own HWM).
            let mut pace = tokio::time::interval(Duration::from_millis(1));
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for seq in 0..DROP_TOTAL {
                if seq % DROP_BURST == 0 {
                    pace.tick().await;
                }
                tokio::time::timeout(STEP, producer.send(envelope(data(seq))))
                    .await
                    .unwrap_or_else(|_| panic!("{name}: a dropping socket type blocked"))
                    .expect("send");
                sent += 1;
            }
        }
        Backpressure::Blocks => loop {
            match producer.try_send(envelope(data(sent))) {
                Ok(()) => sent += 1,
                Err(Error::WouldBlock) => {
                    match tokio::time::timeout(STALL, producer.send(envelope(data(sent)))).await {
                        Ok(sent_ok) => {
                            sent_ok.expect("send");
                            sent += 1;
                        }
                        // No progress for STALL: blocked, if try_send agrees.
                        Err(_) => match producer.try_send(envelope(data(sent))) {
                            Err(Error::WouldBlock) => break,
                            Ok(()) => sent += 1,
                            Err(e) => panic!("{name}: {e}"),
                        },
                    }
                }
                Err(e) => panic!("{name}: {e}"),
            }
            assert!(sent <= cap, "{name}: {sent} messages accepted for a consumer that reads nothing (bound {cap})");
        },
    }
    let growth = mem.rss_growth();
    println!(
        "{name} ({backpressure:?}): {sent} x {} KiB sent in {:?}{}; {} growth {:.1} MiB (bound {:.1} MiB)",
        MSG / 1024,
        started.elapsed(),
        if backpressure == Backpressure::Blocks { format!(" before blocking (bound {cap})") } else { String::new() },
        mem.what(),
        mib(growth),
        mib(rss_bound())
    );
    assert!(growth < rss_bound(), "{name}: RSS grew {:.1} MiB with HWM {HWM}", mib(growth));

    // The consumer reads again: what it gets is intact and in order, and then the producer serves it.
    let mut received = 0u64;
    let mut last: Option<u64> = None;
    match backpressure {
        Backpressure::Blocks => {
            // Every accepted message, exactly once, in order.
            while received < sent {
                let msg = tokio::time::timeout(STEP, take(&consumer)).await.expect("drain timed out");
                if let Some(seq) = data_seq(last_frame(&msg)) {
                    assert_eq!(seq, received, "{name}: out of order or lost");
                    received += 1;
                }
            }
            send_within(&producer, envelope(Bytes::from_static(b"end"))).await;
            loop {
                let msg = recv_within(&consumer).await;
                assert!(data_seq(last_frame(&msg)).is_none(), "{name}: a message beyond those sent");
                if last_frame(&msg) == b"end" {
                    break;
                }
            }
        }
        Backpressure::Drops => {
            // Some were dropped; those delivered are intact, in order, no duplicates. A marker is
            // sent whenever the consumer runs dry, until one arrives.
            let deadline = Instant::now() + 2 * STEP;
            loop {
                assert!(Instant::now() < deadline, "{name}: the end marker never arrived");
                match tokio::time::timeout(Duration::from_millis(200), take(&consumer)).await {
                    Ok(msg) => match data_seq(last_frame(&msg)) {
                        Some(seq) => {
                            assert!(last.is_none_or(|l| seq > l), "{name}: {seq} after {last:?}");
                            last = Some(seq);
                            received += 1;
                        }
                        None if last_frame(&msg) == b"end" => break,
                        None => assert_eq!(last_frame(&msg), b"probe"),
                    },
                    Err(_) => producer.send(envelope(Bytes::from_static(b"end"))).await.expect("marker"),
                }
            }
            assert!(received >= HWM as u64, "{name}: only {received} delivered: the flood never reached the consumer");
        }
    }
    println!("{name}: consumer then received {received} data messages intact, and the end marker");
    consumer.close().await;
    producer.close().await;
}

#[test]
fn slow_consumer_pub_sub() {
    run_serial("slow_consumer_pub_sub", || slow_consumer(SocketType::Pub, SocketType::Sub, |_| {}));
}

#[test]
fn slow_consumer_xpub_sub() {
    run_serial("slow_consumer_xpub_sub", || slow_consumer(SocketType::XPub, SocketType::Sub, |_| {}));
}

#[test]
fn slow_consumer_xpub_nodrop_sub() {
    run_serial("slow_consumer_xpub_nodrop_sub", || {
        slow_consumer(SocketType::XPub, SocketType::Sub, |p| p.set_xpub_nodrop(true))
    });
}

#[test]
fn slow_consumer_xsub_xpub() {
    run_serial("slow_consumer_xsub_xpub", || slow_consumer(SocketType::XSub, SocketType::XPub, |_| {}));
}

#[test]
fn slow_consumer_push_pull() {
    run_serial("slow_consumer_push_pull", || slow_consumer(SocketType::Push, SocketType::Pull, |_| {}));
}

#[test]
fn slow_consumer_dealer_router() {
    run_serial("slow_consumer_dealer_router", || slow_consumer(SocketType::Dealer, SocketType::Router, |_| {}));
}

#[test]
fn slow_consumer_dealer_dealer() {
    run_serial("slow_consumer_dealer_dealer", || slow_consumer(SocketType::Dealer, SocketType::Dealer, |_| {}));
}

#[test]
fn slow_consumer_router_dealer() {
    run_serial("slow_consumer_router_dealer", || slow_consumer(SocketType::Router, SocketType::Dealer, |_| {}));
}

#[test]
fn slow_consumer_router_mandatory_dealer() {
    run_serial("slow_consumer_router_mandatory_dealer", || {
        slow_consumer(SocketType::Router, SocketType::Dealer, |p| p.set_router_mandatory(true))
    });
}

#[test]
fn slow_consumer_req_rep() {
    // A relaxed REQ can send without reading replies: the REP is the slow consumer.
    run_serial("slow_consumer_req_rep", || {
        slow_consumer(SocketType::Req, SocketType::Rep, |p| p.set_req_relaxed(true))
    });
}

#[test]
fn slow_consumer_pair_pair() {
    run_serial("slow_consumer_pair_pair", || slow_consumer(SocketType::Pair, SocketType::Pair, |_| {}));
}

/// REP replies to a relaxed REQ that never reads them: the REP drops at the HWM, as libzmq does.
#[test]
fn slow_consumer_rep_req() {
    run_serial("slow_consumer_rep_req", || async {
        let rep = Socket::new(SocketType::Rep);
        let req = Socket::new(SocketType::Req);
        for s in [&rep, &req] {
            s.set_sndhwm(HWM);
            s.set_rcvhwm(HWM);
            s.set_linger(Some(Duration::ZERO));
        }
        req.set_req_relaxed(true);
        let endpoint = rep.bind("tcp://127.0.0.1:*").await.expect("bind");
        req.connect(&endpoint).await.expect("connect");

        let mem = MemProbe::start();
        let started = Instant::now();
        for seq in 0..DROP_TOTAL {
            send_within(&req, "request").await;
            assert_eq!(recv_within(&rep).await[0], "request");
            tokio::time::timeout(STEP, rep.send(data(seq)))
                .await
                .expect("REP blocked on a slow requester")
                .expect("reply");
        }
        let growth = mem.rss_growth();
        println!(
            "Rep -> Req (Drops): {DROP_TOTAL} x {} KiB replies in {:?}; {} growth {:.1} MiB (bound {:.1} MiB)",
            MSG / 1024,
            started.elapsed(),
            mem.what(),
            mib(growth),
            mib(rss_bound())
        );
        assert!(growth < rss_bound(), "Rep -> Req: RSS grew {:.1} MiB with HWM {HWM}", mib(growth));

        // The oldest reply was kept, intact; and a new requester is served.
        assert_eq!(data_seq(&recv_within(&req).await[0]), Some(0));
        let fresh = Socket::new(SocketType::Req);
        fresh.set_linger(Some(Duration::ZERO));
        fresh.connect(&endpoint).await.expect("connect");
        send_within(&fresh, "ping").await;
        assert_eq!(recv_within(&rep).await[0], "ping");
        send_within(&rep, "pong").await;
        assert_eq!(recv_within(&fresh).await[0], "pong");
        fresh.close().await;
        req.close().await;
        rep.close().await;
    });
}

// ---------------------------------------------------------------------------------------------------
// A fast sender against a PULL with a small RCVHWM
// ---------------------------------------------------------------------------------------------------

/// Body sizes of the flood's messages, in turn: empty, short and long frames.
const FLOOD_SIZES: [usize; 9] = [65_536, 0, 1, 255, 256, 4096, 65_535, 20_000, 100];

/// Appends flood message `seq`: a header frame (MORE) with the sequence number and body size, then
/// the body filled with a byte derived from `seq`.
fn encode_flood_message(seq: u64, out: &mut Vec<u8>) {
    let size = FLOOD_SIZES[(seq % FLOOD_SIZES.len() as u64) as usize];
    let mut header = seq.to_be_bytes().to_vec();
    header.extend_from_slice(&(size as u32).to_be_bytes());
    out.extend_from_slice(&frame(0x01, &header));
    encode_frame(0, size, out);
    out.resize(out.len() + size, fill_of(seq));
}

/// Checks that `msg` is flood message `seq`, intact.
fn check_flood_message(msg: &Message, seq: u64) {
    assert_eq!(msg.len(), 2, "flood message {seq}: frames");
    let header = &msg[0];
    assert_eq!(header.len(), 12, "flood message {seq}: header");
    assert_eq!(u64::from_be_bytes(header[..8].try_into().unwrap()), seq, "flood message out of order or lost");
    let size = u32::from_be_bytes(header[8..].try_into().unwrap()) as usize;
    assert_eq!(size, FLOOD_SIZES[(seq % FLOOD_SIZES.len() as u64) as usize]);
    assert!(msg[1] == vec![fill_of(seq); size][..], "flood message {seq}: body corrupted");
}

#[test]
fn fast_sender_against_a_slow_pull_with_small_rcvhwm() {
    run_serial("fast_sender_slow_pull", || async {
        const RCVHWM: usize = 10;
        /// Flood messages the PULL reads, one per millisecond.
        const READS: u64 = 1500;
        /// After this many, the good peer sends GOOD messages that must be fair-queued in.
        const GOOD_AT: u64 = 500;
        const GOOD: usize = 20;
        let pull = Socket::new(SocketType::Pull);
        pull.set_rcvhwm(RCVHWM);
        pull.set_linger(Some(Duration::ZERO));
        let log = EventLog::start(pull.monitor());
        let endpoint = pull.bind("tcp://127.0.0.1:*").await.expect("bind");
        let good = Socket::new(SocketType::Push);
        good.set_linger(Some(Duration::ZERO));
        good.connect(&endpoint).await.expect("connect");
        send_within(&good, "good-hello").await;
        assert_eq!(recv_within(&pull).await[0], "good-hello");

        let mut flooder = Raw::connect(&endpoint).await;
        flooder.handshake("PUSH").await;
        let flooder_addr = flooder.local();
        let mem = MemProbe::start();
        let written = Arc::new(AtomicU64::new(0));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let flood = tokio::spawn({
            let written = written.clone();
            let mut stream = flooder.stream;
            async move {
                let mut chunk = Vec::with_capacity(512 * 1024);
                let mut seq = 0u64;
                loop {
                    chunk.clear();
                    while chunk.len() < 256 * 1024 {
                        encode_flood_message(seq, &mut chunk);
                        seq += 1;
                    }
                    tokio::select! {
                        _ = &mut stopped => return,
                        w = stream.write_all(&chunk) => {
                            if w.is_err() {
                                return;
                            }
                            written.store(seq, Ordering::Relaxed);
                        }
                    }
                }
            }
        });

        let mut pace = tokio::time::interval(Duration::from_millis(1));
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next = 0u64;
        let mut good_left: Option<HashSet<String>> = None;
        let mut flood_while_good = 0u64;
        while next < READS || good_left.as_ref().is_none_or(|g| !g.is_empty()) {
            assert!(next < 3 * READS, "the good peer's messages never came through");
            pace.tick().await;
            let msg = recv_within(&pull).await;
            if msg.len() == 1 {
                let body = String::from_utf8(msg[0].to_vec()).unwrap();
                let left = good_left.as_mut().expect("a good message before any was sent");
                assert!(left.remove(&body), "unexpected good message {body:?}");
                continue;
            }
            check_flood_message(&msg, next);
            next += 1;
            if good_left.as_ref().is_some_and(|g| !g.is_empty()) {
                flood_while_good += 1;
            }
            if next == GOOD_AT {
                for k in 0..GOOD {
                    send_within(&good, format!("good-{k}")).await;
                }
                good_left = Some((0..GOOD).map(|k| format!("good-{k}")).collect());
            }
        }
        let growth = mem.rss_growth();
        let written_now = written.load(Ordering::Relaxed);
        println!(
            "fast sender: PULL (RCVHWM {RCVHWM}) read {next} flood messages; the sender had written {written_now}; \
             {flood_while_good} flood messages read while {GOOD} good ones were pending; {} growth {:.1} MiB",
            mem.what(),
            mib(growth)
        );
        // Fair queueing: while the good peer had messages queued, the flood got about one turn in two.
        assert!(
            flood_while_good <= (GOOD + 2 * RCVHWM + 10) as u64,
            "{flood_while_good} flood messages were read before {GOOD} good ones"
        );
        let bound = 4 * RCVHWM as u64 * 65_536 + 32 * MIB;
        assert!(growth < bound, "RSS grew {:.1} MiB with RCVHWM {RCVHWM} (bound {:.1} MiB)", mib(growth), mib(bound));

        // The flooder goes away. The PULL reads on until its reader has seen the end of the stream:
        // what the flooder had written arrives intact, then the good peer's next message.
        stop.send(()).expect("flooder alive");
        flood.await.expect("flooder task");
        let gone = log.failure_of(&flooder_addr);
        tokio::pin!(gone);
        let error = loop {
            tokio::select! {
                (_, error) = &mut gone => break error,
                msg = pull.recv() => {
                    check_flood_message(&msg.expect("recv"), next);
                    next += 1;
                }
            }
        };
        assert!(matches!(&*error, ConnectionError::PeerClosed), "flooder: {error:?}");
        while let Ok(msg) = pull.try_recv() {
            check_flood_message(&msg, next);
            next += 1;
        }
        send_within(&good, "good-last").await;
        assert_eq!(recv_within(&pull).await[0], "good-last");
        println!("after the flooder left: {next} flood messages read in all, then the good peer's");
        good.close().await;
        pull.close().await;
    });
}
