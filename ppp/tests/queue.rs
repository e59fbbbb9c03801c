//! The queue, in-process: LRU dispatch, heartbeats to every worker (idle or busy), expiry,
//! re-dispatch of lost requests without duplicate replies, malformed input, the bounded pending
//! queue. Workers are either our `ppp::Worker` or raw DEALER sockets driven frame by frame.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use ppp::{Client, ClientConfig, Overflow, Queue, QueueEvent, QueueHandle, Worker, WorkerHandle};
use tokio::time::Instant;
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::{STEP, bounded, ipc_endpoint};

async fn queue(interval_ms: u64, liveness: u32) -> QueueHandle {
    Queue { interval: ms(interval_ms), liveness, ..Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") }
        .spawn()
        .await
        .expect("queue starts")
}

async fn ready_event(q: &mut QueueHandle, id: &'static str) {
    queue_event(q, id, |e| matches!(e, QueueEvent::WorkerReady { worker } if worker == id)).await;
}

/// Polls the queue's stats until `pred` holds (bounded by STEP).
async fn stats_until(q: &QueueHandle, what: &str, pred: impl Fn(&ppp::QueueStats) -> bool) {
    let deadline = Instant::now() + STEP;
    while !pred(&q.stats()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}; stats {:?}", q.stats());
        tokio::task::yield_now().await;
        tokio::time::sleep(ms(2)).await; // polling period, not synchronisation
    }
}

/// Our worker with a handler that prefixes the reply with `name`.
async fn named_worker(q: &mut QueueHandle, name: &'static str, interval_ms: u64, liveness: u32) -> WorkerHandle {
    let before = q.stats().workers;
    let w = Worker { interval: ms(interval_ms), liveness, ..Worker::new(q.backend()) }
        .spawn(move |request: Message| async move {
            let mut reply = Message::single(name);
            for frame in request {
                reply.push(frame);
            }
            reply
        })
        .await
        .expect("worker starts");
    queue_event(q, "worker ready", |e| matches!(e, QueueEvent::WorkerReady { .. })).await;
    assert_eq!(q.stats().workers, before + 1);
    w
}

async fn raw_client(endpoint: &str) -> Socket {
    let s = Socket::new(SocketType::Dealer);
    s.set_linger(Some(Duration::ZERO));
    s.connect(endpoint).await.unwrap();
    s
}

fn request(body: &'static str) -> Message {
    Message::from(vec!["", body])
}

/// Echo of a raw worker's request `[client…, "", body]` with a new body.
fn answer(req: &Message, body: &'static str) -> Message {
    let mut reply: Message = req.iter().take_while(|f| !f.is_empty()).cloned().collect();
    reply.push(Bytes::new());
    reply.push(body);
    reply
}

/// Reads 6 HEARTBEATs on a raw worker: after the first, 5 more take about 5 intervals. The bounds
/// are loose (2 to 6 intervals plus 1 s) because a stalled reader or a late tick bunches a few up.
async fn assert_heartbeat_rate(w: &Socket, interval_ms: u64) {
    let first = recv(w).await;
    assert!(is_heartbeat(&first), "expected a heartbeat, got {first:?}");
    let start = Instant::now();
    for _ in 0..5 {
        let msg = recv(w).await;
        assert!(is_heartbeat(&msg), "expected a heartbeat, got {msg:?}");
    }
    // Not faster than the interval allows (order: a tick cannot come early); how much slower is
    // a matter of load and is not asserted.
    let took = start.elapsed();
    let lo = ms(2 * interval_ms);
    assert!(took >= lo, "5 heartbeats took {took:?} at interval {interval_ms} ms");
}

fn client_config(timeout_ms: u64, retries: u32) -> ClientConfig {
    ClientConfig { timeout: ms(timeout_ms), retries }
}

/// Behaviour 1: READY then work; each request echoed; requests go to the longest-idle worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_to_the_longest_idle_worker() {
    bounded(async {
        let mut q = queue(100, 10).await;
        let mut workers = Vec::new();
        for name in ["A", "B", "C"] {
            workers.push(named_worker(&mut q, name, 100, 10).await);
        }
        let mut client = Client::connect(q.frontend(), client_config(5000, 1)).await.unwrap();
        let mut served = Vec::new();
        for i in 0..9 {
            let body = format!("request-{i}");
            let reply = client.request(Message::from(vec![body.clone(), "second frame".into()])).await.unwrap();
            assert_eq!(reply.len(), 3, "{reply:?}");
            assert_eq!(reply[1], body);
            assert_eq!(reply[2], "second frame");
            served.push(String::from_utf8(reply[0].to_vec()).unwrap());
        }
        assert_eq!(served, ["A", "B", "C", "A", "B", "C", "A", "B", "C"]);
        let stats = q.stats();
        assert_eq!((stats.requests, stats.replies, stats.redispatched), (9, 9, 0));
        assert_eq!(client.resends(), 0);
        for w in workers {
            w.close().await;
        }
        q.close().await;
    })
    .await;
}

