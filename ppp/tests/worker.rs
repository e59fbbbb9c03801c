//! The worker, in-process, against a hand-driven ROUTER posing as the queue: READY first,
//! heartbeats (also while busy), liveness, exponential reconnect backoff with READY each time,
//! conversation restart after a reconnect, malformed input, handler panics.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use ppp::{Worker, WorkerEvent};
use tokio::sync::Notify;
use tokio::time::Instant;
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::{STEP, bounded, ipc_endpoint};

/// A ROUTER bound to `endpoint`. zmtp's `close()` returns before the old listener is gone, so a
/// re-bind of the same endpoint is retried (bounded) while it reports "in use".
async fn fake_queue(endpoint: &str) -> (Socket, String) {
    let deadline = Instant::now() + STEP;
    loop {
        let router = Socket::new(SocketType::Router);
        router.set_linger(Some(Duration::ZERO));
        match router.bind(endpoint).await {
            Ok(bound) => return (router, bound),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(ms(5)).await; // retry period
            }
            Err(e) => panic!("bind fake queue on {endpoint}: {e}"),
        }
    }
}

fn config(endpoint: &str, interval_ms: u64, liveness: u32) -> Worker {
    Worker { interval: ms(interval_ms), liveness, ..Worker::new(endpoint) }
}

async fn echo(request: Message) -> Message {
    request
}

/// `[worker id, frame]` from the fake queue's point of view: returns (id, message without id).
async fn from_worker(router: &Socket) -> (Bytes, Message) {
    let mut msg = recv(router).await;
    let id = msg.pop_front().unwrap();
    (id, msg)
}

/// Next non-heartbeat message from the worker, answering its heartbeats so it stays alive.
async fn next_non_heartbeat(router: &Socket) -> (Bytes, Message) {
    loop {
        let (id, msg) = from_worker(router).await;
        if is_heartbeat(&msg) {
            router.send(Message::from(vec![id, Bytes::from_static(&[0x02])])).await.unwrap();
        } else {
            return (id, msg);
        }
    }
}

fn to(id: &Bytes, frames: &[&'static str]) -> Message {
    let mut msg = Message::single(id.clone());
    for f in frames {
        msg.push(Bytes::from_static(f.as_bytes()));
    }
    msg
}

/// Behaviour 2 (worker side): READY is the first message, then a HEARTBEAT every interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_first_then_heartbeats_every_interval() {
    bounded(async {
        let (router, ep) = fake_queue("tcp://127.0.0.1:*").await;
        let mut w = config(&ep, 50, 100).spawn(echo).await.unwrap();
        let WorkerEvent::Ready { identity } =
            worker_event(&mut w, "ready", |e| matches!(e, WorkerEvent::Ready { .. })).await
        else {
            unreachable!()
        };
        let (id, first) = from_worker(&router).await;
        assert_eq!(id, identity);
        assert!(is_ready(&first), "first message must be READY, got {first:?}");
        let (_, msg) = from_worker(&router).await;
        assert!(is_heartbeat(&msg), "{msg:?}");
        let start = Instant::now();
        for _ in 0..5 {
            let (from, msg) = from_worker(&router).await;
            assert_eq!(from, id);
            assert!(is_heartbeat(&msg), "{msg:?}");
        }
        let took = start.elapsed();
        assert!(took >= ms(100) && took <= ms(300 + 1000), "5 heartbeats took {took:?} at 50 ms");
        w.close().await;
    })
    .await;
}

