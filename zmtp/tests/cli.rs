//! The `zmtp` command-line tool, end to end: real processes talking over loopback TCP (and to pyzmq).
//!
//! Every wait is bounded (a child that overstays [`LIMIT`] is killed and the test fails with its
//! output); processes learn each other's ports from the "listening on" line `zmtp` prints on stderr,
//! and publishers repeat until the subscriber has printed, so nothing relies on sleeping.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ZMTP: &str = env!("CARGO_BIN_EXE_zmtp");

/// The most any single wait in these tests may take.
const LIMIT: Duration = Duration::from_secs(20);

/// A running process whose stdout and stderr lines arrive on channels (and are kept for reports).
struct Proc {
    name: String,
    child: Child,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    stderr_log: Arc<Mutex<Vec<String>>>,
}

/// How a process ended.
struct Finished {
    status: ExitStatus,
    stdout: Vec<String>,
    stderr: String,
}

fn lines_of(pipe: impl std::io::Read + Send + 'static, log: Option<Arc<Mutex<Vec<String>>>>) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if let Some(log) = &log {
                log.lock().unwrap().push(line.clone());
            }
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn spawn_program(program: &str, args: &[&str], stdin: Option<&str>) -> Proc {
    let mut child = Command::new(program)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
        // Dropping the pipe closes stdin: end of input.
    }
    let stderr_log = Arc::new(Mutex::new(Vec::new()));
    Proc {
        name: format!("{} {}", program.rsplit('/').next().unwrap(), args.join(" ")),
        stdout: lines_of(child.stdout.take().unwrap(), None),
        stderr: lines_of(child.stderr.take().unwrap(), Some(stderr_log.clone())),
        child,
        stderr_log,
    }
}

/// Starts `zmtp ARGS…` with stdin closed.
fn zmtp(args: &[&str]) -> Proc {
    spawn_program(ZMTP, args, None)
}

/// Starts `zmtp ARGS…` with `input` on stdin.
fn zmtp_with_stdin(args: &[&str], input: &str) -> Proc {
    spawn_program(ZMTP, args, Some(input))
}

/// Runs `zmtp ARGS…` to its end.
fn run(args: &[&str]) -> Finished {
    zmtp(args).finish()
}

impl Proc {
    fn stderr_so_far(&self) -> String {
        self.stderr_log.lock().unwrap().join("\n")
    }

