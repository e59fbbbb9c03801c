//! The pure parts, exhaustively: every (state, event, peer-expired?) combination of the FSM against
//! the transition table written out by hand, the state-message codec, and the peer-expiry clock.

use std::time::Duration;

use bstar::codec::{self, MalformedState};
use bstar::fsm::{Event, Fsm, FsmError, Outcome, Role, Side, State, Vote, transition};
use bstar::liveness::{Liveness, PeerClock};
use bytes::Bytes;
use tokio::time::Instant;
use zmtp::Message;

use Event::*;
use State::*;

/// What a row of the table says.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// State unchanged, no vote.
    Ignore,
    /// New state (a role change), no vote.
    To(State),
    /// A client request: verdict and resulting state.
    Verdict(Vote, State),
    Fatal(FsmError),
}

/// patterns.md §A, row by row: (state, event, peer expired?, expected).
const TABLE: [(State, Event, bool, Expect); 40] = {
    use Expect::{Fatal, Ignore, To, Verdict};
    use Vote::{Accept, Reject};
    [
        // PRIMARY
        (Primary, PeerPrimary, false, Ignore),
        (Primary, PeerPrimary, true, Ignore),
        (Primary, PeerBackup, false, To(Active)),
        (Primary, PeerBackup, true, To(Active)),
        (Primary, PeerActive, false, To(Passive)),
        (Primary, PeerActive, true, To(Passive)),
        (Primary, PeerPassive, false, Ignore),
        (Primary, PeerPassive, true, Ignore),
        (Primary, ClientRequest, false, Verdict(Reject, Primary)),
        (Primary, ClientRequest, true, Verdict(Accept, Active)),
        // BACKUP
        (Backup, PeerPrimary, false, Ignore),
        (Backup, PeerPrimary, true, Ignore),
        (Backup, PeerBackup, false, Ignore),
        (Backup, PeerBackup, true, Ignore),
        (Backup, PeerActive, false, To(Passive)),
        (Backup, PeerActive, true, To(Passive)),
        (Backup, PeerPassive, false, Ignore),
        (Backup, PeerPassive, true, Ignore),
        (Backup, ClientRequest, false, Verdict(Reject, Backup)),
        (Backup, ClientRequest, true, Verdict(Reject, Backup)),
        // ACTIVE
        (Active, PeerPrimary, false, Ignore),
        (Active, PeerPrimary, true, Ignore),
        (Active, PeerBackup, false, Ignore),
        (Active, PeerBackup, true, Ignore),
        (Active, PeerActive, false, Fatal(FsmError::DualActive)),
        (Active, PeerActive, true, Fatal(FsmError::DualActive)),
        (Active, PeerPassive, false, Ignore),
        (Active, PeerPassive, true, Ignore),
        (Active, ClientRequest, false, Verdict(Accept, Active)),
        (Active, ClientRequest, true, Verdict(Accept, Active)),
        // PASSIVE
        (Passive, PeerPrimary, false, To(Active)),
        (Passive, PeerPrimary, true, To(Active)),
        (Passive, PeerBackup, false, To(Active)),
        (Passive, PeerBackup, true, To(Active)),
        (Passive, PeerActive, false, Ignore),
        (Passive, PeerActive, true, Ignore),
        (Passive, PeerPassive, false, Fatal(FsmError::DualPassive)),
        (Passive, PeerPassive, true, Fatal(FsmError::DualPassive)),
        (Passive, ClientRequest, false, Verdict(Reject, Passive)),
        (Passive, ClientRequest, true, Verdict(Accept, Active)),
    ]
};

fn role_of(from: State, to: State) -> Option<Role> {
    match to {
        _ if from == to => None,
        Active => Some(Role::Active),
        Passive => Some(Role::Passive),
        _ => panic!("the table never moves into a start state"),
    }
}

fn expected_outcome(state: State, expect: Expect) -> Result<Outcome, FsmError> {
    match expect {
        Expect::Ignore => Ok(Outcome { state, vote: None, became: None, split: None }),
        Expect::To(next) => Ok(Outcome { state: next, vote: None, became: role_of(state, next), split: None }),
        Expect::Verdict(vote, next) => {
            Ok(Outcome { state: next, vote: Some(vote), became: role_of(state, next), split: None })
        }
        Expect::Fatal(e) => Err(e),
    }
}

#[test]
fn the_table_covers_every_combination_exactly_once() {
    let mut seen = std::collections::HashSet::new();
    for (state, event, expired, _) in TABLE {
        assert!(seen.insert((state, event, expired)), "duplicate row {state} {event} {expired}");
    }
    for state in State::ALL {
        for event in Event::ALL {
            for expired in [false, true] {
                assert!(seen.contains(&(state, event, expired)), "missing row {state} {event} {expired}");
            }
        }
    }
    assert_eq!(seen.len(), 4 * 5 * 2);
}

