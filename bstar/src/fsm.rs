//! The Binary Star finite-state machine as a pure type: no sockets, no clock.
//!
//! The caller supplies each [`Event`] and whether the peer has expired (`now ≥ peer expiry`); the
//! machine answers with an [`Outcome`] (new state, accept/reject for a client request, role change)
//! or a fatal [`FsmError`]. Wire values are the Guide's: states PRIMARY=1 … PASSIVE=4, events
//! PEER_PRIMARY=1 … PEER_PASSIVE=4 and CLIENT_REQUEST=5. The state a peer publishes *is* the event the
//! other side sees ([`Event::from_peer`]).
//!
//! | state \ event | PEER_PRIMARY | PEER_BACKUP | PEER_ACTIVE | PEER_PASSIVE | CLIENT_REQUEST |
//! |---|---|---|---|---|---|
//! | PRIMARY | ignore | →ACTIVE | →PASSIVE | ignore | peer expired: →ACTIVE, accept; else reject |
//! | BACKUP | ignore | ignore | →PASSIVE | ignore | reject |
//! | ACTIVE | ignore | ignore | fatal: dual actives | ignore | accept |
//! | PASSIVE | →ACTIVE | →ACTIVE | ignore | fatal: dual passives | peer expired: →ACTIVE, accept; else reject |
//!
//! ```
//! use bstar::fsm::{Event, Fsm, Role, Side, State, Vote};
//!
//! let mut fsm = Fsm::new(Side::Backup);
//! // The backup alone never serves, however long the primary has been silent.
//! assert_eq!(fsm.handle(Event::ClientRequest, true)?.vote, Some(Vote::Reject));
//! // It hears an active primary and becomes passive.
//! let outcome = fsm.handle(Event::from_peer(State::Active), false)?;
//! assert_eq!((outcome.state, outcome.became), (State::Passive, Some(Role::Passive)));
//! // The primary dies; once its heartbeats have expired, the first client request is a failover.
//! let outcome = fsm.handle(Event::ClientRequest, true)?;
//! assert_eq!(outcome.vote, Some(Vote::Accept));
//! assert_eq!(outcome.became, Some(Role::Active));
//! # Ok::<(), bstar::fsm::FsmError>(())
//! ```

pub use crate::roles::{Event, Side, State};
use crate::split::{Healer, Split};

/// The verdict on a client request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Vote {
    /// Hand the request to the application.
    Accept,
    /// Read and discard it; the client notices only by timing out.
    Reject,
}

/// A role this server just took on (the reference's new-active / new-passive callbacks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Entered [`State::Active`].
    Active,
    /// Entered [`State::Passive`].
    Passive,
}

/// What one event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Outcome {
    /// The state after the event (unchanged when the event is ignored).
    pub state: State,
    /// `Some` exactly for [`Event::ClientRequest`].
    pub vote: Option<Vote>,
    /// `Some` when the event moved the server into ACTIVE or PASSIVE from another state.
    pub became: Option<Role>,
    /// `Some` when the peer claimed this server's role and the machine healed it instead of
    /// failing (only with healing on: [`Fsm::healing`]).
    pub split: Option<Split>,
}

/// The pair is broken: both servers claim the same role. The reference aborts the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum FsmError {
    /// This server is ACTIVE and so is its peer (split brain after a partition, or misconfiguration).
    #[error("dual actives: this server and its peer are both ACTIVE")]
    DualActive,
    /// This server is PASSIVE and so is its peer: nobody would ever serve.
    #[error("dual passives: this server and its peer are both PASSIVE")]
    DualPassive,
}

/// The transition table as a pure function.
///
/// `peer_expired` is `now ≥ peer expiry` (the peer sent no state message for 2 × heartbeat); it only
/// matters for [`Event::ClientRequest`] in PRIMARY and PASSIVE.
///
/// ```
/// use bstar::fsm::{transition, Event, FsmError, State, Vote};
///
/// // A primary alone rejects requests until its peer has expired …
/// assert_eq!(transition(State::Primary, Event::ClientRequest, false)?.vote, Some(Vote::Reject));
/// // … then the first request makes it active and is served.
/// let outcome = transition(State::Primary, Event::ClientRequest, true)?;
/// assert_eq!((outcome.state, outcome.vote), (State::Active, Some(Vote::Accept)));
/// // Two actives is fatal.
/// assert_eq!(transition(State::Active, Event::PeerActive, false), Err(FsmError::DualActive));
/// # Ok::<(), FsmError>(())
/// ```
pub fn transition(state: State, event: Event, peer_expired: bool) -> Result<Outcome, FsmError> {
    use Event::*;
    use State::*;
    let next = match (state, event) {
        (Active, PeerActive) => return Err(FsmError::DualActive),
        (Passive, PeerPassive) => return Err(FsmError::DualPassive),
        // The primary meets a waiting backup: it serves.
        (Primary, PeerBackup) => Active,
        // A peer is already serving: stand by (this is also how a restarted primary stays out of the way).
        (Primary | Backup, PeerActive) => Passive,
        // The peer restarted (it is waiting again): take over.
        (Passive, PeerPrimary | PeerBackup) => Active,
        // The expiry guard: only serve when the peer has gone quiet.
        (Primary | Passive, ClientRequest) if peer_expired => Active,
        (Active, ClientRequest) => Active,
        // Everything else is ignored (a rejected request leaves the state as it is).
        (s, _) => s,
    };
    let vote = (event == ClientRequest).then_some(if next == Active { Vote::Accept } else { Vote::Reject });
    let became = match next {
        _ if next == state => None,
        Active => Some(Role::Active),
        Passive => Some(Role::Passive),
        Primary | Backup => unreachable!("no transition leads back to a start state"),
    };
    Ok(Outcome { state: next, vote, became, split: None })
}