/// Behaviour 2 (queue side) and the reference flaw: the queue heartbeats idle *and busy* workers
/// every interval, and a busy worker's heartbeats never earn it a second request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_reach_busy_workers_and_never_double_book_them() {
    bounded(async {
        let mut q = queue(50, 20).await;
        let w = raw_worker(q.backend(), "W1").await;
        w.send(ready()).await.unwrap();
        ready_event(&mut q, "W1").await;

        // Idle: a HEARTBEAT every interval (checked over a window: single gaps jitter).
        assert_heartbeat_rate(&w, 50).await;

        let c1 = raw_client(q.frontend()).await;
        let c2 = raw_client(q.frontend()).await;
        c1.send(request("one")).await.unwrap();
        let (req1, _) = next_request(&w).await;
        assert_eq!(
            req1.len(),
            3,
            "[client, \"\", body], nothing added (the Guide's worker takes exactly that): {req1:?}"
        );
        assert!(req1[1].is_empty());
        assert_eq!(req1[2], "one");
        c2.send(request("two")).await.unwrap();
        stats_until(&q, "request two pending", |s| s.pending == 1).await;

        // Busy: heartbeats keep coming both ways, and "two" must wait.
        for _ in 0..6 {
            let msg = recv(&w).await;
            assert!(is_heartbeat(&msg), "busy worker was sent {msg:?} while busy");
            w.send(heartbeat()).await.unwrap();
        }
        assert_eq!(q.stats().pending, 1);

        w.send(answer(&req1, "ONE")).await.unwrap();
        assert_eq!(recv(&c1).await, Message::from(vec!["", "ONE"]));
        let (req2, _) = next_request(&w).await;
        assert_eq!(req2[2], "two");
        w.send(answer(&req2, "TWO")).await.unwrap();
        assert_eq!(recv(&c2).await, Message::from(vec!["", "TWO"]));
        q.close().await;
    })
    .await;
}

/// Behaviour 2: a silent worker is purged after LIVENESS intervals, then no longer heartbeated;
/// it can come back with READY (a HEARTBEAT alone does not re-register it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_worker_is_purged_after_liveness_intervals() {
    bounded(async {
        let (interval, liveness) = (50, 3);
        let span = ms(interval * liveness as u64);
        let mut q = queue(interval, liveness).await;
        let w = raw_worker(q.backend(), "SILENT").await;
        w.send(ready()).await.unwrap();
        ready_event(&mut q, "SILENT").await;
        let ev = queue_event(&mut q, "expiry", |e| matches!(e, QueueEvent::WorkerExpired { .. })).await;
        let QueueEvent::WorkerExpired { worker, silent_for } = ev else { unreachable!() };
        assert_eq!(worker, "SILENT");
        assert!(silent_for >= span, "purged after {silent_for:?} of silence, before {span:?}");
        assert_eq!(q.stats().workers, 0);

        // No more heartbeats for it (drain what was already on the way first).
        while recv_within(&w, ms(100)).await.is_some() {}
        assert!(recv_within(&w, ms(300)).await.is_none(), "a purged worker was still sent messages");

        // A heartbeat does not bring it back; READY does.
        w.send(heartbeat()).await.unwrap();
        w.send(ready()).await.unwrap();
        ready_event(&mut q, "SILENT").await;
        assert_eq!(q.stats().workers, 1);
        assert!(is_heartbeat(&recv(&w).await));
        q.close().await;
    })
    .await;
}

