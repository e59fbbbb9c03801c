//! Memory bounded in bytes per peer (issue 14): the byte HWM (`set_sndhwm_bytes`) caps what a
//! socket holds for a peer that stops reading, whatever the message HWM allows. Counts, never a
//! clock: how many 64 KiB messages a socket accepts before it pushes back (or drops).

#[macro_use]
mod common;

use std::time::Duration;

use common::*;
use zmtp::{Error, Message, Socket, SocketType};
use zmtp_testkit::{bounded, python_with_pyzmq};

const SIZE: usize = 64 * 1024;
/// Without a byte limit (and no message limit) the sender would take all of these: 128 MiB.
const TRIES: usize = 2048;
/// What a stalled peer may hold with a 1 MiB byte HWM: the limit, one message, and whatever the
/// kernel's socket buffers and the receiver's one-message queue took. Far below `TRIES`.
const BOUND: usize = 512;

over_transports!(
    a_sender_holds_at_most_the_byte_hwm_for_a_peer_that_stops_reading,
    a_publisher_drops_beyond_the_byte_hwm,
    subscriptions_over_the_per_peer_limits_close_the_connection,
);

/// On a current-thread runtime, so the connection's reader cannot refill the queue while the test
/// counts it (on more threads it resumes at half of RCVHWM, in the middle of the count).
mod xpub_notices_stop_at_rcvhwm_while_the_application_does_not_read {
    #[tokio::test]
    async fn tcp() {
        zmtp_testkit::bounded(super::xpub_notices_stop_at_rcvhwm_while_the_application_does_not_read("tcp")).await
    }
    #[tokio::test]
    async fn ipc() {
        zmtp_testkit::bounded(super::xpub_notices_stop_at_rcvhwm_while_the_application_does_not_read("ipc")).await
    }
    #[tokio::test]
    async fn inproc() {
        zmtp_testkit::bounded(super::xpub_notices_stop_at_rcvhwm_while_the_application_does_not_read("inproc")).await
    }
}

