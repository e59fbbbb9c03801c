//! Interop tests against the real libzmq, driven through pyzmq.
//!
//! Each test pairs one of our sockets with a libzmq socket run by `tests/py/peer.py` (a small
//! scriptable peer, see its docstring) and asserts exact message contents on both sides. Most
//! scenarios run twice: our socket binds and libzmq connects (`..._bind_ours`), and libzmq binds and
//! ours connects (`..._bind_libzmq`).
//!
//! Requires `python3` with `pyzmq` (`pip install pyzmq`); without them every test fails with a
//! message saying so.

use std::fmt::{self, Write as _};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use zmtp::{Message, MonitorEvent, Socket, SocketType};
// STEP: the bound on one step (a recv, a send, an answer from the peer).
use zmtp_testkit::{STEP, bounded};

/// 1 MiB.
const MIB: usize = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Minimal JSON (the test crate has no serde): enough for peer.py's config and its output lines.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn obj(pairs: Vec<(&str, Json)>) -> Json {
        Json::Obj(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(pairs) => pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn str_field(&self, key: &str) -> &str {
        match self.get(key) {
            Some(Json::Str(s)) => s,
            _ => panic!("peer output {self} has no string field {key:?}"),
        }
    }

    fn event(&self) -> &str {
        self.str_field("event")
    }

    fn parse(text: &str) -> Result<Json, String> {
        let mut p = JsonParser { b: text.as_bytes(), i: 0 };
        let v = p.value()?;
        p.ws();
        if p.i != p.b.len() {
            return Err(format!("trailing characters at {}", p.i));
        }
        Ok(v)
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_owned())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
    }
}

impl From<u64> for Json {
    fn from(n: u64) -> Json {
        Json::Num(n as f64)
    }
}

impl From<bool> for Json {
    fn from(b: bool) -> Json {
        Json::Bool(b)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
            f.write_char('"')?;
            for c in s.chars() {
                match c {
                    '"' => f.write_str("\\\"")?,
                    '\\' => f.write_str("\\\\")?,
                    c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
                    c => f.write_char(c)?,
                }
            }
            f.write_char('"')
        }
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => write!(f, "{}", *n as i64),
            Json::Num(n) => write!(f, "{n}"),
            Json::Str(s) => string(f, s),
            Json::Arr(items) => {
                f.write_char('[')?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_char(']')
            }
            Json::Obj(pairs) => {
                f.write_char('{')?;
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    string(f, k)?;
                    write!(f, ":{v}")?;
                }
                f.write_char('}')
            }
        }
    }
}

struct JsonParser<'a> {
    b: &'a [u8],
    i: usize,
}

impl JsonParser<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at {}", c as char, self.i))
        }
    }

    fn literal(&mut self, word: &str, v: Json) -> Result<Json, String> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(format!("bad literal at {}", self.i))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        match self.peek().ok_or("unexpected end")? {
            b'{' => {
                self.i += 1;
                let mut pairs = Vec::new();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(pairs));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.expect(b':')?;
                    pairs.push((k, self.value()?));
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(pairs));
                        }
                        _ => return Err(format!("bad object at {}", self.i)),
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value()?);
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return Err(format!("bad array at {}", self.i)),
                    }
                }
            }
            b'"' => Ok(Json::Str(self.string()?)),
            b't' => self.literal("true", Json::Bool(true)),
            b'f' => self.literal("false", Json::Bool(false)),
            b'n' => self.literal("null", Json::Null),
            _ => {
                let start = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(&c)) {
                    self.i += 1;
                }
                std::str::from_utf8(&self.b[start..self.i])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .map(Json::Num)
                    .ok_or_else(|| format!("bad number at {start}"))
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self.b.get(self.i..self.i + 4).ok_or("short \\u escape")?;
        self.i += 4;
        u32::from_str_radix(std::str::from_utf8(digits).map_err(|e| e.to_string())?, 16).map_err(|e| e.to_string())
    }

    fn string(&mut self) -> Result<String, String> {
        if self.peek() != Some(b'"') {
            return Err(format!("expected string at {}", self.i));
        }
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let c = self.peek().ok_or("unterminated string")?;
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).map_err(|e| e.to_string()),
                b'\\' => {
                    let e = self.peek().ok_or("unterminated escape")?;
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) && self.b[self.i..].starts_with(b"\\u") {
                                self.i += 2;
                                let lo = self.hex4()?;
                                0x10000 + ((hi - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF)
                            } else {
                                hi
                            };
                            char::from_u32(code).unwrap_or('\u{FFFD}')
                        }
                        other => return Err(format!("bad escape \\{}", other as char)),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c => out.push(c),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bytes helpers
// ---------------------------------------------------------------------------------------------

fn to_hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for byte in b {
        write!(s, "{byte:02x}").unwrap();
    }
    s
}

fn from_hex(s: &str) -> Bytes {
    assert!(s.len().is_multiple_of(2), "odd-length hex from peer");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex from peer"))
        .collect::<Vec<u8>>()
        .into()
}

