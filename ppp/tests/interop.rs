//! Interop with the real libzmq through pyzmq: our worker with a Paranoid Pirate queue written
//! from the spec in Python (`tests/py/queue.py`), and a Python worker (`tests/py/worker.py`, the
//! Guide's ppworker from the spec) with our queue.
//!
//! Requires `python3` with `pyzmq` (`pip install pyzmq`); without it every test fails saying so
//! (`Proc::python` checks through `zmtp_testkit::python_with_pyzmq`).

mod common;

use common::*;
use ppp::{Client, ClientConfig, Queue, QueueEvent, Worker, WorkerEvent};
use tokio::time::Instant;
use zmtp::Message;
use zmtp_testkit::{STEP, bounded, ipc_endpoint};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn echo(request: Message) -> Message {
    request
}

/// `n` one-frame requests, each echoed: what the Guide's client sends and its worker accepts
/// (exactly `[client address, "", body]`).
async fn exchange(client: &mut Client, n: usize) {
    for i in 0..n {
        let request = Message::single(format!("req-{i}"));
        assert_eq!(client.request(request.clone()).await.unwrap(), request);
    }
}

/// Our worker with the Python queue: READY first, heartbeats both ways, requests echoed, and the
/// worker backs off when the Python queue dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_worker_with_a_pyzmq_queue() {
    bounded(async {
        let mut pyq = Proc::python("queue.py", &["--interval-ms", "50", "--liveness", "3"]);
        let front = pyq.wait_for("frontend", |l| l.text.starts_with("frontend: ")).await.text;
        let back = pyq.wait_for("backend", |l| l.text.starts_with("backend: ")).await.text;
        let (front, back) = (after(&front, "frontend:").unwrap(), after(&back, "backend:").unwrap());

        let mut worker = Worker {
            interval: ms(50),
            liveness: 3,
            reconnect_init: ms(50),
            reconnect_max: ms(400),
            ..Worker::new(back)
        }
        .spawn(echo)
        .await
        .unwrap();
        let WorkerEvent::Ready { identity } =
            worker_event(&mut worker, "ready", |e| matches!(e, WorkerEvent::Ready { .. })).await
        else {
            unreachable!()
        };
        let id = hex(&identity);
        let first = pyq.wait_for("our worker's first message", |l| l.text.ends_with(&id)).await;
        assert_eq!(first.text, format!("ready {id}"), "the first message must be READY");
        for _ in 0..3 {
            pyq.wait_for("our heartbeat", |l| l.text == format!("heartbeat {id}")).await;
            worker_event(&mut worker, "the queue's heartbeat", |e| *e == WorkerEvent::HeartbeatReceived).await;
        }

        let mut client = Client::connect(front, ClientConfig { timeout: ms(5000), retries: 1 }).await.unwrap();
        exchange(&mut client, 20).await;
        assert!(!pyq.seen.iter().any(|l| l.text.starts_with("unregistered") || l.text.starts_with("malformed")));

        pyq.kill().await;
        worker_event(&mut worker, "silence", |e| *e == WorkerEvent::QueueSilent).await;
        let ev = worker_event(&mut worker, "backoff", |e| matches!(e, WorkerEvent::Reconnecting { .. })).await;
        assert_eq!(ev, WorkerEvent::Reconnecting { delay: ms(50) });
        worker.close().await;
    })
    .await;
}

/// The Python worker with our queue: registered on READY, heartbeated by our queue, requests
/// echoed; when our queue goes away it backs off 50, 100, 200, 200 ms, and a new queue on the same
/// endpoints gets it back (READY again) and serves the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyzmq_worker_with_our_queue() {
    bounded(async {
        let (front, back) = (ipc_endpoint("py-front"), ipc_endpoint("py-back"));
        let config = Queue { interval: ms(50), liveness: 3, ..Queue::new(front.clone(), back.clone()) };
        let mut q = config.clone().spawn().await.unwrap();
        let mut pyw = Proc::python(
            "worker.py",
            &["--connect", &back, "--interval-ms", "50", "--liveness", "3", "--init-ms", "50", "--max-ms", "200"],
        );
        let ready = pyw.wait_for("ready", |l| l.text.starts_with("ready ")).await.text;
        let QueueEvent::WorkerReady { worker } =
            queue_event(&mut q, "python worker ready", |e| matches!(e, QueueEvent::WorkerReady { .. })).await
        else {
            unreachable!()
        };
        assert_eq!(ready, format!("ready {}", hex(&worker)));
        for _ in 0..3 {
            pyw.wait_for("our queue's heartbeat", |l| l.text == "heartbeat-in").await;
        }

        let mut client = Client::connect(&front, ClientConfig { timeout: ms(5000), retries: 1 }).await.unwrap();
        exchange(&mut client, 20).await;
        let stats = q.stats();
        assert_eq!((stats.requests, stats.replies, stats.redispatched, stats.replies_dropped), (20, 20, 0, 0));

        q.close().await;
        let mut backoffs = Vec::new();
        while backoffs.len() < 4 {
            let line = pyw.wait_for("reconnect", |l| l.text.starts_with("reconnect ")).await;
            backoffs.push(after(&line.text, "reconnect").unwrap().parse::<u64>().unwrap());
        }
        assert_eq!(backoffs, [50, 100, 200, 200]);

        // zmtp's close() returns before its listeners are gone: retry the bind (bounded).
        let deadline = Instant::now() + STEP;
        let mut q = loop {
            match config.clone().spawn().await {
                Ok(q) => break q,
                Err(e) => assert!(Instant::now() < deadline, "cannot rebind: {e}"),
            }
            tokio::time::sleep(ms(5)).await; // retry period
        };
        queue_event(&mut q, "python worker back", |e| matches!(e, QueueEvent::WorkerReady { .. })).await;
        let mut client = Client::connect(&front, ClientConfig { timeout: ms(5000), retries: 1 }).await.unwrap();
        exchange(&mut client, 5).await;
        pyw.kill().await;
        q.close().await;
    })
    .await;
}
