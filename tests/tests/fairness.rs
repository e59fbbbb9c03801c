//! No loop over zmtp's API starves the runtime it runs on (issue 20): a send or receive that
//! completes at once still takes part in tokio's cooperative budget. (A receive loop cannot starve
//! the runtime for long even without it: it drains at most RCVHWM messages per peer, then waits.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use zmtp::{Socket, SocketType};

/// On a current-thread runtime, a PUB publishing in a tight loop (a PUB never waits: without a
/// subscriber every send completes at once) must let a SUB connect, subscribe and receive. Before
/// the fix it received nothing, however long the loop ran.
#[test]
fn a_tight_pub_loop_lets_a_subscriber_connect_on_a_current_thread_runtime() {
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
        // Nothing is awaited here but our own sends. The bound is a count, not a time: it only
        // keeps a regression from looping forever (a pass takes a few hundred thousand sends).
        let mut sent = 0u64;
        while received.load(Ordering::Relaxed) == 0 && sent < 20_000_000 {
            publisher.send("tick").await.unwrap();
            sent += 1;
        }
        subscriber.abort();
        assert!(received.load(Ordering::Relaxed) > 0, "the subscriber got nothing in {sent} sends");
        eprintln!("first delivery after {sent} sends");
    });
}
