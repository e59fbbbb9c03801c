//! XPUB/XSUB semantics over tcp, ipc and inproc, and against libzmq (pyzmq) in both directions.
//!
//! The subscription-notice scenarios (what the XPUB application receives as `\x01topic` /
//! `\x00topic`) are written once, as a script over abstract participants, and run with any mix of
//! our sockets and libzmq's: the run with libzmq on every side is the reference that confirms the
//! expected table, the mixed runs check interop, and the runs with ours on every side check the
//! semantics over every transport.
//!
//! libzmq sockets live in `tests/py/xpub_peer.py`, an interactive driver answering one command per
//! line (see its docstring). Requires `python3` with `pyzmq`.
//!
//! No sleeps are used for synchronisation: each step is followed by a "sync" subscription to a
//! fresh `~n` topic on the same connection, and the notices that arrive before the sync notice are
//! what the step produced (the connection keeps order). The only fixed windows are negative checks
//! ("nothing more arrives within [`QUIET`]").

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::timeout;
use zmtp::{Error, Message, Monitor, MonitorEvent, Proxy, Socket, SocketType};

#[macro_use]
mod common;
use common::*;
use zmtp_testkit::bounded;

fn frames_of(frames: &[&str]) -> Message {
    frames.iter().map(|f| Bytes::copy_from_slice(f.as_bytes())).collect()
}

async fn send(s: &Socket, m: impl Into<Message>) {
    match timeout(WAIT, s.send(m)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{:?} send failed: {e}", s.socket_type()),
        Err(_) => panic!("{:?} send did not complete within {WAIT:?}", s.socket_type()),
    }
}

async fn recv_within(s: &Socket, limit: Duration) -> Option<Vec<Bytes>> {
    match timeout(limit, s.recv()).await {
        Ok(Ok(m)) => Some(m.into_frames()),
        Ok(Err(e)) => panic!("{:?} recv failed: {e}", s.socket_type()),
        Err(_) => None,
    }
}

async fn recv(s: &Socket) -> Vec<Bytes> {
    recv_within(s, WAIT).await.unwrap_or_else(|| panic!("{:?}: no message within {WAIT:?}", s.socket_type()))
}

/// The first frame of the next message, as text.
async fn recv_first(s: &Socket) -> String {
    String::from_utf8_lossy(&recv(s).await[0]).into_owned()
}

/// Asserts that nothing arrives within [`QUIET`].
async fn assert_silent(s: &Socket, who: &str) {
    if let Some(m) = recv_within(s, QUIET).await {
        panic!("{who} received {}, expected nothing", show(&m));
    }
}