/// The deterministic payload peer.py builds for `{"gen": n}`: byte i = i % 251.
fn gen_frame(n: usize) -> Bytes {
    (0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into()
}

fn msg<T: AsRef<[u8]>>(frames: &[T]) -> Message {
    frames.iter().map(|f| Bytes::copy_from_slice(f.as_ref())).collect()
}

fn bytes_vec<T: AsRef<[u8]>>(frames: &[T]) -> Vec<Bytes> {
    frames.iter().map(|f| Bytes::copy_from_slice(f.as_ref())).collect()
}

/// Short human-readable rendering of frames (large ones summarised).
fn show<T: AsRef<[u8]>>(frames: &[T]) -> String {
    let parts: Vec<String> = frames
        .iter()
        .map(|f| {
            let f = f.as_ref();
            if f.len() <= 40 {
                format!("{:?}", String::from_utf8_lossy(f))
            } else {
                format!("<{} bytes: {:?}…>", f.len(), String::from_utf8_lossy(&f[..16]))
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

#[track_caller]
fn assert_frames<A: AsRef<[u8]>, E: AsRef<[u8]>>(actual: &[A], expected: &[E], what: &str) {
    let same = actual.len() == expected.len() && actual.iter().zip(expected).all(|(a, e)| a.as_ref() == e.as_ref());
    if !same {
        let detail = actual
            .iter()
            .zip(expected)
            .enumerate()
            .find(|(_, (a, e))| a.as_ref() != e.as_ref())
            .map(|(i, (a, e))| {
                let (a, e) = (a.as_ref(), e.as_ref());
                let at = a.iter().zip(e).position(|(x, y)| x != y);
                format!("; frame {i} differs: {} vs {} bytes, first differing byte at {at:?}", a.len(), e.len())
            })
            .unwrap_or_default();
        panic!(
            "{what}: got {} frames {}, expected {} frames {}{detail}",
            actual.len(),
            show(actual),
            expected.len(),
            show(expected)
        );
    }
}

#[track_caller]
fn assert_generated_routing_id(id: &[u8], what: &str) {
    assert!(
        id.len() == 5 && id[0] == 0,
        "{what}: expected a generated 5-byte routing id starting with 0x00, got {:?}",
        Bytes::copy_from_slice(id)
    );
}

// ---------------------------------------------------------------------------------------------
// Our side
// ---------------------------------------------------------------------------------------------

async fn send<T: AsRef<[u8]>>(socket: &Socket, frames: &[T]) {
    send_msg(socket, msg(frames)).await
}

async fn send_msg(socket: &Socket, m: Message) {
    let shown = show(m.frames());
    timeout(STEP, socket.send(m))
        .await
        .unwrap_or_else(|_| panic!("our {:?} send of {shown} blocked", socket.socket_type()))
        .unwrap_or_else(|e| panic!("our {:?} send of {shown}: {e}", socket.socket_type()));
}

async fn recv(socket: &Socket) -> Vec<Bytes> {
    timeout(STEP, socket.recv())
        .await
        .unwrap_or_else(|_| panic!("our {:?} recv timed out", socket.socket_type()))
        .unwrap_or_else(|e| panic!("our {:?} recv: {e}", socket.socket_type()))
        .into_frames()
}

/// Waits (bounded) until the monitor reports a completed handshake.
async fn wait_handshake(mon: &mut zmtp::Monitor) {
    let deadline = Instant::now() + STEP;
    loop {
        let ev = tokio::time::timeout_at(deadline, mon.next_event())
            .await
            .expect("no HandshakeSucceeded event within 10 s")
            .expect("monitor ended");
        match ev {
            MonitorEvent::HandshakeSucceeded { .. } => return,
            MonitorEvent::HandshakeFailed { error, .. } | MonitorEvent::Disconnected { error, .. } => {
                panic!("connection to libzmq failed before the handshake completed: {error}")
            }
            _ => {}
        }
    }
}

/// Asserts that the monitor reports nothing (in particular no Disconnected / reconnect) for
/// `window`. Waiting out a window is the only way to assert an absence.
async fn assert_no_connection_events(mon: &mut zmtp::Monitor, window: Duration) {
    if let Ok(ev) = timeout(window, mon.next_event()).await {
        panic!("connection event during the idle heartbeat window (connection did not stay up): {ev:?}");
    }
}

/// A TCP endpoint on a port that was free a moment ago (for connect-before-bind tests).
fn free_tcp_endpoint() -> String {
    format!("tcp://127.0.0.1:{}", zmtp_testkit::free_port())
}

// ---------------------------------------------------------------------------------------------
// The libzmq side: config builder and child process
// ---------------------------------------------------------------------------------------------

/// Configuration + script for one peer.py process.
struct Cfg {
    fields: Vec<(String, Json)>,
    script: Vec<Json>,
}

fn libzmq(socket_type: &str) -> Cfg {
    Cfg { fields: vec![("type".to_owned(), socket_type.into())], script: Vec::new() }
}

fn hex_list<T: AsRef<[u8]>>(frames: &[T]) -> Json {
    Json::Arr(frames.iter().map(|f| Json::Str(to_hex(f.as_ref()))).collect())
}

/// A frame spec peer.py generates itself: `n` bytes, byte i = i % 251 (see [`gen_frame`]).
fn gen_spec(n: usize) -> Json {
    Json::obj(vec![("gen", (n as u64).into())])
}

/// A literal frame spec.
fn lit(b: &[u8]) -> Json {
    Json::Str(to_hex(b))
}

impl Cfg {
    fn opt(mut self, key: &str, value: impl Into<Json>) -> Self {
        self.fields.retain(|(k, _)| k != key);
        self.fields.push((key.to_owned(), value.into()));
        self
    }

    fn bind(self, endpoint: &str) -> Self {
        self.opt("bind", endpoint)
    }

    fn connect(self, endpoint: &str) -> Self {
        self.opt("connect", endpoint)
    }

    fn routing_id(self, id: &[u8]) -> Self {
        self.opt("routing_id", to_hex(id))
    }

    fn subscribe(mut self, topics: &[&str]) -> Self {
        self.fields.push(("subscribe".to_owned(), hex_list(topics)));
        self
    }

    fn ignore(mut self, first_frames: &[&str]) -> Self {
        self.fields.push(("ignore".to_owned(), hex_list(first_frames)));
        self
    }

    fn op(mut self, op: Json) -> Self {
        self.script.push(op);
        self
    }

    fn send<T: AsRef<[u8]>>(self, frames: &[T]) -> Self {
        self.op(Json::obj(vec![("op", "send".into()), ("frames", hex_list(frames))]))
    }

    fn send_specs(self, frames: Vec<Json>) -> Self {
        self.op(Json::obj(vec![("op", "send".into()), ("frames", Json::Arr(frames))]))
    }

    fn send_mandatory<T: AsRef<[u8]>>(self, frames: &[T]) -> Self {
        self.op(Json::obj(vec![("op", "send_mandatory".into()), ("frames", hex_list(frames))]))
    }

    fn recv(self, count: u64) -> Self {
        self.op(Json::obj(vec![("op", "recv".into()), ("count", count.into())]))
    }

    fn echo(self, count: u64) -> Self {
        self.op(Json::obj(vec![("op", "echo".into()), ("count", count.into())]))
    }

    fn sync(self, topics: &[&str]) -> Self {
        self.op(Json::obj(vec![("op", "sync".into()), ("topics", hex_list(topics))]))
    }

    fn send_until_stdin(self, messages: &[&[&str]]) -> Self {
        let messages = Json::Arr(messages.iter().map(|m| hex_list(m)).collect());
        self.op(Json::obj(vec![
            ("op", "send_until_stdin".into()),
            ("messages", messages),
            ("interval_ms", 5u64.into()),
        ]))
    }

    fn wait_stdin(self) -> Self {
        self.op(Json::obj(vec![("op", "wait_stdin".into())]))
    }

    fn mark(self, name: &str) -> Self {
        self.op(Json::obj(vec![("op", "mark".into()), ("name", name.into())]))
    }

    fn to_json(&self) -> String {
        let mut pairs = self.fields.clone();
        pairs.push(("script".to_owned(), Json::Arr(self.script.clone())));
        Json::Obj(pairs).to_string()
    }

    fn describe(&self) -> String {
        let get = |k: &str| self.fields.iter().find(|(key, _)| key == k).map(|(_, v)| v.to_string());
        format!(
            "libzmq {} ({})",
            get("type").unwrap_or_default().trim_matches('"'),
            get("bind")
                .map(|e| format!("bind {e}"))
                .or_else(|| get("connect").map(|e| format!("connect {e}")))
                .unwrap_or_default()
        )
    }
}

/// A running peer.py. Killed when dropped.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    events: mpsc::UnboundedReceiver<Result<Json, String>>,
    /// The endpoint it bound (wildcards resolved) or connected to.
    endpoint: String,
    name: String,
}

impl Peer {
    async fn spawn(cfg: &Cfg) -> Peer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/peer.py");
        let name = cfg.describe();
        let mut child = Command::from(zmtp_testkit::python_with_pyzmq())
            .arg(script)
            .arg(cfg.to_json())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start python3 ({e}): the libzmq interop tests need python3 with pyzmq \
                     installed (pip install pyzmq)"
                )
            });
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let parsed = Json::parse(&line).map_err(|e| format!("{e}: {line:.300}"));
                if tx.send(parsed).is_err() {
                    break;
                }
            }
        });
        let mut peer = Peer { child, stdin, events, endpoint: String::new(), name };
        let ready = peer.next_event().await;
        assert_eq!(ready.event(), "ready", "{}: first line {ready}", peer.name);
        peer.endpoint = ready.str_field("endpoint").to_owned();
        peer
    }

    async fn raw_event(&mut self, limit: Duration) -> Option<Json> {
        let ev = match timeout(limit, self.events.recv()).await {
            Err(_) => return None,
            Ok(Some(Ok(ev))) => ev,
            Ok(Some(Err(bad))) => panic!("{}: unparsable output line: {bad}", self.name),
            Ok(None) => {
                let status = timeout(Duration::from_secs(2), self.child.wait()).await;
                panic!(
                    "{}: tests/py/peer.py exited without finishing (exit: {status:?}); see its \
                     stderr above. The interop tests need python3 with pyzmq (pip install pyzmq).",
                    self.name
                )
            }
        };
        if ev.event() == "error" {
            panic!("{}: libzmq peer failed: {}", self.name, ev.str_field("msg"));
        }
        Some(ev)
    }

    /// The next output line (panics after [`STEP`], on exit, or on an error report).
    async fn next_event(&mut self) -> Json {
        match self.raw_event(STEP).await {
            Some(ev) => ev,
            None => panic!("{}: no output from the libzmq peer within {STEP:?}", self.name),
        }
    }

    /// The next output line if one arrives within `limit`.
    async fn try_event(&mut self, limit: Duration) -> Option<Json> {
        self.raw_event(limit).await
    }

    async fn expect(&mut self, event: &str) -> Json {
        let ev = self.next_event().await;
        assert_eq!(ev.event(), event, "{}: unexpected output {ev:.300}", self.name);
        ev
    }

    /// The frames of the next message the peer received.
    async fn expect_recv(&mut self) -> Vec<Bytes> {
        let ev = self.expect("recv").await;
        match ev.get("frames") {
            Some(Json::Arr(frames)) => frames
                .iter()
                .map(|f| match f {
                    Json::Str(s) => from_hex(s),
                    other => panic!("{}: bad frame {other}", self.name),
                })
                .collect(),
            _ => panic!("{}: recv without frames: {ev:.300}", self.name),
        }
    }

    async fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("peer stdin");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{}: writing to its stdin: {e}", self.name));
        stdin.flush().await.unwrap();
    }

    /// Expects the script to have completed and the process to exit successfully.
    async fn finish(mut self) {
        self.expect("done").await;
        self.stdin.take();
        let status = timeout(STEP, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{}: did not exit after its script", self.name))
            .expect("wait for peer.py");
        assert!(status.success(), "{}: exited with {status}", self.name);
    }
}

