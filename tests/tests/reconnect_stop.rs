//! ZMQ_RECONNECT_STOP's three bits, against a libzmq 4.3.5 built with its draft API
//! (`.ci/draft-pyzmq`) as the oracle (CONN_REFUSED over tcp is also a scripted scenario in
//! draft.rs). What the scripted harness cannot see is whether a connect keeps trying, so here the
//! same experiment runs once on libzmq (a python child) and once on zmtp, and what each observed —
//! retried or not, and what `disconnect` answered afterwards — must match, and match what libzmq's
//! source says (stream_engine_base.cpp, tcp_connecter.cpp, ipc_connecter.cpp).
//!
//! Timing: a connect that must stop is watched for 500 ms with a 10 ms reconnect interval; one
//! that must keep trying is waited for (up to the step limit). A loaded machine can only make the
//! first pass more easily, never fail either.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::timeout;
use zmtp::{Error, MonitorEvent, Socket, SocketType};
use zmtp_testkit::{bounded, free_port, python_with_draft_pyzmq, unique};

const STEP: Duration = Duration::from_secs(20);
const WATCH: Duration = Duration::from_millis(500);

/// A TCP listener that accepts and at once closes every connection: a ZMTP handshake cut short.
/// The receiver counts the connections accepted so far.
async fn slammer() -> (String, watch::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let endpoint = format!("tcp://{}", listener.local_addr().expect("address"));
    let (count, accepted) = watch::channel(0);
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            count.send_modify(|n| *n += 1);
            drop(conn);
        }
    });
    (endpoint, accepted)
}

/// Waits for the third accepted connection (a connect that keeps trying), or for the first and
/// then watches for [`WATCH`] (one that must stop); returns the count seen.
async fn accepts_after(accepted: &mut watch::Receiver<usize>, keeps_trying: bool) -> usize {
    let want = if keeps_trying { 3 } else { 1 };
    accepted.wait_for(|n| *n >= want).await.expect("the listener runs");
    if !keeps_trying {
        tokio::time::sleep(WATCH).await;
    }
    *accepted.borrow()
}

/// A libzmq DEALER connecting with RECONNECT_IVL 10 ms and `stop`; it disconnects when told to and
/// prints libzmq's answer.
const LIBZMQ_DEALER: &str = r#"
import errno, sys, zmq
ctx = zmq.Context()
d = ctx.socket(zmq.DEALER)
d.setsockopt(zmq.LINGER, 0)
d.setsockopt(zmq.RECONNECT_IVL, 10)
d.setsockopt(109, int(sys.argv[2]))  # ZMQ_RECONNECT_STOP (draft)
d.connect(sys.argv[1])
print("connecting", flush=True)
sys.stdin.readline()
try:
    d.disconnect(sys.argv[1])
    print("ok", flush=True)
except zmq.ZMQError as e:
    print("err " + ("ENOENT" if e.errno == errno.ENOENT else str(e.errno)), flush=True)
"#;

/// RECONNECT_STOP_HANDSHAKE_FAILED on libzmq: (attempts seen, what `disconnect` answered).
async fn libzmq_handshake_cut(stop: u8) -> (bool, String) {
    let (endpoint, mut accepted) = slammer().await;
    let mut child = tokio::process::Command::from(python_with_draft_pyzmq())
        .args(["-c", LIBZMQ_DEALER, &endpoint, &stop.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next_line().await.expect("read").as_deref(), Some("connecting"));
    let attempts = accepts_after(&mut accepted, stop == 0).await;
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"disconnect\n").await.expect("tell python");
    let answer = lines.next_line().await.expect("read").expect("python answers");
    (attempts > 1, answer)
}

async fn zmtp_handshake_cut(stop: u8) -> (bool, String) {
    let (endpoint, mut accepted) = slammer().await;
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_linger(Some(Duration::ZERO));
    dealer.set_reconnect_ivl(Some(Duration::from_millis(10)));
    dealer.set_reconnect_stop(stop);
    dealer.connect(&endpoint).await.expect("connect");
    let attempts = accepts_after(&mut accepted, stop == 0).await;
    (attempts > 1, disconnect_answer(&dealer, &endpoint).await)
}

async fn disconnect_answer(socket: &Socket, endpoint: &str) -> String {
    match socket.disconnect(endpoint).await {
        Ok(()) => "ok".into(),
        Err(Error::EndpointNotFound(_)) => "err ENOENT".into(),
        Err(e) => format!("err {e}"),
    }
}

/// A handshake cut short is retried without the bit and ends the connect with it; the endpoint
/// stays (`disconnect` succeeds), on libzmq and on zmtp.
#[tokio::test]
async fn handshake_failed_stops_reconnecting_as_libzmq_does() {
    bounded(async {
        for stop in [0, 2] {
            let theirs = timeout(STEP, libzmq_handshake_cut(stop)).await.expect("libzmq run");
            let ours = timeout(STEP, zmtp_handshake_cut(stop)).await.expect("zmtp run");
            assert_eq!(theirs, (stop == 0, "ok".to_owned()), "libzmq, RECONNECT_STOP={stop}");
            assert_eq!(ours, theirs, "RECONNECT_STOP={stop}: zmtp observed otherwise than libzmq");
        }
    })
    .await;
}