async fn handshake(mon: &mut Monitor) {
    wait_event(mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;
}

/// Connects `s` to `ep` and waits until the handshake completed, so later subscriptions travel
/// on the live connection, in order.
async fn connect_live(s: &Socket, ep: &str) {
    let mut mon = s.monitor();
    connect(s, ep).await;
    handshake(&mut mon).await;
}

/// A subscription message as the XPUB application sees it: `\x01topic` / `\x00topic`.
fn notice(topic: &str, subscribe: bool) -> Message {
    let mut f = vec![subscribe as u8];
    f.extend_from_slice(topic.as_bytes());
    Message::single(Bytes::from(f))
}

/// Renders a message for assertions: `+topic` / `-topic` for subscription messages, else
/// `msg:frame|frame`.
fn show(frames: &[Bytes]) -> String {
    match frames {
        [f] if matches!(f.first(), Some(0 | 1)) => {
            format!("{}{}", if f[0] == 1 { '+' } else { '-' }, String::from_utf8_lossy(&f[1..]))
        }
        _ => format!("msg:{}", frames.iter().map(|f| String::from_utf8_lossy(f)).collect::<Vec<_>>().join("|")),
    }
}

/// Everything our XPUB application receives up to and including `marker`, then whatever else
/// arrives within [`QUIET`] (so a message overtaken by the marker shows up, out of place).
async fn ours_sequence(xpub: &Socket, marker: &str) -> Vec<String> {
    let mut got = ours_until(xpub, marker).await;
    got.push(marker.to_owned());
    while let Some(m) = recv_within(xpub, QUIET).await {
        got.push(show(&m));
    }
    got
}

/// Receives on our XPUB until `marker` (a rendered message) arrives; returns what came before,
/// skipping notices of the `~n` sync topics.
async fn ours_until(xpub: &Socket, marker: &str) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let Some(m) = recv_within(xpub, WAIT).await else {
            panic!("{marker} never reached the XPUB application; received before: {got:?}")
        };
        let m = show(&m);
        if m == marker {
            return got;
        }
        if !(m.starts_with("+~") || m.starts_with("-~")) {
            got.push(m);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The libzmq driver (tests/py/xpub_peer.py)
// ---------------------------------------------------------------------------------------------

/// Limit for one driver command (its own waits are shorter).
const PY_STEP: Duration = Duration::from_secs(15);

struct PyIo {
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

/// A running xpub_peer.py holding named libzmq sockets. Killed when dropped.
struct Py {
    io: tokio::sync::Mutex<PyIo>,
    _child: Child,
}

impl Py {
    async fn start() -> Arc<Py> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/xpub_peer.py");
        let mut child = Command::from(zmtp_testkit::python_with_pyzmq())
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start python3 ({e}): these tests need python3 with pyzmq"));
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Arc::new(Py { io: tokio::sync::Mutex::new(PyIo { stdin, lines }), _child: child })
    }

    /// Runs one command; panics on `err ...`, on exit and after [`PY_STEP`].
    async fn cmd(&self, line: &str) -> String {
        let mut io = self.io.lock().await;
        io.stdin.write_all(format!("{line}\n").as_bytes()).await.expect("write to the libzmq driver");
        io.stdin.flush().await.expect("flush the libzmq driver's stdin");
        let answer = timeout(PY_STEP, io.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("libzmq driver: no answer to {line:?} within {PY_STEP:?}"))
            .expect("read from the libzmq driver")
            .unwrap_or_else(|| panic!("libzmq driver exited during {line:?} (python3 with pyzmq needed)"));
        assert!(!answer.starts_with("err"), "libzmq driver: {line:?} failed: {answer}");
        answer
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Bytes {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect::<Vec<u8>>().into()
}

fn encode(frames: &[&[u8]]) -> String {
    frames.iter().map(|f| hex(f)).collect::<Vec<_>>().join(",")
}

/// A libzmq socket inside the driver.
#[derive(Clone)]
struct Lib {
    py: Arc<Py>,
    name: String,
}

impl Lib {
    async fn new(py: &Arc<Py>, kind: &str) -> Lib {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("s{}", NEXT.fetch_add(1, Ordering::Relaxed));
        py.cmd(&format!("new {name} {kind}")).await;
        Lib { py: py.clone(), name }
    }

    async fn opt(&self, option: &str, value: i64) {
        self.py.cmd(&format!("opt {} {option} {value}", self.name)).await;
    }

    async fn optb(&self, option: &str, value: &[u8]) {
        self.py.cmd(&format!("optb {} {option} {}", self.name, hex(value))).await;
    }

    async fn bind(&self, ep: &str) -> String {
        let answer = self.py.cmd(&format!("bind {} {ep}", self.name)).await;
        answer.strip_prefix("ok ").expect("bind answers with the endpoint").to_owned()
    }

    async fn connect(&self, ep: &str) {
        self.py.cmd(&format!("connect {} {ep}", self.name)).await;
    }

    async fn send(&self, frames: &[&[u8]]) {
        self.py.cmd(&format!("send {} {}", self.name, encode(frames))).await;
    }

    async fn recv_within(&self, limit: Duration) -> Option<Vec<Bytes>> {
        let answer = self.py.cmd(&format!("recv {} {}", self.name, limit.as_millis())).await;
        if answer == "timeout" {
            return None;
        }
        let body = answer.strip_prefix("msg ").unwrap_or_else(|| panic!("bad recv answer {answer:?}"));
        Some(body.split(',').map(unhex).collect())
    }

    async fn recv(&self) -> Vec<Bytes> {
        self.recv_within(WAIT).await.unwrap_or_else(|| panic!("libzmq {}: no message within {WAIT:?}", self.name))
    }

    async fn monitor(&self) {
        self.py.cmd(&format!("monitor {}", self.name)).await;
    }

    /// Waits for the named monitor event (e.g. `HANDSHAKE_SUCCEEDED`), skipping others.
    async fn wait_event(&self, event: &str) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            let answer = self.py.cmd(&format!("event {} 1000", self.name)).await;
            if answer.split(' ').nth(1) == Some(event) {
                return;
            }
        }
        panic!("libzmq {}: no {event} event within {WAIT:?}", self.name);
    }

    async fn close(&self) {
        self.py.cmd(&format!("close {}", self.name)).await;
    }

    /// Like [`ours_sequence`], for a libzmq XPUB.
    async fn sequence(&self, marker: &str) -> Vec<String> {
        let mut got = self.until(marker).await;
        got.push(marker.to_owned());
        while let Some(m) = self.recv_within(QUIET).await {
            got.push(show(&m));
        }
        got
    }

    /// Like [`ours_until`], for a libzmq XPUB.
    async fn until(&self, marker: &str) -> Vec<String> {
        let mut got = Vec::new();
        loop {
            let Some(m) = self.recv_within(WAIT).await else {
                panic!("{marker} never reached the libzmq XPUB application; received before: {got:?}")
            };
            let m = show(&m);
            if m == marker {
                return got;
            }
            if !(m.starts_with("+~") || m.starts_with("-~")) {
                got.push(m);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The subscription-notice scenario, over any mix of implementations
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Ours,
    Libzmq,
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Default,
    Verbose,
    Verboser,
}

enum Publisher {
    Ours(Socket, Monitor),
    Lib(Lib),
}

impl Publisher {
    async fn start(who: Who, mode: Mode, transport: &str, py: Option<&Arc<Py>>) -> (Publisher, String) {
        match who {
            Who::Ours => {
                let s = Socket::new(SocketType::XPub);
                match mode {
                    Mode::Default => {}
                    Mode::Verbose => s.set_xpub_verbose(true),
                    Mode::Verboser => s.set_xpub_verboser(true),
                }
                let mon = s.monitor();
                let ep = bind(&s, transport, "notices").await;
                (Publisher::Ours(s, mon), ep)
            }
            Who::Libzmq => {
                let s = Lib::new(py.expect("driver"), "XPUB").await;
                match mode {
                    Mode::Default => {}
                    Mode::Verbose => s.opt("XPUB_VERBOSE", 1).await,
                    Mode::Verboser => s.opt("XPUB_VERBOSER", 1).await,
                }
                s.monitor().await;
                let ep = s.bind(&endpoint(transport, "notices")).await;
                (Publisher::Lib(s), ep)
            }
        }
    }

    async fn until(&self, marker: &str) -> Vec<String> {
        match self {
            Publisher::Ours(s, _) => ours_until(s, marker).await,
            Publisher::Lib(s) => s.until(marker).await,
        }
    }

    /// Whatever arrives within [`QUIET`] (stragglers after a disconnect).
    async fn stragglers(&self) -> Vec<String> {
        let mut got = Vec::new();
        loop {
            let m = match self {
                Publisher::Ours(s, _) => recv_within(s, QUIET).await,
                Publisher::Lib(s) => s.recv_within(QUIET).await,
            };
            match m.map(|m| show(&m)) {
                None => return got,
                Some(m) if m.starts_with("+~") || m.starts_with("-~") => {}
                Some(m) => got.push(m),
            }
        }
    }

    async fn wait_disconnected(&mut self) {
        match self {
            Publisher::Ours(_, mon) => {
                wait_event(mon, "Disconnected", |e| matches!(e, MonitorEvent::Disconnected { .. })).await;
            }
            Publisher::Lib(s) => s.wait_event("DISCONNECTED").await,
        }
    }
}

enum Subscriber {
    Ours { s: Option<Socket>, xsub: bool },
    Lib { s: Lib, xsub: bool },
}

impl Subscriber {
    async fn start(who: Who, xsub: bool, ep: &str, py: Option<&Arc<Py>>) -> Subscriber {
        match who {
            Who::Ours => {
                let s = Socket::new(if xsub { SocketType::XSub } else { SocketType::Sub });
                connect_live(&s, ep).await;
                Subscriber::Ours { s: Some(s), xsub }
            }
            Who::Libzmq => {
                let s = Lib::new(py.expect("driver"), if xsub { "XSUB" } else { "SUB" }).await;
                s.monitor().await;
                s.connect(ep).await;
                s.wait_event("HANDSHAKE_SUCCEEDED").await;
                Subscriber::Lib { s, xsub }
            }
        }
    }

    /// Subscribes or unsubscribes: the socket option on SUB, a `\x01`/`\x00` message on XSUB.
    async fn subscription(&self, topic: &str, on: bool) {
        match self {
            Subscriber::Ours { s: Some(s), xsub: false } => {
                if on { s.subscribe(topic) } else { s.unsubscribe(topic) }.expect("subscribe");
            }
            Subscriber::Ours { s: Some(s), xsub: true } => send(s, notice(topic, on)).await,
            Subscriber::Ours { s: None, .. } => panic!("subscriber already closed"),
            Subscriber::Lib { s, xsub: false } => {
                s.optb(if on { "SUBSCRIBE" } else { "UNSUBSCRIBE" }, topic.as_bytes()).await;
            }
            Subscriber::Lib { s, xsub: true } => s.send(&[&notice(topic, on)[0][..]]).await,
        }
    }

    async fn close(&mut self) {
        match self {
            Subscriber::Ours { s, .. } => s.take().expect("open").close().await,
            Subscriber::Lib { s, .. } => s.close().await,
        }
    }
}

#[derive(Clone, Copy)]
enum Step {
    Sub(usize, &'static str),
    Unsub(usize, &'static str),
    Close(usize),
}

/// Two subscribers A (0) and B (1); C (2) only provides sync topics after a disconnect.
const SCRIPT: &[(&str, Step)] = &[
    ("A subscribes a", Step::Sub(0, "a")),
    ("B subscribes a", Step::Sub(1, "a")),
    ("A subscribes a again", Step::Sub(0, "a")),
    ("A unsubscribes a (one reference left)", Step::Unsub(0, "a")),
    ("A unsubscribes a", Step::Unsub(0, "a")),
    ("B subscribes b", Step::Sub(1, "b")),
    ("A subscribes b", Step::Sub(0, "b")),
    ("A disconnects (holding b, B holds b too)", Step::Close(0)),
    ("B disconnects (holding a, b)", Step::Close(1)),
];

/// What the XPUB application receives at each step of [`SCRIPT`], as libzmq 4.3.5 does it
/// (confirmed by the `*_libzmq_reference` tests). Sorted within a step.
fn expected(mode: Mode) -> Vec<Vec<&'static str>> {
    let table: [&[&str]; 9] = match mode {
        Mode::Default => [&["+a"], &[], &[], &[], &[], &["+b"], &[], &[], &["-a", "-b"]],
        Mode::Verbose => [&["+a"], &["+a"], &["+a"], &[], &[], &["+b"], &["+b"], &[], &["-a", "-b"]],
        Mode::Verboser => [&["+a"], &["+a"], &["+a"], &[], &["-a"], &["+b"], &["+b"], &["-b"], &["-a", "-b"]],
    };
    table.iter().map(|s| s.to_vec()).collect()
}

async fn notices_scenario(transport: &str, xpub: Who, subs: Who, xsub: bool, mode: Mode) {
    let py = if xpub == Who::Libzmq || subs == Who::Libzmq { Some(Py::start().await) } else { None };
    let (mut publisher, ep) = Publisher::start(xpub, mode, transport, py.as_ref()).await;
    let mut s = Vec::new();
    for _ in 0..3 {
        s.push(Subscriber::start(subs, xsub, &ep, py.as_ref()).await);
    }
    let mut log = Vec::new();
    for (n, (what, step)) in SCRIPT.iter().enumerate() {
        let syncer = match *step {
            Step::Sub(i, t) => {
                s[i].subscription(t, true).await;
                i
            }
            Step::Unsub(i, t) => {
                s[i].subscription(t, false).await;
                i
            }
            Step::Close(i) => {
                s[i].close().await;
                publisher.wait_disconnected().await;
                2
            }
        };
        let marker = format!("~{n}");
        s[syncer].subscription(&marker, true).await;
        let mut got = publisher.until(&format!("+{marker}")).await;
        if matches!(step, Step::Close(_)) {
            got.extend(publisher.stragglers().await);
        }
        got.sort();
        log.push((*what, got));
    }
    let expected = expected(mode);
    if log.iter().zip(&expected).any(|((_, got), want)| got != want) {
        let rows: Vec<String> = log
            .iter()
            .zip(&expected)
            .map(|((what, got), want)| {
                let flag = if got == want { "  " } else { "!!" };
                format!("{flag} {what:<45} got {got:?}, expected {want:?}")
            })
            .collect();
        panic!(
            "XPUB ({xpub:?}, {mode:?}) notices with {subs:?} {} over {transport} differ from libzmq's:\n{}",
            if xsub { "XSUBs" } else { "SUBs" },
            rows.join("\n")
        );
    }
}

async fn notices_default(transport: &'static str) {
    notices_scenario(transport, Who::Ours, Who::Ours, false, Mode::Default).await
}

async fn notices_verbose(transport: &'static str) {
    notices_scenario(transport, Who::Ours, Who::Ours, false, Mode::Verbose).await
}

async fn notices_verboser(transport: &'static str) {
    notices_scenario(transport, Who::Ours, Who::Ours, false, Mode::Verboser).await
}

async fn notices_xsub_subscribers_verbose(transport: &'static str) {
    notices_scenario(transport, Who::Ours, Who::Ours, true, Mode::Verbose).await
}

over_transports!(notices_default, notices_verbose, notices_verboser, notices_xsub_subscribers_verbose);

/// The same scenario, over tcp, with libzmq on one or both sides.
mod interop_notices {
    use super::{Mode, Who, bounded, notices_scenario};

    macro_rules! cases {
        ($($name:ident: $xpub:ident xpub, $subs:ident subs, xsub $xsub:expr, $mode:ident;)*) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                bounded(notices_scenario("tcp", Who::$xpub, Who::$subs, $xsub, Mode::$mode)).await
            }
        )*};
    }

    cases! {
        default_libzmq_reference: Libzmq xpub, Libzmq subs, xsub false, Default;
        default_our_xpub_libzmq_subs: Ours xpub, Libzmq subs, xsub false, Default;
        default_libzmq_xpub_our_subs: Libzmq xpub, Ours subs, xsub false, Default;
        verbose_libzmq_reference: Libzmq xpub, Libzmq subs, xsub false, Verbose;
        verbose_our_xpub_libzmq_subs: Ours xpub, Libzmq subs, xsub false, Verbose;
        verbose_libzmq_xpub_our_subs: Libzmq xpub, Ours subs, xsub false, Verbose;
        verboser_libzmq_reference: Libzmq xpub, Libzmq subs, xsub false, Verboser;
        verboser_our_xpub_libzmq_subs: Ours xpub, Libzmq subs, xsub false, Verboser;
        verboser_libzmq_xpub_our_subs: Libzmq xpub, Ours subs, xsub false, Verboser;
        xsub_verbose_libzmq_reference: Libzmq xpub, Libzmq subs, xsub true, Verbose;
        xsub_verbose_our_xpub_libzmq_xsubs: Ours xpub, Libzmq subs, xsub true, Verbose;
        xsub_verbose_libzmq_xpub_our_xsubs: Libzmq xpub, Ours subs, xsub true, Verbose;
    }
}

// ---------------------------------------------------------------------------------------------
// Raw ZMTP 3.0 subscriber (message-form subscriptions), against libzmq's XPUB and ours
// ---------------------------------------------------------------------------------------------

/// A hand-made ZMTP 3.0 SUB over TCP: sends subscriptions and data as raw message frames.
struct RawSub {
    stream: TcpStream,
}

impl RawSub {
    async fn connect(ep: &str) -> RawSub {
        let addr = ep.strip_prefix("tcp://").expect("tcp endpoint");
        let mut stream = timeout(WAIT, TcpStream::connect(addr)).await.expect("connect timed out").expect("connect");
        let mut greeting = [0u8; 64];
        greeting[0] = 0xFF;
        greeting[9] = 0x7F;
        greeting[10] = 3;
        greeting[11] = 0; // ZMTP 3.0: subscriptions travel as messages
        greeting[12..16].copy_from_slice(b"NULL");
        stream.write_all(&greeting).await.expect("write greeting");
        let mut theirs = [0u8; 64];
        timeout(WAIT, stream.read_exact(&mut theirs)).await.expect("greeting timed out").expect("read greeting");
        let mut ready = vec![5u8];
        ready.extend_from_slice(b"READY");
        ready.push(11);
        ready.extend_from_slice(b"Socket-Type");
        ready.extend_from_slice(&3u32.to_be_bytes());
        ready.extend_from_slice(b"SUB");
        let mut frame = vec![0x04, ready.len() as u8];
        frame.extend_from_slice(&ready);
        stream.write_all(&frame).await.expect("write READY");
        let mut header = [0u8; 2];
        timeout(WAIT, stream.read_exact(&mut header)).await.expect("READY timed out").expect("read READY");
        assert_eq!(header[0], 0x04, "READY is a short command frame");
        let mut body = vec![0u8; header[1] as usize];
        stream.read_exact(&mut body).await.expect("read READY body");
        RawSub { stream }
    }

    /// Writes single-frame messages, all in one write (so the XPUB reads them together).
    async fn send_all(&mut self, messages: &[&[u8]]) {
        let mut out = Vec::new();
        for m in messages {
            assert!(m.len() < 256);
            out.extend_from_slice(&[0x00, m.len() as u8]);
            out.extend_from_slice(m);
        }
        self.stream.write_all(&out).await.expect("raw write");
    }
}

/// Runs `messages` (then a `\x01~end` marker) from a raw ZMTP 3.0 subscriber against libzmq's XPUB
/// (must give `expected`, which ends with `+~end`: this confirms the table) and then against ours.
async fn raw_subscriber_against_both(messages: &[&[u8]], expected: &[&str]) {
    let mut all = messages.to_vec();
    all.push(b"\x01~end");

    let py = Py::start().await;
    let lib = Lib::new(&py, "XPUB").await;
    lib.monitor().await;
    let ep = lib.bind("tcp://127.0.0.1:*").await;
    let mut raw = RawSub::connect(&ep).await;
    lib.wait_event("HANDSHAKE_SUCCEEDED").await;
    raw.send_all(&all).await;
    let reference = lib.sequence("+~end").await;
    assert_eq!(reference, expected, "libzmq's XPUB (the reference) did not give the expected notices");

    let ours = Socket::new(SocketType::XPub);
    let mut mon = ours.monitor();
    let ep = ours.bind("tcp://127.0.0.1:*").await.expect("bind");
    let mut raw = RawSub::connect(&ep).await;
    handshake(&mut mon).await;
    raw.send_all(&all).await;
    let got = ours_sequence(&ours, "+~end").await;
    assert_eq!(got, expected, "our XPUB application saw different messages than libzmq's for the same peer input");
}

/// libzmq's XPUB passes up a cancel for a topic the peer never subscribed (and a second cancel of
/// one it already cancelled): `rm_result != values_remain` in `xpub.cpp` is also true for
/// `not_found`. A duplicate subscribe from the same peer is not passed up (not verbose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_cancel_of_unknown_topic_is_passed_up_like_libzmq() {
    bounded(raw_subscriber_against_both(
        &[b"\x00zz", b"\x01a", b"\x01a", b"\x00a", b"\x00a"],
        &["-zz", "+a", "-a", "-a", "+~end"],
    ))
    .await
}

/// Data messages from a subscriber reach the XPUB application in order with its subscriptions,
/// including an empty message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_data_and_subscriptions_keep_their_order() {
    bounded(raw_subscriber_against_both(
        &[b"\x01a", b"hello", b"\x00a", b"", b"\x01b", b"bye"],
        &["+a", "msg:hello", "-a", "msg:", "+b", "msg:bye", "+~end"],
    ))
    .await
}

// ---------------------------------------------------------------------------------------------
// XSUB (ours on both ends)
// ---------------------------------------------------------------------------------------------

/// XSUB: subscribe messages always go upstream, unsubscribes when the refcount reaches zero,
/// unknown unsubscribes are dropped; `subscribe()` is the same as sending `\x01topic`; other
/// messages go upstream as they are.
async fn xsub_forwards_subscriptions_upstream(transport: &'static str) {
    let xpub = Socket::new(SocketType::XPub);
    xpub.set_xpub_verbose(true);
    let ep = bind(&xpub, transport, "xsub-up").await;
    let xsub = Socket::new(SocketType::XSub);
    connect_live(&xsub, &ep).await;

    for m in [notice("a", true), notice("a", true), notice("a", false), notice("zz", false)] {
        send(&xsub, m).await;
    }
    xsub.subscribe("k").expect("XSUB subscribe()");
    send(&xsub, notice("a", false)).await;
    send(&xsub, notice("~1", true)).await;
    assert_eq!(ours_until(&xpub, "+~1").await, ["+a", "+a", "+k", "-a"]);

    send(&xsub, frames_of(&["multi", "part"])).await;
    send(&xsub, "hello").await;
    assert_eq!(show(&recv(&xpub).await), "msg:multi|part");
    assert_eq!(show(&recv(&xpub).await), "msg:hello");

    // What XPUB publishes reaches the XSUB by its subscriptions (the filter is upstream).
    send(&xpub, "k1").await;
    send(&xpub, "a1").await;
    send(&xpub, "k2").await;
    assert_eq!(recv_first(&xsub).await, "k1");
    assert_eq!(recv_first(&xsub).await, "k2");
    xsub.unsubscribe("k").expect("XSUB unsubscribe()");
    send(&xsub, notice("~2", true)).await;
    assert_eq!(ours_until(&xpub, "+~2").await, ["-k"]);
}

/// Subscriptions and data sent by an XSUB reach the XPUB application in the order sent.
async fn xsub_messages_and_subscriptions_keep_their_order(transport: &'static str) {
    let xpub = Socket::new(SocketType::XPub);
    let ep = bind(&xpub, transport, "xsub-order").await;
    let xsub = Socket::new(SocketType::XSub);
    connect_live(&xsub, &ep).await;
    send(&xsub, notice("a", true)).await;
    send(&xsub, "hello").await;
    send(&xsub, notice("a", false)).await;
    send(&xsub, frames_of(&[""])).await;
    send(&xsub, notice("b", true)).await;
    send(&xsub, "bye").await;
    send(&xsub, notice("~end", true)).await;
    assert_eq!(
        ours_sequence(&xpub, "+~end").await,
        ["+a", "msg:hello", "-a", "msg:", "+b", "msg:bye", "+~end"],
        "the XPUB application must see the XSUB's messages in the order sent"
    );
}

over_transports!(xsub_forwards_subscriptions_upstream, xsub_messages_and_subscriptions_keep_their_order);

// ---------------------------------------------------------------------------------------------
// Disconnect notices, NODROP, WELCOME_MSG (ours on both ends)
// ---------------------------------------------------------------------------------------------

/// An XPUB that connects (to a bound SUB) also hears `\x00topic` when that subscriber goes away.
async fn xpub_connecting_hears_unsubscribe_on_disconnect(transport: &'static str) {
    let sub = Socket::new(SocketType::Sub);
    let ep = bind(&sub, transport, "xpub-connects").await;
    let xpub = Socket::new(SocketType::XPub);
    let mut mon = xpub.monitor();
    connect(&xpub, &ep).await;
    handshake(&mut mon).await;
    sub.subscribe("x").expect("subscribe");
    sub.subscribe("y").expect("subscribe");
    let mut got = vec![show(&recv(&xpub).await), show(&recv(&xpub).await)];
    got.sort();
    assert_eq!(got, ["+x", "+y"]);
    sub.close().await;
    let mut got = vec![show(&recv(&xpub).await), show(&recv(&xpub).await)];
    got.sort();
    assert_eq!(got, ["-x", "-y"], "subscriber gone: its topics are left without subscribers");
    assert_silent(&xpub, "XPUB").await;
}

over_transports!(xpub_connecting_hears_unsubscribe_on_disconnect);

/// An indexed 64 KiB message (big, so transport buffers fill quickly).
fn big(i: usize, payload: &Bytes) -> Message {
    Message::from(vec![Bytes::from(format!("{i}")), payload.clone()])
}

fn index_of(m: &[Bytes]) -> usize {
    std::str::from_utf8(&m[0]).ok().and_then(|s| s.parse().ok()).expect("indexed message")
}

/// XPUB + SUB with small HWMs; the SUB subscribes to everything and does not read yet.
async fn slow_subscriber(transport: &str, nodrop: bool) -> (Socket, Socket) {
    let xpub = Socket::new(SocketType::XPub);
    xpub.set_xpub_nodrop(nodrop);
    xpub.set_sndhwm(4);
    let ep = bind(&xpub, transport, "nodrop").await;
    let sub = Socket::new(SocketType::Sub);
    sub.set_rcvhwm(4);
    sub.subscribe("").expect("subscribe");
    connect(&sub, &ep).await;
    assert_eq!(show(&recv(&xpub).await), "+", "subscription to everything");
    (xpub, sub)
}

/// NODROP: at the subscriber's HWM `try_send` says WouldBlock and `send` waits; nothing is lost.
async fn nodrop_blocks_instead_of_dropping(transport: &'static str) {
    let (xpub, sub) = slow_subscriber(transport, true).await;
    let payload = Bytes::from(vec![7u8; 64 * 1024]);
    let mut sent = 0;
    let started = Instant::now();
    // Fill until a blocking send stays blocked for QUIET (the transport's buffers are full too).
    loop {
        assert!(started.elapsed() < WAIT && sent < 100_000, "XPUB with NODROP never blocked ({sent} sent)");
        match xpub.try_send(big(sent, &payload)) {
            Ok(()) => sent += 1,
            Err(Error::WouldBlock) => match timeout(QUIET, xpub.send(big(sent, &payload))).await {
                Ok(Ok(())) => sent += 1,
                Ok(Err(e)) => panic!("send: {e}"),
                Err(_) => break,
            },
            Err(e) => panic!("try_send: {e}"),
        }
    }
    assert!(matches!(xpub.try_send(big(sent, &payload)), Err(Error::WouldBlock)), "still blocked");
    // A blocked send completes once the subscriber reads.
    let last = sent;
    let pending = tokio::spawn({
        let xpub = xpub.clone();
        let payload = payload.clone();
        async move { xpub.send(big(last, &payload)).await }
    });
    for i in 0..=last {
        let m = recv(&sub).await;
        assert_eq!(index_of(&m), i, "NODROP must not lose messages");
    }
    timeout(WAIT, pending).await.expect("blocked send completed").expect("task").expect("send");
    assert_silent(&sub, "SUB").await;
}

/// Without NODROP the same slow subscriber loses messages and the XPUB never blocks.
async fn without_nodrop_slow_subscriber_loses_messages(transport: &'static str) {
    let (xpub, sub) = slow_subscriber(transport, false).await;
    let payload = Bytes::from(vec![7u8; 64 * 1024]);
    let total = 2000;
    for i in 0..total {
        match xpub.try_send(big(i, &payload)) {
            Ok(()) => {}
            Err(e) => panic!("XPUB without NODROP must drop, not refuse: message {i}: {e}"),
        }
    }
    let mut got = Vec::new();
    while let Some(m) = recv_within(&sub, QUIET).await {
        got.push(index_of(&m));
    }
    assert!(!got.is_empty(), "the subscriber got nothing at all");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order: {got:?}");
    assert!(got.len() < total, "a slow subscriber must lose messages at the HWM (got all {total})");
}

/// WELCOME_MSG goes to every new subscriber: a SUB sees it if subscribed to its prefix, an XSUB
/// always (no local filter).
async fn welcome_message_for_every_new_subscriber(transport: &'static str) {
    let xpub = Socket::new(SocketType::XPub);
    xpub.set_xpub_welcome_msg(Some(Bytes::from_static(b"W")));
    assert_eq!(xpub.xpub_welcome_msg(), Some(Bytes::from_static(b"W")));
    let ep = bind(&xpub, transport, "welcome").await;

    let first = Socket::new(SocketType::Sub);
    first.subscribe("W").expect("subscribe");
    connect(&first, &ep).await;
    assert_eq!(recv(&first).await, [Bytes::from_static(b"W")]);
    assert_eq!(show(&recv(&xpub).await), "+W");

    let second = Socket::new(SocketType::Sub);
    second.subscribe("W").expect("subscribe");
    connect_live(&second, &ep).await;
    assert_eq!(recv(&second).await, [Bytes::from_static(b"W")]);
    second.subscribe("~").expect("subscribe");
    assert_eq!(ours_until(&xpub, "+~").await, Vec::<String>::new(), "second W subscriber is not news");

    let xsub = Socket::new(SocketType::XSub);
    connect(&xsub, &ep).await;
    assert_eq!(recv(&xsub).await, [Bytes::from_static(b"W")], "XSUB receives without subscribing");
    assert_silent(&first, "the first SUB").await;
}

over_transports!(
    nodrop_blocks_instead_of_dropping,
    without_nodrop_slow_subscriber_loses_messages,
    welcome_message_for_every_new_subscriber
);

// ---------------------------------------------------------------------------------------------
// Proxy chain: upstream XPUB ← XSUB [proxy] XPUB ← SUB
// ---------------------------------------------------------------------------------------------

/// Subscriptions made downstream reach the upstream publisher through a proxy; the publisher
/// filters, so only matching messages travel; the capture sees both directions.
async fn proxy_chain_forwards_subscriptions(transport: &'static str) {
    let upstream = Socket::new(SocketType::XPub);
    let mut up_mon = upstream.monitor();
    let up_ep = bind(&upstream, transport, "chain-up").await;

    let front = Socket::new(SocketType::XSub);
    let back = Socket::new(SocketType::XPub);
    connect(&front, &up_ep).await;
    let down_ep = bind(&back, transport, "chain-down").await;
    handshake(&mut up_mon).await;

    let capture = Socket::new(SocketType::Push);
    let tap = Socket::new(SocketType::Pull);
    let cap_ep = bind(&tap, transport, "chain-capture").await;
    connect_live(&capture, &cap_ep).await;

    let proxy = Proxy::new(front, back).with_capture(capture);
    let control = proxy.control();
    let running = tokio::spawn(proxy.run());

    let sub1 = Socket::new(SocketType::Sub);
    connect_live(&sub1, &down_ep).await;
    sub1.subscribe("a").expect("subscribe");
    assert_eq!(show(&recv(&upstream).await), "+a", "the subscription reached the upstream publisher");

    for m in ["b1", "a1", "b2", "a2"] {
        send(&upstream, m).await;
    }
    assert_eq!(recv_first(&sub1).await, "a1");
    assert_eq!(recv_first(&sub1).await, "a2");

    let sub2 = Socket::new(SocketType::Sub);
    connect_live(&sub2, &down_ep).await;
    sub2.subscribe("a").expect("subscribe");
    sub2.subscribe("c").expect("subscribe");
    assert_eq!(show(&recv(&upstream).await), "+c", "the proxy's XPUB passes on only new prefixes");
    sub1.unsubscribe("a").expect("unsubscribe");
    sub1.subscribe("d").expect("subscribe");
    assert_eq!(show(&recv(&upstream).await), "+d", "a still has a subscriber downstream");
    sub2.unsubscribe("a").expect("unsubscribe");
    assert_eq!(show(&recv(&upstream).await), "-a", "the last subscriber of a left");

    let mut captured = Vec::new();
    for _ in 0..6 {
        captured.push(show(&recv(&tap).await));
    }
    captured.sort();
    assert_eq!(captured, ["+a", "+c", "+d", "-a", "msg:a1", "msg:a2"], "capture saw both directions, no b*");
    assert_silent(&tap, "capture").await;

    control.terminate();
    timeout(WAIT, running).await.expect("proxy stops").expect("task").expect("terminate makes run() Ok");
}

over_transports!(proxy_chain_forwards_subscriptions);

// ---------------------------------------------------------------------------------------------
// Interop: WELCOME_MSG and the proxy chain with libzmq at the ends
// ---------------------------------------------------------------------------------------------

/// libzmq's XPUB welcome message reaches our SUB (subscribed to it) and our XSUB (not subscribed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libzmq_xpub_welcome_reaches_our_sub_and_xsub() {
    bounded(async {
        let py = Py::start().await;
        let xpub = Lib::new(&py, "XPUB").await;
        xpub.optb("XPUB_WELCOME_MSG", b"W").await;
        let ep = xpub.bind("tcp://127.0.0.1:*").await;
        let sub = Socket::new(SocketType::Sub);
        sub.subscribe("W").expect("subscribe");
        connect(&sub, &ep).await;
        assert_eq!(show(&xpub.recv().await), "+W");
        assert_eq!(recv(&sub).await, [Bytes::from_static(b"W")]);

        let xsub = Socket::new(SocketType::XSub);
        connect_live(&xsub, &ep).await;
        // libzmq attaches the new pipe (and writes the welcome) when its XPUB processes commands.
        let deadline = Instant::now() + WAIT;
        let got = loop {
            assert!(Instant::now() < deadline, "no welcome message at our XSUB within {WAIT:?}");
            if let Some(m) = recv_within(&xsub, Duration::from_millis(50)).await {
                break m;
            }
            assert!(xpub.recv_within(Duration::from_millis(20)).await.is_none(), "XSUB subscribed to nothing");
        };
        assert_eq!(got, [Bytes::from_static(b"W")]);
    })
    .await
}

