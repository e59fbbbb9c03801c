//! Socket monitor events: the exact sequence for a successful connect, refused connects retried with
//! RECONNECT_IVL and its doubling backoff, a peer going away (closed socket, killed process), a
//! handshake failing against garbage / an incompatible libzmq peer / a silent peer, and the
//! Listening / Closed events of bind, unbind, disconnect and close.
//!
//! No sleeps are used for synchronisation: every step waits for the event it expects (bounded by
//! [`WAIT`]); fixed windows ([`QUIET`]) only assert that something does *not* happen. The killed
//! peer and the incompatible peer are libzmq sockets in `tests/py/xpub_peer.py` (needs pyzmq).

use std::process::Stdio;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::{Instant, timeout};
use zmtp::wire::{GreetingError, HandshakeError};
use zmtp::{ConnectionError, Monitor, MonitorEvent, Socket, SocketType};

#[macro_use]
mod common;
use common::*;
use zmtp_testkit::bounded;

/// For scenarios that need a refused connect (an unbound inproc name is not refused: it waits).
macro_rules! over_tcp_ipc {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tcp() {
                zmtp_testkit::bounded(super::$scenario("tcp")).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ipc() {
                zmtp_testkit::bounded(super::$scenario("ipc")).await
            }
        }
    )*};
}

/// The next event, whatever it is (panics after WAIT or if the monitor ended).
async fn next(mon: &mut Monitor) -> MonitorEvent {
    timeout(WAIT, mon.next_event())
        .await
        .unwrap_or_else(|_| panic!("no monitor event within {WAIT:?}"))
        .expect("monitor ended")
}

/// Asserts no event arrives within QUIET.
async fn assert_no_event(mon: &mut Monitor, context: &str) {
    if let Ok(e) = timeout(QUIET, mon.next_event()).await {
        panic!("{context}: unexpected monitor event {e:?}");
    }
}

/// Events already queued, without waiting.
fn pending_events(mon: &mut Monitor) -> Vec<MonitorEvent> {
    let mut events = Vec::new();
    while let Some(Some(e)) = mon.next().now_or_never() {
        events.push(e);
    }
    events
}

/// The address part of a tcp endpoint (`127.0.0.1:port`), empty for ipc/inproc (no peer address).
fn tcp_addr(ep: &str) -> String {
    ep.strip_prefix("tcp://").unwrap_or_default().to_owned()
}

/// A raw TCP listener on 127.0.0.1 for garbage/silent servers.
async fn raw_listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("raw listener");
    let ep = format!("tcp://{}", l.local_addr().expect("addr"));
    (l, ep)
}

// ---------------------------------------------------------------------------------------------
// The libzmq driver (tests/py/xpub_peer.py), for a peer process to kill and an incompatible peer
// ---------------------------------------------------------------------------------------------

struct Py {
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    child: Child,
}

impl Py {
    async fn start() -> Py {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/xpub_peer.py");
        let mut child = Command::from(zmtp_testkit::python_with_pyzmq())
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start python3 ({e}): this test needs python3 with pyzmq"));
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Py { stdin, lines, child }
    }

    async fn cmd(&mut self, line: &str) -> String {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.expect("write to the driver");
        self.stdin.flush().await.expect("flush");
        let answer = timeout(WAIT, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("libzmq driver: no answer to {line:?}"))
            .expect("read the driver")
            .unwrap_or_else(|| panic!("libzmq driver exited during {line:?} (python3 with pyzmq needed)"));
        assert!(!answer.starts_with("err"), "libzmq driver: {line:?} failed: {answer}");
        answer
    }
}

// ---------------------------------------------------------------------------------------------
// Successful connect
// ---------------------------------------------------------------------------------------------