#[test]
fn transition_matches_the_table_for_every_state_event_and_expiry() {
    for (state, event, expired, expect) in TABLE {
        let got = transition(state, event, expired);
        assert_eq!(got, expected_outcome(state, expect), "{state} + {event} (peer expired: {expired})");
    }
}

#[test]
fn fsm_handle_applies_the_table_and_keeps_state_on_fatal_errors() {
    for (state, event, expired, expect) in TABLE {
        // Reach `state` through real transitions from the right start state.
        let mut fsm = match state {
            Primary => Fsm::new(Side::Primary),
            Backup => Fsm::new(Side::Backup),
            Active => {
                let mut f = Fsm::new(Side::Primary);
                f.handle(PeerBackup, false).unwrap();
                f
            }
            Passive => {
                let mut f = Fsm::new(Side::Backup);
                f.handle(PeerActive, false).unwrap();
                f
            }
        };
        assert_eq!(fsm.state(), state);
        let got = fsm.handle(event, expired);
        assert_eq!(got, expected_outcome(state, expect), "{state} + {event} (peer expired: {expired})");
        match got {
            Ok(outcome) => assert_eq!(fsm.state(), outcome.state),
            Err(_) => assert_eq!(fsm.state(), state, "a fatal error leaves the state alone"),
        }
    }
}

#[test]
fn votes_exist_only_for_client_requests_and_accept_means_active() {
    for (state, event, expired, _) in TABLE {
        if let Ok(outcome) = transition(state, event, expired) {
            assert_eq!(outcome.vote.is_some(), event == ClientRequest);
            if let Some(vote) = outcome.vote {
                assert_eq!(vote == Vote::Accept, outcome.state == Active);
            }
        }
    }
}

#[test]
fn wire_values_are_the_guides() {
    assert_eq!(State::ALL.map(State::wire), [1, 2, 3, 4]);
    assert_eq!(Event::ALL.map(Event::wire), [1, 2, 3, 4, 5]);
    for state in State::ALL {
        assert_eq!(State::from_wire(u64::from(state.wire())), Some(state));
        // The state a peer publishes is the event this side sees.
        assert_eq!(Event::from_peer(state).wire(), state.wire());
    }
    assert_eq!(State::from_wire(0), None);
    assert_eq!(State::from_wire(5), None);
    assert_eq!(Side::Primary.start_state(), Primary);
    assert_eq!(Side::Backup.start_state(), Backup);
}

/// An ineligible PASSIVE and a restarted PRIMARY: without `confirms_with_restarted_peer` every
/// further event leaves both where they are (the pair serves nobody); with it, the PASSIVE goes
/// ACTIVE when it hears the restart (from either side's start state), the PRIMARY then stands by,
/// and a client's vote is still rejected while the PASSIVE is not eligible.
#[test]
fn an_ineligible_passive_meets_a_restarted_peer() {
    for (side, restart) in [(Side::Backup, PeerPrimary), (Side::Primary, PeerBackup)] {
        let mut passive = Fsm::new(side);
        passive.handle(PeerActive, false).unwrap();
        passive.set_eligible(false);
        let mut restarted = Fsm::new(if side == Side::Backup { Side::Primary } else { Side::Backup });
        for expired in [false, true] {
            assert_eq!(passive.handle(restart, expired).unwrap().state, Passive);
            assert_eq!(passive.handle(ClientRequest, expired).unwrap().vote, Some(Vote::Reject));
            assert_eq!(restarted.handle(PeerPassive, expired).unwrap().became, None);
            assert_eq!(restarted.handle(ClientRequest, false).unwrap().vote, Some(Vote::Reject));
        }

        passive.set_confirms_with_restarted_peer(true);
        assert_eq!(passive.handle(ClientRequest, true).unwrap().vote, Some(Vote::Reject));
        assert_eq!(passive.handle(restart, false).unwrap().became, Some(Role::Active));
        assert_eq!(restarted.handle(PeerActive, false).unwrap().became, Some(Role::Passive));
    }
}

