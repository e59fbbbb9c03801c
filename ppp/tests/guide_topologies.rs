//! Wire-compatibility with the Guide's Paranoid Pirate programs (issue 13), every topology, with
//! Python peers (real libzmq) as strict as the reference:
//! - `worker.py` takes a request only if it is exactly `[client address, "", body]` (ppworker);
//! - `lpclient_like.py` sends its sequence number as a one-frame body on REQ, a fresh socket per
//!   retry, and counts only a reply equal to it (lpclient);
//! - `ppqueue_like.py` re-admits a worker on any message and forwards frames as they are (ppqueue).
//!
//! Before this fix our queue added a tag frame and our client a sequence frame: every topology with
//! the Guide's worker served 0 requests.

mod common;

use common::*;
use ppp::{Client, ClientConfig, Queue, QueueEvent, Worker};
use zmtp::Message;
use zmtp_testkit::bounded;

const N: usize = 20;

async fn our_queue() -> ppp::QueueHandle {
    Queue { interval: ms(100), ..Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") }.spawn().await.unwrap()
}

/// A Guide-like queue; returns it with its (frontend, backend).
async fn guide_queue() -> (Proc, String, String) {
    let mut q = Proc::python("ppqueue_like.py", &["--interval-ms", "100"]);
    let front = q.wait_for("frontend", |l| l.text.starts_with("frontend: ")).await.text;
    let back = q.wait_for("backend", |l| l.text.starts_with("backend: ")).await.text;
    let (front, back) = (after(&front, "frontend:").unwrap().to_owned(), after(&back, "backend:").unwrap().to_owned());
    (q, front, back)
}

fn strict_worker(backend: &str) -> Proc {
    Proc::python("worker.py", &["--connect", backend, "--interval-ms", "100", "--liveness", "3"])
}

async fn our_worker(backend: &str) -> ppp::WorkerHandle {
    Worker { interval: ms(100), ..Worker::new(backend) }.spawn(|request: Message| async move { request }).await.unwrap()
}

/// `N` one-frame requests through our client; returns how many came back equal.
async fn served_to_our_client(frontend: &str) -> usize {
    let mut client = Client::connect(frontend, ClientConfig { timeout: ms(3000), retries: 3 }).await.unwrap();
    let mut served = 0;
    for i in 1..=N {
        let body = Message::single(i.to_string());
        if client.request(body.clone()).await.ok() == Some(body) {
            served += 1;
        }
    }
    served
}

/// The Guide-like client's summary line.
async fn served_to_guide_client(frontend: &str) -> String {
    let n = N.to_string();
    let mut client = Proc::python(
        "lpclient_like.py",
        &["--connect", frontend, "--requests", &n, "--timeout-ms", "3000", "--retries", "3"],
    );
    client.wait_for("summary", |l| l.text.starts_with("served ")).await.text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_queue_serves_the_strict_worker_and_the_guide_client() {
    bounded(async {
        let mut q = our_queue().await;
        let mut worker = strict_worker(q.backend());
        queue_event(&mut q, "strict worker ready", |e| matches!(e, QueueEvent::WorkerReady { .. })).await;
        assert_eq!(served_to_guide_client(q.frontend()).await, format!("served {N} of {N}"));
        assert_eq!(served_to_our_client(q.frontend()).await, N);
        let malformed = worker.wait_for_within(ms(300), "malformed", |l| l.text == "malformed").await;
        assert!(malformed.is_none(), "the strict worker saw only 3-frame requests: {}", worker.report("-"));
        let requests = worker.seen.iter().filter(|l| l.text == "request").count();
        assert_eq!(requests, 2 * N, "the strict worker served every request");
        worker.kill().await;
        q.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_worker_and_client_work_under_a_guide_like_queue() {
    bounded(async {
        let (mut q, front, back) = guide_queue().await;
        let worker = our_worker(&back).await;
        assert_eq!(served_to_our_client(&front).await, N);
        assert_eq!(served_to_guide_client(&front).await, format!("served {N} of {N}"));
        worker.close().await;
        // And our client with the strict worker behind the Guide-like queue.
        let mut strict = strict_worker(&back);
        strict.wait_for("ready", |l| l.text.starts_with("ready ")).await;
        assert_eq!(served_to_our_client(&front).await, N);
        strict.kill().await;
        q.kill().await;
    })
    .await;
}