/// Binding gives Listening; connecting gives ConnectDelayed → Connected → HandshakeSucceeded on
/// the connecting side and Accepted → HandshakeSucceeded on the bound side, with endpoint and peer
/// address; nothing else (no retry) on a healthy link.
async fn successful_connect_sequence(transport: &'static str) {
    let server = Socket::new(SocketType::Router);
    let mut server_mon = server.monitor();
    let bound = bind(&server, transport, "ok").await;
    match next(&mut server_mon).await {
        MonitorEvent::Listening { endpoint } => assert_eq!(endpoint, bound),
        other => panic!("bind: expected Listening, got {other:?}"),
    }

    let client = Socket::new(SocketType::Dealer);
    client.set_routing_id("client").expect("routing id");
    let mut client_mon = client.monitor();
    connect(&client, &bound).await;
    match next(&mut client_mon).await {
        MonitorEvent::ConnectDelayed { endpoint } => assert_eq!(endpoint, bound),
        other => panic!("expected ConnectDelayed, got {other:?}"),
    }
    let server_addr = tcp_addr(&bound);
    match next(&mut client_mon).await {
        MonitorEvent::Connected { endpoint, peer } => {
            assert_eq!(endpoint, bound);
            assert_eq!(peer, server_addr, "Connected names the peer's address");
        }
        other => panic!("expected Connected, got {other:?}"),
    }
    match next(&mut client_mon).await {
        MonitorEvent::HandshakeSucceeded { endpoint, peer, peer_type, routing_id } => {
            assert_eq!(endpoint, bound);
            assert_eq!(peer, server_addr);
            assert_eq!((peer_type, routing_id), (Some(SocketType::Router), None), "a ROUTER announces no identity");
        }
        other => panic!("expected HandshakeSucceeded, got {other:?}"),
    }

    let accepted_peer = match next(&mut server_mon).await {
        MonitorEvent::Accepted { endpoint, peer } => {
            assert_eq!(endpoint, bound);
            peer
        }
        other => panic!("expected Accepted, got {other:?}"),
    };
    if transport == "tcp" {
        assert!(
            accepted_peer.starts_with("127.0.0.1:") && accepted_peer != server_addr,
            "client address: {accepted_peer}"
        );
    } else {
        assert_eq!(accepted_peer, "", "no peer address over {transport}");
    }
    match next(&mut server_mon).await {
        MonitorEvent::HandshakeSucceeded { endpoint, peer, peer_type, routing_id } => {
            assert_eq!(endpoint, bound);
            assert_eq!(peer, accepted_peer);
            assert_eq!(peer_type, Some(SocketType::Dealer));
            assert_eq!(routing_id.as_deref(), Some(&b"client"[..]), "the ROUTER's route for the peer");
        }
        other => panic!("expected HandshakeSucceeded, got {other:?}"),
    }

    client.send("hello").await.expect("send");
    let m = timeout(WAIT, server.recv()).await.expect("recv in time").expect("recv");
    assert_eq!(&m[1][..], b"hello");
    assert!(pending_events(&mut client_mon).is_empty() && pending_events(&mut server_mon).is_empty());
}

over_transports!(successful_connect_sequence);

