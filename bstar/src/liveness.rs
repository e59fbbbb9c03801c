//! Peer liveness: the peer-expiry clock of the Guide plus what an operator wants to see.
//!
//! Every valid state message sets `expiry = now + window` (window = 2 × heartbeat); start-up seeds
//! `expiry = start + window`. The peer is *expired* once `now ≥ expiry` — the input of the FSM's
//! expiry guard. On top of that the clock tracks [`Liveness`] so a passive server whose peer died is
//! visible before any client votes.
//!
//! ```
//! use std::time::Duration;
//! use bstar::fsm::State;
//! use bstar::liveness::{Liveness, PeerClock};
//! use tokio::time::Instant;
//!
//! let t0 = Instant::now();
//! let window = Duration::from_millis(200);
//! let mut clock = PeerClock::new(t0, window);
//! assert!(!clock.expired(t0));
//! assert_eq!(clock.liveness(), Liveness::Unknown);
//!
//! assert!(clock.heard(t0 + Duration::from_millis(100), State::Active)); // became alive
//! assert!(!clock.expired(t0 + Duration::from_millis(299)));
//! assert!(clock.expired(t0 + Duration::from_millis(300)));
//! assert!(clock.check(t0 + Duration::from_millis(300))); // went silent
//! assert_eq!(clock.liveness(), Liveness::Silent);
//! ```

use std::time::Duration;

use tokio::time::Instant;

use crate::fsm::State;

/// What is known about the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// Start-up: nothing heard yet and the first expiry window has not passed.
    Unknown,
    /// A state message arrived within the last expiry window.
    Alive,
    /// No state message for a whole expiry window.
    Silent,
}

/// The peer-expiry clock.
#[derive(Clone, Debug)]
pub struct PeerClock {
    window: Duration,
    expiry: Instant,
    last_heard: Option<Instant>,
    peer_state: Option<State>,
    liveness: Liveness,
}

impl PeerClock {
    /// A clock started at `now`: the peer expires at `now + window` unless heard from.
    pub fn new(now: Instant, window: Duration) -> PeerClock {
        PeerClock { window, expiry: now + window, last_heard: None, peer_state: None, liveness: Liveness::Unknown }
    }

    /// A valid state message arrived at `now`. Returns true when the peer just became [`Liveness::Alive`].
    pub fn heard(&mut self, now: Instant, state: State) -> bool {
        self.expiry = now + self.window;
        self.last_heard = Some(now);
        self.peer_state = Some(state);
        let changed = self.liveness != Liveness::Alive;
        self.liveness = Liveness::Alive;
        changed
    }

    /// The expiry guard's input: `now ≥ expiry`.
    pub fn expired(&self, now: Instant) -> bool {
        now >= self.expiry
    }

    /// Updates the liveness for `now`. Returns true when the peer just became [`Liveness::Silent`].
    pub fn check(&mut self, now: Instant) -> bool {
        if self.liveness != Liveness::Silent && self.expired(now) {
            self.liveness = Liveness::Silent;
            return true;
        }
        false
    }

    /// When [`check`](Self::check) would next report silence (`None` while already silent).
    pub fn deadline(&self) -> Option<Instant> {
        (self.liveness != Liveness::Silent).then_some(self.expiry)
    }

    /// The current expiry instant.
    pub fn expiry(&self) -> Instant {
        self.expiry
    }

    /// The expiry window (2 × heartbeat in the runner).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// When the last valid state message arrived.
    pub fn last_heard(&self) -> Option<Instant> {
        self.last_heard
    }

    /// The state the peer last announced.
    pub fn peer_state(&self) -> Option<State> {
        self.peer_state
    }

    /// The liveness as of the last [`heard`](Self::heard) / [`check`](Self::check).
    pub fn liveness(&self) -> Liveness {
        self.liveness
    }
}
