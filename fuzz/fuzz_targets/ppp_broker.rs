//! The PPP queue's broker state machine (ppp/src/queue/broker.rs, compiled in here), driven
//! directly: any sequence of READY, HEARTBEAT, right and late replies, requests, disconnects,
//! failed sends and ticks at any times. No panic, no client ever gets two replies, nothing is
//! lost or invented, and no request waits while a worker is idle.
#![no_main]
use std::collections::HashSet;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use ppp::{Overflow, Queue, QueueEvent, QueueStats, display_id, protocol};
use zmtp::Message;

#[path = "../../ppp/src/queue/broker.rs"]
mod broker;

use broker::{Action, Broker, Input};
use protocol::Command;

const WORKERS: [&[u8]; 4] = [b"W0", b"W1", b"W2", b"W3"];

#[derive(Arbitrary, Debug)]
enum Op {
    Ready(u8),
    Heartbeat(u8),
    /// The worker echoes the `n`-th request it was ever sent (its current one, or a late one).
    Answer {
        worker: u8,
        nth_back: u8,
    },
    Raw {
        worker: u8,
        frames: Vec<Vec<u8>>,
    },
    Request,
    RawRequest(Vec<Vec<u8>>),
    /// The backend lost a connection; the bits say which workers are still connected.
    Disconnect(u8),
    Tick,
    /// Time jumps to when the broker asked to be woken, and it is.
    Wake,
}

#[derive(Arbitrary, Debug)]
struct Step {
    /// Milliseconds since the last step.
    elapsed: u16,
    op: Op,
    /// Which sends fail while this step's actions are performed (bit n: the n-th send).
    failures: u16,
}

#[derive(Arbitrary, Debug)]
struct Run {
    max_pending: u8,
    drop_oldest: bool,
    request_timeout_ms: u16,
    steps: Vec<Step>,
}

fn worker(n: u8) -> Bytes {
    Bytes::from_static(WORKERS[usize::from(n) % WORKERS.len()])
}

fn raw(frames: Vec<Vec<u8>>) -> Message {
    frames.into_iter().take(8).map(Bytes::from).collect()
}

fuzz_target!(|run: Run| {
    let config = Queue {
        max_pending: usize::from(run.max_pending % 8) + 1,
        overflow: if run.drop_oldest { Overflow::DropOldest } else { Overflow::Backpressure },
        request_timeout: Duration::from_millis(u64::from(run.request_timeout_ms) + 1),
        ..Queue::new("", "")
    };
    let mut now = Instant::now();
    let mut broker = Broker::new(&config, now);
    let mut sent: Vec<Vec<Message>> = vec![Vec::new(); WORKERS.len()];
    let mut requested = HashSet::new();
    let mut replied = HashSet::new();
    let mut next_client = 0u64;
    for step in run.steps.into_iter().take(256) {
        now += Duration::from_millis(u64::from(step.elapsed));
        let input = match step.op {
            Op::Ready(w) => Input::FromWorker { worker: worker(w), msg: Command::Ready.message() },
            Op::Heartbeat(w) => Input::FromWorker { worker: worker(w), msg: Command::Heartbeat.message() },
            Op::Answer { worker: w, nth_back } => {
                let history = &sent[usize::from(w) % WORKERS.len()];
                match history.len().checked_sub(1 + usize::from(nth_back)) {
                    Some(i) => Input::FromWorker { worker: worker(w), msg: history[i].clone() },
                    None => Input::Tick,
                }
            }
            Op::Raw { worker: w, frames } => Input::FromWorker { worker: worker(w), msg: raw(frames) },
            Op::Request | Op::RawRequest(_) if !broker.accepts_requests() => Input::Tick,
            Op::Request => {
                next_client += 1;
                let client = Bytes::from(format!("client-{next_client}"));
                requested.insert(client.clone());
                Input::Request(Message::from(vec![client, Bytes::new(), Bytes::from_static(b"body")]))
            }
            // Behind a client routing id the fuzzer does not choose, as the frontend ROUTER delivers.
            Op::RawRequest(frames) => {
                let mut msg = raw(frames);
                msg.push_front(Bytes::from_static(b"raw-client"));
                Input::Request(msg)
            }
            Op::Disconnect(bits) => Input::BackendDisconnected {
                connected: (0..WORKERS.len()).filter(|i| bits & (1 << i) != 0).map(|i| worker(i as u8)).collect(),
            },
            Op::Tick => Input::Tick,
            Op::Wake => {
                now = now.max(broker.next_wakeup());
                Input::Tick
            }
        };
        let (is_request, is_tick) = (matches!(input, Input::Request(_)), matches!(input, Input::Tick));
        let before = broker.stats();
        broker.handle(now, input);
        if is_request {
            assert!(broker.stats().pending <= before.pending.max(config.max_pending), "max_pending exceeded");
        }
        if is_tick {
            assert!(broker.next_wakeup() > now, "a tick leaves nothing due (the runner would spin)");
        }
        let mut sends = 0;
        while let Some(action) = broker.poll_action(now) {
            match action {
                Action::Dispatch { worker, request } => {
                    sends += 1;
                    if step.failures & (1 << (sends % 16)) != 0 {
                        broker.handle(now, Input::DispatchFailed { worker });
                    } else {
                        let i = WORKERS.iter().position(|w| *w == worker).expect("a worker we named");
                        sent[i].push(request);
                    }
                }
                Action::Heartbeat { worker } => {
                    sends += 1;
                    if step.failures & (1 << (sends % 16)) != 0 {
                        broker.handle(now, Input::HeartbeatUnroutable { worker });
                    }
                }
                Action::Reply(reply) => {
                    let client = &reply[0];
                    assert!(
                        requested.contains(client) || client.as_ref() == b"raw-client",
                        "a reply to a request never made: {reply:?}"
                    );
                    if client.as_ref() != b"raw-client" {
                        assert!(replied.insert(client.clone()), "two replies to {}", display_id(client));
                    }
                }
                Action::Event(_) => {}
            }
        }
        let QueueStats { workers, idle, pending, requests, replies, requests_dropped, .. } = broker.stats();
        assert!(idle <= workers);
        assert!(pending == 0 || idle == 0, "a request waits beside an idle worker");
        // Every request is replied to, dropped, waiting, or held by one worker.
        let held = requests.checked_sub(replies + requests_dropped + pending as u64);
        assert!(held.is_some_and(|held| held <= workers as u64), "{held:?} requests held by {workers} workers");
    }
});