/// The machine with its current state.
///
/// ```
/// use bstar::fsm::{Event, Fsm, Role, Side, State};
///
/// let mut fsm = Fsm::new(Side::Primary);
/// assert_eq!(fsm.state(), State::Primary);
/// let outcome = fsm.handle(Event::PeerBackup, false)?;
/// assert_eq!(outcome.became, Some(Role::Active));
/// assert_eq!(fsm.state(), State::Active);
/// # Ok::<(), bstar::fsm::FsmError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fsm {
    side: Side,
    state: State,
    /// `Some`: dual actives / dual passives are healed (see [`crate::split`]), not fatal.
    healer: Option<Healer>,
    /// May leave PASSIVE for ACTIVE (see [`Fsm::set_eligible`]).
    eligible: bool,
    /// PRIMARY may go ACTIVE on a client's vote alone (see [`Fsm::set_may_start_alone`]).
    may_start_alone: bool,
    /// A restarted peer makes even an ineligible PASSIVE ACTIVE (see
    /// [`Fsm::set_confirms_with_restarted_peer`]).
    confirms_with_restarted_peer: bool,
}

impl Fsm {
    /// A machine in the side's start state, with the Guide's fatal dual actives / dual passives.
    pub fn new(side: Side) -> Fsm {
        Fsm {
            side,
            state: side.start_state(),
            healer: None,
            eligible: true,
            may_start_alone: true,
            confirms_with_restarted_peer: false,
        }
    }

    /// A machine in the side's start state that heals a split brain instead of failing (see
    /// [`crate::split`]).
    ///
    /// ```
    /// use bstar::fsm::{Event, Fsm, Role, Side, State};
    /// use bstar::split::Split;
    ///
    /// // An active primary that never took over hears another ACTIVE: its peer took over while it
    /// // was stalled. It yields.
    /// let mut fsm = Fsm::healing(Side::Primary);
    /// fsm.handle(Event::PeerBackup, false)?;
    /// let outcome = fsm.handle(Event::PeerActive, false)?;
    /// assert_eq!((outcome.split, outcome.became), (Some(Split::Yield), Some(Role::Passive)));
    /// assert_eq!(fsm.state(), State::Passive);
    /// # Ok::<(), bstar::fsm::FsmError>(())
    /// ```
    pub fn healing(side: Side) -> Fsm {
        Fsm {
            side,
            state: side.start_state(),
            healer: Some(Healer::default()),
            eligible: true,
            may_start_alone: true,
            confirms_with_restarted_peer: false,
        }
    }

    /// Whether the machine may go from PASSIVE to ACTIVE (default true). An application clears it
    /// while it cannot serve as the truth (a passive whose copy of the active's state is still
    /// incomplete): a client's vote is then rejected and a restarted peer (PEER_PRIMARY /
    /// PEER_BACKUP) leaves it passive (unless [`Fsm::set_confirms_with_restarted_peer`]). A pair with no eligible server serves nobody — which is
    /// right when the only complete state died with the other server.
    ///
    /// ```
    /// use bstar::fsm::{Event, Fsm, Side, State, Vote};
    /// let mut fsm = Fsm::new(Side::Backup);
    /// fsm.handle(Event::PeerActive, false)?; // passive
    /// fsm.set_eligible(false);
    /// assert_eq!(fsm.handle(Event::ClientRequest, true)?.vote, Some(Vote::Reject));
    /// assert_eq!(fsm.handle(Event::PeerPrimary, false)?.state, State::Passive);
    /// fsm.set_eligible(true);
    /// assert_eq!(fsm.handle(Event::ClientRequest, true)?.vote, Some(Vote::Accept));
    /// # Ok::<(), bstar::fsm::FsmError>(())
    /// ```
    pub fn set_eligible(&mut self, eligible: bool) {
        self.eligible = eligible;
    }

