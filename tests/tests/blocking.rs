//! `zmtp::blocking` (issue 19): sockets for programs without a tokio runtime. Plain `#[test]`s on plain
//! threads, against libzmq 4.3.5 (pyzmq) both ways and against each other.

use std::time::Duration;

use zmtp::blocking::Socket;
use zmtp::{Error, SocketType};

#[path = "common/sync_peer.rs"]
mod sync_peer;
use sync_peer::{Peer, hex};

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn blocking_req_to_libzmq_rep() {
    let mut peer = Peer::spawn(&["type=REP", "bind=tcp://127.0.0.1:*", "--", "echo:2"]);
    let endpoint = peer.expect("ready");
    let req = Socket::new(SocketType::Req);
    req.connect(&endpoint).unwrap();
    for body in ["one", "two"] {
        req.send(body).unwrap();
        assert_eq!(req.recv_timeout(WAIT).unwrap()[0], body);
        assert_eq!(peer.expect("recv"), format!("- {}", hex(body.as_bytes())));
    }
}

#[test]
fn libzmq_req_to_blocking_rep() {
    let rep = Socket::new(SocketType::Rep);
    let endpoint = rep.bind("tcp://127.0.0.1:*").unwrap();
    let mut peer =
        Peer::spawn(&["type=REQ", &format!("connect={endpoint}"), "--", &format!("send:{}", hex(b"ping")), "recv:1"]);
    peer.expect("ready");
    let request = rep.recv_timeout(WAIT).unwrap();
    assert_eq!(request[0], "ping");
    rep.send("pong").unwrap();
    assert_eq!(peer.expect("recv"), format!("- {}", hex(b"pong")));
}

#[test]
fn timeouts_give_would_block_and_lose_nothing() {
    let pull = Socket::new(SocketType::Pull);
    let endpoint = pull.bind("tcp://127.0.0.1:*").unwrap();
    assert!(matches!(pull.recv_timeout(Duration::from_millis(50)), Err(Error::WouldBlock)));

    // A PUSH with no peer waits (libzmq's rule): the timed send gives up and the message is not sent.
    let push = Socket::new(SocketType::Push);
    assert!(matches!(push.send_timeout("lost", Duration::from_millis(50)), Err(Error::WouldBlock)));
    push.connect(&endpoint).unwrap();
    push.send_timeout("kept", WAIT).unwrap();
    assert_eq!(pull.recv_timeout(WAIT).unwrap()[0], "kept");
    assert!(matches!(pull.recv_timeout(Duration::from_millis(50)), Err(Error::WouldBlock)));
}

#[test]
fn one_socket_shared_by_threads_loses_and_duplicates_nothing() {
    const MESSAGES: u32 = 2000;
    const THREADS: usize = 4;
    let pull = Socket::new(SocketType::Pull);
    let endpoint = pull.bind("tcp://127.0.0.1:*").unwrap();
    let push = Socket::new(SocketType::Push);
    push.connect(&endpoint).unwrap();
    // Each receiver stops at its first empty message (one per thread, after all the data on the
    // one connection), never on a timeout, so a slow machine cannot end one early.
    let receivers: Vec<_> = (0..THREADS)
        .map(|_| {
            let pull = pull.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                loop {
                    let msg = pull.recv_timeout(WAIT).expect("a message or the stop");
                    if msg[0].is_empty() {
                        return got;
                    }
                    got.push(u32::from_be_bytes(msg[0][..].try_into().unwrap()));
                }
            })
        })
        .collect();
    for i in 0..MESSAGES {
        push.send(i.to_be_bytes().to_vec()).unwrap();
    }
    for _ in 0..THREADS {
        push.send(Vec::<u8>::new()).unwrap(); // one empty frame
    }
    let mut all: Vec<u32> = receivers.into_iter().flat_map(|r| r.join().unwrap()).collect();
    all.sort_unstable();
    assert_eq!(all, (0..MESSAGES).collect::<Vec<_>>());
}

#[test]
fn close_lingers_until_queued_messages_are_out() {
    let pull = Socket::new(SocketType::Pull);
    let endpoint = pull.bind("tcp://127.0.0.1:*").unwrap();
    let push = Socket::new(SocketType::Push);
    push.connect(&endpoint).unwrap();
    for i in 0..100u32 {
        push.send(i.to_be_bytes().to_vec()).unwrap();
    }
    push.close(); // LINGER is infinite by default: returns once the 100 are written
    for i in 0..100u32 {
        assert_eq!(pull.recv_timeout(WAIT).unwrap()[0][..], i.to_be_bytes());
    }
}
