//! Binary Star state messages: decoding never panics, and what decodes drives the FSM without panicking.
//! Then the whole machine (with and without split-brain healing) under any sequence of peer states,
//! client requests and changes of the application's flags (eligible, may start alone, confirms with
//! a restarted peer): it never panics, a vote comes exactly with a client request, and a vetoed
//! takeover never happens.
#![no_main]
use bstar::fsm::{Event, Fsm, Role, Side, Vote, transition};
use bstar::{State, codec};
use libfuzzer_sys::fuzz_target;

#[path = "multipart.rs"]
mod multipart;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let msg = multipart::message(rest);
    if let Ok(peer) = codec::decode(&msg) {
        assert_eq!(codec::decode(&codec::encode(peer)).ok(), Some(peer));
        for ours in [State::Primary, State::Backup, State::Active, State::Passive] {
            let _ = transition(ours, Event::from_peer(peer), flags & 1 == 1);
        }
    }

    let side = if flags & 2 == 0 { Side::Primary } else { Side::Backup };
    let mut fsm = if flags & 4 == 0 { Fsm::new(side) } else { Fsm::healing(side) };
    let (mut eligible, mut alone, mut confirms) = (true, true, false);
    for &step in rest {
        let expired = step & 8 != 0;
        let event = match step & 7 {
            0 => Event::PeerPrimary,
            1 => Event::PeerBackup,
            2 => Event::PeerActive,
            3 => Event::PeerPassive,
            4 => Event::ClientRequest,
            5 => {
                eligible = !eligible;
                fsm.set_eligible(eligible);
                continue;
            }
            6 => {
                alone = !alone;
                fsm.set_may_start_alone(alone);
                continue;
            }
            _ => {
                confirms = !confirms;
                fsm.set_confirms_with_restarted_peer(confirms);
                continue;
            }
        };
        let before = fsm.state();
        let Ok(outcome) = fsm.handle(event, expired) else {
            assert!(matches!(event, Event::PeerActive | Event::PeerPassive), "only a peer in our role is fatal");
            assert_eq!(fsm.state(), before, "a fatal event leaves the state");
            continue;
        };
        assert_eq!(outcome.state, fsm.state());
        assert_eq!(outcome.vote.is_some(), event == Event::ClientRequest);
        assert_eq!(outcome.vote == Some(Vote::Accept), outcome.vote.is_some() && outcome.state == State::Active);
        if outcome.became == Some(Role::Active) {
            assert_eq!(outcome.state, State::Active);
        }
        if outcome.split.is_none() && before == State::Passive && outcome.state == State::Active && !eligible {
            assert!(
                confirms && matches!(event, Event::PeerPrimary | Event::PeerBackup),
                "an ineligible passive took over on {event:?}"
            );
        }
        if before == State::Primary && event == Event::ClientRequest && !alone {
            assert_eq!(outcome.state, State::Primary, "a primary that may not start alone took over");
        }
    }
});
