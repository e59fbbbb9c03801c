//! Streams end when what feeds them is gone (issue 13): a closed socket's `stream()` used to yield
//! `Err(Closed)` forever without waiting, so a consumer that skipped errors spun a core and even a
//! `tokio::time::timeout` around it could not fire.

use futures::StreamExt;
use zmtp::{Error, Socket, SocketType};
use zmtp_testkit::step;

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
    let skipped = step("the stream ended", async {
        let mut errors = 0;
        while let Some(item) = messages.next().await {
            if item.is_err() {
                errors += 1;
                assert!(errors < 1000, "the stream keeps yielding errors");
            }
        }
        errors
    })
    .await;
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
    step("the monitor stream ended", async { while monitor.next().await.is_some() {} }).await;
}

/// Issue 19: `stream()` and `sink()` are `Unpin` like `monitor()` (no `pin!`), and anything
/// byte-like sends as one frame: `b"hi"`, `s.as_str()`, a `Vec<u8>`, a `&[u8]`; lists and arrays of
/// frames send as several.
#[tokio::test(flavor = "current_thread")]
async fn streams_are_unpin_and_byte_likes_are_one_frame() {
    use futures::SinkExt;
    fn assert_unpin<T: Unpin>(_: &T) {}

    let pull = Socket::new(SocketType::Pull);
    let ep = pull.bind("tcp://127.0.0.1:*").await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.connect(&ep).await.unwrap();
    let mut messages = pull.stream();
    let mut sink = push.sink();
    assert_unpin(&messages);
    assert_unpin(&sink);

    let owned = String::from("as_str");
    let bytes: Vec<u8> = vec![1, 2, 3];
    push.send(b"literal").await.unwrap();
    push.send(owned.as_str()).await.unwrap();
    push.send(bytes.clone()).await.unwrap();
    push.send(&bytes[..2]).await.unwrap();
    push.send(["two", "frames"]).await.unwrap();
    sink.send(zmtp::Message::from(vec![b"a".to_vec(), b"b".to_vec()])).await.unwrap();
    let expected: [&[&[u8]]; 6] =
        [&[b"literal"], &[b"as_str"], &[&[1, 2, 3]], &[&[1, 2]], &[b"two", b"frames"], &[b"a", b"b"]];
    for frames in expected {
        let msg = messages.next().await.unwrap().unwrap();
        let got: Vec<&[u8]> = msg.iter().map(|f| &f[..]).collect();
        assert_eq!(got, frames);
    }
}