    /// The endpoint from the stderr line "… {what} listening on ENDPOINT".
    fn endpoint(&self, what: &str) -> String {
        let needle = format!("{what} listening on ");
        let deadline = Instant::now() + LIMIT;
        loop {
            match self.stderr.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    if let Some(at) = line.find(&needle) {
                        return line[at + needle.len()..].trim().to_owned();
                    }
                }
                Err(e) => panic!("`{}`: no \"{needle}\" line ({e:?}); stderr:\n{}", self.name, self.stderr_so_far()),
            }
        }
    }

    /// The next line on stdout.
    fn line(&self) -> String {
        self.stdout.recv_timeout(LIMIT).unwrap_or_else(|e| {
            panic!("`{}`: no output line within {LIMIT:?} ({e:?}); stderr:\n{}", self.name, self.stderr_so_far())
        })
    }

    /// Reads stdout until a line equal to `wanted`; returns every line read.
    fn lines_until(&self, wanted: &str) -> Vec<String> {
        let mut seen = Vec::new();
        while seen.last().map(String::as_str) != Some(wanted) {
            seen.push(self.line());
        }
        seen
    }

    /// Waits (bounded) for the process to exit and collects the rest of its output.
    fn finish(mut self) -> Finished {
        let deadline = Instant::now() + LIMIT;
        let mut stdout = Vec::new();
        loop {
            match self.stdout.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => stdout.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "`{}` still running after {LIMIT:?}; stdout so far: {stdout:?}; stderr:\n{}",
                    self.name,
                    self.stderr_so_far()
                ),
            }
        }
        // stdout closed: the process is exiting; its stderr closes with it.
        while self.stderr.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok() {}
        let status = self.child.wait().unwrap();
        Finished { status, stdout, stderr: self.stderr_so_far() }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Only our own child, by handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Finished {
    fn assert_success(&self, what: &str) -> &Self {
        assert!(
            self.status.success(),
            "{what} failed ({}); stdout {:?}; stderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    fn assert_code(&self, code: i32, what: &str) -> &Self {
        assert_eq!(self.status.code(), Some(code), "{what}: stdout {:?}; stderr:\n{}", self.stdout, self.stderr);
        self
    }

    fn assert_stderr_has(&self, text: &str) -> &Self {
        assert!(self.stderr.contains(text), "expected {text:?} on stderr, got:\n{}", self.stderr);
        self
    }
}

#[test]
fn help_explains_the_tool_and_every_subcommand() {
    let top = run(&["--help"]);
    top.assert_success("zmtp --help");
    let text = top.stdout.join("\n");
    for needle in ["netcat for ZeroMQ", "Examples:", "Exit status", "RUST_LOG", "proxy", "xsub", "--subscribe weather"]
    {
        assert!(text.contains(needle), "zmtp --help lacks {needle:?}:\n{text}");
    }
    let bare = run(&[]);
    assert_eq!(bare.status.code(), Some(2), "zmtp without arguments is a usage error");
    assert!(bare.stderr.contains("Usage: zmtp"), "{}", bare.stderr);

    let classic = ["pub", "sub", "req", "rep", "push", "pull", "dealer", "router", "pair", "xpub", "xsub", "proxy"];
    let draft = ["server", "client", "radio", "dish", "scatter", "gather", "peer", "channel", "stream"];
    for t in classic.into_iter().chain(draft) {
        let help = run(&[t, "--help"]);
        help.assert_success(&format!("zmtp {t} --help"));
        let text = help.stdout.join("\n");
        assert!(text.contains("Examples:") && text.contains(&format!("zmtp {t} ")), "zmtp {t} --help:\n{text}");
    }
    let sub = run(&["sub", "--help"]).stdout.join("\n");
    assert!(sub.contains("--subscribe") && sub.contains("--count") && !sub.contains("--repeat"), "{sub}");
    let push = run(&["push", "--help"]).stdout.join("\n");
    assert!(push.contains("--repeat") && !push.contains("--subscribe") && !push.contains("--format"), "{push}");
    let proxy = run(&["proxy", "--help"]).stdout.join("\n");
    assert!(proxy.contains("--capture") && proxy.contains("TYPE:bind:ENDPOINT"), "{proxy}");
}

#[test]
fn push_to_pull_from_arguments_and_stdin() {
    // With the kernel-buffer and TOS options (applied to each connection; tests/tests/options.rs
    // reads them back from the kernel).
    let pull = zmtp(&[
        "pull",
        "--bind",
        "tcp://127.0.0.1:*",
        "--count",
        "5",
        "--timeout",
        "20",
        "--sndbuf",
        "65536",
        "--rcvbuf",
        "131072",
        "--tos",
        "8",
    ]);
    let ep = pull.endpoint("PULL");
    // Each pusher exits once its messages are out; the puller prints them in order.
    run(&["push", "--connect", &ep, "--timeout", "20", "first", "multi|part"]).assert_success("push from arguments");
    assert_eq!([pull.line(), pull.line()], ["first", "multi|part"]);
    zmtp_with_stdin(&["push", "--connect", &ep, "--timeout", "20"], "line one\nline|two\n")
        .finish()
        .assert_success("push from stdin");
    assert_eq!([pull.line(), pull.line()], ["line one", "line|two"]);
    run(&["push", "--connect", &ep, "--timeout", "20", "--hex", "00ff|6869"]).assert_success("push --hex");
    let out = pull.finish();
    out.assert_success("pull --count 5");
    assert_eq!(out.stdout, ["0x00ff|hi"]);
}

#[test]
fn pull_prints_json() {
    let pull = zmtp(&["pull", "--bind", "tcp://127.0.0.1:*", "--count", "1", "--format", "json", "--timeout", "20"]);
    let ep = pull.endpoint("PULL");
    run(&["push", "--connect", &ep, "--timeout", "20", "--hex", "22686922|00ff"]).assert_success("push");
    let out = pull.finish();
    out.assert_success("pull --format json");
    assert_eq!(out.stdout, [r#"["\"hi\"",{"hex":"00ff"}]"#]);
}

#[test]
fn pub_to_sub_with_a_subscription_filter() {
    let publisher = zmtp(&[
        "pub",
        "--bind",
        "tcp://127.0.0.1:*",
        "--repeat",
        "--interval",
        "20",
        "weather|sunny",
        "sports|3-1",
        "weatherman|rain",
    ]);
    let ep = publisher.endpoint("PUB");
    // The publisher repeats, so the subscriber sees the stream once its subscription is in place.
    let sub = run(&["sub", "--connect", &ep, "--subscribe", "weather", "--count", "4", "--timeout", "20"]);
    sub.assert_success("sub --count 4");
    assert_eq!(sub.stdout.len(), 4);
    for line in &sub.stdout {
        assert!(line == "weather|sunny" || line == "weatherman|rain", "filter let {line:?} through");
    }
    assert!(sub.stdout.iter().any(|l| l == "weather|sunny") && sub.stdout.iter().any(|l| l == "weatherman|rain"));
}

#[test]
fn req_against_a_pyzmq_rep() {
    let _ = zmtp_testkit::python_with_pyzmq(); // panics with what to install if pyzmq is missing
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/rep_upper.py");
    let rep = spawn_program("python3", &[script, "2"], None);
    let ep = rep.line();
    assert!(ep.starts_with("tcp://127.0.0.1:"), "pyzmq printed {ep:?}");
    let req = run(&["req", "--connect", &ep, "--timeout", "20", "hello", "multi|part"]);
    req.assert_success("zmtp req");
    assert_eq!(req.stdout, ["HELLO", "MULTI|PART"]);
    rep.finish().assert_success("the pyzmq REP");
}

#[test]
fn req_to_rep_echo_and_scripted_replies() {
    let echo = zmtp(&["rep", "--bind", "tcp://127.0.0.1:*", "--echo", "--count", "2", "--timeout", "20"]);
    let ep = echo.endpoint("REP");
    let req = zmtp_with_stdin(&["req", "--connect", &ep, "--timeout", "20"], "one\ntwo|frames\n").finish();
    req.assert_success("req from stdin");
    assert_eq!(req.stdout, ["one", "two|frames"]);
    let rep = echo.finish();
    rep.assert_success("rep --echo --count 2");
    assert_eq!(rep.stdout, ["one", "two|frames"], "REP prints the requests");

    // Replies from arguments, one per request; REP exits after the last one.
    let scripted = zmtp(&["rep", "--bind", "tcp://127.0.0.1:*", "--timeout", "20", "first", "second"]);
    let ep = scripted.endpoint("REP");
    let req = run(&["req", "--connect", &ep, "--timeout", "20", "a", "b"]);
    req.assert_success("req");
    assert_eq!(req.stdout, ["first", "second"]);
    assert_eq!(scripted.finish().assert_success("rep").stdout, ["a", "b"]);
}

#[test]
fn router_prints_routing_ids_and_sends_by_routing_id() {
    let router =
        zmtp(&["router", "--bind", "tcp://127.0.0.1:*", "--count", "2", "--timeout", "20", "client-7|welcome"]);
    let ep = router.endpoint("ROUTER");
    // The router waits for client-7 before sending it "welcome".
    let dealer =
        run(&["dealer", "--connect", &ep, "--identity", "client-7", "--count", "1", "--timeout", "20", "hello"]);
    dealer.assert_success("dealer --identity client-7 (libzmq's older name for --routing-id)");
    assert_eq!(dealer.stdout, ["welcome"]);
    // An anonymous peer gets a generated 5-byte id (0x00 + 4 bytes), printed as hex.
    run(&["dealer", "--connect", &ep, "--count", "0", "--timeout", "20", "|anon"]).assert_success("anonymous dealer");
    let mut out = router.finish().assert_success("router --count 2").stdout.clone();
    out.sort();
    assert_eq!(out.len(), 2, "{out:?}");
    let anon = &out[0];
    let id =
        anon.strip_prefix("0x00").and_then(|rest| rest.strip_suffix("||anon")).unwrap_or_else(|| panic!("{out:?}"));
    assert!(id.len() == 8 && id.chars().all(|c| c.is_ascii_hexdigit()), "generated id printed as {anon:?}");
    assert_eq!(out[1], "client-7|hello");
}

#[test]
fn proxy_forwards_pub_sub_and_captures_a_copy() {
    let proxy = zmtp(&[
        "proxy",
        "--frontend",
        "xsub:bind:tcp://127.0.0.1:*",
        "--backend",
        "xpub:bind:tcp://127.0.0.1:*",
        "--capture",
        "pub:bind:tcp://127.0.0.1:*",
    ]);
    let frontend = proxy.endpoint("frontend XSUB");
    let backend = proxy.endpoint("backend XPUB");
    let capture = proxy.endpoint("capture PUB");
    let watcher = zmtp(&["sub", "--connect", &capture]);
    let _publisher = zmtp(&["pub", "--connect", &frontend, "--repeat", "--interval", "20", "news|flash", "other|x"]);
    // The subscription travels sub → XPUB → proxy → XSUB → publisher; "other" must never arrive.
    let sub = run(&["sub", "--connect", &backend, "--subscribe", "news", "--count", "2", "--timeout", "20"]);
    sub.assert_success("sub through the proxy");
    assert_eq!(sub.stdout, ["news|flash", "news|flash"]);
    // The capture socket sees the forwarded traffic too (the publisher keeps publishing until then).
    let captured = watcher.lines_until("news|flash");
    assert!(!captured.iter().any(|l| l.starts_with("other")), "only subscribed traffic flows: {captured:?}");
}

#[test]
fn errors_are_readable_with_nonzero_exit_codes() {
    run(&["pull", "--bind", "tcp://localhost"])
        .assert_code(2, "bad endpoint")
        .assert_stderr_has("invalid endpoint \"tcp://localhost\"")
        .assert_stderr_has("tcp://HOST:PORT");
    run(&["push", "--connect", "pgm://127.0.0.1:5555", "x"])
        .assert_code(2, "unknown transport")
        .assert_stderr_has("unsupported transport");
    run(&["push", "--connect", "udp://127.0.0.1:5555", "x"])
        .assert_code(2, "a transport the type cannot use")
        .assert_stderr_has("a DISH's bind and a RADIO's connect");
    run(&["push", "--connect", "tcp://*:5555", "x"]).assert_code(2, "connect to *").assert_stderr_has("only --bind");
    run(&["sub", "--connect", "tcp://127.0.0.1:5555", "hello"])
        .assert_code(2, "send on a SUB")
        .assert_stderr_has("SUB sockets only receive");
    run(&["dealer", "--connect", "tcp://127.0.0.1:5555", "--subscribe", "x"])
        .assert_code(2, "option of another type")
        .assert_stderr_has("--subscribe does not apply to DEALER sockets");
    run(&["push", "--connect", "tcp://127.0.0.1:5555", "--hex", "xyz"])
        .assert_code(2, "bad hex")
        .assert_stderr_has("not valid hex");
    run(&["router", "--bind", "tcp://127.0.0.1:*", "no-routing-id"])
        .assert_code(2, "router message without id")
        .assert_stderr_has("routing id");
    run(&["pull"]).assert_code(2, "no endpoint").assert_stderr_has("--bind ENDPOINT");
    run(&["dgram", "--bind", "tcp://127.0.0.1:*"]).assert_code(2, "unknown socket type");
    run(&["proxy", "--frontend", "xsub:tcp://127.0.0.1:*", "--backend", "xpub:bind:tcp://127.0.0.1:*"])
        .assert_code(2, "proxy spec without bind/connect")
        .assert_stderr_has("bind:");
    run(&[
        "proxy",
        "--frontend",
        "xsub:bind:tcp://127.0.0.1:*",
        "--backend",
        "xpub:bind:tcp://127.0.0.1:*",
        "--capture",
        "sub:bind:tcp://127.0.0.1:*",
    ])
    .assert_code(2, "capture that cannot send")
    .assert_stderr_has("capture socket cannot be SUB");

    let holder = zmtp(&["pull", "--bind", "tcp://127.0.0.1:*"]);
    let taken = holder.endpoint("PULL");
    run(&["pull", "--bind", &taken])
        .assert_code(1, "bind in use")
        .assert_stderr_has(&format!("cannot bind to \"{taken}\": address already in use"));
}

#[test]
fn timeout_fails_with_status_3_when_too_little_arrives() {
    run(&["pull", "--bind", "tcp://127.0.0.1:*", "--count", "1", "--timeout", "0.3"])
        .assert_code(3, "pull --timeout")
        .assert_stderr_has("timed out after 0.3s: received 0 of 1 messages");
    run(&["sub", "--bind", "tcp://127.0.0.1:*", "--timeout", "0.3"])
        .assert_code(3, "sub --timeout")
        .assert_stderr_has("no message arrived");
}

/// Library behaviour the CLI depends on (and works around in run.rs): closing a socket must deliver
/// messages queued for a `connect` whose connection is not up yet, as libzmq's LINGER does.
#[test]
fn library_close_delivers_messages_queued_before_the_connection_is_up() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        zmtp_testkit::bounded(async {
            use zmtp::{Socket, SocketType};
            let pull = Socket::new(SocketType::Pull);
            let ep = pull.bind("tcp://127.0.0.1:*").await.unwrap();
            let push = Socket::new(SocketType::Push);
            push.connect(&ep).await.unwrap();
            push.send("queued before the handshake").await.unwrap();
            push.close().await; // LINGER is infinite by default
            let got = zmtp_testkit::step(
                "the message queued before the connection came up (dropped by close()?)",
                pull.recv(),
            );
            assert_eq!(got.await.unwrap()[0], "queued before the handshake");
        })
        .await;
    });
}

