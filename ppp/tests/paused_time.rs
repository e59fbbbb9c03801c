//! The queue's clocks under tokio's paused time: expiry, request timeout and heartbeat rate are
//! asserted in *virtual* time, so the bounds are exact and hold on a machine under any load (the
//! runtime only advances the clock when every task is idle). Everything runs over inproc, which
//! does no real I/O, so the auto-advancing clock cannot overtake a message in flight.

mod common;

use std::time::Duration;

use common::*;
use ppp::{Queue, QueueEvent, QueueHandle};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::{STEP, bounded};

const INTERVAL: Duration = Duration::from_secs(1);
const LIVENESS: u32 = 3;

async fn inproc_queue(tag: &str) -> QueueHandle {
    Queue {
        interval: INTERVAL,
        liveness: LIVENESS,
        ..Queue::new(format!("inproc://ppp-paused-{tag}-front"), format!("inproc://ppp-paused-{tag}-back"))
    }
    .spawn()
    .await
    .expect("queue starts")
}

async fn ready_worker(q: &mut QueueHandle, id: &'static str) -> Socket {
    let w = raw_worker(q.backend(), id).await;
    w.send(ready()).await.unwrap();
    queue_event(q, id, |e| matches!(e, QueueEvent::WorkerReady { worker } if worker == id)).await;
    w
}

/// Answers every HEARTBEAT the worker receives with one, and hands over every other message
/// (requests, which the test answers or drops).
fn keep_alive(worker: &Socket) -> mpsc::UnboundedReceiver<Message> {
    let (tx, rx) = mpsc::unbounded_channel();
    let worker = worker.clone();
    tokio::spawn(async move {
        while let Ok(msg) = worker.recv().await {
            if is_heartbeat(&msg) {
                let _ = worker.send(heartbeat()).await;
            } else if tx.send(msg).is_err() {
                return;
            }
        }
    });
    rx
}

#[tokio::test(start_paused = true)]
async fn a_silent_worker_is_purged_after_liveness_intervals_never_before() {
    bounded(async {
        let mut q = inproc_queue("expiry").await;
        let w = ready_worker(&mut q, "silent").await;
        let ready_at = Instant::now();
        let event = queue_event(&mut q, "expiry", |e| matches!(e, QueueEvent::WorkerExpired { .. })).await;
        let waited = ready_at.elapsed();
        let span = INTERVAL * LIVENESS;
        // Checked on the queue's ticks: never before the span, at most one interval after it.
        assert!(waited >= span, "purged after {waited:?}, before liveness x interval = {span:?}");
        assert!(waited <= span + INTERVAL, "purged after {waited:?}, later than {span:?} + one interval");
        let QueueEvent::WorkerExpired { silent_for, .. } = event else { unreachable!() };
        assert!(silent_for >= span, "reported silent for {silent_for:?}");
        // Meanwhile the queue heartbeated it once per interval.
        let mut beats = 0;
        while let Ok(msg) = w.try_recv() {
            assert!(is_heartbeat(&msg), "only heartbeats, got {msg:?}");
            beats += 1;
        }
        assert!((LIVENESS as usize - 1..=LIVENESS as usize + 1).contains(&beats), "{beats} heartbeats in {waited:?}");
        assert_eq!(q.stats().workers, 0);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_heartbeats_is_never_purged() {
    bounded(async {
        let mut q = inproc_queue("alive").await;
        let w = ready_worker(&mut q, "alive").await;
        let _requests = keep_alive(&w);
        // Five liveness spans of virtual time.
        tokio::time::sleep(INTERVAL * LIVENESS * 5).await;
        assert_eq!(q.stats().workers, 1, "a heartbeating worker stays registered");
        while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, q.next_event()).await {
            assert!(!matches!(event, QueueEvent::WorkerExpired { .. }), "expired: {event:?}");
        }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_request_held_past_the_timeout_goes_to_another_worker_and_the_holder_comes_back() {
    bounded(async {
        let mut q = inproc_queue("timeout").await;
        // "sink" registers first, so LRU hands it the request; it heartbeats but never replies.
        // Both heartbeat all along, so neither expires.
        let sink = ready_worker(&mut q, "sink").await;
        let mut dropped = keep_alive(&sink);
        let good = ready_worker(&mut q, "good").await;
        let mut requests = keep_alive(&good);

        let client = Socket::new(SocketType::Req);
        client.set_linger(Some(Duration::ZERO));
        client.connect(q.frontend()).await.unwrap();
        client.send("job-1").await.unwrap();
        let sent_at = Instant::now();

        let event = queue_event(&mut q, "request timeout", |e| matches!(e, QueueEvent::RequestTimedOut { .. })).await;
        let waited = sent_at.elapsed();
        assert_eq!(event, QueueEvent::RequestTimedOut { worker: "sink".into() });
        let timeout = INTERVAL * LIVENESS; // request_timeout's default: liveness x interval
        assert!(waited >= timeout, "re-dispatched after {waited:?}, before the {timeout:?} timeout");
        assert!(waited <= timeout + INTERVAL, "re-dispatched after {waited:?}, more than an interval late");
        let first = dropped.try_recv().expect("the sink got the request first");
        assert_eq!(&first[2][..], b"job-1");

        // The other worker gets it exactly as the client sent it: [address, "", body].
        let request = tokio::time::timeout(STEP, requests.recv()).await.unwrap().unwrap();
        assert_eq!(request.len(), 3, "three frames, as the Guide's worker requires: {request:?}");
        assert_eq!(&request[2][..], b"job-1");
        good.send(request).await.unwrap();
        let reply = recv(&client).await;
        assert_eq!(reply, Message::single("job-1"));

        // The sink's next heartbeat brings it back: both workers idle, nothing stranded. The
        // deadline is virtual time (the runtime's clock is paused), so load cannot make it fire.
        let deadline = Instant::now() + INTERVAL * 2;
        while q.stats().idle < 2 {
            assert!(Instant::now() < deadline, "the sink did not rejoin within two intervals: {:?}", q.stats());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(q.stats().workers, 2);
        assert_eq!(q.stats().replies, 1);
        assert!(dropped.try_recv().is_err(), "the sink never saw the request again");
    })
    .await;
}