#[test]
fn a_whole_failover_story() {
    let mut primary = Fsm::new(Side::Primary);
    let mut backup = Fsm::new(Side::Backup);
    // Both start; each hears the other's start state.
    assert_eq!(backup.handle(PeerPrimary, false).unwrap().became, None);
    assert_eq!(primary.handle(PeerBackup, false).unwrap().became, Some(Role::Active));
    assert_eq!(backup.handle(PeerActive, false).unwrap().became, Some(Role::Passive));
    assert_eq!(primary.handle(PeerPassive, false).unwrap().became, None);
    // The primary dies. Before expiry the backup rejects; after it, the first request fails over.
    assert_eq!(backup.handle(ClientRequest, false).unwrap().vote, Some(Vote::Reject));
    let failover = backup.handle(ClientRequest, true).unwrap();
    assert_eq!((failover.vote, failover.became), (Some(Vote::Accept), Some(Role::Active)));
    // The primary restarts: it hears an active backup and stands by (no fail-back).
    let mut restarted = Fsm::new(Side::Primary);
    assert_eq!(restarted.handle(ClientRequest, false).unwrap().vote, Some(Vote::Reject));
    assert_eq!(backup.handle(PeerPrimary, false).unwrap().became, None);
    assert_eq!(restarted.handle(PeerActive, false).unwrap().became, Some(Role::Passive));
    assert_eq!(restarted.handle(ClientRequest, false).unwrap().vote, Some(Vote::Reject));
}

#[test]
fn codec_round_trips_every_state() {
    for state in State::ALL {
        let msg = codec::encode(state);
        assert_eq!(msg.len(), 1);
        assert_eq!(msg[0], state.wire().to_string().as_bytes());
        assert_eq!(codec::decode(&msg), Ok(state));
    }
    // Leading zeros are still the same decimal.
    assert_eq!(codec::decode(&Message::single("003")), Ok(Active));
}

#[test]
fn codec_rejects_malformed_state_messages_with_typed_errors() {
    let not_decimal = |s: &'static [u8]| Err(MalformedState::NotDecimal(Bytes::from_static(s)));
    let unknown = |s: &'static [u8]| Err(MalformedState::UnknownState(Bytes::from_static(s)));
    assert_eq!(codec::decode(&Message::new()), Err(MalformedState::FrameCount(0)));
    assert_eq!(codec::decode(&Message::from(vec!["3", "3"])), Err(MalformedState::FrameCount(2)));
    assert_eq!(codec::decode(&Message::single("")), not_decimal(b""));
    assert_eq!(codec::decode(&Message::single("x")), not_decimal(b"x"));
    assert_eq!(codec::decode(&Message::single("-1")), not_decimal(b"-1"));
    assert_eq!(codec::decode(&Message::single("+3")), not_decimal(b"+3"));
    assert_eq!(codec::decode(&Message::single(" 3")), not_decimal(b" 3"));
    assert_eq!(codec::decode(&Message::single("3 ")), not_decimal(b"3 "));
    assert_eq!(codec::decode(&Message::single(&b"3\0"[..])), not_decimal(b"3\0"));
    assert_eq!(codec::decode(&Message::single("0")), unknown(b"0"));
    assert_eq!(codec::decode(&Message::single("5")), unknown(b"5"));
    assert_eq!(codec::decode(&Message::single("259")), unknown(b"259"));
    assert_eq!(codec::decode(&Message::single("18446744073709551619")), unknown(b"18446744073709551619"));
    let long = Bytes::from(vec![b'1'; 5000]);
    assert_eq!(codec::decode(&Message::single(long.clone())), Err(MalformedState::NotDecimal(long)));
    // Errors display safely (escaped, truncated).
    let shown = codec::decode(&Message::single(vec![0xffu8; 100])).unwrap_err().to_string();
    assert!(shown.contains("\\xff") && shown.contains("(100 bytes)") && shown.len() < 200, "{shown}");
}

#[test]
fn peer_clock_expires_two_heartbeats_after_the_last_state_message() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut clock = PeerClock::new(t0, ms(200));
    assert_eq!((clock.liveness(), clock.last_heard(), clock.peer_state()), (Liveness::Unknown, None, None));
    // Start-up seeds the expiry.
    assert!(!clock.expired(t0 + ms(199)));
    assert!(clock.expired(t0 + ms(200)), "now ≥ expiry counts as expired");
    assert_eq!(clock.deadline(), Some(t0 + ms(200)));
    // A state message moves it.
    assert!(clock.heard(t0 + ms(150), Active));
    assert!(!clock.heard(t0 + ms(160), Active), "already alive");
    assert_eq!(clock.expiry(), t0 + ms(360));
    assert!(!clock.check(t0 + ms(359)));
    assert!(clock.check(t0 + ms(360)));
    assert!(!clock.check(t0 + ms(400)), "silence is reported once");
    assert_eq!(clock.liveness(), Liveness::Silent);
    assert_eq!(clock.deadline(), None);
    assert_eq!((clock.last_heard(), clock.peer_state()), (Some(t0 + ms(160)), Some(Active)));
    // Heard again: alive again.
    assert!(clock.heard(t0 + ms(500), Passive));
    assert_eq!(clock.liveness(), Liveness::Alive);
    // Never heard at all: silent after the seeded window.
    let mut lonely = PeerClock::new(t0, ms(200));
    assert!(lonely.check(t0 + ms(200)));
    assert_eq!(lonely.liveness(), Liveness::Silent);
}
