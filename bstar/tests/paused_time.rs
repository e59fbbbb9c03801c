//! Failover timing under tokio's paused time, with the Guide's one-second heartbeat: the bounds are
//! asserted in *virtual* time, so they are exact and hold on a machine under any load. Over
//! inproc (no real I/O), so the auto-advancing clock never overtakes a message in flight.

mod common;

use std::time::Duration;

use bstar::fsm::Vote;
use bstar::{Config, Notice, State};
use common::{Node, Voter};
use tokio::time::Instant;
use zmtp::SocketType;
use zmtp_testkit::bounded;

const HEARTBEAT: Duration = Duration::from_secs(1);
/// How often the test's client votes while the passive waits for its peer to expire.
const VOTE_EVERY: Duration = Duration::from_millis(100);

fn inproc(tag: &str) -> String {
    format!("inproc://{}", zmtp_testkit::unique(tag))
}

async fn pair() -> (Node, Node) {
    let (ps, bs, pv, bv) = (inproc("ps"), inproc("bs"), inproc("pv"), inproc("bv"));
    let primary = Config::primary(&ps, &bs).voter(&pv, SocketType::Router).heartbeat(HEARTBEAT);
    let backup = Config::backup(&bs, &ps).voter(&bv, SocketType::Router).heartbeat(HEARTBEAT);
    let (primary, backup) = tokio::join!(Node::start(primary), Node::start(backup));
    primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
    backup.wait("backup PASSIVE", |s| s.state == State::Passive).await;
    (primary, backup)
}

#[tokio::test(start_paused = true)]
async fn the_passive_takes_over_on_the_first_vote_two_heartbeats_after_the_active_died() {
    bounded(async {
        let (primary, backup) = pair().await;
        // Let a few heartbeats pass so the passive has heard its peer recently.
        tokio::time::sleep(HEARTBEAT * 3).await;
        let mut voter = Voter::new(&backup).await;
        let killed_at = Instant::now();
        primary.kill().await;
        let ballots = voter.vote_until_accepted(&backup, VOTE_EVERY).await;
        let status = backup.status();
        let last_heard = status.last_heard.expect("the backup heard the primary");
        let expiry = last_heard + HEARTBEAT * 2;
        assert_eq!(status.peer_expiry, expiry, "peer expiry is two heartbeats after the last one heard");
        assert!(last_heard <= killed_at, "nothing heard from a dead peer");
        assert!(killed_at - last_heard <= HEARTBEAT, "heard within the last heartbeat before the kill");
        for b in &ballots[..ballots.len() - 1] {
            assert_eq!(b.vote, Vote::Reject);
            assert!(b.sent < expiry, "a vote sent after expiry was rejected: {b:?} (expiry {expiry:?})");
        }
        let accepted = ballots.last().unwrap();
        assert!(accepted.observed >= expiry, "promoted before the peer expired");
        assert!(accepted.sent < expiry + VOTE_EVERY, "the first vote after expiry promotes: {accepted:?}");
        assert_eq!(status.state, State::Active);
        // A count, not a clock: votes every VOTE_EVERY of virtual time were all rejected for at
        // least the heartbeat between the last one heard and the kill.
        assert!(ballots.len() as u32 >= (HEARTBEAT.as_millis() / VOTE_EVERY.as_millis()) as u32, "{ballots:?}");
        let notices: Vec<_> =
            backup.notices().into_iter().filter(|n| !matches!(n, Notice::PeerAlive(_) | Notice::Request(_))).collect();
        assert_eq!(notices, vec![Notice::BecamePassive, Notice::PeerSilent, Notice::BecameActive]);
        backup.kill().await;
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_passive_whose_active_keeps_beating_never_takes_over() {
    bounded(async {
        let (primary, backup) = pair().await;
        let mut voter = Voter::new(&backup).await;
        // Ten heartbeats of virtual time, a vote every 500 ms: all rejected, roles unchanged.
        for _ in 0..20 {
            let ballot = voter.vote(&backup).await;
            assert_eq!(ballot.vote, Vote::Reject, "{ballot:?}");
            tokio::time::sleep(HEARTBEAT / 2).await;
        }
        assert_eq!(backup.status().state, State::Passive);
        assert_eq!(primary.status().state, State::Active);
        assert!(!backup.notices().contains(&Notice::PeerSilent), "{:?}", backup.notices());
        primary.kill().await;
        backup.kill().await;
    })
    .await;
}
