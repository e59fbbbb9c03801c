//! Streams end when what feeds them is gone (issue 13): a closed socket's `stream()` used to yield
//! `Err(Closed)` forever without waiting, so a consumer that skipped errors spun a core and even a
//! `tokio::time::timeout` around it could not fire.

use futures::StreamExt;
use zmtp::{Error, Socket, SocketType};

#[tokio::test(flavor = "current_thread")]
async fn a_closed_sockets_stream_ends_and_an_error_skipping_consumer_terminates() {
    let pull = Socket::new(SocketType::Pull);
    let ep = pull.bind("tcp://127.0.0.1:*").await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.connect(&ep).await.unwrap();
    push.send("one").await.unwrap();
    let mut messages = Box::pin(pull.stream());
    assert_eq!(messages.next().await.unwrap().unwrap()[0], "one");
    pull.clone().close().await;
    // The consumer the issue describes: skip errors, stop at the end. On a current-thread runtime a
    // stream that never waits would starve the timeout, so reaching the assertion is the proof.
    let skipped = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut errors = 0;
        while let Some(item) = messages.next().await {
            if item.is_err() {
                errors += 1;
                assert!(errors < 1000, "the stream keeps yielding errors");
            }
        }
        errors
    })
    .await
    .expect("the stream ended");
    assert_eq!(skipped, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_stream_on_a_socket_that_cannot_receive_says_so_once_and_ends() {
    let publisher = Socket::new(SocketType::Pub);
    let mut messages = Box::pin(publisher.stream());
    assert!(matches!(messages.next().await, Some(Err(Error::NotSupported(SocketType::Pub)))));
    assert!(messages.next().await.is_none());
}

#[tokio::test(flavor = "current_thread")]
async fn monitors_end_when_their_socket_is_closed() {
    let socket = Socket::new(SocketType::Pull);
    let mut monitor = socket.monitor();
    socket.bind("tcp://127.0.0.1:*").await.unwrap();
    socket.close().await;
    let ended =
        tokio::time::timeout(std::time::Duration::from_secs(10), async { while monitor.next().await.is_some() {} })
            .await;
    assert!(ended.is_ok(), "the monitor stream ended");
}