/// Requests are echoed inside their envelope; the handler runs in its own task so heartbeats go
/// on while it works, and the queue's heartbeats keep the worker from reconnecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_continue_while_the_handler_is_busy() {
    bounded(async {
        let (router, ep) = fake_queue("tcp://127.0.0.1:*").await;
        let gate = Arc::new(Notify::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let (g, c) = (gate.clone(), calls.clone());
        let mut w = config(&ep, 50, 3)
            .spawn(move |request: Message| {
                let (g, c) = (g.clone(), c.clone());
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    g.notified().await;
                    let mut reply = Message::single("done");
                    for f in request {
                        reply.push(f);
                    }
                    reply
                }
            })
            .await
            .unwrap();
        let (id, first) = from_worker(&router).await;
        assert!(is_ready(&first));
        router.send(to(&id, &["tag", "client", "", "work", "more"])).await.unwrap();
        worker_event(&mut w, "request", |e| *e == WorkerEvent::RequestReceived).await;

        // Busy for well over liveness × interval: heartbeats both ways, no reconnect.
        let mut busy_beats = 0;
        while busy_beats < 8 {
            let (from, msg) = from_worker(&router).await;
            assert_eq!(from, id, "the worker reconnected while busy");
            assert!(is_heartbeat(&msg), "unexpected {msg:?} while the handler is blocked");
            router.send(to(&id, &["\u{2}"])).await.unwrap();
            busy_beats += 1;
        }
        worker_event(&mut w, "busy heartbeat", |e| *e == WorkerEvent::HeartbeatSent { busy: true }).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        gate.notify_one();
        let (_, reply) = next_non_heartbeat(&router).await;
        assert_eq!(reply, Message::from(vec!["tag", "client", "", "done", "work", "more"]));
        worker_event(&mut w, "reply sent", |e| *e == WorkerEvent::ReplySent).await;
        w.close().await;
    })
    .await;
}

/// Behaviour 3 (worker side): with the queue gone, the worker gives up after liveness × interval,
/// waits 1, 2, 4 … × INTERVAL_INIT capped at INTERVAL_MAX, and sends READY on every new socket;
/// any message from a queue resets the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_backoff_doubles_up_to_the_max_and_resets_on_contact() {
    bounded(async {
        let ep = ipc_endpoint("backoff"); // nobody listens yet
        let (interval, liveness) = (30, 3);
        let span = ms(interval * liveness as u64);
        let mut w = Worker {
            interval: ms(interval),
            liveness,
            reconnect_init: ms(30),
            reconnect_max: ms(240),
            ..Worker::new(ep.clone())
        }
        .spawn(echo)
        .await
        .unwrap();

        let mut delays = Vec::new();
        let mut readies = 0;
        let mut ready_at = None;
        while delays.len() < 6 {
            match worker_event(&mut w, "reconnect cycle", |_| true).await {
                WorkerEvent::Ready { .. } => {
                    readies += 1;
                    ready_at = Some(Instant::now());
                }
                WorkerEvent::QueueSilent => {
                    let waited = ready_at.take().expect("READY before each silence").elapsed();
                    assert!(waited >= span - ms(10), "gave up after {waited:?}, liveness span {span:?}");
                }
                WorkerEvent::Reconnecting { delay } => delays.push(delay.as_millis() as u64),
                _ => {}
            }
        }
        assert_eq!(delays, [30, 60, 120, 240, 240, 240]);
        assert_eq!(readies, 6, "READY on the first socket and after each of the first 5 backoffs");

        // A queue appears: the next socket's first message is READY; contact resets the backoff.
        let (router, _) = fake_queue(&ep).await;
        let (id, first) = from_worker(&router).await;
        assert!(is_ready(&first), "first message on a new socket must be READY, got {first:?}");
        router.send(to(&id, &["\u{2}"])).await.unwrap();
        worker_event(&mut w, "contact", |e| *e == WorkerEvent::HeartbeatReceived).await;
        // The fake queue now goes silent: the next backoff starts again from INTERVAL_INIT.
        let ev = worker_event(&mut w, "next backoff", |e| matches!(e, WorkerEvent::Reconnecting { .. })).await;
        assert_eq!(ev, WorkerEvent::Reconnecting { delay: ms(30) });
        w.close().await;
    })
    .await;
}

