//! `Socket::set_busy_poll` (issue 20): a receive spins before it parks. What it must keep: every
//! message arrives (during the spin, and after it gave up and parked), the runtime's other tasks
//! still run while it spins (on a current-thread runtime, the peer that will answer is one of
//! them), and a receive dropped mid-spin takes nothing.

use std::time::Duration;

use tokio::time::timeout;
use zmtp::{Socket, SocketType};
use zmtp_testkit::STEP;

async fn pair(budget: Duration) -> (Socket, Socket) {
    let rep = Socket::new(SocketType::Rep);
    rep.set_busy_poll(Some(budget));
    let endpoint = rep.bind("tcp://127.0.0.1:*").await.unwrap();
    let req = Socket::new(SocketType::Req);
    req.set_busy_poll(Some(budget));
    req.connect(&endpoint).await.unwrap();
    (req, rep)
}

#[tokio::test(flavor = "current_thread")]
async fn round_trips_with_both_ends_spinning_on_one_thread() {
    // Both ends on one thread, each spinning while it waits: the spin must let the other run.
    let (req, rep) = pair(Duration::from_millis(5)).await;
    let server = tokio::spawn(async move {
        for _ in 0..200 {
            let m = rep.recv().await.unwrap();
            rep.send(m).await.unwrap();
        }
    });
    for i in 0..200 {
        req.send(format!("{i}")).await.unwrap();
        let echo = timeout(STEP, req.recv()).await.expect("answer in time").unwrap();
        assert_eq!(echo[0], format!("{i}").as_bytes());
    }
    server.await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_receive_that_outlasts_its_spin_parks_and_still_gets_the_message() {
    // A 1 µs budget is spent long before the answer, sent only after a real sleep.
    let (req, rep) = pair(Duration::from_micros(1)).await;
    let server = tokio::spawn(async move {
        let m = rep.recv().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        rep.send(m).await.unwrap();
    });
    req.send("late").await.unwrap();
    assert_eq!(timeout(STEP, req.recv()).await.unwrap().unwrap()[0], "late");
    server.await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn recv_many_spins_too_and_a_dropped_spin_takes_nothing() {
    let pull = Socket::new(SocketType::Pull);
    pull.set_busy_poll(Some(Duration::from_millis(20)));
    assert_eq!(pull.busy_poll(), Some(Duration::from_millis(20)));
    let endpoint = pull.bind("tcp://127.0.0.1:*").await.unwrap();
    let push = Socket::new(SocketType::Push);
    push.connect(&endpoint).await.unwrap();
    // Dropped while it spins (nothing was sent): nothing is taken, nothing lost.
    let mut got = Vec::new();
    assert!(timeout(Duration::from_millis(5), pull.recv_many(&mut got, 10)).await.is_err());
    assert!(got.is_empty());
    push.send("one").await.unwrap();
    push.send("two").await.unwrap();
    while got.len() < 2 {
        timeout(STEP, pull.recv_many(&mut got, 10)).await.unwrap().unwrap();
    }
    assert_eq!((&got[0][0][..], &got[1][0][..]), (&b"one"[..], &b"two"[..]));
    pull.set_busy_poll(None);
    assert_eq!(pull.busy_poll(), None);
}