/// Behaviour 5 (hung worker): the request goes to another worker after the hung one expires, the
/// client gets exactly one reply without resending, and the hung worker's late reply is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_worker_request_is_redispatched_and_its_late_reply_dropped() {
    bounded(async {
        let mut q = queue(50, 3).await;
        let hung = raw_worker(q.backend(), "HUNG").await;
        hung.send(ready()).await.unwrap();
        ready_event(&mut q, "HUNG").await;
        let good = named_worker(&mut q, "GOOD", 50, 3).await;

        // One attempt only: the reply can only come from the queue's re-dispatch.
        let mut client = Client::connect(q.frontend(), client_config(8000, 1)).await.unwrap();
        let call = tokio::spawn(async move {
            let reply = client.request("job").await;
            (client, reply)
        });
        let (req, _) = next_request(&hung).await; // the longest-idle worker got it, then hangs
        let (mut client, reply) = call.await.unwrap();
        assert_eq!(reply.unwrap(), Message::from(vec!["GOOD", "job"]));
        queue_event(&mut q, "re-dispatch", |e| matches!(e, QueueEvent::Redispatched { worker } if worker == "HUNG"))
            .await;
        assert_eq!(client.resends(), 0);

        // The late reply from the expired worker must not reach the client.
        hung.send(answer(&req, "LATE")).await.unwrap();
        queue_event(
            &mut q,
            "late reply dropped",
            |e| matches!(e, QueueEvent::ReplyDropped { worker, .. } if worker == "HUNG"),
        )
        .await;
        assert_eq!(client.request("next").await.unwrap(), Message::from(vec!["GOOD", "next"]));
        assert_eq!(client.stale_replies(), 0, "a duplicate reply reached the client");
        let stats = q.stats();
        assert_eq!((stats.requests, stats.replies, stats.redispatched, stats.replies_dropped), (2, 2, 1, 1));
        good.close().await;
        q.close().await;
    })
    .await;
}

/// Behaviour 5 (crashed worker): a worker whose connection drops mid-request is purged at once
/// (not at the next heartbeat, not at expiry) and its request re-dispatched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnected_worker_request_is_redispatched_at_once() {
    bounded(async {
        // Heartbeat 1 s, expiry 3 s: only the disconnect itself can explain a fast recovery.
        let mut q = queue(1000, 3).await;
        let crashing = raw_worker(q.backend(), "CRASH").await;
        crashing.send(ready()).await.unwrap();
        ready_event(&mut q, "CRASH").await;
        let good = named_worker(&mut q, "GOOD", 1000, 3).await;
        let c = raw_client(q.frontend()).await;
        c.send(request("job")).await.unwrap();
        let _ = next_request(&crashing).await;
        drop(crashing);
        // Order, not wall clock: the disconnect (not a liveness expiry) is what frees the request.
        assert_eq!(recv(&c).await, Message::from(vec!["", "GOOD", "job"]));
        queue_event(
            &mut q,
            "disconnect",
            |e| matches!(e, QueueEvent::WorkerDisconnected { worker } if worker == "CRASH"),
        )
        .await;
        assert!(recv_within(&c, ms(300)).await.is_none(), "duplicate reply");
        good.close().await;
        q.close().await;
    })
    .await;
}

/// A worker that restarts its conversation (READY while busy) gets its request re-dispatched (here
/// to itself, the only worker): the client gets exactly one reply, whichever answer comes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_while_busy_redispatches_and_the_client_gets_one_reply() {
    bounded(async {
        let mut q = queue(100, 20).await;
        let w = raw_worker(q.backend(), "W").await;
        w.send(ready()).await.unwrap();
        ready_event(&mut q, "W").await;
        let c = raw_client(q.frontend()).await;
        c.send(request("job")).await.unwrap();
        let (first, _) = next_request(&w).await;
        w.send(ready()).await.unwrap(); // restart: "job" is re-dispatched, to W again (the only worker)
        let (second, _) = next_request(&w).await;
        assert_eq!(second, first, "the same request, as the client sent it");
        w.send(answer(&first, "FIRST")).await.unwrap();
        w.send(answer(&second, "SECOND")).await.unwrap();
        queue_event(&mut q, "the second answer dropped", |e| matches!(e, QueueEvent::ReplyDropped { .. })).await;
        assert_eq!(recv(&c).await, Message::from(vec!["", "FIRST"]));
        assert!(recv_within(&c, ms(300)).await.is_none(), "duplicate reply");
        assert_eq!(q.stats().redispatched, 1);
        q.close().await;
    })
    .await;
}