/// When the connection is re-established underneath (a queue restarted within the liveness
/// window), the worker abandons its request and restarts the conversation with READY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnection_restarts_the_conversation_with_ready() {
    bounded(async {
        let ep = ipc_endpoint("restart");
        let (router, _) = fake_queue(&ep).await;
        let completed = Arc::new(AtomicUsize::new(0));
        let done = completed.clone();
        let mut w = config(&ep, 50, 40) // liveness span 2 s: only the reconnect can trigger READY
            .spawn(move |request: Message| {
                let done = done.clone();
                async move {
                    if request[0] == "block" {
                        std::future::pending::<()>().await;
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    request
                }
            })
            .await
            .unwrap();
        let (id, first) = from_worker(&router).await;
        assert!(is_ready(&first));
        router.send(to(&id, &["t1", "c", "", "block"])).await.unwrap();
        worker_event(&mut w, "request", |e| *e == WorkerEvent::RequestReceived).await;

        router.close().await; // the queue "restarts"
        let (router, _) = fake_queue(&ep).await;
        worker_event(&mut w, "restart", |e| matches!(e, WorkerEvent::Restarted { .. })).await;
        let (id2, msg) = next_non_heartbeat(&router).await;
        assert_eq!(id2, id, "same socket, same identity");
        assert!(is_ready(&msg), "expected READY after the reconnect, got {msg:?}");
        router.send(to(&id, &["t2", "c", "", "after"])).await.unwrap();
        let (_, reply) = next_non_heartbeat(&router).await;
        assert_eq!(reply, Message::from(vec!["t2", "c", "", "after"]), "the abandoned request must not be answered");
        assert_eq!(completed.load(Ordering::SeqCst), 1);
        w.close().await;
    })
    .await;
}

/// Malformed messages from the queue are dropped; the worker stays connected and usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_from_the_queue_are_dropped() {
    bounded(async {
        let (router, ep) = fake_queue("tcp://127.0.0.1:*").await;
        let mut w = config(&ep, 100, 20).spawn(echo).await.unwrap();
        let (id, _) = from_worker(&router).await;
        router.send(to(&id, &["\u{9}"])).await.unwrap();
        let ev = worker_event(&mut w, "unknown command", |e| matches!(e, WorkerEvent::Malformed(_))).await;
        assert_eq!(ev, WorkerEvent::Malformed(ppp::ProtocolError::UnknownCommand(Bytes::from_static(&[9]))));
        router.send(to(&id, &["no", "delimiter"])).await.unwrap();
        let ev = worker_event(&mut w, "missing envelope", |e| matches!(e, WorkerEvent::Malformed(_))).await;
        assert_eq!(ev, WorkerEvent::Malformed(ppp::ProtocolError::MissingEnvelope));
        router.send(to(&id, &["addr", ""])).await.unwrap();
        let ev = worker_event(&mut w, "missing content", |e| matches!(e, WorkerEvent::Malformed(_))).await;
        assert_eq!(ev, WorkerEvent::Malformed(ppp::ProtocolError::MissingContent));
        router.send(to(&id, &["t", "c", "", "fine"])).await.unwrap();
        let (from, reply) = next_non_heartbeat(&router).await;
        assert_eq!(from, id);
        assert_eq!(reply, Message::from(vec!["t", "c", "", "fine"]));
        w.close().await;
    })
    .await;
}

/// A handler panic is handled like a crash: no reply, READY again (so a PPP queue re-dispatches
/// the request), and the worker goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_panic_restarts_the_conversation() {
    bounded(async {
        let (router, ep) = fake_queue("tcp://127.0.0.1:*").await;
        let mut w = config(&ep, 100, 20)
            .spawn(|request: Message| async move {
                assert!(request[0] != "boom", "handler failure (expected by the test)");
                request
            })
            .await
            .unwrap();
        let (id, _) = from_worker(&router).await;
        router.send(to(&id, &["t1", "c", "", "boom"])).await.unwrap();
        let (_, msg) = next_non_heartbeat(&router).await;
        assert!(is_ready(&msg), "expected READY after the panic, got {msg:?}");
        worker_event(&mut w, "abandoned", |e| *e == WorkerEvent::RequestAbandoned).await;
        router.send(to(&id, &["t2", "c", "", "ok"])).await.unwrap();
        let (_, reply) = next_non_heartbeat(&router).await;
        assert_eq!(reply, Message::from(vec!["t2", "c", "", "ok"]));
        w.close().await;
    })
    .await;
}

/// Configuration errors are reported at spawn, not later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_fails_at_spawn() {
    bounded(async {
        assert!(Worker::new("nonsense").spawn(echo).await.is_err());
        assert!(Worker { liveness: 0, ..Worker::new("tcp://127.0.0.1:5556") }.spawn(echo).await.is_err());
    })
    .await;
}
