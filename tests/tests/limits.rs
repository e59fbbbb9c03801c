//! Memory bounded in bytes per peer (issue 14): the byte HWM (`set_sndhwm_bytes`) caps what a
//! socket holds for a peer that stops reading, whatever the message HWM allows. Counts, never a
//! clock: how many 64 KiB messages a socket accepts before it pushes back (or drops).

#[macro_use]
mod common;

use std::time::Duration;

use common::*;
use zmtp::{Error, Message, Socket, SocketType};

const SIZE: usize = 64 * 1024;
/// Without a byte limit (and no message limit) the sender would take all of these: 128 MiB.
const TRIES: usize = 2048;
/// What a stalled peer may hold with a 1 MiB byte HWM: the limit, one message, and whatever the
/// kernel's socket buffers and the receiver's one-message queue took. Far below `TRIES`.
const BOUND: usize = 512;

over_transports!(
    a_sender_holds_at_most_the_byte_hwm_for_a_peer_that_stops_reading,
    a_publisher_drops_beyond_the_byte_hwm
);

async fn a_sender_holds_at_most_the_byte_hwm_for_a_peer_that_stops_reading(transport: &'static str) {
    let push = Socket::new(SocketType::Push);
    push.set_sndhwm(0);
    push.set_sndhwm_bytes(1 << 20);
    let ep = push.bind(&endpoint(transport, "bytes-push")).await.unwrap();
    let pull = Socket::new(SocketType::Pull);
    pull.set_rcvhwm(1);
    pull.connect(&ep).await.unwrap();
    push.send("hello").await.unwrap();
    assert_eq!(tokio::time::timeout(WAIT, pull.recv()).await.unwrap().unwrap()[0], "hello");
    // The puller stops reading. Count what the pusher still accepts.
    let payload = bytes::Bytes::from(vec![7u8; SIZE]);
    let mut accepted = 0;
    while accepted < TRIES {
        match push.try_send(Message::single(payload.clone())) {
            Ok(()) => accepted += 1,
            Err(Error::WouldBlock) => break,
            Err(e) => panic!("{e}"),
        }
        tokio::task::yield_now().await;
    }
    eprintln!("{transport}: accepted {accepted} messages of 64 KiB for a peer that stopped reading");
    assert!(accepted < BOUND, "{transport}: {accepted} messages of 64 KiB held for a peer that reads nothing");
    // Reading again drains it all, in order, nothing lost.
    for i in 0..accepted {
        let msg = tokio::time::timeout(WAIT, pull.recv()).await.unwrap().unwrap();
        assert_eq!(msg[0].len(), SIZE, "message {i}");
    }
}

async fn a_publisher_drops_beyond_the_byte_hwm(transport: &'static str) {
    let publisher = Socket::new(SocketType::Pub);
    publisher.set_sndhwm(0);
    publisher.set_sndhwm_bytes(1 << 20);
    let ep = publisher.bind(&endpoint(transport, "bytes-pub")).await.unwrap();
    let sub = Socket::new(SocketType::Sub);
    sub.set_rcvhwm(1);
    sub.subscribe("").unwrap();
    sub.connect(&ep).await.unwrap();
    // Subscription live: a probe gets through.
    tokio::time::timeout(WAIT, async {
        loop {
            publisher.send("probe").await.unwrap();
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await {
                return;
            }
        }
    })
    .await
    .expect("subscription live");
    while tokio::time::timeout(QUIET, sub.recv()).await.is_ok() {}
    let payload = bytes::Bytes::from(vec![7u8; SIZE]);
    for _ in 0..TRIES {
        publisher.send(Message::single(payload.clone())).await.unwrap();
        tokio::task::yield_now().await;
    }
    let mut received = 0;
    while let Ok(Ok(msg)) = tokio::time::timeout(QUIET, sub.recv()).await {
        if msg[0].len() == SIZE {
            received += 1;
        }
    }
    eprintln!("{transport}: {received} of {TRIES} published messages reached a subscriber that stopped reading");
    assert!(
        received < BOUND,
        "{transport}: {received} of {TRIES} messages were held for a subscriber that read nothing"
    );
}
