//! STREAM against plain TCP peers that speak no ZeroMQ at all (libzmq's STREAM is witnessed in
//! draft.rs): connection notices, bytes both ways, closing from either side.

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zmtp::{Error, Message, Socket, SocketType};
use zmtp_testkit::{bounded, step};

async fn accept_raw(stream: &Socket, endpoint: &str) -> (TcpStream, Bytes) {
    let raw = TcpStream::connect(endpoint.trim_start_matches("tcp://")).await.unwrap();
    let hello = step("connect notice", stream.recv()).await.unwrap();
    assert_eq!((hello.len(), hello[1].is_empty()), (2, true), "[id, \"\"] when a connection is made");
    (raw, hello[0].clone())
}

#[tokio::test]
async fn a_plain_tcp_client_talks_to_a_stream_by_routing_id() {
    bounded(async {
        let stream = Socket::new(SocketType::Stream);
        let endpoint = stream.bind("tcp://127.0.0.1:*").await.unwrap();
        let (mut raw, id) = accept_raw(&stream, &endpoint).await;
        raw.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut got = Vec::new();
        while got.len() < 18 {
            let msg = step("bytes", stream.recv()).await.unwrap();
            assert_eq!(msg[0], id);
            got.extend_from_slice(&msg[1]);
        }
        assert_eq!(got, b"GET / HTTP/1.0\r\n\r\n");
        stream
            .send(Message::from_frames([id.clone(), Bytes::from_static(b"HTTP/1.0 200 OK\r\n\r\nhi")]))
            .await
            .unwrap();
        stream.send(Message::from_frames([id.clone(), Bytes::new()])).await.unwrap(); // close it
        let mut reply = Vec::new();
        step("the reply, then EOF", raw.read_to_end(&mut reply)).await.unwrap();
        assert_eq!(reply, b"HTTP/1.0 200 OK\r\n\r\nhi");
        let unknown = Message::from_frames([Bytes::from_static(b"\0nope"), Bytes::from_static(b"x")]);
        assert!(matches!(stream.try_send(unknown), Err(Error::HostUnreachable(_))));
    })
    .await;
}

#[tokio::test]
async fn a_peer_that_hangs_up_is_announced_with_an_empty_message() {
    bounded(async {
        let stream = Socket::new(SocketType::Stream);
        let endpoint = stream.bind("tcp://127.0.0.1:*").await.unwrap();
        let (raw, id) = accept_raw(&stream, &endpoint).await;
        drop(raw);
        let bye = step("disconnect notice", stream.recv()).await.unwrap();
        assert_eq!((bye[0].clone(), bye[1].is_empty()), (id, true));
    })
    .await;
}

#[tokio::test]
async fn stream_has_no_inproc_and_notices_can_be_turned_off() {
    bounded(async {
        let stream = Socket::new(SocketType::Stream);
        assert!(matches!(stream.bind("inproc://raw").await, Err(Error::IncompatibleTransport(..))));
        stream.set_stream_notify(false);
        let endpoint = stream.bind("tcp://127.0.0.1:*").await.unwrap();
        let mut raw = TcpStream::connect(endpoint.trim_start_matches("tcp://")).await.unwrap();
        raw.write_all(b"x").await.unwrap();
        let first = step("data", stream.recv()).await.unwrap();
        assert_eq!(&first[1][..], b"x", "no connect notice first");
    })
    .await;
}
