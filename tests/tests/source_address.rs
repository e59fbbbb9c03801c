//! Connecting from a chosen source address or interface (libzmq's `tcp://source;host:port`),
//! witnessed by libzmq 4.3.5 (pyzmq) in both directions: each side reports the `Peer-Address` it
//! sees, which must be the source the connecting side asked for.
//!
//! Linux routes all of 127.0.0.0/8 to the loopback interface, so 127.0.0.2 is a local address a
//! connection can come from while the listener is on 127.0.0.1.
#![cfg(target_os = "linux")]

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use zmtp::{Socket, SocketType};
use zmtp_testkit::{bounded, python_with_pyzmq};

/// A libzmq REP on 127.0.0.1 that answers each request with the Peer-Address it arrived from.
const LIBZMQ_REP: &str = r#"
import zmq, sys
s = zmq.Context().socket(zmq.REP)
s.linger = 0
port = s.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
for _ in range(2):
    frame = s.recv(copy=False)
    s.send_string(frame.get("Peer-Address"))
"#;

/// A libzmq REQ connecting to the endpoint given on stdin, printing the reply.
const LIBZMQ_REQ: &str = r#"
import zmq, sys
endpoint = sys.stdin.readline().strip()
s = zmq.Context().socket(zmq.REQ)
s.linger = 0
s.connect(endpoint)
s.send_string("hi")
print(s.recv_string(), flush=True)
"#;

fn python(script: &str) -> tokio::process::Child {
    Command::from(python_with_pyzmq())
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn python3")
}

#[tokio::test]
async fn our_connection_comes_from_the_source_libzmq_sees() {
    bounded(async {
        let mut rep = python(LIBZMQ_REP);
        let mut lines = BufReader::new(rep.stdout.take().unwrap()).lines();
        let port: u16 = lines.next_line().await.unwrap().expect("libzmq REP port").parse().unwrap();
        for (source, seen) in [("127.0.0.2:0", "127.0.0.2"), ("lo", "127.0.0.1")] {
            let req = Socket::new(SocketType::Req);
            req.connect(&format!("tcp://{source};127.0.0.1:{port}")).await.unwrap();
            req.send("hi").await.unwrap();
            assert_eq!(req.recv().await.unwrap()[0], seen, "from {source}");
        }
    })
    .await;
}

#[tokio::test]
async fn libzmq_connecting_from_a_source_is_seen_from_there() {
    bounded(async {
        let rep = Socket::new(SocketType::Rep);
        let bound = rep.bind("tcp://127.0.0.1:*").await.unwrap();
        let port = bound.rsplit(':').next().unwrap();
        let mut req = python(LIBZMQ_REQ);
        let mut stdin = req.stdin.take().unwrap();
        stdin.write_all(format!("tcp://127.0.0.2:0;127.0.0.1:{port}\n").as_bytes()).await.unwrap();
        let request = rep.recv().await.unwrap();
        assert_eq!(request.property("Peer-Address"), Some("127.0.0.2"));
        rep.send(request.property("Peer-Address").unwrap().to_owned()).await.unwrap();
        let mut lines = BufReader::new(req.stdout.take().unwrap()).lines();
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("127.0.0.2"));
    })
    .await;
}

#[tokio::test]
async fn a_source_address_is_refused_on_bind() {
    let socket = Socket::new(SocketType::Rep);
    let err = socket.bind("tcp://127.0.0.2:0;127.0.0.1:*").await.unwrap_err();
    assert!(err.to_string().contains("only applies to connect"), "{err}");
}