/// `zmtp keygen` output: two labelled 40-character Z85 keys.
fn keygen() -> (String, String) {
    let out = run(&["keygen"]);
    out.assert_success("keygen");
    let field = |label: &str| {
        let line = out
            .stdout
            .iter()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label} in {:?}", out.stdout));
        let key = line[label.len()..].trim().to_owned();
        assert_eq!(key.len(), 40, "{label} {key:?} is not a Z85 key");
        key
    };
    (field("public:"), field("secret:"))
}

#[test]
fn curve_request_reply_and_a_wrong_server_key_is_refused() {
    let (public, secret) = keygen();
    let (client_public, client_secret) = keygen();
    let server = zmtp(&[
        "rep",
        "--bind",
        "tcp://127.0.0.1:*",
        "--curve-server",
        &secret,
        "--curve-allow",
        &client_public,
        "--echo",
        "--count",
        "1",
        "--timeout",
        "20",
    ]);
    let ep = server.endpoint("REP");
    // A client with another server's key never gets through: timeout, exit status 3.
    let (other_public, _) = keygen();
    let refused = run(&["req", "--connect", &ep, "--curve-serverkey", &other_public, "--timeout", "1", "nope"]);
    // It says why, not only that no reply came (the server closes on a HELLO it cannot decrypt).
    refused.assert_code(3, "req with a wrong server key").assert_stderr_has("wrong --curve-serverkey?");
    // A client whose key is not allowed is refused too, and told its handshake failed.
    let stranger = run(&["req", "--connect", &ep, "--curve-serverkey", &public, "--timeout", "1", "nope"]);
    stranger.assert_code(3, "req with a key not on --curve-allow").assert_stderr_has("the handshake with");
    let req = run(&[
        "req",
        "--connect",
        &ep,
        "--curve-serverkey",
        &public,
        "--curve-secretkey",
        &client_secret,
        "--timeout",
        "20",
        "over curve",
    ]);
    req.assert_success("req over CURVE");
    assert_eq!(req.stdout, ["over curve"]);
    let server = server.finish();
    assert_eq!(server.assert_success("rep over CURVE").stdout, ["over curve"]);
    // The wrong-key client retried for a second (every 100 ms); the server named it once, not on
    // every attempt.
    let dropped = server.stderr.lines().filter(|l| l.contains("connection dropped")).count();
    assert!(dropped <= 2, "the server logged {dropped} dropped connections:\n{}", server.stderr);
}