/// A libzmq DEALER: connects to a live ROUTER, disconnects from it, connects to `refusing` (nobody
/// listens) and reports whether that connect was retried within the watch, then `disconnect`'s answer.
const LIBZMQ_AFTER_DISCONNECT: &str = r#"
import errno, sys, time, zmq
live, refusing, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = zmq.Context()
r = ctx.socket(zmq.ROUTER)
r.setsockopt(zmq.LINGER, 0)
r.bind(live)
live = r.getsockopt(zmq.LAST_ENDPOINT).decode()
d = ctx.socket(zmq.DEALER)
d.setsockopt(zmq.LINGER, 0)
d.setsockopt(zmq.RECONNECT_IVL, 10)
d.setsockopt(109, stop)  # ZMQ_RECONNECT_STOP (draft)
mon = d.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_CONNECT_RETRIED)
d.connect(live)
while int.from_bytes(mon.recv_multipart()[0][:2], "little") != zmq.EVENT_HANDSHAKE_SUCCEEDED:
    pass
d.disconnect(live)
d.connect(refusing)
retries, deadline = 0, time.time() + (20 if stop == 0 else 0.5)
while time.time() < deadline and retries < 2:
    if mon.poll(10):
        parts = mon.recv_multipart()
        if int.from_bytes(parts[0][:2], "little") == zmq.EVENT_CONNECT_RETRIED and parts[1].decode() == refusing:
            retries += 1
try:
    d.disconnect(refusing)
    answer = "ok"
except zmq.ZMQError as e:
    answer = "err " + ("ENOENT" if e.errno == errno.ENOENT else str(e.errno))
print("retried" if retries else "stopped", answer, flush=True)
"#;

async fn libzmq_after_disconnect(live: &str, refusing: &str, stop: u8) -> String {
    let out = tokio::process::Command::from(python_with_draft_pyzmq())
        .args(["-c", LIBZMQ_AFTER_DISCONNECT, live, refusing, &stop.to_string()])
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .output()
        .await
        .expect("python runs");
    assert!(out.status.success(), "python failed");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

async fn zmtp_after_disconnect(live: &str, refusing: &str, stop: u8) -> String {
    let router = Socket::new(SocketType::Router);
    let live = router.bind(live).await.expect("bind");
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_linger(Some(Duration::ZERO));
    dealer.set_reconnect_ivl(Some(Duration::from_millis(10)));
    dealer.set_reconnect_stop(stop);
    let mut monitor = dealer.monitor();
    dealer.connect(&live).await.expect("connect");
    while !matches!(monitor.next_event().await, Some(MonitorEvent::HandshakeSucceeded { .. })) {}
    dealer.disconnect(&live).await.expect("disconnect the live one");
    dealer.connect(refusing).await.expect("connect");
    let watch = if stop == 0 { STEP } else { WATCH };
    let mut retries = 0;
    let _ = timeout(watch, async {
        while retries < 2 {
            if let Some(MonitorEvent::ConnectRetried { endpoint, .. }) = monitor.next_event().await
                && endpoint == refusing
            {
                retries += 1;
            }
        }
    })
    .await;
    let answer = disconnect_answer(&dealer, refusing).await;
    format!("{} {answer}", if retries > 0 { "retried" } else { "stopped" })
}

/// A stale Unix socket file: connecting to it is refused (ECONNREFUSED, not ENOENT).
fn stale_ipc() -> String {
    let path = std::env::temp_dir().join(format!("{}.ipc", unique("stale")));
    let _ = std::fs::remove_file(&path);
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind a unix socket"));
    format!("ipc://{}", path.display())
}

/// RECONNECT_STOP_AFTER_DISCONNECT: once the socket has disconnected, a refused connect stops —
/// over ipc only, where libzmq checks the bit (its tcp connecter does not), and the endpoint stays.
/// With CONN_REFUSED (bit 1) instead it is the other way round: tcp stops and forgets the endpoint,
/// ipc keeps trying.
#[tokio::test]
async fn after_disconnect_stops_a_refused_ipc_connect_as_libzmq_does() {
    bounded(async {
        for transport in ["ipc", "tcp"] {
            for stop in [0, 1, 4] {
                let (live, refusing) = match transport {
                    "ipc" => (format!("ipc://{}", std::env::temp_dir().join(unique("live")).display()), stale_ipc()),
                    _ => ("tcp://127.0.0.1:*".to_owned(), format!("tcp://127.0.0.1:{}", free_port())),
                };
                let theirs = timeout(STEP * 2, libzmq_after_disconnect(&live, &refusing, stop)).await.expect("libzmq");
                let expected = match (transport, stop) {
                    ("ipc", 4) => "stopped ok",
                    ("tcp", 1) => "stopped err ENOENT",
                    _ => "retried ok",
                };
                assert_eq!(theirs, expected, "libzmq over {transport}, RECONNECT_STOP={stop}");
                let refusing = if transport == "ipc" { stale_ipc() } else { refusing };
                let live = if transport == "ipc" { live.replace("live", "live2") } else { live };
                let ours = timeout(STEP * 2, zmtp_after_disconnect(&live, &refusing, stop)).await.expect("zmtp");
                assert_eq!(ours, theirs, "over {transport}, RECONNECT_STOP={stop}: zmtp observed otherwise");
            }
        }
    })
    .await;
}
