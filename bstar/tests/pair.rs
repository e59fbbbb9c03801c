//! Binary Star behaviours 1–5 of patterns.md §D with in-process runners over real sockets (ipc) and
//! short heartbeats.

mod common;

use std::time::Duration;

use bstar::fsm::Vote;
use bstar::{Config, Error, FsmError, Liveness, Notice, State};
use common::{FakePeer, Link, Node, PairEndpoints, Voter, WAIT, ep};
use tokio::time::{Instant, timeout};
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::bounded;

const MS: fn(u64) -> Duration = Duration::from_millis;

#[derive(Clone, Copy, Debug)]
enum Order {
    PrimaryFirst,
    BackupFirst,
    Together,
}

/// Waits until a probe subscribed to `node`'s state PUB has received `count` state messages saying
/// `state` (so the node is demonstrably up and alone before its peer starts).
async fn heard_heartbeats(node: &Node, state: State, count: usize) {
    let probe = Socket::new(SocketType::Sub);
    probe.subscribe("").unwrap();
    probe.connect(node.handle.state_endpoint()).await.unwrap();
    let mut seen = 0;
    while seen < count {
        let msg = timeout(WAIT, probe.recv()).await.expect("no heartbeat").unwrap();
        assert_eq!(msg, bstar::codec::encode(state));
        seen += 1;
    }
}