    /// Whether a PRIMARY that has not met its peer may go ACTIVE on a client's vote once the peer
    /// has been silent past its expiry (default true, as the Guide's Binary Star: a primary
    /// restarted alone serves). An application whose state survives restarts clears it while the
    /// peer may hold newer state than its own: a vote is then rejected, and the pair forms only
    /// when the peer returns (PRIMARY meeting BACKUP or ACTIVE is unaffected).
    ///
    /// ```
    /// use bstar::fsm::{Event, Fsm, Side, State, Vote};
    /// let mut fsm = Fsm::new(Side::Primary);
    /// fsm.set_may_start_alone(false);
    /// assert_eq!(fsm.handle(Event::ClientRequest, true)?.vote, Some(Vote::Reject));
    /// assert_eq!(fsm.state(), State::Primary);
    /// assert_eq!(fsm.handle(Event::PeerBackup, false)?.state, State::Active);
    /// # Ok::<(), bstar::fsm::FsmError>(())
    /// ```
    pub fn set_may_start_alone(&mut self, may: bool) {
        self.may_start_alone = may;
    }

    /// Whether a PASSIVE that is not [eligible](Fsm::set_eligible) still becomes ACTIVE when its
    /// peer restarts (PEER_PRIMARY / PEER_BACKUP; default false: it stays PASSIVE). For an
    /// application whose state survives restarts and that, once ACTIVE with a live peer, serves
    /// nothing until the two have compared whose state is newer: without it, an ineligible PASSIVE
    /// and a restarted PRIMARY wait for each other for good (PASSIVE vetoes PEER_PRIMARY, PRIMARY
    /// ignores PEER_PASSIVE), and the pair serves nobody although the restarted peer may hold
    /// the newest state. A client's vote is still rejected while not eligible.
    ///
    /// ```
    /// use bstar::fsm::{Event, Fsm, Side, State, Vote};
    /// let mut fsm = Fsm::new(Side::Backup);
    /// fsm.handle(Event::PeerActive, false)?; // passive, its copy incomplete
    /// fsm.set_eligible(false);
    /// fsm.set_confirms_with_restarted_peer(true);
    /// assert_eq!(fsm.handle(Event::ClientRequest, true)?.vote, Some(Vote::Reject));
    /// assert_eq!(fsm.handle(Event::PeerPrimary, false)?.state, State::Active);
    /// # Ok::<(), bstar::fsm::FsmError>(())
    /// ```
    pub fn set_confirms_with_restarted_peer(&mut self, confirms: bool) {
        self.confirms_with_restarted_peer = confirms;
    }

    /// Which server this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Applies one event (see [`transition`]). On a fatal error the state is left unchanged; the
    /// pair is broken and the server should stop.
    pub fn handle(&mut self, event: Event, peer_expired: bool) -> Result<Outcome, FsmError> {
        let before = self.state;
        let mut result = transition(before, event, peer_expired);
        if let Ok(outcome) = &mut result
            && before == State::Passive
            && outcome.state == State::Active
            && !self.eligible
            && !(self.confirms_with_restarted_peer && matches!(event, Event::PeerPrimary | Event::PeerBackup))
        {
            // Vetoed: stay passive, and a vote is rejected.
            *outcome =
                Outcome { state: State::Passive, vote: outcome.vote.map(|_| Vote::Reject), became: None, split: None };
        }
        if let Ok(outcome) = &mut result
            && before == State::Primary
            && event == Event::ClientRequest
            && outcome.state == State::Active
            && !self.may_start_alone
        {
            // Vetoed: wait for the peer.
            *outcome =
                Outcome { state: State::Primary, vote: outcome.vote.map(|_| Vote::Reject), became: None, split: None };
        }
        let outcome = match (result, self.healer.as_mut()) {
            (Ok(outcome), healer) => {
                if let Some(h) = healer {
                    h.observe(before, event, outcome.state);
                }
                outcome
            }
            (Err(error), None) => return Err(error),
            (Err(error), Some(h)) => {
                let split = match error {
                    FsmError::DualActive => h.dual_active(self.side),
                    FsmError::DualPassive => h.dual_passive(self.side),
                };
                let (state, became) = match split {
                    Split::Stay | Split::Wait => (before, None),
                    Split::Yield => (State::Passive, Some(Role::Passive)),
                    Split::Serve => (State::Active, Some(Role::Active)),
                };
                Outcome { state, vote: None, became, split: Some(split) }
            }
        };
        self.state = outcome.state;
        Ok(outcome)
    }
}
