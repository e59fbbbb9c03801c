//! `Socket::flushed` (ROUTER): waits until what was queued for one peer has been written to its
//! connection. A server bounds what it holds across peers with it (chp's snapshot streams keep
//! their slot until then).

use std::time::Duration;

use bytes::Bytes;
use tokio::time::timeout;
use zmtp::{Error, Socket, SocketType};
use zmtp_testkit::{STEP, step};

/// A ROUTER and a DEALER named `d` connected to it, the ROUTER knowing the DEALER's id.
async fn router_and_dealer() -> (Socket, Socket) {
    let router = Socket::new(SocketType::Router);
    router.set_sndhwm(0);
    router.set_sndhwm_bytes(0);
    let endpoint = router.bind("tcp://127.0.0.1:*").await.unwrap();
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_routing_id("d").unwrap();
    dealer.set_rcvhwm(1);
    dealer.connect(&endpoint).await.unwrap();
    dealer.send("hello").await.unwrap();
    step("the ROUTER hears the DEALER", router.recv()).await.unwrap();
    (router, dealer)
}

#[tokio::test]
async fn flushed_waits_for_a_peer_that_reads_and_answers_at_once_for_one_that_has_all() {
    let (router, dealer) = router_and_dealer().await;
    step("nothing queued: flushed", router.flushed(b"d")).await.unwrap();

    // 64 MiB: more than the kernel's buffers hold while the DEALER reads nothing.
    let chunk = Bytes::from(vec![7u8; 1 << 20]);
    for _ in 0..64 {
        router.send(vec![Bytes::from_static(b"d"), chunk.clone()]).await.unwrap();
    }
    assert!(
        timeout(Duration::from_millis(300), router.flushed(b"d")).await.is_err(),
        "the DEALER has read nothing: 64 MiB cannot all be written"
    );
    let reader = tokio::spawn(async move {
        for _ in 0..64 {
            assert_eq!(dealer.recv().await.unwrap()[0].len(), 1 << 20);
        }
        dealer
    });
    step("flushed once the DEALER reads", router.flushed(b"d")).await.unwrap();
    let dealer = step("the DEALER read all", reader).await.unwrap();
    dealer.close().await;
    router.close().await;
}

#[tokio::test]
async fn flushed_fails_for_an_unknown_peer_one_that_leaves_and_other_socket_types() {
    let (router, dealer) = router_and_dealer().await;
    assert!(matches!(router.flushed(b"nobody").await, Err(Error::HostUnreachable(_))));
    let chunk = Bytes::from(vec![7u8; 1 << 20]);
    for _ in 0..64 {
        router.send(vec![Bytes::from_static(b"d"), chunk.clone()]).await.unwrap();
    }
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { router.flushed(b"d").await }
    });
    dealer.close().await;
    let result = timeout(STEP, waiting).await.expect("woken when the peer left").unwrap();
    assert!(matches!(result, Err(Error::HostUnreachable(_))), "{result:?}");

    let pull = Socket::new(SocketType::Pull);
    assert!(matches!(pull.flushed(b"d").await, Err(Error::HostUnreachable(_))));
    router.close().await;
}