/// Our XPUB's welcome message reaches a libzmq SUB subscribed to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_xpub_welcome_reaches_libzmq_sub() {
    bounded(async {
        let py = Py::start().await;
        let xpub = Socket::new(SocketType::XPub);
        xpub.set_xpub_welcome_msg(Some(Bytes::from_static(b"Welcome")));
        let ep = xpub.bind("tcp://127.0.0.1:*").await.expect("bind");
        let sub = Lib::new(&py, "SUB").await;
        sub.optb("SUBSCRIBE", b"W").await;
        sub.connect(&ep).await;
        assert_eq!(sub.recv().await, [Bytes::from_static(b"Welcome")]);
        assert_eq!(show(&recv(&xpub).await), "+W");
        let xsub = Lib::new(&py, "XSUB").await;
        xsub.connect(&ep).await;
        assert_eq!(xsub.recv().await, [Bytes::from_static(b"Welcome")], "libzmq XSUB, not subscribed");
    })
    .await
}

/// libzmq XPUB upstream ← our proxy (XSUB/XPUB) ← libzmq SUB: the SUB's subscription reaches the
/// libzmq publisher, which then sends only matching messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_chain_between_libzmq_ends() {
    bounded(async {
        let py = Py::start().await;
        let upstream = Lib::new(&py, "XPUB").await;
        let up_ep = upstream.bind("tcp://127.0.0.1:*").await;
        let front = Socket::new(SocketType::XSub);
        let back = Socket::new(SocketType::XPub);
        connect(&front, &up_ep).await;
        let down_ep = back.bind("tcp://127.0.0.1:*").await.expect("bind");
        let proxy = Proxy::new(front, back);
        let control = proxy.control();
        let running = tokio::spawn(proxy.run());

        let sub = Lib::new(&py, "SUB").await;
        sub.monitor().await;
        sub.connect(&down_ep).await;
        sub.wait_event("HANDSHAKE_SUCCEEDED").await;
        sub.optb("SUBSCRIBE", b"a").await;
        assert_eq!(show(&upstream.recv().await), "+a", "libzmq publisher saw the downstream subscription");
        for m in ["b1", "a1", "b2", "a2"] {
            upstream.send(&[m.as_bytes()]).await;
        }
        assert_eq!(sub.recv().await, [Bytes::from_static(b"a1")]);
        assert_eq!(sub.recv().await, [Bytes::from_static(b"a2")]);
        sub.optb("UNSUBSCRIBE", b"a").await;
        assert_eq!(show(&upstream.recv().await), "-a");

        control.terminate();
        timeout(WAIT, running).await.expect("proxy stops").expect("task").expect("run() Ok");
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Many subscriptions
// ---------------------------------------------------------------------------------------------

fn topic(i: usize) -> String {
    format!("t{i:05}")
}

/// 100k subscriptions: every one is announced once, matching stays exact, unsubscribing half of
/// them takes exactly those away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_subscriptions_match_correctly() {
    bounded(async {
        const N: usize = 100_000;
        let xpub = Socket::new(SocketType::XPub);
        xpub.set_rcvhwm(0);
        let ep = xpub.bind("tcp://127.0.0.1:*").await.expect("bind");
        let sub = Socket::new(SocketType::Sub);
        connect_live(&sub, &ep).await;
        let started = Instant::now();
        for i in 0..N {
            sub.subscribe(topic(i)).expect("subscribe");
        }
        sub.subscribe("~all").expect("subscribe");
        let notices = ours_until(&xpub, "+~all").await;
        assert_eq!(notices.len(), N, "one notice per new subscription");
        assert!(notices.iter().enumerate().all(|(i, n)| *n == format!("+{}", topic(i))), "in order");
        println!("100k subscriptions announced in {:?}", started.elapsed());

        // Spot checks: matching prefixes pass, near misses do not.
        for m in ["t1", "u00001", "t0000", "T00001", "t42424 yes", "x", "t99999", "t000001 yes", "t1000"] {
            send(&xpub, m).await;
        }
        send(&xpub, "~all end").await;
        let mut got = Vec::new();
        loop {
            let m = recv_first(&sub).await;
            if m == "~all end" {
                break;
            }
            got.push(m);
        }
        assert_eq!(got, ["t42424 yes", "t99999", "t000001 yes"]);

        // Unsubscribe the even topics.
        for i in (0..N).step_by(2) {
            sub.unsubscribe(topic(i)).expect("unsubscribe");
        }
        sub.subscribe("~half").expect("subscribe");
        let notices = ours_until(&xpub, "+~half").await;
        assert_eq!(notices.len(), N / 2);
        assert!(notices.iter().enumerate().all(|(k, n)| *n == format!("-{}", topic(2 * k))));
        for m in ["t12344", "t12345", "t00000", "t99999", "t50001x", "t50002x"] {
            send(&xpub, m).await;
        }
        send(&xpub, "~half end").await;
        let mut got = Vec::new();
        loop {
            let m = recv_first(&sub).await;
            if m == "~half end" {
                break;
            }
            got.push(m);
        }
        assert_eq!(got, ["t12345", "t99999", "t50001x"]);
    })
    .await
}

/// Measures XPUB throughput against the number of subscriptions (prints a table). Ignored by
/// default: run with `cargo test --release -p zmtp-tests --test xpubsub -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: prints subscriptions vs. messages/s"]
async fn subscription_scaling_figures() {
    const MESSAGES: usize = 200_000;
    println!("{:>13} {:>22} {:>22}", "subscriptions", "no match (send) msg/s", "delivered (tcp) msg/s");
    for n in [1usize, 1_000, 100_000] {
        let xpub = Socket::new(SocketType::XPub);
        xpub.set_rcvhwm(0);
        xpub.set_sndhwm(0);
        let ep = xpub.bind("tcp://127.0.0.1:*").await.expect("bind");
        let sub = Socket::new(SocketType::Sub);
        sub.set_rcvhwm(0);
        connect_live(&sub, &ep).await;
        for i in 0..n {
            sub.subscribe(topic(i)).expect("subscribe");
        }
        sub.subscribe("~").expect("subscribe");
        assert_eq!(ours_until(&xpub, "+~").await.len(), n);

        // Matching cost alone: a topic sharing a long prefix with the subscriptions, matching none.
        let miss = Bytes::from_static(b"t0000x-no-subscriber");
        let started = Instant::now();
        for _ in 0..MESSAGES {
            xpub.send(Message::single(miss.clone())).await.expect("send");
        }
        let miss_rate = MESSAGES as f64 / started.elapsed().as_secs_f64();

        // End to end: every message matches one of the n subscriptions.
        let topics: Vec<Bytes> =
            (0..n.min(1000)).map(|i| Bytes::from(format!("{}-payload", topic(i * (n / n.min(1000)))))).collect();
        let started = Instant::now();
        let receiver = tokio::spawn({
            let sub = sub.clone();
            async move {
                for _ in 0..MESSAGES {
                    sub.recv().await.expect("recv");
                }
            }
        });
        for i in 0..MESSAGES {
            xpub.send(Message::single(topics[i % topics.len()].clone())).await.expect("send");
        }
        timeout(Duration::from_secs(60), receiver).await.expect("all delivered").expect("task");
        let hit_rate = MESSAGES as f64 / started.elapsed().as_secs_f64();
        println!("{n:>13} {miss_rate:>22.0} {hit_rate:>22.0}");
    }
}