/// Every monitor gets every event; a monitor is also a `Stream`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitors_are_independent_streams() {
    bounded(async {
        let s = Socket::new(SocketType::Pull);
        let mut a = s.monitor();
        let mut b = s.monitor();
        let ep = s.bind("tcp://127.0.0.1:*").await.expect("bind");
        for mon in [&mut a, &mut b] {
            let e = timeout(WAIT, mon.next()).await.expect("event in time").expect("stream item");
            assert!(matches!(&e, MonitorEvent::Listening { endpoint } if *endpoint == ep), "{e:?}");
        }
        drop(a);
        let push = Socket::new(SocketType::Push);
        push.connect(&ep).await.expect("connect");
        let e = wait_event(&mut b, "Accepted", |e| matches!(e, MonitorEvent::Accepted { .. })).await;
        assert!(matches!(&e, MonitorEvent::Accepted { endpoint, .. } if *endpoint == ep));
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Refused connects, retries and backoff
// ---------------------------------------------------------------------------------------------

/// The `retry_in` of the next `n` ConnectRetried events, checking each is preceded by a
/// ConnectDelayed for `ep` and that nothing else happens in between.
async fn retries(mon: &mut Monitor, ep: &str, n: usize) -> Vec<Duration> {
    let mut waits = Vec::new();
    for _ in 0..n {
        match next(mon).await {
            MonitorEvent::ConnectDelayed { endpoint } => assert_eq!(endpoint, ep),
            other => panic!("expected ConnectDelayed before each attempt, got {other:?}"),
        }
        match next(mon).await {
            MonitorEvent::ConnectRetried { endpoint, retry_in, reason } => {
                assert_eq!(endpoint, ep);
                assert!(
                    matches!(&*reason, ConnectionError::Io(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound)),
                    "the retry says why: {reason:?}"
                );
                waits.push(retry_in);
            }
            other => panic!("a refused attempt must give ConnectRetried, got {other:?}"),
        }
    }
    waits
}

fn ms(v: &[u64]) -> Vec<Duration> {
    v.iter().map(|&m| Duration::from_millis(m)).collect()
}

/// Refused connects are retried after RECONNECT_IVL, doubling up to RECONNECT_IVL_MAX; the waits
/// really happen; once the peer exists the connection is made; after it is lost, the backoff starts
/// again from RECONNECT_IVL.
async fn refused_connect_is_retried_with_backoff(transport: &'static str) {
    let ep = unbound_endpoint(transport, "refused");
    let client = Socket::new(SocketType::Dealer);
    client.set_reconnect_ivl(Some(Duration::from_millis(50)));
    client.set_reconnect_ivl_max(Duration::from_millis(400));
    let mut mon = client.monitor();
    let started = Instant::now();
    connect(&client, &ep).await;
    let waits = retries(&mut mon, &ep, 5).await;
    assert_eq!(waits, ms(&[50, 100, 200, 400, 400]), "doubling from RECONNECT_IVL, capped at RECONNECT_IVL_MAX");
    match next(&mut mon).await {
        MonitorEvent::ConnectDelayed { .. } => {}
        other => panic!("expected the 6th attempt, got {other:?}"),
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(50 + 100 + 200 + 400 + 400), "attempts came too early: {elapsed:?}");

    // The peer appears: the next attempt succeeds.
    let server = Socket::new(SocketType::Dealer);
    let bound = timeout(WAIT, async {
        loop {
            match server.bind(&ep).await {
                Ok(b) => return b,
                Err(e) => {
                    assert!(transport == "tcp", "bind {ep}: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    })
    .await
    .expect("bind the refused endpoint");
    assert_eq!(bound, ep);
    wait_event(&mut mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;

    // Lost again: the backoff restarts at RECONNECT_IVL.
    server.close().await;
    let e = wait_event(&mut mon, "Disconnected", |e| matches!(e, MonitorEvent::Disconnected { .. })).await;
    assert!(matches!(&e, MonitorEvent::Disconnected { endpoint, .. } if *endpoint == ep));
    match next(&mut mon).await {
        MonitorEvent::ConnectRetried { retry_in, .. } => assert_eq!(retry_in, Duration::from_millis(50)),
        other => panic!("expected ConnectRetried after the loss, got {other:?}"),
    }
    assert_eq!(retries(&mut mon, &ep, 2).await, ms(&[100, 200]));
}

/// Without RECONNECT_IVL_MAX every retry waits RECONNECT_IVL; with RECONNECT_IVL `None` a refused
/// connect is not retried at all.
async fn refused_connect_without_backoff(transport: &'static str) {
    let ep = unbound_endpoint(transport, "refused-flat");
    let client = Socket::new(SocketType::Dealer);
    client.set_reconnect_ivl(Some(Duration::from_millis(30)));
    let mut mon = client.monitor();
    connect(&client, &ep).await;
    assert_eq!(retries(&mut mon, &ep, 4).await, ms(&[30, 30, 30, 30]));

    let once = Socket::new(SocketType::Dealer);
    once.set_reconnect_ivl(None);
    let mut mon = once.monitor();
    connect(&once, &ep).await;
    assert!(matches!(next(&mut mon).await, MonitorEvent::ConnectDelayed { .. }));
    assert_no_event(&mut mon, "RECONNECT_IVL None: no retry").await;
}

over_tcp_ipc!(refused_connect_is_retried_with_backoff, refused_connect_without_backoff);

// ---------------------------------------------------------------------------------------------
// Peer gone
// ---------------------------------------------------------------------------------------------

fn is_peer_gone(e: &ConnectionError) -> bool {
    matches!(e, ConnectionError::PeerClosed) || matches!(e, ConnectionError::Io(_))
}

/// A peer socket closing gives Disconnected (PeerClosed, or an I/O error such as a reset) on both
/// sides' monitors; the connecting side then retries after RECONNECT_IVL.
async fn closed_peer_gives_disconnected(transport: &'static str) {
    let server = Socket::new(SocketType::Router);
    let mut server_mon = server.monitor();
    let ep = bind(&server, transport, "closed").await;
    let client = Socket::new(SocketType::Dealer);
    let mut client_mon = client.monitor();
    connect(&client, &ep).await;
    wait_event(&mut client_mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;
    wait_event(&mut server_mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;

    server.close().await;
    match next(&mut client_mon).await {
        MonitorEvent::Disconnected { endpoint, peer, error, .. } => {
            assert_eq!(endpoint, ep);
            assert_eq!(peer, tcp_addr(&ep));
            assert!(is_peer_gone(&error), "expected PeerClosed/Io, got {error:?}");
        }
        other => panic!("expected Disconnected, got {other:?}"),
    }
    match next(&mut client_mon).await {
        MonitorEvent::ConnectRetried { endpoint, retry_in, reason } => {
            assert_eq!(endpoint, ep);
            assert_eq!(retry_in, Duration::from_millis(100), "default RECONNECT_IVL");
            assert!(is_peer_gone(&reason), "the retry gives the connection's end: {reason:?}");
        }
        other => panic!("expected ConnectRetried, got {other:?}"),
    }

    // And the bound side hears of a connecting peer that closes.
    let server = Socket::new(SocketType::Router);
    let mut server_mon = server.monitor();
    let ep = bind(&server, transport, "closed2").await;
    let client = Socket::new(SocketType::Dealer);
    connect(&client, &ep).await;
    wait_event(&mut server_mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;
    client.close().await;
    let e = wait_event(&mut server_mon, "Disconnected", |e| matches!(e, MonitorEvent::Disconnected { .. })).await;
    let MonitorEvent::Disconnected { endpoint, error, .. } = e else { unreachable!() };
    assert_eq!(endpoint, ep);
    assert!(is_peer_gone(&error), "expected PeerClosed/Io, got {error:?}");
}

over_transports!(closed_peer_gives_disconnected);

/// A libzmq peer process killed with SIGKILL: Disconnected (PeerClosed/Io), then retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_peer_process_gives_disconnected() {
    bounded(async {
        let mut py = Py::start().await;
        py.cmd("new r ROUTER").await;
        let ep = py.cmd("bind r tcp://127.0.0.1:*").await.strip_prefix("ok ").expect("endpoint").to_owned();
        let client = Socket::new(SocketType::Dealer);
        let mut mon = client.monitor();
        connect(&client, &ep).await;
        wait_event(&mut mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;
        client.send("hi").await.expect("send");
        assert!(py.cmd("recv r 5000").await.starts_with("msg "), "libzmq peer got our message");

        py.child.start_kill().expect("kill the libzmq process");
        match next(&mut mon).await {
            MonitorEvent::Disconnected { endpoint, peer, error, .. } => {
                assert_eq!(endpoint, ep);
                assert_eq!(peer, tcp_addr(&ep));
                assert!(is_peer_gone(&error), "expected PeerClosed/Io, got {error:?}");
            }
            other => panic!("expected Disconnected, got {other:?}"),
        }
        assert!(matches!(next(&mut mon).await, MonitorEvent::ConnectRetried { .. }));
        // Nobody listens any more: refused attempts keep being retried.
        let waits = retries(&mut mon, &ep, 2).await;
        assert_eq!(waits, ms(&[100, 100]));
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Handshake failures
// ---------------------------------------------------------------------------------------------

/// Our socket connects to a server that answers with garbage (an HTTP response): HandshakeFailed
/// with the typed greeting error, and no reconnect after a protocol error (libzmq).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_server_gives_handshake_failed_and_no_retry() {
    bounded(async {
        let (listener, ep) = raw_listener().await;
        let client = Socket::new(SocketType::Dealer);
        client.set_reconnect_ivl(Some(Duration::from_millis(20)));
        let mut mon = client.monitor();
        connect(&client, &ep).await;
        let (mut conn, _) = timeout(WAIT, listener.accept()).await.expect("accept in time").expect("accept");
        let mut junk = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_vec();
        junk.resize(64, b' ');
        conn.write_all(&junk).await.expect("write garbage");

        assert!(matches!(next(&mut mon).await, MonitorEvent::ConnectDelayed { .. }));
        assert!(matches!(next(&mut mon).await, MonitorEvent::Connected { .. }));
        match next(&mut mon).await {
            MonitorEvent::HandshakeFailed { endpoint, peer, error } => {
                assert_eq!(endpoint, ep);
                assert_eq!(peer, tcp_addr(&ep));
                assert!(
                    matches!(&*error, ConnectionError::Greeting(GreetingError::BadSignature { first: b'H', .. })),
                    "expected a bad-signature greeting error, got {error:?}"
                );
                assert!(error.is_protocol());
            }
            other => panic!("expected HandshakeFailed, got {other:?}"),
        }
        assert_no_event(&mut mon, "no reconnect after a protocol error").await;
        assert!(timeout(QUIET, listener.accept()).await.is_err(), "no second connection attempt");
    })
    .await
}

/// A garbage client to our bound socket: Accepted then HandshakeFailed, both naming the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_client_gives_handshake_failed() {
    bounded(async {
        let pull = Socket::new(SocketType::Pull);
        let mut mon = pull.monitor();
        let ep = pull.bind("tcp://127.0.0.1:*").await.expect("bind");
        assert!(matches!(next(&mut mon).await, MonitorEvent::Listening { .. }));
        let mut raw = TcpStream::connect(tcp_addr(&ep)).await.expect("raw connect");
        let me = raw.local_addr().expect("addr").to_string();
        raw.write_all(&[0x47; 64]).await.expect("write garbage");
        match next(&mut mon).await {
            MonitorEvent::Accepted { endpoint, peer } => {
                assert_eq!(endpoint, ep);
                assert_eq!(peer, me);
            }
            other => panic!("expected Accepted, got {other:?}"),
        }
        match next(&mut mon).await {
            MonitorEvent::HandshakeFailed { endpoint, peer, error } => {
                assert_eq!(endpoint, ep);
                assert_eq!(peer, me);
                assert!(
                    matches!(&*error, ConnectionError::Greeting(GreetingError::BadSignature { first: 0x47, .. })),
                    "got {error:?}"
                );
            }
            other => panic!("expected HandshakeFailed, got {other:?}"),
        }
        // Our socket drops the connection (EOF or reset, either ends the read).
        let mut rest = Vec::new();
        let _ = timeout(WAIT, raw.read_to_end(&mut rest)).await.expect("our socket closes the connection");
    })
    .await
}

/// A peer that connects and never says anything: HandshakeFailed with HandshakeTimeout after
/// HANDSHAKE_IVL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peer_gives_handshake_timeout() {
    bounded(async {
        let pull = Socket::new(SocketType::Pull);
        pull.set_handshake_ivl(Some(Duration::from_millis(200)));
        let mut mon = pull.monitor();
        let ep = pull.bind("tcp://127.0.0.1:*").await.expect("bind");
        let started = Instant::now();
        let _silent = TcpStream::connect(tcp_addr(&ep)).await.expect("raw connect");
        let e = wait_event(&mut mon, "HandshakeFailed", |e| matches!(e, MonitorEvent::HandshakeFailed { .. })).await;
        let MonitorEvent::HandshakeFailed { error, .. } = e else { unreachable!() };
        assert!(matches!(&*error, ConnectionError::HandshakeTimeout), "got {error:?}");
        assert!(started.elapsed() >= Duration::from_millis(200), "timed out before HANDSHAKE_IVL");
    })
    .await
}

/// A libzmq PUB connecting to our PULL completes the greeting but is the wrong socket type:
/// HandshakeFailed with the typed handshake error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incompatible_libzmq_peer_gives_handshake_failed() {
    bounded(async {
        let pull = Socket::new(SocketType::Pull);
        let mut mon = pull.monitor();
        let ep = pull.bind("tcp://127.0.0.1:*").await.expect("bind");
        let mut py = Py::start().await;
        py.cmd("new p PUB").await;
        py.cmd(&format!("connect p {ep}")).await;
        let e = wait_event(&mut mon, "HandshakeFailed", |e| matches!(e, MonitorEvent::HandshakeFailed { .. })).await;
        let MonitorEvent::HandshakeFailed { endpoint, error, .. } = e else { unreachable!() };
        assert_eq!(endpoint, ep);
        assert!(
            matches!(
                &*error,
                ConnectionError::Handshake(HandshakeError::IncompatibleSocketType {
                    ours: SocketType::Pull,
                    peer: SocketType::Pub
                })
            ),
            "got {error:?}"
        );
        assert!(error.is_protocol());
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Listening / Closed
// ---------------------------------------------------------------------------------------------

/// bind → Listening; unbind → Closed; disconnect → Closed; close → Closed for every remaining
/// endpoint, after which the monitor ends.
async fn listening_and_closed(transport: &'static str) {
    let s = Socket::new(SocketType::Dealer);
    let mut mon = s.monitor();
    let first = bind(&s, transport, "lc1").await;
    assert!(matches!(next(&mut mon).await, MonitorEvent::Listening { endpoint } if endpoint == first));
    s.unbind(&first).await.expect("unbind");
    match next(&mut mon).await {
        MonitorEvent::Closed { endpoint } => assert_eq!(endpoint, first),
        other => panic!("unbind: expected Closed, got {other:?}"),
    }

    let second = bind(&s, transport, "lc2").await;
    assert!(matches!(next(&mut mon).await, MonitorEvent::Listening { endpoint } if endpoint == second));
    let target = unbound_endpoint(transport, "lc-target");
    s.set_reconnect_ivl(None);
    connect(&s, &target).await;
    wait_event(&mut mon, "ConnectDelayed", |e| matches!(e, MonitorEvent::ConnectDelayed { .. })).await;
    s.disconnect(&target).await.expect("disconnect");
    wait_event(&mut mon, "Closed", |e| matches!(e, MonitorEvent::Closed { endpoint } if *endpoint == target)).await;

    let third = unbound_endpoint(transport, "lc-target2");
    connect(&s, &third).await;
    s.close().await;
    let rest: Vec<MonitorEvent> = timeout(WAIT, mon.collect()).await.expect("the monitor ends once the socket is gone");
    let mut closed: Vec<String> = rest
        .iter()
        .filter_map(|e| match e {
            MonitorEvent::Closed { endpoint } => Some(endpoint.clone()),
            _ => None,
        })
        .collect();
    closed.sort();
    let mut want = vec![second.clone(), third.clone()];
    want.sort();
    assert_eq!(closed, want, "close reports every endpoint once; all events: {rest:?}");
    assert!(!rest.iter().any(|e| matches!(e, MonitorEvent::Listening { .. })), "{rest:?}");
}

over_transports!(listening_and_closed);

/// Subscriptions and group joins are events too, and a disconnect names the peer's routing id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_joins_and_the_routing_id_of_a_disconnect() {
    bounded(async {
        let publisher = Socket::new(SocketType::Pub);
        let mut mon = publisher.monitor();
        let ep = publisher.bind("tcp://127.0.0.1:*").await.expect("bind");
        let sub = Socket::new(SocketType::Sub);
        sub.connect(&ep).await.expect("connect");
        sub.subscribe("news").expect("subscribe");
        let e = wait_event(&mut mon, "Subscribed", |e| matches!(e, MonitorEvent::Subscribed { .. })).await;
        assert!(matches!(&e, MonitorEvent::Subscribed { topic, routing_id: None } if *topic == "news"), "{e:?}");
        sub.unsubscribe("news").expect("unsubscribe");
        let e = wait_event(&mut mon, "Unsubscribed", |e| matches!(e, MonitorEvent::Unsubscribed { .. })).await;
        assert!(matches!(&e, MonitorEvent::Unsubscribed { topic, .. } if *topic == "news"), "{e:?}");

        let radio = Socket::new(SocketType::Radio);
        let mut mon = radio.monitor();
        let ep = radio.bind("tcp://127.0.0.1:*").await.expect("bind");
        let dish = Socket::new(SocketType::Dish);
        dish.join("weather").expect("join");
        dish.connect(&ep).await.expect("connect");
        let e = wait_event(&mut mon, "a JOIN", |e| matches!(e, MonitorEvent::Subscribed { .. })).await;
        assert!(matches!(&e, MonitorEvent::Subscribed { topic, .. } if *topic == "weather"), "{e:?}");

        let router = Socket::new(SocketType::Router);
        let mut mon = router.monitor();
        let ep = router.bind("tcp://127.0.0.1:*").await.expect("bind");
        let dealer = Socket::new(SocketType::Dealer);
        dealer.set_routing_id("w7").expect("routing id");
        dealer.connect(&ep).await.expect("connect");
        wait_event(&mut mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;
        dealer.close().await;
        let e = wait_event(&mut mon, "Disconnected", |e| matches!(e, MonitorEvent::Disconnected { .. })).await;
        assert!(matches!(&e, MonitorEvent::Disconnected { routing_id: Some(id), .. } if *id == "w7"), "{e:?}");
    })
    .await
}