#[derive(Clone, Copy, Debug)]
enum Bind {
    /// Our socket binds, libzmq connects.
    Ours,
    /// libzmq binds, our socket connects.
    Libzmq,
}

/// Starts the libzmq peer and links it to `ours`, with the given side binding.
async fn link(ours: &Socket, cfg: Cfg, bind: Bind) -> Peer {
    match bind {
        Bind::Ours => {
            let endpoint = ours.bind("tcp://127.0.0.1:*").await.expect("our socket binds");
            Peer::spawn(&cfg.connect(&endpoint)).await
        }
        Bind::Libzmq => {
            let peer = Peer::spawn(&cfg.bind("tcp://127.0.0.1:*")).await;
            ours.connect(&peer.endpoint).await.expect("our socket connects");
            peer
        }
    }
}

/// Declares the two tests of a scenario: `$ours` (our socket binds) and `$libzmq` (libzmq binds).
macro_rules! both_binds {
    ($scenario:ident => $ours:ident, $libzmq:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $ours() {
            bounded($scenario(Bind::Ours)).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $libzmq() {
            bounded($scenario(Bind::Libzmq)).await
        }
    };
}

// ---------------------------------------------------------------------------------------------
// REQ / REP / ROUTER / DEALER
// ---------------------------------------------------------------------------------------------

async fn req_to_libzmq_rep(bind: Bind) {
    let req = Socket::new(SocketType::Req);
    let mut peer = link(&req, libzmq("REP").echo(2), bind).await;

    send(&req, &["hello"]).await;
    assert_frames(&peer.expect_recv().await, &["hello"], "libzmq REP request");
    assert_frames(&recv(&req).await, &["hello"], "our REQ reply");

    send(&req, &["multi", "part", "request"]).await;
    assert_frames(&peer.expect_recv().await, &["multi", "part", "request"], "libzmq REP request 2");
    assert_frames(&recv(&req).await, &["multi", "part", "request"], "our REQ reply 2");
    peer.finish().await;
}
both_binds!(req_to_libzmq_rep => req_to_libzmq_rep_bind_ours, req_to_libzmq_rep_bind_libzmq);

async fn libzmq_req_to_rep(bind: Bind) {
    let rep = Socket::new(SocketType::Rep);
    let cfg = libzmq("REQ").send(&["q1"]).recv(1).send(&["q2a", "q2b", "q2c"]).recv(1);
    let mut peer = link(&rep, cfg, bind).await;

    assert_frames(&recv(&rep).await, &["q1"], "our REP request");
    send(&rep, &["r1"]).await;
    assert_frames(&peer.expect_recv().await, &["r1"], "libzmq REQ reply");

    assert_frames(&recv(&rep).await, &["q2a", "q2b", "q2c"], "our REP request 2");
    send(&rep, &["r2a", "", "r2c"]).await;
    assert_frames(&peer.expect_recv().await, &["r2a", "", "r2c"], "libzmq REQ reply 2");
    peer.finish().await;
}
both_binds!(libzmq_req_to_rep => libzmq_req_to_rep_bind_ours, libzmq_req_to_rep_bind_libzmq);

async fn req_to_libzmq_router(bind: Bind) {
    let req = Socket::new(SocketType::Req);
    let mut peer = link(&req, libzmq("ROUTER").echo(1), bind).await;

    send(&req, &["hello"]).await;
    let got = peer.expect_recv().await;
    assert_eq!(got.len(), 3, "libzmq ROUTER got {}", show(&got));
    assert_generated_routing_id(&got[0], "libzmq ROUTER's id for our REQ");
    assert_frames(&got[1..], &["", "hello"], "libzmq ROUTER envelope + body");
    assert_frames(&recv(&req).await, &["hello"], "our REQ reply");
    peer.finish().await;
}
both_binds!(req_to_libzmq_router => req_to_libzmq_router_bind_ours, req_to_libzmq_router_bind_libzmq);

async fn libzmq_req_to_router(bind: Bind) {
    let router = Socket::new(SocketType::Router);
    let mut peer = link(&router, libzmq("REQ").send(&["hi"]).recv(1), bind).await;

    let got = recv(&router).await;
    assert_eq!(got.len(), 3, "our ROUTER got {}", show(&got));
    assert_generated_routing_id(&got[0], "our ROUTER's id for libzmq REQ");
    assert_frames(&got[1..], &["", "hi"], "our ROUTER envelope + body");
    send_msg(&router, msg(&[got[0].clone(), Bytes::new(), Bytes::from_static(b"re:hi")])).await;
    assert_frames(&peer.expect_recv().await, &["re:hi"], "libzmq REQ reply");
    peer.finish().await;
}
both_binds!(libzmq_req_to_router => libzmq_req_to_router_bind_ours, libzmq_req_to_router_bind_libzmq);

async fn dealer_to_libzmq_rep(bind: Bind) {
    let dealer = Socket::new(SocketType::Dealer);
    let mut peer = link(&dealer, libzmq("REP").echo(1), bind).await;

    send(&dealer, &["", "hello", "world"]).await;
    assert_frames(&peer.expect_recv().await, &["hello", "world"], "libzmq REP request");
    assert_frames(&recv(&dealer).await, &["", "hello", "world"], "our DEALER reply");
    peer.finish().await;
}
both_binds!(dealer_to_libzmq_rep => dealer_to_libzmq_rep_bind_ours, dealer_to_libzmq_rep_bind_libzmq);

async fn libzmq_dealer_to_rep(bind: Bind) {
    let rep = Socket::new(SocketType::Rep);
    let mut peer = link(&rep, libzmq("DEALER").send(&["", "q"]).recv(1), bind).await;

    assert_frames(&recv(&rep).await, &["q"], "our REP request");
    send(&rep, &["r", "s"]).await;
    assert_frames(&peer.expect_recv().await, &["", "r", "s"], "libzmq DEALER reply");
    peer.finish().await;
}
both_binds!(libzmq_dealer_to_rep => libzmq_dealer_to_rep_bind_ours, libzmq_dealer_to_rep_bind_libzmq);

/// Also: a libzmq ROUTER names our DEALER (no routing id set) with a generated 5-byte id.
async fn dealer_to_libzmq_router(bind: Bind) {
    let dealer = Socket::new(SocketType::Dealer);
    let mut peer = link(&dealer, libzmq("ROUTER").echo(1), bind).await;

    send(&dealer, &["m1", "m2"]).await;
    let got = peer.expect_recv().await;
    assert_eq!(got.len(), 3, "libzmq ROUTER got {}", show(&got));
    assert_generated_routing_id(&got[0], "libzmq ROUTER's id for our DEALER");
    assert_frames(&got[1..], &["m1", "m2"], "libzmq ROUTER body");
    assert_frames(&recv(&dealer).await, &["m1", "m2"], "our DEALER reply");
    peer.finish().await;
}
both_binds!(dealer_to_libzmq_router => dealer_to_libzmq_router_bind_ours, dealer_to_libzmq_router_bind_libzmq);

async fn libzmq_dealer_to_router(bind: Bind) {
    let router = Socket::new(SocketType::Router);
    let mut peer = link(&router, libzmq("DEALER").send(&["m1"]).recv(1), bind).await;

    let got = recv(&router).await;
    assert_eq!(got.len(), 2, "our ROUTER got {}", show(&got));
    assert_generated_routing_id(&got[0], "our ROUTER's id for libzmq DEALER");
    assert_frames(&got[1..], &["m1"], "our ROUTER body");
    send_msg(&router, msg(&[got[0].clone(), Bytes::from_static(b"r1"), Bytes::from_static(b"r2")])).await;
    assert_frames(&peer.expect_recv().await, &["r1", "r2"], "libzmq DEALER reply");
    peer.finish().await;
}
both_binds!(libzmq_dealer_to_router => libzmq_dealer_to_router_bind_ours, libzmq_dealer_to_router_bind_libzmq);

async fn dealer_to_libzmq_dealer(bind: Bind) {
    let dealer = Socket::new(SocketType::Dealer);
    let cfg = libzmq("DEALER").send(&["from-libzmq", "1"]).echo(1);
    let mut peer = link(&dealer, cfg, bind).await;

    assert_frames(&recv(&dealer).await, &["from-libzmq", "1"], "our DEALER got libzmq's message");
    send(&dealer, &["ping", "x"]).await;
    assert_frames(&peer.expect_recv().await, &["ping", "x"], "libzmq DEALER got");
    assert_frames(&recv(&dealer).await, &["ping", "x"], "our DEALER echo");
    peer.finish().await;
}
both_binds!(dealer_to_libzmq_dealer => dealer_to_libzmq_dealer_bind_ours, dealer_to_libzmq_dealer_bind_libzmq);

/// ROUTER to ROUTER: both sides set routing ids; the bind side sends first, to the connecting side's
/// id, retrying while that id is not yet routable (ROUTER_MANDATORY).
async fn router_to_libzmq_router(bind: Bind) {
    let router = Socket::new(SocketType::Router);
    router.set_routing_id("rust-router").unwrap();
    match bind {
        Bind::Libzmq => {
            let cfg = libzmq("ROUTER")
                .routing_id(b"py-router")
                .opt("router_mandatory", true)
                .send_mandatory(&["rust-router", "hello"])
                .recv(1);
            let mut peer = link(&router, cfg, bind).await;
            assert_frames(&recv(&router).await, &["py-router", "hello"], "our ROUTER got");
            send(&router, &["py-router", "back"]).await;
            assert_frames(&peer.expect_recv().await, &["rust-router", "back"], "libzmq ROUTER got");
            peer.finish().await;
        }
        Bind::Ours => {
            router.set_router_mandatory(true);
            let cfg = libzmq("ROUTER").routing_id(b"py-router").recv(1).send(&["rust-router", "back"]);
            let mut peer = link(&router, cfg, bind).await;
            let deadline = Instant::now() + STEP;
            loop {
                match router.send(msg(&["py-router", "hello"])).await {
                    Ok(()) => break,
                    Err(zmtp::Error::HostUnreachable(_)) if Instant::now() < deadline => {
                        // Not connected yet: retry shortly (bounded by the deadline).
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(e) => panic!("our ROUTER never reached libzmq ROUTER \"py-router\": {e}"),
                }
            }
            assert_frames(&peer.expect_recv().await, &["rust-router", "hello"], "libzmq ROUTER got");
            assert_frames(&recv(&router).await, &["py-router", "back"], "our ROUTER got");
            peer.finish().await;
        }
    }
}
both_binds!(router_to_libzmq_router => router_to_libzmq_router_bind_ours, router_to_libzmq_router_bind_libzmq);

// ---------------------------------------------------------------------------------------------
// Routing ids
// ---------------------------------------------------------------------------------------------

async fn libzmq_dealer_routing_id_to_router(bind: Bind) {
    let router = Socket::new(SocketType::Router);
    let cfg = libzmq("DEALER").routing_id(b"dealer-7").send(&["hello"]).recv(1);
    let mut peer = link(&router, cfg, bind).await;

    assert_frames(&recv(&router).await, &["dealer-7", "hello"], "our ROUTER got");
    assert!(
        router.peer_routing_ids().contains(&Bytes::from_static(b"dealer-7")),
        "peer_routing_ids() = {:?}",
        router.peer_routing_ids()
    );
    send(&router, &["dealer-7", "hi dealer-7"]).await;
    assert_frames(&peer.expect_recv().await, &["hi dealer-7"], "libzmq DEALER got");
    peer.finish().await;
}
both_binds!(libzmq_dealer_routing_id_to_router =>
    libzmq_dealer_routing_id_to_router_bind_ours, libzmq_dealer_routing_id_to_router_bind_libzmq);

async fn dealer_routing_id_to_libzmq_router(bind: Bind) {
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_routing_id("rust-dealer-3").unwrap();
    let mut peer = link(&dealer, libzmq("ROUTER").echo(1), bind).await;

    send(&dealer, &["hello"]).await;
    assert_frames(&peer.expect_recv().await, &["rust-dealer-3", "hello"], "libzmq ROUTER got");
    assert_frames(&recv(&dealer).await, &["hello"], "our DEALER reply");
    peer.finish().await;
}
both_binds!(dealer_routing_id_to_libzmq_router =>
    dealer_routing_id_to_libzmq_router_bind_ours, dealer_routing_id_to_libzmq_router_bind_libzmq);

// ---------------------------------------------------------------------------------------------
// PUB / SUB, PUSH / PULL, PAIR
// ---------------------------------------------------------------------------------------------

/// Our PUB, libzmq SUB subscribed to "a" and "b" only.
async fn pub_to_libzmq_sub(bind: Bind) {
    let publisher = Socket::new(SocketType::Pub);
    let cfg = libzmq("SUB").subscribe(&["a", "b"]).ignore(&["a-warm", "b-warm"]).sync(&["a-warm", "b-warm"]).recv(3);
    let mut peer = link(&publisher, cfg, bind).await;

    // Slow joiner: publish warm-ups on both subscribed topics until the subscriber has seen both
    // (then both subscriptions are known to our PUB).
    let deadline = Instant::now() + STEP;
    loop {
        send(&publisher, &["a-warm"]).await;
        send(&publisher, &["b-warm"]).await;
        if let Some(ev) = peer.try_event(Duration::from_millis(5)).await {
            assert_eq!(ev.event(), "synced", "libzmq SUB: unexpected {ev}");
            break;
        }
        assert!(Instant::now() < deadline, "libzmq SUB never received the warm-ups");
    }

    send(&publisher, &["c1"]).await;
    send(&publisher, &["a1", "more"]).await;
    send(&publisher, &["c2", "x"]).await;
    send(&publisher, &["b1"]).await;
    send(&publisher, &["cz"]).await;
    send(&publisher, &["b-last"]).await;
    assert_frames(&peer.expect_recv().await, &["a1", "more"], "libzmq SUB 1st");
    assert_frames(&peer.expect_recv().await, &["b1"], "libzmq SUB 2nd");
    assert_frames(&peer.expect_recv().await, &["b-last"], "libzmq SUB 3rd");
    peer.finish().await;
}
both_binds!(pub_to_libzmq_sub => pub_to_libzmq_sub_bind_ours, pub_to_libzmq_sub_bind_libzmq);

/// libzmq PUB, our SUB subscribed to "a" and "b" only.
async fn libzmq_pub_to_sub(bind: Bind) {
    let sub = Socket::new(SocketType::Sub);
    sub.subscribe("a").unwrap();
    sub.subscribe("b").unwrap();
    let cfg = libzmq("PUB")
        .send_until_stdin(&[&["a-warm"], &["b-warm"]])
        .send(&["c1"])
        .send(&["a1", "more"])
        .send(&["c2", "x"])
        .send(&["b1"])
        .send(&["cz"])
        .send(&["b-last"])
        .wait_stdin();
    let mut peer = link(&sub, cfg, bind).await;

    let (mut seen_a, mut seen_b) = (false, false);
    while !(seen_a && seen_b) {
        let m = recv(&sub).await;
        match &m[0][..] {
            b"a-warm" => seen_a = true,
            b"b-warm" => seen_b = true,
            _ => panic!("our SUB got {} before the warm-up finished", show(&m)),
        }
    }
    peer.send_line("go").await;

    let mut got = Vec::new();
    while got.len() < 3 {
        let m = recv(&sub).await;
        if m.len() == 1 && (m[0] == "a-warm" || m[0] == "b-warm") {
            continue;
        }
        got.push(m);
    }
    assert_frames(&got[0], &["a1", "more"], "our SUB 1st");
    assert_frames(&got[1], &["b1"], "our SUB 2nd");
    assert_frames(&got[2], &["b-last"], "our SUB 3rd");
    peer.send_line("end").await;
    peer.finish().await;
}
both_binds!(libzmq_pub_to_sub => libzmq_pub_to_sub_bind_ours, libzmq_pub_to_sub_bind_libzmq);

async fn push_to_libzmq_pull(bind: Bind) {
    let push = Socket::new(SocketType::Push);
    let mut peer = link(&push, libzmq("PULL").recv(3), bind).await;

    send(&push, &["one"]).await;
    send(&push, &["two", "parts"]).await;
    send(&push, &["three"]).await;
    assert_frames(&peer.expect_recv().await, &["one"], "libzmq PULL 1st");
    assert_frames(&peer.expect_recv().await, &["two", "parts"], "libzmq PULL 2nd");
    assert_frames(&peer.expect_recv().await, &["three"], "libzmq PULL 3rd");
    peer.finish().await;
}
both_binds!(push_to_libzmq_pull => push_to_libzmq_pull_bind_ours, push_to_libzmq_pull_bind_libzmq);

async fn libzmq_push_to_pull(bind: Bind) {
    let pull = Socket::new(SocketType::Pull);
    let cfg = libzmq("PUSH").send(&["one"]).send(&["two", "parts"]).send(&["three"]);
    let peer = link(&pull, cfg, bind).await;

    assert_frames(&recv(&pull).await, &["one"], "our PULL 1st");
    assert_frames(&recv(&pull).await, &["two", "parts"], "our PULL 2nd");
    assert_frames(&recv(&pull).await, &["three"], "our PULL 3rd");
    peer.finish().await;
}
both_binds!(libzmq_push_to_pull => libzmq_push_to_pull_bind_ours, libzmq_push_to_pull_bind_libzmq);

/// The batch API (issue 20) makes the same wire bytes as single sends: a `send_many` batch of
/// single- and multipart messages, and the coalescing sink, reach libzmq whole and in order.
async fn send_many_to_libzmq_pull(bind: Bind) {
    use futures::SinkExt;
    // Long enough for runs of small messages that send_many encodes itself, with a frame over
    // 1 KiB now and then (it ends a run) and long headers (256 B and more).
    const RUN: usize = 300;
    let run_frames = |i: usize| -> Vec<Vec<u8>> {
        match i % 4 {
            0 => vec![format!("r{i}").into_bytes()],
            1 => vec![format!("r{i}").into_bytes(), Vec::new(), vec![b'v'; 250 + i]],
            2 if i % 50 == 2 => vec![vec![b'L'; 1100 + i]],
            _ => vec![format!("r{i}").into_bytes(), format!("value {i}").into_bytes()],
        }
    };
    let push = Socket::new(SocketType::Push);
    let mut peer = link(&push, libzmq("PULL").recv(5 + RUN as u64), bind).await;

    let mut batch = vec![msg(&["one"]), msg(&["two", "parts"]), msg(&["three"])];
    push.send_many(&mut batch).await.expect("send_many");
    assert!(batch.is_empty(), "a sent batch is emptied");
    let mut sink = push.sink();
    sink.feed(msg(&["four", "", "x"])).await.expect("feed");
    sink.feed(msg(&["five"])).await.expect("feed");
    sink.flush().await.expect("flush");
    let mut run: Vec<Message> = (0..RUN).map(|i| Message::from(run_frames(i))).collect();
    push.send_many(&mut run).await.expect("send_many of a run");
    for (i, expected) in [&["one"][..], &["two", "parts"], &["three"], &["four", "", "x"], &["five"]].iter().enumerate()
    {
        assert_frames(&peer.expect_recv().await, expected, &format!("libzmq PULL message {i}"));
    }
    for i in 0..RUN {
        assert_frames(&peer.expect_recv().await, &run_frames(i), &format!("libzmq PULL run message {i}"));
    }
    peer.finish().await;
}
both_binds!(send_many_to_libzmq_pull => send_many_to_libzmq_pull_bind_ours, send_many_to_libzmq_pull_bind_libzmq);

/// Direct writes (a sender writes a small message itself while its connection's writer is idle)
/// reach libzmq frame for frame, including those the socket buffer took only in part: libzmq's
/// PULL (a queue of 10) reads nothing until 800 messages of up to 16 KB are on their way, so
/// the buffers fill, a direct write goes out in part and the writer sends the rest.
async fn direct_writes_to_a_slow_libzmq_pull(bind: Bind) {
    // Kept small enough that an armv7 build under qemu parses libzmq's report in time.
    const N: usize = 800;
    let size = |i: usize| 1 + (i * 997) % 16_000;
    let push = Socket::new(SocketType::Push);
    let mut peer = link(&push, libzmq("PULL").opt("rcvhwm", 10u64).wait_stdin().recv(N as u64), bind).await;
    let (ahead, go) = tokio::sync::oneshot::channel();
    let sender = tokio::spawn(async move {
        let mut ahead = Some(ahead);
        for i in 0..N {
            let frames = vec![Bytes::from(format!("{i}")), gen_frame(size(i))];
            timeout(STEP, push.send(Message::from(frames))).await.expect("send in time").expect("send");
            if i == N / 2 {
                // Megabytes on their way and libzmq reading none: the buffers are full by now.
                let _ = ahead.take().expect("once").send(());
            }
            tokio::task::yield_now().await;
        }
        push
    });
    go.await.expect("the sender got half way");
    peer.send_line("go").await;
    for i in 0..N {
        let frames = peer.expect_recv().await;
        assert_eq!(frames.len(), 2, "message {i}");
        assert_eq!(frames[0], format!("{i}").as_bytes(), "in order");
        assert!(frames[1] == gen_frame(size(i)), "message {i} whole");
    }
    let _push = timeout(STEP, sender).await.expect("all sent").unwrap();
    peer.finish().await;
}
both_binds!(direct_writes_to_a_slow_libzmq_pull => direct_writes_to_a_slow_libzmq_pull_bind_ours, direct_writes_to_a_slow_libzmq_pull_bind_libzmq);

/// `recv_many` takes libzmq's messages whole and in order, however the reads split them.
async fn libzmq_push_to_recv_many(bind: Bind) {
    let pull = Socket::new(SocketType::Pull);
    let mut cfg = libzmq("PUSH");
    for i in 0..50 {
        cfg = cfg.send(&[format!("m{i}"), "tail".to_owned()]);
    }
    let peer = link(&pull, cfg, bind).await;

    let mut got = Vec::new();
    while got.len() < 50 {
        let before = got.len();
        let taken = timeout(STEP, pull.recv_many(&mut got, 16)).await.expect("recv_many in time").expect("recv_many");
        assert_eq!(taken, got.len() - before);
        assert!((1..=16).contains(&taken), "took {taken}, max 16");
    }
    for (i, m) in got.iter().enumerate() {
        let frames: Vec<Bytes> = m.iter().cloned().collect();
        assert_frames(&frames, &[format!("m{i}"), "tail".to_owned()], "our PULL via recv_many");
    }
    peer.finish().await;
}
both_binds!(libzmq_push_to_recv_many => libzmq_push_to_recv_many_bind_ours, libzmq_push_to_recv_many_bind_libzmq);

/// A libzmq DEALER receives an `EncodedBatch` from our ROUTER as the messages it holds: frame for
/// frame, empty and long frames included, in order, after and before plain sends.
async fn send_encoded_to_libzmq_dealer(bind: Bind) {
    let router = Socket::new(SocketType::Router);
    let mut peer = link(&router, libzmq("DEALER").routing_id(b"reader").send(&["hi"]).recv(5), bind).await;
    assert_frames(&recv(&router).await, &["reader", "hi"], "our ROUTER got the hello");

    let long = "L".repeat(300);
    send(&router, &["reader", "before"]).await;
    let mut batch = zmtp::EncodedBatch::new();
    batch.push(&[b"key", b"", b"value"]).unwrap();
    batch.push(&[long.as_bytes()]).unwrap();
    batch.push_message(&msg(&["", "x", ""])).unwrap();
    timeout(STEP, router.send_encoded(b"reader", &mut batch)).await.expect("in time").expect("send_encoded");
    assert!(batch.is_empty(), "a sent batch is emptied");
    send(&router, &["reader", "after"]).await;
    for (i, expected) in
        [&["before"][..], &["key", "", "value"], &[long.as_str()], &["", "x", ""], &["after"]].iter().enumerate()
    {
        assert_frames(&peer.expect_recv().await, expected, &format!("libzmq DEALER message {i}"));
    }
    peer.finish().await;
}
both_binds!(send_encoded_to_libzmq_dealer => send_encoded_to_libzmq_dealer_bind_ours, send_encoded_to_libzmq_dealer_bind_libzmq);

async fn pair_to_libzmq_pair(bind: Bind) {
    let pair = Socket::new(SocketType::Pair);
    let cfg = libzmq("PAIR").echo(1).send(&["p2", "x"]);
    let mut peer = link(&pair, cfg, bind).await;

    send(&pair, &["p1"]).await;
    assert_frames(&peer.expect_recv().await, &["p1"], "libzmq PAIR got");
    assert_frames(&recv(&pair).await, &["p1"], "our PAIR echo");
    assert_frames(&recv(&pair).await, &["p2", "x"], "our PAIR got");
    peer.finish().await;
}
both_binds!(pair_to_libzmq_pair => pair_to_libzmq_pair_bind_ours, pair_to_libzmq_pair_bind_libzmq);

// ---------------------------------------------------------------------------------------------
// Frame shapes: multipart, empty frames, long frames, 1 MiB
// ---------------------------------------------------------------------------------------------

fn multipart_messages() -> Vec<Vec<Bytes>> {
    vec![
        bytes_vec(&["a", "b", "c"]),
        bytes_vec(&["a", "", "c"]),
        bytes_vec(&["a", "b", ""]),
        bytes_vec(&[""]),
        bytes_vec(&["", "", ""]),
        bytes_vec(&["1", "2", "3", "4", "5", "6", "7"]),
    ]
}

fn large_messages() -> Vec<Vec<Bytes>> {
    vec![
        vec![gen_frame(300)],
        vec![Bytes::from_static(b"hdr"), gen_frame(300), Bytes::new()],
        vec![gen_frame(255)],
        vec![gen_frame(256)],
        vec![gen_frame(MIB)],
        vec![Bytes::from_static(b"big"), gen_frame(MIB), gen_frame(1)],
    ]
}

/// The frames as peer.py send specs (generated frames for the large ones, to keep argv small).
fn specs(frames: &[Bytes]) -> Vec<Json> {
    frames
        .iter()
        .map(|f| {
            if f.len() > 64 {
                assert_eq!(f, &gen_frame(f.len()), "large frames must be gen_frame()s");
                gen_spec(f.len())
            } else {
                lit(f)
            }
        })
        .collect()
}

/// Our DEALER sends each message; the libzmq DEALER reports it and echoes it back.
async fn frames_ours_to_libzmq(bind: Bind, messages: Vec<Vec<Bytes>>) {
    let dealer = Socket::new(SocketType::Dealer);
    let mut peer = link(&dealer, libzmq("DEALER").echo(messages.len() as u64), bind).await;
    for (i, m) in messages.iter().enumerate() {
        send_msg(&dealer, msg(m)).await;
        assert_frames(&peer.expect_recv().await, m, &format!("libzmq DEALER got message {i}"));
        assert_frames(&recv(&dealer).await, m, &format!("our DEALER got echo {i}"));
    }
    peer.finish().await;
}

/// The libzmq DEALER sends each message to our DEALER.
async fn frames_libzmq_to_ours(bind: Bind, messages: Vec<Vec<Bytes>>) {
    let dealer = Socket::new(SocketType::Dealer);
    let mut cfg = libzmq("DEALER");
    for m in &messages {
        cfg = cfg.send_specs(specs(m));
    }
    let peer = link(&dealer, cfg, bind).await;
    for (i, m) in messages.iter().enumerate() {
        assert_frames(&recv(&dealer).await, m, &format!("our DEALER got message {i}"));
    }
    peer.finish().await;
}

async fn multipart_empty_frames_ours_to_libzmq(bind: Bind) {
    frames_ours_to_libzmq(bind, multipart_messages()).await
}
both_binds!(multipart_empty_frames_ours_to_libzmq =>
    multipart_empty_frames_ours_to_libzmq_bind_ours, multipart_empty_frames_ours_to_libzmq_bind_libzmq);

async fn multipart_empty_frames_libzmq_to_ours(bind: Bind) {
    frames_libzmq_to_ours(bind, multipart_messages()).await
}
both_binds!(multipart_empty_frames_libzmq_to_ours =>
    multipart_empty_frames_libzmq_to_ours_bind_ours, multipart_empty_frames_libzmq_to_ours_bind_libzmq);

async fn long_frames_ours_to_libzmq(bind: Bind) {
    frames_ours_to_libzmq(bind, large_messages()).await
}
both_binds!(long_frames_ours_to_libzmq =>
    long_frames_ours_to_libzmq_bind_ours, long_frames_ours_to_libzmq_bind_libzmq);

async fn long_frames_libzmq_to_ours(bind: Bind) {
    frames_libzmq_to_ours(bind, large_messages()).await
}
both_binds!(long_frames_libzmq_to_ours =>
    long_frames_libzmq_to_ours_bind_ours, long_frames_libzmq_to_ours_bind_libzmq);

// ---------------------------------------------------------------------------------------------
// Heartbeats
// ---------------------------------------------------------------------------------------------

/// Idle time during which the connection must stay up.
const IDLE_WINDOW: Duration = Duration::from_millis(1500);

/// libzmq PINGs every 100 ms and drops the link if nothing comes back within 500 ms: our side
/// must answer with PONGs for the connection to survive the idle window.
async fn libzmq_heartbeat_to_dealer(bind: Bind) {
    let dealer = Socket::new(SocketType::Dealer);
    let mut mon = dealer.monitor();
    let cfg = libzmq("DEALER").opt("heartbeat_ivl", 100u64).opt("heartbeat_timeout", 500u64).echo(2);
    let mut peer = link(&dealer, cfg, bind).await;
    wait_handshake(&mut mon).await;

    send(&dealer, &["before"]).await;
    assert_frames(&peer.expect_recv().await, &["before"], "libzmq got");
    assert_frames(&recv(&dealer).await, &["before"], "our echo");

    assert_no_connection_events(&mut mon, IDLE_WINDOW).await;

    send(&dealer, &["after"]).await;
    assert_frames(&peer.expect_recv().await, &["after"], "libzmq got after idle");
    assert_frames(&recv(&dealer).await, &["after"], "our echo after idle");
    peer.finish().await;
}
both_binds!(libzmq_heartbeat_to_dealer =>
    libzmq_heartbeat_to_dealer_bind_ours, libzmq_heartbeat_to_dealer_bind_libzmq);

/// Our side PINGs every 100 ms (timeout 500 ms): libzmq must accept the PINGs and its PONGs must
/// keep our side from timing out.
async fn dealer_heartbeat_to_libzmq(bind: Bind) {
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_heartbeat_ivl(Duration::from_millis(100));
    dealer.set_heartbeat_timeout(Some(Duration::from_millis(500)));
    let mut mon = dealer.monitor();
    let mut peer = link(&dealer, libzmq("DEALER").echo(2), bind).await;
    wait_handshake(&mut mon).await;

    send(&dealer, &["before"]).await;
    assert_frames(&peer.expect_recv().await, &["before"], "libzmq got");
    assert_frames(&recv(&dealer).await, &["before"], "our echo");

    assert_no_connection_events(&mut mon, IDLE_WINDOW).await;

    send(&dealer, &["after"]).await;
    assert_frames(&peer.expect_recv().await, &["after"], "libzmq got after idle");
    assert_frames(&recv(&dealer).await, &["after"], "our echo after idle");
    peer.finish().await;
}
both_binds!(dealer_heartbeat_to_libzmq =>
    dealer_heartbeat_to_libzmq_bind_ours, dealer_heartbeat_to_libzmq_bind_libzmq);

/// Control for the heartbeat tests: when the libzmq peer goes away, our monitor does report
/// `Disconnected` (so "no event during the idle window" really means the link stayed up).
async fn libzmq_peer_exit_reported_as_disconnected(bind: Bind) {
    let dealer = Socket::new(SocketType::Dealer);
    let mut mon = dealer.monitor();
    let mut peer = link(&dealer, libzmq("DEALER").echo(1), bind).await;
    wait_handshake(&mut mon).await;
    send(&dealer, &["bye"]).await;
    assert_frames(&peer.expect_recv().await, &["bye"], "libzmq got");
    assert_frames(&recv(&dealer).await, &["bye"], "our echo");
    peer.finish().await;

    let deadline = Instant::now() + STEP;
    loop {
        let ev = tokio::time::timeout_at(deadline, mon.next_event())
            .await
            .expect("no Disconnected event within 10 s after the libzmq peer exited")
            .expect("monitor ended");
        if let MonitorEvent::Disconnected { .. } = ev {
            break;
        }
    }
}
both_binds!(libzmq_peer_exit_reported_as_disconnected =>
    libzmq_peer_exit_reported_as_disconnected_bind_ours,
    libzmq_peer_exit_reported_as_disconnected_bind_libzmq);

// ---------------------------------------------------------------------------------------------
// Connect before bind
// ---------------------------------------------------------------------------------------------

/// libzmq connects (and queues two messages) before our ROUTER binds; libzmq reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libzmq_dealer_connects_before_router_binds() {
    bounded(async {
        let endpoint = free_tcp_endpoint();
        let cfg = libzmq("DEALER")
            .routing_id(b"early-bird")
            .connect(&endpoint)
            .send(&["early-1"])
            .send(&["early-2", "x"])
            .mark("queued")
            .recv(1);
        let mut peer = Peer::spawn(&cfg).await;
        let mark = peer.expect("mark").await;
        assert_eq!(mark.str_field("name"), "queued");

        let router = Socket::new(SocketType::Router);
        let bound = router.bind(&endpoint).await.expect("our ROUTER binds");
        assert_eq!(bound, endpoint);
        assert_frames(&recv(&router).await, &["early-bird", "early-1"], "our ROUTER 1st");
        assert_frames(&recv(&router).await, &["early-bird", "early-2", "x"], "our ROUTER 2nd");
        send(&router, &["early-bird", "welcome"]).await;
        assert_frames(&peer.expect_recv().await, &["welcome"], "libzmq DEALER got");
        peer.finish().await;
    })
    .await
}

/// Our DEALER connects (and queues a message) before the libzmq ROUTER binds; ours reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dealer_connects_before_libzmq_router_binds() {
    bounded(async {
        let endpoint = free_tcp_endpoint();
        let dealer = Socket::new(SocketType::Dealer);
        dealer.set_routing_id("early-rust").unwrap();
        dealer.connect(&endpoint).await.expect("our DEALER connects");
        // A connecting socket queues for its endpoint from connect() on: this must not block.
        send(&dealer, &["early-1"]).await;
        send(&dealer, &["early-2", "x"]).await;

        let cfg = libzmq("ROUTER").bind(&endpoint).echo(2);
        let mut peer = Peer::spawn(&cfg).await;
        assert_eq!(peer.endpoint, endpoint);
        assert_frames(&peer.expect_recv().await, &["early-rust", "early-1"], "libzmq ROUTER 1st");
        assert_frames(&peer.expect_recv().await, &["early-rust", "early-2", "x"], "libzmq ROUTER 2nd");
        assert_frames(&recv(&dealer).await, &["early-1"], "our DEALER echo 1");
        assert_frames(&recv(&dealer).await, &["early-2", "x"], "our DEALER echo 2");
        peer.finish().await;
    })
    .await
}