/// Malformed messages on either side are logged and dropped; both peers stay usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_dropped_and_peers_stay_usable() {
    bounded(async {
        let mut q = queue(100, 20).await;
        let w = raw_worker(q.backend(), "W").await;
        w.send(ready()).await.unwrap();
        ready_event(&mut q, "W").await;

        let malformed =
            |side: &'static str| move |e: &QueueEvent| matches!(e, QueueEvent::Malformed { side: s, .. } if *s == side);
        w.send(Message::single(Bytes::from_static(&[0x07]))).await.unwrap();
        let ev = queue_event(&mut q, "unknown command", malformed("backend")).await;
        assert_eq!(
            ev,
            QueueEvent::Malformed {
                side: "backend",
                error: ppp::ProtocolError::UnknownCommand(Bytes::from_static(&[7]))
            }
        );
        w.send(Message::single(Bytes::new())).await.unwrap();
        queue_event(&mut q, "empty command", malformed("backend")).await;
        w.send(Message::from(vec!["not", "a reply"])).await.unwrap();
        queue_event(&mut q, "reply without an envelope", malformed("backend")).await;
        w.send(Message::from(vec!["nobody", "", "a reply"])).await.unwrap();
        queue_event(&mut q, "reply without request", |e| matches!(e, QueueEvent::ReplyDropped { .. })).await;

        let c = raw_client(q.frontend()).await;
        c.send(Message::single("no envelope")).await.unwrap();
        let ev = queue_event(&mut q, "missing envelope", malformed("frontend")).await;
        assert_eq!(ev, QueueEvent::Malformed { side: "frontend", error: ppp::ProtocolError::MissingEnvelope });
        c.send(Message::single(Bytes::new())).await.unwrap();
        let ev = queue_event(&mut q, "missing content", malformed("frontend")).await;
        assert_eq!(ev, QueueEvent::Malformed { side: "frontend", error: ppp::ProtocolError::MissingContent });
        assert_eq!(q.stats().requests, 0);

        // Both still work.
        c.send(request("fine")).await.unwrap();
        let (req, _) = next_request(&w).await;
        // A reply to another client (a mangled address stack) is dropped; the worker keeps its
        // request and can still answer.
        let mut mangled = answer(&req, "BAD");
        let mut frames = mangled.into_frames();
        frames[0] = Bytes::from_static(b"xyz");
        mangled = frames.into_iter().collect();
        w.send(mangled).await.unwrap();
        queue_event(&mut q, "not the reply to its request", |e| matches!(e, QueueEvent::ReplyDropped { .. })).await;
        w.send(answer(&req, "FINE")).await.unwrap();
        assert_eq!(recv(&c).await, Message::from(vec!["", "FINE"]));
        assert_eq!(q.stats().workers, 1);
        q.close().await;
    })
    .await;
}

/// Requests that arrive while no worker exists wait in the queue and are all served later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_wait_for_a_worker_and_none_is_lost() {
    bounded(async {
        let mut q = queue(100, 10).await;
        let mut calls = Vec::new();
        for i in 0..5u32 {
            let mut client = Client::connect(q.frontend(), client_config(10_000, 1)).await.unwrap();
            calls.push(tokio::spawn(async move { client.request(i.to_string()).await }));
        }
        stats_until(&q, "5 pending requests", |s| s.pending == 5).await;
        let w = named_worker(&mut q, "LATE", 100, 10).await;
        for (i, call) in calls.into_iter().enumerate() {
            let reply = call.await.unwrap().expect("served once a worker arrived");
            assert_eq!(reply, Message::from(vec!["LATE".to_string(), i.to_string()]));
        }
        assert_eq!(q.stats().replies, 5);
        w.close().await;
        q.close().await;
    })
    .await;
}

async fn overflow_scenario(overflow: Overflow) -> (Vec<Option<Message>>, ppp::QueueStats) {
    let mut q = Queue {
        interval: ms(100),
        liveness: 10,
        max_pending: 2,
        overflow,
        ..Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    }
    .spawn()
    .await
    .unwrap();
    let mut clients = Vec::new();
    for (i, body) in ["r0", "r1", "r2", "r3"].into_iter().enumerate() {
        let c = raw_client(q.frontend()).await;
        c.send(request(body)).await.unwrap();
        if overflow == Overflow::DropOldest {
            stats_until(&q, "request read", |s| s.requests == i as u64 + 1).await;
        }
        clients.push(c);
    }
    match overflow {
        Overflow::DropOldest => assert_eq!(q.stats().requests_dropped, 2),
        // Backpressure: the queue stops reading at 2 pending; the others wait in the socket.
        Overflow::Backpressure => stats_until(&q, "2 pending", |s| s.pending == 2 && s.requests == 2).await,
    }
    let w = named_worker(&mut q, "W", 100, 10).await;
    let mut replies = Vec::new();
    for c in &clients {
        replies.push(recv_within(c, ms(1500)).await);
    }
    let stats = q.stats();
    w.close().await;
    q.close().await;
    (replies, stats)
}