/// Starts a pair in `order` and returns (primary, backup, time from the second start until the
/// primary is ACTIVE and the backup PASSIVE).
async fn start_pair(order: Order, heartbeat: Duration) -> (Node, Node, Duration) {
    let eps = PairEndpoints::new();
    let (primary, backup, since) = match order {
        Order::PrimaryFirst => {
            let primary = Node::start(eps.primary(heartbeat)).await;
            heard_heartbeats(&primary, State::Primary, 3).await;
            let since = Instant::now();
            (primary, Node::start(eps.backup(heartbeat)).await, since)
        }
        Order::BackupFirst => {
            let backup = Node::start(eps.backup(heartbeat)).await;
            heard_heartbeats(&backup, State::Backup, 3).await;
            let since = Instant::now();
            (Node::start(eps.primary(heartbeat)).await, backup, since)
        }
        Order::Together => {
            let since = Instant::now();
            let (p, b) = tokio::join!(Node::start(eps.primary(heartbeat)), Node::start(eps.backup(heartbeat)));
            (p, b, since)
        }
    };
    primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
    backup.wait("backup PASSIVE", |s| s.state == State::Passive).await;
    let took = since.elapsed();
    (primary, backup, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_start_order_converges_to_primary_active_backup_passive_with_one_callback_each() {
    bounded(async {
        let heartbeat = MS(50);
        for order in [Order::PrimaryFirst, Order::BackupFirst, Order::Together] {
            let (primary, backup, took) = start_pair(order, heartbeat).await;
            eprintln!("{order:?}: converged in {took:?} at heartbeat {heartbeat:?}");
            // ~2 heartbeats: one for the first state message to cross, one for the answer; allow
            // one more heartbeat and some scheduling slack on a loaded machine.
            assert!(took <= heartbeat * 3 + MS(100), "{order:?}: converged in {took:?}");
            // Let several more heartbeats pass: nothing else may change (the waiting is the test).
            tokio::time::sleep(heartbeat * 6).await;
            assert_eq!(primary.roles(), vec![Notice::BecameActive], "{order:?} primary");
            assert_eq!(backup.roles(), vec![Notice::BecamePassive], "{order:?} backup");
            assert_eq!((primary.status().state, backup.status().state), (State::Active, State::Passive));
            assert!(primary.handle.peer_alive() && backup.handle.peer_alive());
            assert_eq!(primary.status().peer_state, Some(State::Passive));
            assert_eq!(backup.status().peer_state, Some(State::Active));
            // The active serves, the passive does not.
            let mut to_primary = Voter::new(&primary).await;
            let mut to_backup = Voter::new(&backup).await;
            assert_eq!(to_primary.vote(&primary).await.vote, Vote::Accept);
            assert_eq!(to_backup.vote(&backup).await.vote, Vote::Reject);
            primary.kill().await;
            backup.kill().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_alone_rejects_until_the_peer_expires_then_serves() {
    bounded(async {
        let heartbeat = MS(250);
        let config = Config::primary(ep("ps"), ep("nobody")).voter(ep("pv"), SocketType::Router).heartbeat(heartbeat);
        let primary = Node::start(config).await;
        let mut voter = Voter::new(&primary).await;
        let mut ballots = Vec::new();
        loop {
            let ballot = voter.vote(&primary).await;
            ballots.push(ballot);
            if ballot.vote == Vote::Accept {
                break;
            }
            tokio::time::sleep(heartbeat / 5).await; // pacing between votes, not synchronisation
        }
        let expiry = primary.status().peer_expiry;
        assert!(ballots.len() >= 2, "the first vote, right after start, is rejected: {ballots:?}");
        for b in &ballots[..ballots.len() - 1] {
            assert_eq!(b.vote, Vote::Reject);
            assert!(b.sent < expiry, "a vote sent after expiry was rejected: {b:?}");
        }
        let accepted = ballots.last().unwrap();
        assert!(accepted.observed >= expiry, "accepted before the peer expired");
        assert!(accepted.observed.duration_since(primary.started) >= heartbeat * 2);
        assert_eq!(primary.status().state, State::Active);
        // The role change is reported before the request that caused it.
        let notices = primary.notices();
        let active_at = notices.iter().position(|n| *n == Notice::BecameActive).expect("BecameActive");
        let request_at = notices.iter().position(|n| matches!(n, Notice::Request(_))).expect("Request");
        assert!(active_at < request_at, "{notices:?}");
        assert_eq!(primary.roles(), vec![Notice::BecameActive]);
        // From now on it serves.
        assert_eq!(voter.vote(&primary).await.vote, Vote::Accept);
        primary.kill().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_alone_never_serves() {
    bounded(async {
        let heartbeat = MS(50);
        let config = Config::backup(ep("bs"), ep("nobody")).voter(ep("bv"), SocketType::Router).heartbeat(heartbeat);
        let backup = Node::start(config).await;
        let mut voter = Voter::new(&backup).await;
        // Vote for ten expiry periods.
        let until = Instant::now() + heartbeat * 20;
        let mut votes = 0;
        while Instant::now() < until {
            assert_eq!(voter.vote(&backup).await.vote, Vote::Reject);
            votes += 1;
            tokio::time::sleep(heartbeat / 2).await; // pacing
        }
        let status = backup.status();
        assert_eq!((status.state, status.accepted, status.rejected), (State::Backup, 0, votes));
        assert_eq!(status.peer, Liveness::Silent);
        assert!(!backup.handle.peer_alive());
        assert_eq!(backup.notices(), vec![Notice::PeerSilent]);
        backup.kill().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_active_the_passive_promotes_on_the_first_vote_after_expiry_not_before() {
    bounded(async {
        let heartbeat = MS(150);
        let (primary, backup, _) = start_pair(Order::Together, heartbeat).await;
        let mut voter = Voter::new(&backup).await;
        primary.kill().await;
        let ballots = voter.vote_until_accepted(&backup, heartbeat / 4).await;
        let status = backup.status();
        let last_heard = status.last_heard.expect("the backup heard the primary");
        let expiry = last_heard + heartbeat * 2;
        assert_eq!(status.peer_expiry, expiry);
        assert!(ballots.len() >= 2, "votes right after the kill are rejected: {ballots:?}");
        for b in &ballots[..ballots.len() - 1] {
            assert_eq!(b.vote, Vote::Reject);
            assert!(b.sent < expiry, "a vote sent after expiry was rejected: {b:?} (expiry {expiry:?})");
        }
        assert!(ballots.last().unwrap().observed >= expiry, "promoted before the peer expired");
        assert_eq!(status.state, State::Active);
        // The operator saw the passive lose its peer before it took over, then the take-over.
        let notices: Vec<_> =
            backup.notices().into_iter().filter(|n| !matches!(n, Notice::PeerAlive(_) | Notice::Request(_))).collect();
        assert_eq!(notices, vec![Notice::BecamePassive, Notice::PeerSilent, Notice::BecameActive]);
        assert!(!backup.handle.peer_alive());
        backup.kill().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_reports_a_dead_peer_before_any_vote() {
    bounded(async {
        let heartbeat = MS(50);
        let (primary, backup, _) = start_pair(Order::Together, heartbeat).await;
        assert!(backup.handle.peer_alive());
        let killed = Instant::now();
        primary.kill().await;
        let status = backup.wait("peer silent", |s| s.peer == Liveness::Silent).await;
        assert!(killed.elapsed() >= heartbeat, "silence reported too early");
        assert_eq!(status.state, State::Passive, "no vote, no take-over");
        assert!(!backup.handle.peer_alive());
        backup.wait_notice(Notice::PeerSilent).await;
        backup.kill().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_primary_comes_up_passive_no_fail_back() {
    bounded(async {
        let heartbeat = MS(50);
        let eps = PairEndpoints::new();
        let primary = Node::start(eps.primary(heartbeat)).await;
        let backup = Node::start(eps.backup(heartbeat)).await;
        primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
        backup.wait("backup PASSIVE", |s| s.state == State::Passive).await;
        // Fail over to the backup.
        primary.kill().await;
        let mut to_backup = Voter::new(&backup).await;
        while to_backup.vote(&backup).await.vote == Vote::Reject {
            tokio::time::sleep(heartbeat / 2).await; // pacing
        }
        assert_eq!(backup.status().state, State::Active);
        // The primary comes back.
        let restarted = Node::start(eps.primary(heartbeat)).await;
        let mut to_restarted = Voter::new(&restarted).await;
        assert_eq!(to_restarted.vote(&restarted).await.vote, Vote::Reject, "no serving while the peer is fresh");
        restarted.wait("restarted primary PASSIVE", |s| s.state == State::Passive).await;
        // Several heartbeats later nothing has moved back.
        tokio::time::sleep(heartbeat * 6).await;
        assert_eq!(restarted.roles(), vec![Notice::BecamePassive]);
        assert_eq!(backup.roles(), vec![Notice::BecamePassive, Notice::BecameActive]);
        assert_eq!(to_restarted.vote(&restarted).await.vote, Vote::Reject);
        assert_eq!(to_backup.vote(&backup).await.vote, Vote::Accept);
        restarted.kill().await;
        backup.kill().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_brain_heals_into_dual_actives_fatal_on_both_servers() {
    bounded(async {
        let heartbeat = MS(50);
        let eps = PairEndpoints::new();
        // Each server hears the other only through a link the test can cut.
        let (p_out, b_out) = (ep("p-link"), ep("b-link"));
        let p_to_b = Link::new(&eps.primary_state, &p_out).await;
        let b_to_p = Link::new(&eps.backup_state, &b_out).await;
        let primary = Node::start(
            Config::primary(&eps.primary_state, &b_out)
                .voter(&eps.primary_voter, SocketType::Router)
                .heartbeat(heartbeat),
        )
        .await;
        // Offset the heartbeat phases by half a period (scenario set-up, not synchronisation): when
        // the partition heals, one server hears the other's ACTIVE first, and the second must still
        // learn of the conflict although the first stops.
        tokio::time::sleep(heartbeat / 2).await;
        let backup = Node::start(
            Config::backup(&eps.backup_state, &p_out).voter(&eps.backup_voter, SocketType::Router).heartbeat(heartbeat),
        )
        .await;
        primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
        backup.wait("backup PASSIVE", |s| s.state == State::Passive).await;
        // Partition: both sides lose each other; a client on the backup's side votes.
        p_to_b.cut();
        b_to_p.cut();
        backup.wait("backup: peer silent", |s| s.peer == Liveness::Silent).await;
        let mut voter = Voter::new(&backup).await;
        assert_eq!(voter.vote(&backup).await.vote, Vote::Accept, "split brain: the backup takes over");
        assert_eq!((primary.status().state, backup.status().state), (State::Active, State::Active));
        // The partition heals: both see an active peer and stop.
        p_to_b.heal();
        b_to_p.heal();
        let (p, b) = (primary.handle.clone(), backup.handle.clone());
        let (p_result, b_result) = tokio::join!(primary.finished(), backup.finished());
        assert!(matches!(p_result, Err(Error::Fatal(FsmError::DualActive))), "{p_result:?}");
        assert!(matches!(b_result, Err(Error::Fatal(FsmError::DualActive))), "{b_result:?}");
        for handle in [p, b] {
            let status = handle.status();
            assert_eq!((status.fatal, status.running), (Some(FsmError::DualActive), false));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_dual_active_and_dual_passive_are_fatal() {
    bounded(async {
        let every = MS(20);
        // An active primary hears another active.
        let (peer_ep, fake_ep) = (ep("ps"), ep("fake"));
        let fake = FakePeer::bind(&fake_ep).await;
        let primary =
            Node::start(Config::primary(&peer_ep, &fake_ep).voter(ep("pv"), SocketType::Router).heartbeat(MS(50)))
                .await;
        fake.say_until("2", every, &primary, |s| s.state == State::Active).await;
        fake.say("3");
        let result = primary.finished().await;
        assert!(matches!(result, Err(Error::Fatal(FsmError::DualActive))), "{result:?}");

        // A passive backup hears another passive.
        let (peer_ep, fake_ep) = (ep("bs"), ep("fake"));
        let fake = FakePeer::bind(&fake_ep).await;
        let backup =
            Node::start(Config::backup(&peer_ep, &fake_ep).voter(ep("bv"), SocketType::Router).heartbeat(MS(50))).await;
        fake.say_until("3", every, &backup, |s| s.state == State::Passive).await;
        fake.say("4");
        let handle = backup.handle.clone();
        let result = backup.finished().await;
        assert!(matches!(result, Err(Error::Fatal(FsmError::DualPassive))), "{result:?}");
        assert_eq!(handle.status().fatal, Some(FsmError::DualPassive));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_state_messages_are_logged_and_dropped() {
    bounded(async {
        let (peer_ep, fake_ep) = (ep("ps"), ep("fake"));
        let fake = FakePeer::bind(&fake_ep).await;
        let primary =
            Node::start(Config::primary(&peer_ep, &fake_ep).voter(ep("pv"), SocketType::Router).heartbeat(MS(50)))
                .await;
        // PEER_PRIMARY is ignored by a primary: use it to know the subscription is up, then fall
        // silent so that every "1" in flight has arrived (the wait for silence is the test's point:
        // garbage must not revive the peer).
        fake.say_until("1", MS(20), &primary, |s| s.peer_state == Some(State::Primary)).await;
        primary.wait("peer silent", |s| s.peer == Liveness::Silent).await;
        let heard = primary.status().last_heard;
        let garbage: Vec<Message> = vec![
            Message::from(vec!["2", "2"]),
            Message::single(""),
            Message::single("x"),
            Message::single("9"),
            Message::single("0"),
            Message::single("-2"),
            Message::single("2 "),
            Message::single(vec![b'7'; 4096]),
        ];
        let n = garbage.len() as u64;
        for msg in garbage {
            fake.say(msg);
        }
        let status = primary.wait("malformed messages counted", |s| s.malformed == n).await;
        assert_eq!(status.state, State::Primary, "garbage changes nothing");
        assert_eq!(status.last_heard, heard, "garbage is not a heartbeat");
        assert_eq!(status.peer, Liveness::Silent);
        assert!(!primary.handle.peer_alive());
        assert!(!primary.run.is_finished(), "the runner survives");
        fake.say_until("2", MS(20), &primary, |s| s.state == State::Active).await;
        primary.wait_notice(Notice::BecameActive).await;
        assert_eq!(primary.roles(), vec![Notice::BecameActive]);
        primary.kill().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_configured_primary_reject_every_request() {
    bounded(async {
        let heartbeat = MS(50);
        let (a_state, b_state) = (ep("a"), ep("b"));
        let a =
            Node::start(Config::primary(&a_state, &b_state).voter(ep("av"), SocketType::Router).heartbeat(heartbeat))
                .await;
        let b =
            Node::start(Config::primary(&b_state, &a_state).voter(ep("bv"), SocketType::Router).heartbeat(heartbeat))
                .await;
        a.wait("a hears b", |s| s.peer_state == Some(State::Primary)).await;
        b.wait("b hears a", |s| s.peer_state == Some(State::Primary)).await;
        let (mut to_a, mut to_b) = (Voter::new(&a).await, Voter::new(&b).await);
        let until = Instant::now() + heartbeat * 8;
        while Instant::now() < until {
            assert_eq!(to_a.vote(&a).await.vote, Vote::Reject);
            assert_eq!(to_b.vote(&b).await.vote, Vote::Reject);
            tokio::time::sleep(heartbeat / 2).await; // pacing
        }
        assert_eq!((a.status().state, b.status().state), (State::Primary, State::Primary));
        a.kill().await;
        b.kill().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_application_backpressures_votes_but_not_heartbeats() {
    bounded(async {
        let heartbeat = MS(50);
        let (state_ep, fake_ep) = (ep("ps"), ep("fake"));
        let fake = FakePeer::bind(&fake_ep).await;
        let config = Config::primary(&state_ep, &fake_ep)
            .voter(ep("pv"), SocketType::Router)
            .heartbeat(heartbeat)
            .request_queue(2);
        // Nobody reads the notices for now.
        let (star, mut notices) = common::bind_retrying(config).await;
        let handle = star.handle();
        let run = tokio::spawn(star.run());
        let deadline = Instant::now() + WAIT;
        while handle.state() != State::Active {
            assert!(Instant::now() < deadline, "never became active");
            fake.say("2");
            let _ = timeout(MS(20), handle.wait_for(|s| s.state == State::Active)).await;
        }
        let client = Socket::new(SocketType::Dealer);
        client.connect(handle.voter_endpoint()).await.unwrap();
        for i in 0..10 {
            client.send(format!("r{i}")).await.unwrap();
        }
        timeout(WAIT, handle.wait_for(|s| s.accepted == 2)).await.unwrap().unwrap();
        // Heartbeats keep flowing while the queue is full.
        let probe = Socket::new(SocketType::Sub);
        probe.subscribe("").unwrap();
        probe.connect(handle.state_endpoint()).await.unwrap();
        for _ in 0..3 {
            let msg = timeout(WAIT, probe.recv()).await.unwrap().unwrap();
            assert_eq!(msg, Message::single("3"));
        }
        assert_eq!(handle.status().accepted, 2, "no more than the queue bound is read");
        // The application catches up: every request arrives, in order.
        let mut bodies = Vec::new();
        while bodies.len() < 10 {
            if let Notice::Request(r) = timeout(WAIT, notices.recv()).await.unwrap().unwrap() {
                bodies.push(String::from_utf8(r[1].to_vec()).unwrap());
            }
        }
        assert_eq!(bodies, (0..10).map(|i| format!("r{i}")).collect::<Vec<_>>());
        handle.close();
        assert!(timeout(WAIT, run).await.unwrap().unwrap().is_ok(), "stop ends the run with Ok");
        assert_eq!(notices.recv().await, None, "the notices end with the runner");
    })
    .await;
}
