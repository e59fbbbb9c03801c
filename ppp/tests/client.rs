//! Behaviour 4: the Lazy Pirate client resends after a timeout on a fresh socket, gives up after
//! its retries with a clear error, and sends the body alone, as the Guide's lpclient does on REQ
//! (`["", body…]` on the wire: nothing added for bookkeeping). The server is a hand-driven ROUTER.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use ppp::{Client, ClientConfig, ClientError};
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::bounded;

async fn server() -> (Socket, String) {
    let router = Socket::new(SocketType::Router);
    router.set_linger(Some(Duration::ZERO));
    let ep = router.bind("tcp://127.0.0.1:*").await.unwrap();
    (router, ep)
}

fn config(timeout_ms: u64, retries: u32) -> ClientConfig {
    ClientConfig { timeout: ms(timeout_ms), retries }
}

/// A request as the server sees it, exactly as a REQ client's: `[client id, "", content…]`.
fn parts(msg: &Message) -> (Bytes, Vec<Bytes>) {
    assert!(msg.len() >= 3, "{msg:?}");
    assert!(msg[1].is_empty(), "nothing between the client's id and the delimiter: {msg:?}");
    (msg[0].clone(), msg.frames()[2..].to_vec())
}

fn reply(id: &Bytes, body: &'static str) -> Message {
    Message::from(vec![id.clone(), Bytes::new(), Bytes::from(body)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_on_fresh_sockets_then_gives_up_with_a_clear_error() {
    bounded(async {
        let (server, ep) = server().await;
        let mut client = Client::connect(&ep, config(150, 3)).await.unwrap();
        let call = tokio::spawn(async move {
            let r = client.request(Message::from(vec!["hello", "world"])).await;
            (client, r)
        });
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(parts(&recv(&server).await));
        }
        let (client, result) = call.await.unwrap();
        let err = result.unwrap_err();
        assert!(matches!(err, ClientError::NoReply { attempts: 3, .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!("no reply from {ep} after 3 attempt(s) of 150 ms each: the server seems to be offline")
        );
        // Order, not wall clock: it gave up only after the server saw all three attempts.
        // The same request, each time from a new socket.
        assert!(seen.iter().all(|(_, body)| *body == [Bytes::from("hello"), Bytes::from("world")]));
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
        let (first_id, _) = parts(&recv(&server).await); // ignored: the client times out
        let (second_id, body) = parts(&recv(&server).await);
        assert_ne!(first_id, second_id);
        server.send(reply(&second_id, "answer")).await.unwrap();
        let (mut client, result) = call.await.unwrap();
        assert_eq!(result.unwrap(), Message::single("answer"));
        assert_eq!(body, [Bytes::from("job")]);
        assert_eq!(client.resends(), 1);

        // A late answer to the first attempt goes to a socket that no longer exists.
        server.send(reply(&first_id, "late")).await.unwrap();
        let call = tokio::spawn(async move {
            let r = client.request("next").await;
            (client, r)
        });
        let (id, body) = parts(&recv(&server).await);
        assert_eq!(
            (id.clone(), body),
            (second_id, vec![Bytes::from("next")]),
            "the next request reuses the good socket"
        );
        server.send(reply(&id, "next-answer")).await.unwrap();
        let (client, result) = call.await.unwrap();
        assert_eq!(result.unwrap(), Message::single("next-answer"));
        assert_eq!(client.stale_replies(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_reply_is_ignored_and_the_real_one_taken() {
    bounded(async {
        let (server, ep) = server().await;
        let mut client = Client::connect(&ep, config(5000, 1)).await.unwrap();
        let call = tokio::spawn(async move {
            let r = client.request("a").await;
            (client, r)
        });
        let (id, body) = parts(&recv(&server).await);
        assert_eq!(body, [Bytes::from("a")], "the body alone");
        server.send(Message::from(vec![id.clone(), Bytes::from("no delimiter")])).await.unwrap();
        server.send(reply(&id, "A")).await.unwrap();
        let (client, result) = call.await.unwrap();
        assert_eq!(result.unwrap(), Message::single("A"));
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