/// Frames per message are checked by the ZMTP reader; inproc passes whole messages between sockets
/// of one process, unframed, so there is nothing to limit there.
mod a_message_over_max_frames_closes_the_connection_with_its_reason {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tcp() {
        zmtp_testkit::bounded(super::a_message_over_max_frames_closes_the_connection_with_its_reason("tcp")).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ipc() {
        zmtp_testkit::bounded(super::a_message_over_max_frames_closes_the_connection_with_its_reason("ipc")).await
    }
}

async fn a_sender_holds_at_most_the_byte_hwm_for_a_peer_that_stops_reading(transport: &'static str) {
    let push = Socket::new(SocketType::Push);
    push.set_sndhwm(0);
    push.set_sndhwm_bytes(1 << 20);
    let ep = push.bind(&endpoint(transport, "bytes-push")).await.unwrap();
    let pull = Socket::new(SocketType::Pull);
    pull.set_rcvhwm(1);
    pull.connect(&ep).await.unwrap();
    push.send("hello").await.unwrap();
    assert_eq!(tokio::time::timeout(WAIT, pull.recv()).await.unwrap().unwrap()[0], "hello");
    // The puller stops reading. Count what the pusher still accepts.
    let payload = bytes::Bytes::from(vec![7u8; SIZE]);
    let mut accepted = 0;
    while accepted < TRIES {
        match push.try_send(Message::single(payload.clone())) {
            Ok(()) => accepted += 1,
            Err(Error::WouldBlock) => break,
            Err(e) => panic!("{e}"),
        }
        tokio::task::yield_now().await;
    }
    eprintln!("{transport}: accepted {accepted} messages of 64 KiB for a peer that stopped reading");
    assert!(accepted < BOUND, "{transport}: {accepted} messages of 64 KiB held for a peer that reads nothing");
    // Reading again drains it all, in order, nothing lost.
    for i in 0..accepted {
        let msg = tokio::time::timeout(WAIT, pull.recv()).await.unwrap().unwrap();
        assert_eq!(msg[0].len(), SIZE, "message {i}");
    }
}

async fn a_publisher_drops_beyond_the_byte_hwm(transport: &'static str) {
    let publisher = Socket::new(SocketType::Pub);
    publisher.set_sndhwm(0);
    publisher.set_sndhwm_bytes(1 << 20);
    let ep = publisher.bind(&endpoint(transport, "bytes-pub")).await.unwrap();
    let sub = Socket::new(SocketType::Sub);
    sub.set_rcvhwm(1);
    sub.subscribe("").unwrap();
    sub.connect(&ep).await.unwrap();
    // Subscription live: a probe gets through.
    tokio::time::timeout(WAIT, async {
        loop {
            publisher.send("probe").await.unwrap();
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await {
                return;
            }
        }
    })
    .await
    .expect("subscription live");
    while tokio::time::timeout(QUIET, sub.recv()).await.is_ok() {}
    let payload = bytes::Bytes::from(vec![7u8; SIZE]);
    for _ in 0..TRIES {
        publisher.send(Message::single(payload.clone())).await.unwrap();
        tokio::task::yield_now().await;
    }
    let mut received = 0;
    while let Ok(Ok(msg)) = tokio::time::timeout(QUIET, sub.recv()).await {
        if msg[0].len() == SIZE {
            received += 1;
        }
    }
    eprintln!("{transport}: {received} of {TRIES} published messages reached a subscriber that stopped reading");
    assert!(
        received < BOUND,
        "{transport}: {received} of {TRIES} messages were held for a subscriber that read nothing"
    );
}

/// The next `Disconnected` on `monitor`, with its reason.
async fn disconnected(monitor: &mut zmtp::Monitor) -> std::sync::Arc<zmtp::ConnectionError> {
    tokio::time::timeout(WAIT, async {
        loop {
            if let Some(zmtp::MonitorEvent::Disconnected { error, .. }) = monitor.next_event().await {
                return error;
            }
        }
    })
    .await
    .expect("a disconnect")
}

fn many_frames(count: usize) -> Message {
    let mut msg = Message::new();
    for _ in 0..count {
        msg.push(bytes::Bytes::new());
    }
    msg
}

async fn a_message_over_max_frames_closes_the_connection_with_its_reason(transport: &'static str) {
    let pull = Socket::new(SocketType::Pull);
    pull.set_max_frames(Some(100));
    let mut monitor = pull.monitor();
    let ep = pull.bind(&endpoint(transport, "frames")).await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.connect(&ep).await.unwrap();
    push.send(many_frames(100)).await.unwrap();
    assert_eq!(tokio::time::timeout(WAIT, pull.recv()).await.unwrap().unwrap().len(), 100, "at the limit: delivered");
    push.send(many_frames(101)).await.unwrap();
    let error = disconnected(&mut monitor).await;
    assert!(matches!(*error, zmtp::ConnectionError::Limit(zmtp::LimitError::Frames { limit: 100 })), "{error}");
    assert_eq!(error.to_string(), "limit: a message of more than 100 frames");
    // Unlimited: a message of 70,000 frames (more than the default 65,536) arrives whole.
    let pull = Socket::new(SocketType::Pull);
    pull.set_max_frames(None);
    let ep = pull.bind(&endpoint(transport, "frames-unlimited")).await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.connect(&ep).await.unwrap();
    push.send(many_frames(70_000)).await.unwrap();
    assert_eq!(tokio::time::timeout(WAIT, pull.recv()).await.unwrap().unwrap().len(), 70_000);
}

async fn subscriptions_over_the_per_peer_limits_close_the_connection(transport: &'static str) {
    for (count, bytes, topics, want) in [
        (
            Some(50),
            None,
            (0..51).map(|i| format!("topic-{i}")).collect::<Vec<_>>(),
            zmtp::LimitError::Subscriptions { limit: 50 },
        ),
        (
            None,
            Some(1000),
            (0..11).map(|i| format!("{i:0>100}")).collect(),
            zmtp::LimitError::SubscriptionBytes { limit: 1000 },
        ),
    ] {
        let publisher = Socket::new(SocketType::Pub);
        publisher.set_max_subscriptions(count);
        publisher.set_max_subscription_bytes(bytes);
        let mut monitor = publisher.monitor();
        let ep = publisher.bind(&endpoint(transport, "subs")).await.unwrap();
        let sub = Socket::new(SocketType::Sub);
        sub.set_reconnect_ivl(None);
        // Over inproc the subscriber's side applies its subscriptions to the publisher directly, so
        // it is the one whose connection ends with the reason (the publisher sees it close).
        let mut sub_monitor = sub.monitor();
        // Up to the limit, and the same topic again (not a new subscription): served.
        for topic in &topics[..topics.len() - 1] {
            sub.subscribe(topic).unwrap();
        }
        sub.subscribe(&topics[0]).unwrap();
        sub.connect(&ep).await.unwrap();
        let (probe, publisher_probe, sub_probe) = (topics[0].clone(), publisher.clone(), sub.clone());
        tokio::time::timeout(WAIT, async move {
            loop {
                publisher_probe.send(Message::single(bytes::Bytes::from(probe.clone()))).await.unwrap();
                if let Ok(Ok(_)) = tokio::time::timeout(std::time::Duration::from_millis(50), sub_probe.recv()).await {
                    return;
                }
            }
        })
        .await
        .expect("served up to the limit");
        sub.subscribe(topics.last().unwrap()).unwrap();
        let error = match transport {
            "inproc" => disconnected(&mut sub_monitor).await,
            _ => disconnected(&mut monitor).await,
        };
        assert!(matches!(*error, zmtp::ConnectionError::Limit(e) if e == want), "{transport}: {error}");
    }
}

/// The real libzmq as the sender (pyzmq): a message of 70,000 frames is over the default limit
/// and closes the connection with its reason; with the limit lifted it arrives whole, and so does
/// the message queued behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_libzmq_sender_of_many_frames_meets_the_documented_limit() {
    bounded(async {
        for unlimited in [false, true] {
            let pull = Socket::new(SocketType::Pull);
            if unlimited {
                pull.set_max_frames(None);
            }
            let mut monitor = pull.monitor();
            let ep = pull.bind("tcp://127.0.0.1:*").await.unwrap();
            let script = format!(
                "import zmq,time\nc=zmq.Context()\ns=c.socket(zmq.PUSH)\ns.linger=2000\ns.connect('{ep}')\n\
                 s.send_multipart([b'']*70000)\ns.send(b'after')\ntime.sleep(0.5)\ns.close()\nc.term()\n"
            );
            let mut python = tokio::process::Command::from(python_with_pyzmq())
                .args(["-c", &script])
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            if unlimited {
                let big = tokio::time::timeout(WAIT, pull.recv()).await.unwrap().unwrap();
                assert_eq!(big.len(), 70_000);
                let after = tokio::time::timeout(WAIT, pull.recv()).await.unwrap().unwrap();
                assert_eq!(after[0], "after");
            } else {
                let error = disconnected(&mut monitor).await;
                let limit = zmtp::DEFAULT_MAX_FRAMES;
                assert!(
                    matches!(*error, zmtp::ConnectionError::Limit(zmtp::LimitError::Frames { limit: l }) if l == limit),
                    "{error}"
                );
            }
            let _ = tokio::time::timeout(WAIT, python.wait()).await;
        }
    })
    .await;
}