#[test]
fn plain_credentials_are_checked() {
    let server = zmtp(&[
        "pull",
        "--bind",
        "tcp://127.0.0.1:*",
        "--plain-server",
        "admin:secret",
        "--count",
        "1",
        "--timeout",
        "20",
    ]);
    let ep = server.endpoint("PULL");
    let bad = run(&[
        "push",
        "--connect",
        &ep,
        "--plain-username",
        "admin",
        "--plain-password",
        "wrong",
        "--timeout",
        "1",
        "x",
    ]);
    bad.assert_code(3, "a wrong password: nothing delivered before the timeout");
    let good = run(&[
        "push",
        "--connect",
        &ep,
        "--plain-username",
        "admin",
        "--plain-password",
        "secret",
        "--timeout",
        "20",
        "in",
    ]);
    good.assert_success("push with the right password");
    assert_eq!(server.finish().assert_success("pull").stdout, ["in"]);
    let misuse = run(&["push", "--connect", &ep, "--curve-serverkey", "short", "x"]);
    misuse.assert_code(2, "a malformed key is a usage error").assert_stderr_has("Z85");
}

#[test]
fn the_draft_types_from_the_command_line() {
    // SERVER answers each CLIENT's request to its sender; '|' is part of a single-frame message.
    let server = zmtp(&["server", "--bind", "tcp://127.0.0.1:*", "--echo", "--count", "2", "--timeout", "20"]);
    let ep = server.endpoint("SERVER");
    let client = run(&["client", "--connect", &ep, "--timeout", "20", "ping", "a|b"]);
    client.assert_success("client");
    assert_eq!(client.stdout, ["ping", "a|b"]);
    assert_eq!(server.finish().assert_success("server --echo").stdout, ["ping", "a|b"]);

    // RADIO repeats to its group until the DISH, which joined it, has one; other groups never show.
    let dish = zmtp(&["dish", "--bind", "tcp://127.0.0.1:*", "--join", "weather", "--count", "1", "--timeout", "20"]);
    let ep = dish.endpoint("DISH");
    let _radio = zmtp(&["radio", "--connect", &ep, "--group", "weather", "--repeat", "--interval", "20", "sunny"]);
    let _other = zmtp(&["radio", "--connect", &ep, "--group", "tv", "--repeat", "--interval", "20", "news"]);
    assert_eq!(dish.finish().assert_success("dish --count 1").stdout, ["weather|sunny"]);

    // SCATTER to GATHER, one message per line of input.
    let gather = zmtp(&["gather", "--bind", "tcp://127.0.0.1:*", "--count", "3", "--timeout", "20"]);
    let ep = gather.endpoint("GATHER");
    zmtp_with_stdin(&["scatter", "--connect", &ep, "--timeout", "20"], "1\n2\n3\n").finish().assert_success("scatter");
    assert_eq!(gather.finish().assert_success("gather").stdout, ["1", "2", "3"]);

    // A PEER sends to the peer of its first --connect.
    let listener = zmtp(&["peer", "--bind", "tcp://127.0.0.1:*", "--count", "1", "--timeout", "20"]);
    let ep = listener.endpoint("PEER");
    run(&["peer", "--connect", &ep, "--count", "0", "--timeout", "20", "hello"]).assert_success("peer");
    assert_eq!(listener.finish().assert_success("peer --count 1").stdout, ["hello"]);

    // CHANNEL: one peer each way.
    let channel = zmtp(&["channel", "--bind", "tcp://127.0.0.1:*", "--count", "1", "--timeout", "20"]);
    let ep = channel.endpoint("CHANNEL");
    run(&["channel", "--connect", &ep, "--count", "0", "--timeout", "20", "over"]).assert_success("channel");
    assert_eq!(channel.finish().assert_success("channel --count 1").stdout, ["over"]);

    // RADIO to DISH as UDP datagrams (unicast on loopback).
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let udp = format!("udp://127.0.0.1:{port}");
    let dish = zmtp(&["dish", "--bind", &udp, "--join", "g", "--count", "1", "--timeout", "20"]);
    let _radio = zmtp(&["radio", "--connect", &udp, "--group", "g", "--repeat", "--interval", "20", "datagram"]);
    assert_eq!(dish.finish().assert_success("dish over udp").stdout, ["g|datagram"]);

    // A wrong transport for the type is a usage error.
    run(&["dish", "--connect", "udp://127.0.0.1:5555"]).assert_code(2, "dish connecting over udp");
}

#[test]
fn stream_is_a_raw_tcp_server() {
    use std::io::Read;
    let stream = zmtp(&["stream", "--bind", "tcp://127.0.0.1:*", "--count", "2", "--timeout", "20"]);
    let ep = stream.endpoint("STREAM");
    let mut raw = std::net::TcpStream::connect(ep.trim_start_matches("tcp://")).unwrap();
    raw.write_all(b"hello").unwrap();
    let lines = stream.finish().assert_success("stream --count 2").stdout.clone();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let (id, rest) = lines[0].split_once('|').expect("ID| on connect");
    assert!(id.starts_with("0x00") && rest.is_empty(), "connect notice: {}", lines[0]);
    assert_eq!(lines[1], format!("{id}|hello"));
    let mut end = Vec::new();
    let _ = raw.read_to_end(&mut end);
}
