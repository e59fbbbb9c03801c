//! Healing a split brain (`Config::heal_split_brain`): after a partition heals, or an active that
//! stalled for longer than the peer expiry resumes, the pair settles on exactly one active — the
//! server that took over — and the other yields to passive. Nothing stops.

mod common;

use std::time::Duration;

use bstar::fsm::Vote;
use bstar::split::Split;
use bstar::{Config, Liveness, Notice, State};
use common::{FakePeer, Link, Node, PairEndpoints, Voter, ep};
use zmtp::SocketType;
use zmtp_testkit::bounded;

const MS: fn(u64) -> Duration = Duration::from_millis;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healed_partition_leaves_the_server_that_took_over_active_and_the_other_passive() {
    bounded(async {
        let heartbeat = MS(50);
        let eps = PairEndpoints::new();
        let (p_out, b_out) = (ep("p-link"), ep("b-link"));
        let p_to_b = Link::new(&eps.primary_state, &p_out).await;
        let b_to_p = Link::new(&eps.backup_state, &b_out).await;
        let primary = Node::start(
            Config::primary(&eps.primary_state, &b_out)
                .voter(&eps.primary_voter, SocketType::Router)
                .heartbeat(heartbeat)
                .heal_split_brain(true),
        )
        .await;
        let backup = Node::start(
            Config::backup(&eps.backup_state, &p_out)
                .voter(&eps.backup_voter, SocketType::Router)
                .heartbeat(heartbeat)
                .heal_split_brain(true),
        )
        .await;
        primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
        backup.wait("backup PASSIVE", |s| s.state == State::Passive).await;
        // Partition (or a stalled primary): the backup hears nothing and a client votes.
        p_to_b.cut();
        b_to_p.cut();
        backup.wait("backup: peer silent", |s| s.peer == Liveness::Silent).await;
        let mut voter = Voter::new(&backup).await;
        assert_eq!(voter.vote(&backup).await.vote, Vote::Accept, "the backup takes over");
        assert_eq!((primary.status().state, backup.status().state), (State::Active, State::Active));
        // Heal: the primary, which never took over, yields; the backup stays.
        p_to_b.heal();
        b_to_p.heal();
        primary.wait("primary yields", |s| s.state == State::Passive).await;
        primary.wait_notice(Notice::SplitBrain(Split::Yield)).await;
        primary.wait_notice(Notice::BecamePassive).await;
        backup.wait("backup hears the passive primary", |s| s.peer_state == Some(State::Passive)).await;
        assert_eq!(backup.status().state, State::Active);
        assert!(backup.status().running && primary.status().running);
        assert_eq!(backup.status().fatal, None);
        // The pair works as one again: the backup serves, the primary rejects.
        assert_eq!(voter.vote(&backup).await.vote, Vote::Accept);
        let mut to_primary = Voter::new(&primary).await;
        assert_eq!(to_primary.vote(&primary).await.vote, Vote::Reject);
        // The backup became passive once (when the pair formed), and never yielded. (Whether it
        // saw the conflict at all depends on whose heartbeat crossed first: if the primary yielded
        // before the backup heard its ACTIVE, the backup only ever heard PASSIVE.)
        let notices = backup.notices();
        assert_eq!(notices.iter().filter(|n| **n == Notice::BecamePassive).count(), 1, "{notices:?}");
        assert!(!notices.contains(&Notice::SplitBrain(Split::Yield)), "{notices:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_actives_without_a_takeover_and_dual_passives_settle_on_the_primary() {
    bounded(async {
        let every = MS(20);
        // An active primary hears another ACTIVE without ever having taken over: it yields.
        let (state_ep, fake_ep) = (ep("ps"), ep("fake"));
        let fake = FakePeer::bind(&fake_ep).await;
        let primary = Node::start(
            Config::primary(&state_ep, &fake_ep)
                .voter(ep("pv"), SocketType::Router)
                .heartbeat(MS(50))
                .heal_split_brain(true),
        )
        .await;
        fake.say_until("2", every, &primary, |s| s.state == State::Active).await;
        fake.say("3");
        primary.wait("primary yields", |s| s.state == State::Passive).await;
        // Now both are passive: the primary takes the active role.
        fake.say("4");
        primary.wait("primary serves", |s| s.state == State::Active).await;
        primary.wait_notice(Notice::SplitBrain(Split::Serve)).await;
        assert!(primary.status().running);

        // A passive backup hearing another passive waits for the primary (no fatal error).
        let (state_ep, fake_ep) = (ep("bs"), ep("fake"));
        let fake = FakePeer::bind(&fake_ep).await;
        let backup = Node::start(
            Config::backup(&state_ep, &fake_ep)
                .voter(ep("bv"), SocketType::Router)
                .heartbeat(MS(50))
                .heal_split_brain(true),
        )
        .await;
        fake.say_until("3", every, &backup, |s| s.state == State::Passive).await;
        fake.say("4");
        backup.wait_notice(Notice::SplitBrain(Split::Wait)).await;
        assert_eq!(backup.status().state, State::Passive);
        assert!(backup.status().running);
    })
    .await;
}

/// An active that learns its peer holds newer state falls silent (`Handle::fall_silent`): the
/// passive finds it silent, takes over on a client's vote, and the silent server, hearing it
/// ACTIVE, yields and speaks again as PASSIVE. Neither stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_active_is_taken_over_and_then_yields() {
    bounded(async {
        let heartbeat = MS(50);
        let eps = PairEndpoints::new();
        let primary = Node::start(eps.primary(heartbeat).heal_split_brain(true)).await;
        let backup = Node::start(eps.backup(heartbeat).heal_split_brain(true)).await;
        primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
        backup.wait("backup PASSIVE, primary heard", |s| s.state == State::Passive && s.peer == Liveness::Alive).await;

        primary.handle.fall_silent();
        assert!(primary.handle.is_silent());
        backup.wait("backup: the primary fell silent", |s| s.peer == Liveness::Silent).await;
        let mut voter = Voter::new(&backup).await;
        assert_eq!(voter.vote(&backup).await.vote, Vote::Accept, "the backup takes over");
        primary.wait("the silent primary yields", |s| s.state == State::Passive).await;
        primary.wait_notice(Notice::SplitBrain(Split::Yield)).await;
        primary.wait_notice(Notice::BecamePassive).await;
        assert!(!primary.handle.is_silent(), "a new state is said again");
        backup
            .wait("backup hears the primary again, passive", |s| {
                s.peer == Liveness::Alive && s.peer_state == Some(State::Passive)
            })
            .await;
        assert_eq!(backup.status().state, State::Active);
        assert!(primary.status().running && backup.status().running);
        assert_eq!((primary.status().fatal, backup.status().fatal), (None, None));
    })
    .await;
}

/// A silent active whose peer restarts speaks again. The restarted peer no longer knows why this
/// server fell silent (say, it had been told its state was newer, and lost that with the restart);
/// hearing nothing, a BACKUP would wait for good, as would a PRIMARY that may not start alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_active_speaks_again_when_its_peer_restarts() {
    bounded(async {
        let heartbeat = MS(50);
        let eps = PairEndpoints::new();
        let primary = Node::start(eps.primary(heartbeat).heal_split_brain(true)).await;
        let backup = Node::start(eps.backup(heartbeat).heal_split_brain(true)).await;
        primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
        backup.wait("backup PASSIVE, primary heard", |s| s.state == State::Passive && s.peer == Liveness::Alive).await;

        primary.handle.fall_silent();
        backup.kill().await;
        let backup = Node::start(eps.backup(heartbeat).heal_split_brain(true)).await;
        backup.wait("the restarted backup hears the primary and stands by", |s| s.state == State::Passive).await;
        assert!(!primary.handle.is_silent(), "speaking again");
        assert_eq!(primary.status().state, State::Active);
        assert!(primary.status().running && backup.status().running);
    })
    .await;
}