/// The pending queue is bounded. Backpressure (default): nothing is lost, excess requests wait in
/// the sockets. DropOldest: the oldest are dropped, the newest served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_queue_is_bounded() {
    bounded(async {
        let (replies, stats) = overflow_scenario(Overflow::Backpressure).await;
        let bodies: Vec<_> = replies.iter().map(|r| r.as_ref().map(|m| m[2].clone())).collect();
        assert_eq!(bodies, ["r0", "r1", "r2", "r3"].map(|b| Some(Bytes::from(b))));
        assert_eq!(stats.requests_dropped, 0);

        let (replies, stats) = overflow_scenario(Overflow::DropOldest).await;
        let bodies: Vec<_> = replies.iter().map(|r| r.as_ref().map(|m| m[2].clone())).collect();
        assert_eq!(bodies, [None, None, Some(Bytes::from("r2")), Some(Bytes::from("r3"))]);
        assert_eq!(stats.requests_dropped, 2);
    })
    .await;
}

/// Stopping the queue releases its endpoints: a new queue can bind them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_queue_releases_its_endpoints() {
    bounded(async {
        let (front, back) = (ipc_endpoint("front"), ipc_endpoint("back"));
        let q = Queue::new(front.clone(), back.clone()).spawn().await.unwrap();
        q.close().await;
        // zmtp's close() returns before the listeners are dropped: allow a short (bounded) delay.
        let deadline = Instant::now() + STEP;
        let q = loop {
            match Queue::new(front.clone(), back.clone()).spawn().await {
                Ok(q) => break q,
                Err(e) => assert!(Instant::now() < deadline, "endpoints not released after stop: {e}"),
            }
            tokio::time::sleep(ms(5)).await; // retry period
        };
        q.close().await;
        let bad = Queue::new("nonsense", "tcp://127.0.0.1:*").spawn().await.unwrap_err();
        assert!(bad.to_string().contains("cannot bind the frontend endpoint \"nonsense\""), "{bad}");
        let bad = Queue { liveness: 0, ..Queue::default() }.spawn().await.unwrap_err();
        assert!(matches!(bad, ppp::QueueError::Config(_)));
    })
    .await;
}

/// A worker that silently drops a request but keeps heartbeating used to stay busy forever: its
/// request was never re-sent and it never got work again. Now the request goes to another worker
/// after `request_timeout`, and the silent one rejoins the idle list on its next heartbeat.
/// (Counts and order; the queue runs on a paused clock would need its sockets to be paused too, so
/// the timeout is short and only the order of events is asserted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_its_worker_silently_drops_goes_to_another_and_the_worker_comes_back() {
    bounded(async {
        let mut q = Queue {
            interval: ms(50),
            liveness: 20,
            request_timeout: ms(200),
            ..Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
        }
        .spawn()
        .await
        .unwrap();
        let mute = raw_worker(q.backend(), "MUTE").await;
        mute.send(ready()).await.unwrap();
        ready_event(&mut q, "MUTE").await;
        let c = raw_client(q.frontend()).await;
        c.send(request("lost?")).await.unwrap();
        let (dropped, _) = next_request(&mute).await; // and never answered
        assert_eq!(dropped[2], "lost?");
        let good = raw_worker(q.backend(), "GOOD").await;
        good.send(ready()).await.unwrap();
        ready_event(&mut q, "GOOD").await;
        queue_event(
            &mut q,
            "request timed out",
            |e| matches!(e, QueueEvent::RequestTimedOut { worker } if worker == "MUTE"),
        )
        .await;
        let (again, _) = next_request(&good).await;
        assert_eq!(again, dropped, "the same request, to the other worker");
        good.send(answer(&again, "SERVED")).await.unwrap();
        assert_eq!(recv(&c).await, Message::from(vec!["", "SERVED"]));
        // The mute worker heartbeats: it is idle again (behind GOOD, idle since its reply) and gets
        // work again: of the next two requests, the second.
        mute.send(heartbeat()).await.unwrap();
        stats_until(&q, "both idle", |s| s.idle == 2).await;
        let c2 = raw_client(q.frontend()).await;
        c.send(request("next-1")).await.unwrap();
        let (next1, _) = next_request(&good).await;
        c2.send(request("next-2")).await.unwrap();
        let (next2, _) = next_request(&mute).await;
        assert_eq!((next1[2].as_ref(), next2[2].as_ref()), (&b"next-1"[..], &b"next-2"[..]));
        mute.send(answer(&next2, "TWO")).await.unwrap();
        good.send(answer(&next1, "ONE")).await.unwrap();
        assert_eq!(recv(&c2).await, Message::from(vec!["", "TWO"]));
        assert_eq!(recv(&c).await, Message::from(vec!["", "ONE"]));
        assert_eq!(q.stats().redispatched, 1);
        q.close().await;
    })
    .await;
}
