//! The PPP queue's state machine, driven through its sockets (inproc): a raw worker and a raw
//! client send any sequence of READY, HEARTBEAT, replies (right, wrong or malformed) and requests
//! (well-formed or not). Afterwards a good worker and a good client must still be served: nothing
//! a peer sends may wedge the queue or panic it.
#![no_main]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zmtp::{Message, Socket, SocketType};

static NEXT: AtomicU64 = AtomicU64::new(0);

#[derive(Arbitrary, Debug)]
enum Op {
    WorkerReady,
    WorkerHeartbeat,
    WorkerRaw(Vec<Vec<u8>>),
    /// Answers the last request the raw worker received (with its envelope, or a mangled one).
    WorkerAnswer {
        mangle: bool,
    },
    ClientRequest(Vec<u8>),
    ClientRaw(Vec<Vec<u8>>),
}

fn raw(frames: Vec<Vec<u8>>) -> Option<Message> {
    let frames: Vec<Bytes> = frames.into_iter().take(8).map(Bytes::from).collect();
    (!frames.is_empty()).then(|| Message::from(frames))
}

fuzz_target!(|ops: Vec<Op>| {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let (front, back) = (format!("inproc://ppp-fuzz-front-{n}"), format!("inproc://ppp-fuzz-back-{n}"));
        let queue = ppp::Queue {
            interval: Duration::from_millis(20),
            request_timeout: Duration::from_millis(60),
            ..ppp::Queue::new(front.clone(), back.clone())
        }
        .spawn()
        .await
        .unwrap();
        let worker = Socket::new(SocketType::Dealer);
        worker.set_routing_id("fuzz-worker").unwrap();
        worker.connect(&back).await.unwrap();
        let client = Socket::new(SocketType::Dealer);
        client.connect(&front).await.unwrap();
        let mut last: Option<Message> = None;
        for op in ops.into_iter().take(64) {
            let _ = match op {
                Op::WorkerReady => worker.try_send(Message::single(Bytes::from_static(&[1]))),
                Op::WorkerHeartbeat => worker.try_send(Message::single(Bytes::from_static(&[2]))),
                Op::WorkerRaw(frames) => raw(frames).map_or(Ok(()), |m| worker.try_send(m)),
                Op::WorkerAnswer { mangle } => match last.clone() {
                    Some(mut m) => {
                        if mangle && !m.is_empty() {
                            let mut frames = m.into_frames();
                            frames[0] = Bytes::from_static(b"someone-else");
                            m = Message::from(frames);
                        }
                        worker.try_send(m)
                    }
                    None => Ok(()),
                },
                Op::ClientRequest(body) => client.try_send(Message::from(vec![Bytes::new(), Bytes::from(body)])),
                Op::ClientRaw(frames) => raw(frames).map_or(Ok(()), |m| client.try_send(m)),
            };
            tokio::task::yield_now().await;
            while let Ok(m) = worker.try_recv() {
                if m.len() > 1 {
                    last = Some(m);
                }
            }
            while client.try_recv().is_ok() {}
        }
        // A good worker and client are served whatever came before.
        let good = ppp::Worker { interval: Duration::from_millis(20), ..ppp::Worker::new(back.clone()) }
            .spawn(|request: Message| async move { request })
            .await
            .unwrap();
        let mut lp =
            ppp::Client::connect(front.clone(), ppp::ClientConfig { timeout: Duration::from_secs(2), retries: 3 })
                .await
                .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(10), lp.request("still served")).await;
        assert_eq!(reply.expect("no stall").expect("served").frames(), &[Bytes::from("still served")]);
        good.close().await;
        queue.close().await;
    });
});
