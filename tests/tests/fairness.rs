//! No loop over zmtp's API starves the runtime it runs on (issue 20): a send or receive that
//! completes at once still takes part in tokio's cooperative budget. (A receive loop cannot starve
//! the runtime for long even without it: it drains at most RCVHWM messages per peer, then waits.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::future::Future;
use std::pin::Pin;

use futures::SinkExt;
use zmtp::{Message, Socket, SocketType};

/// On a current-thread runtime, a PUB publishing in a tight loop (a PUB never waits: without a
/// subscriber every send completes at once) must let a SUB connect, subscribe and receive. Before
/// the fix it received nothing, however long the loop ran.
#[test]
fn a_tight_pub_loop_lets_a_subscriber_connect_on_a_current_thread_runtime() {
    let sent = first_delivery_after(20_000_000, |publisher| Box::pin(async move { publisher.send("tick").await }));
    eprintln!("first delivery after {sent} sends");
}

/// The same through the batch API: `send_many` and the coalescing sink's flush never wait on a
/// PUB either.
#[test]
fn tight_batch_loops_let_a_subscriber_connect_on_a_current_thread_runtime() {
    first_delivery_after(2_000_000, |publisher| {
        Box::pin(async move {
            let mut batch = vec![Message::from("tick"), Message::from("tock")];
            publisher.send_many(&mut batch).await
        })
    });
    first_delivery_after(2_000_000, |publisher| {
        Box::pin(async move {
            let mut sink = publisher.sink();
            sink.feed(Message::from("tick")).await?;
            sink.feed(Message::from("tock")).await?;
            sink.flush().await
        })
    });
}

/// One round of a publishing loop that awaits nothing but zmtp's own calls.
type Round = fn(Socket) -> Pin<Box<dyn Future<Output = zmtp::Result<()>>>>;

/// Runs `round` in a loop on a current-thread runtime while a SUB connects; returns how many
/// rounds passed before its first delivery. The bound is a count, not a time: it only keeps a
/// regression from looping forever (a pass takes a few hundred thousand sends).
fn first_delivery_after(max_rounds: u64, round: Round) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let publisher = Socket::new(SocketType::Pub);
        let endpoint = publisher.bind("tcp://127.0.0.1:*").await.unwrap();
        let received = Arc::new(AtomicUsize::new(0));
        let subscriber = tokio::spawn({
            let received = received.clone();
            async move {
                let sub = Socket::new(SocketType::Sub);
                sub.subscribe("").unwrap();
                sub.connect(&endpoint).await.unwrap();
                while sub.recv().await.is_ok() {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let mut rounds = 0u64;
        while received.load(Ordering::Relaxed) == 0 && rounds < max_rounds {
            round(publisher.clone()).await.unwrap();
            rounds += 1;
        }
        subscriber.abort();
        assert!(received.load(Ordering::Relaxed) > 0, "the subscriber got nothing in {rounds} rounds");
        rounds
    })
}