/// A subscriber that subscribes and cancels one topic again and again stays within every
/// subscription limit, but each change is a notice for an XPUB's application. Notices are never
/// dropped, so the XPUB stops reading that peer at RCVHWM until its application reads: nothing is
/// lost, and what waits in the XPUB stays at RCVHWM instead of growing with the peer's commands.
async fn xpub_notices_stop_at_rcvhwm_while_the_application_does_not_read(transport: &'static str) {
    const HWM: usize = 10;
    const CHANGES: usize = 2000;
    let xpub = Socket::new(SocketType::XPub);
    xpub.set_rcvhwm(HWM);
    let ep = xpub.bind(&endpoint(transport, "xpub-notices")).await.unwrap();
    let xsub = Socket::new(SocketType::XSub);
    xsub.connect(&ep).await.unwrap();
    let change = |i: usize| {
        Message::single(bytes::Bytes::from_static(if i.is_multiple_of(2) { b"\x01churn" } else { b"\x00churn" }))
    };
    // The first change, once connected (before that, XSUB sends only its set on connecting).
    xsub.send(change(0)).await.unwrap();
    let first = tokio::time::timeout(WAIT, xpub.recv()).await.expect("a notice").unwrap();
    assert_eq!(&first[0][..], b"\x01churn");
    let sender = tokio::spawn({
        let xsub = xsub.clone();
        async move {
            for i in 1..CHANGES {
                xsub.send(change(i)).await.unwrap();
            }
        }
    });
    // Give the peer time to push everything it can (a settling pause, not an assertion on time:
    // the bound below holds however long this takes).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut queued = 0;
    while xpub.try_recv().is_ok() {
        queued += 1;
    }
    assert!(queued <= HWM, "{transport}: {queued} notices queued for an application that did not read (RCVHWM {HWM})");
    // Reading resumes the peer: every change arrives, in order.
    let mut seen = 1 + queued;
    while seen < CHANGES {
        let notice = tokio::time::timeout(WAIT, xpub.recv())
            .await
            .unwrap_or_else(|_| panic!("{transport}: notice {seen} never arrived"))
            .unwrap();
        let want: &[u8] = if seen.is_multiple_of(2) { b"\x01churn" } else { b"\x00churn" };
        assert_eq!(&notice[0][..], want, "{transport}: notice {seen}");
        seen += 1;
    }
    sender.await.unwrap();
}
