//! Behaviour 4: the Lazy Pirate client resends after a timeout on a fresh socket, gives up after
//! its retries with a clear error, and ignores replies with the wrong sequence number. The server
//! is a hand-driven ROUTER.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use ppp::{Client, ClientConfig, ClientError};
use tokio::time::Instant;
use zmtp::{Message, Socket, SocketType};

async fn server() -> (Socket, String) {
    let router = Socket::new(SocketType::Router);
    router.set_linger(Some(Duration::ZERO));
    let ep = router.bind("tcp://127.0.0.1:*").await.unwrap();
    (router, ep)
}

fn config(timeout_ms: u64, retries: u32) -> ClientConfig {
    ClientConfig { timeout: ms(timeout_ms), retries }
}

/// A request as the server sees it: `[client id, sequence, "", content…]`.
fn parts(msg: &Message) -> (Bytes, u64, Vec<Bytes>) {
    assert!(msg.len() >= 4, "{msg:?}");
    assert!(msg[2].is_empty(), "{msg:?}");
    let seq = u64::from_be_bytes(msg[1].as_ref().try_into().expect("8-byte sequence"));
    (msg[0].clone(), seq, msg.frames()[3..].to_vec())
}

fn reply(id: &Bytes, seq: u64, body: &'static str) -> Message {
    Message::from(vec![id.clone(), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::new(), Bytes::from(body)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_on_fresh_sockets_then_gives_up_with_a_clear_error() {
    bounded(async {
        let (server, ep) = server().await;
        let mut client = Client::connect(&ep, config(150, 3)).await.unwrap();
        let started = Instant::now();
        let call = tokio::spawn(async move {
            let r = client.request(Message::from(vec!["hello", "world"])).await;
            (client, r)
        });
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(parts(&recv(&server).await));
        }
        let (client, result) = call.await.unwrap();
        let took = started.elapsed();
        let err = result.unwrap_err();
        assert!(matches!(err, ClientError::NoReply { attempts: 3, .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!("no reply from {ep} after 3 attempt(s) of 150 ms each: the server seems to be offline")
        );
        assert!(took >= ms(450) && took <= ms(450 + 2000), "gave up after {took:?}");
        // The same request, same sequence number, each time from a new socket.
        assert!(seen.iter().all(|(_, seq, body)| *seq == 1 && *body == [Bytes::from("hello"), Bytes::from("world")]));
        assert_ne!(seen[0].0, seen[1].0);
        assert_ne!(seen[1].0, seen[2].0);
        assert_ne!(seen[0].0, seen[2].0);
        assert!(recv_within(&server, ms(300)).await.is_none(), "no fourth attempt");
        assert_eq!(client.resends(), 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_is_answered_and_late_replies_never_surface() {
    bounded(async {
        let (server, ep) = server().await;
        let mut client = Client::connect(&ep, config(200, 3)).await.unwrap();
        let call = tokio::spawn(async move {
            let r = client.request("job").await;
            (client, r)
        });
        let (first_id, seq, _) = parts(&recv(&server).await); // ignored: the client times out
        let (second_id, seq2, body) = parts(&recv(&server).await);
        assert_eq!((seq, seq2), (1, 1));
        assert_ne!(first_id, second_id);
        server.send(reply(&second_id, seq2, "answer")).await.unwrap();
        let (mut client, result) = call.await.unwrap();
        assert_eq!(result.unwrap(), Message::single("answer"));
        assert_eq!(body, [Bytes::from("job")]);
        assert_eq!(client.resends(), 1);

        // A late answer to the first attempt goes to a socket that no longer exists.
        server.send(reply(&first_id, seq, "late")).await.unwrap();
        let call = tokio::spawn(async move {
            let r = client.request("next").await;
            (client, r)
        });
        let (id, seq, _) = parts(&recv(&server).await);
        assert_eq!((id.clone(), seq), (second_id, 2), "the next request reuses the good socket");
        server.send(reply(&id, seq, "next-answer")).await.unwrap();
        let (client, result) = call.await.unwrap();
        assert_eq!(result.unwrap(), Message::single("next-answer"));
        assert_eq!(client.stale_replies(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_with_the_wrong_sequence_are_ignored() {
    bounded(async {
        let (server, ep) = server().await;
        let mut client = Client::connect(&ep, config(5000, 1)).await.unwrap();
        let call = tokio::spawn(async move {
            let r = client.request("a").await;
            (client, r)
        });
        let (id, seq, _) = parts(&recv(&server).await);
        server.send(reply(&id, seq + 7, "WRONG")).await.unwrap();
        server.send(reply(&id, seq.wrapping_sub(1), "OLD")).await.unwrap();
        server.send(Message::from(vec![id.clone(), Bytes::from("no delimiter")])).await.unwrap();
        server.send(reply(&id, seq, "RIGHT")).await.unwrap();
        let (client, result) = call.await.unwrap();
        assert_eq!(result.unwrap(), Message::single("RIGHT"));
        assert_eq!(client.stale_replies(), 2);
        assert_eq!(client.resends(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error() {
    bounded(async {
        assert!(matches!(Client::connect("tcp://127.0.0.1:1", config(100, 0)).await, Err(ClientError::Config(_))));
        assert!(matches!(Client::connect("tcp://127.0.0.1:1", config(0, 3)).await, Err(ClientError::Config(_))));
        assert!(matches!(Client::connect("nonsense", config(100, 3)).await, Err(ClientError::Socket(_))));
        let mut client = Client::connect("tcp://127.0.0.1:1", config(100, 1)).await.unwrap();
        assert!(matches!(client.request(Message::new()).await, Err(ClientError::EmptyRequest)));
    })
    .await;
}
