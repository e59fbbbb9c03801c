//! The words both the state machine ([`crate::fsm`]) and split-brain healing ([`crate::split`])
//! speak: a server's [`State`], the [`Event`]s that move it, and its [`Side`]. They live apart
//! from both so that each can use them without the other (`fsm` decides with `split`'s help;
//! `split` must not depend back on `fsm`). Their public home is still `bstar::fsm`.

use std::fmt;

/// A server's state; the number is its wire value in state messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum State {
    /// Primary, waiting for its peer (the start state of the primary).
    Primary = 1,
    /// Backup, waiting for its peer (the start state of the backup).
    Backup = 2,
    /// Serving clients.
    Active = 3,
    /// Standing by; takes over when the active's heartbeats have expired and a client votes.
    Passive = 4,
}

impl State {
    /// Every state, in wire order.
    pub const ALL: [State; 4] = [State::Primary, State::Backup, State::Active, State::Passive];

    /// The wire value (1..=4).
    pub fn wire(self) -> u8 {
        self as u8
    }

    /// The state with this wire value, if any.
    ///
    /// ```
    /// use bstar::fsm::State;
    /// assert_eq!(State::from_wire(3), Some(State::Active));
    /// assert_eq!(State::from_wire(5), None);
    /// ```
    pub fn from_wire(value: u64) -> Option<State> {
        match value {
            1 => Some(State::Primary),
            2 => Some(State::Backup),
            3 => Some(State::Active),
            4 => Some(State::Passive),
            _ => None,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Primary => "PRIMARY",
            State::Backup => "BACKUP",
            State::Active => "ACTIVE",
            State::Passive => "PASSIVE",
        })
    }
}

/// An input to the machine; the number is the Guide's event value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Event {
    /// The peer says it is PRIMARY (starting, waiting).
    PeerPrimary = 1,
    /// The peer says it is BACKUP (starting, waiting).
    PeerBackup = 2,
    /// The peer says it is ACTIVE.
    PeerActive = 3,
    /// The peer says it is PASSIVE.
    PeerPassive = 4,
    /// A client request arrived on the voter socket.
    ClientRequest = 5,
}

impl Event {
    /// Every event, in wire order.
    pub const ALL: [Event; 5] =
        [Event::PeerPrimary, Event::PeerBackup, Event::PeerActive, Event::PeerPassive, Event::ClientRequest];

    /// The event a state message from the peer represents.
    pub fn from_peer(peer: State) -> Event {
        match peer {
            State::Primary => Event::PeerPrimary,
            State::Backup => Event::PeerBackup,
            State::Active => Event::PeerActive,
            State::Passive => Event::PeerPassive,
        }
    }

    /// The event's number (1..=5).
    pub fn wire(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Event::PeerPrimary => "PEER_PRIMARY",
            Event::PeerBackup => "PEER_BACKUP",
            Event::PeerActive => "PEER_ACTIVE",
            Event::PeerPassive => "PEER_PASSIVE",
            Event::ClientRequest => "CLIENT_REQUEST",
        })
    }
}

/// Which server of the pair this is; decides the start state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Starts in [`State::Primary`]; becomes active when it meets a waiting backup.
    Primary,
    /// Starts in [`State::Backup`]; never serves until it has been passive.
    Backup,
}

impl Side {
    /// The state a server of this side starts in.
    pub fn start_state(self) -> State {
        match self {
            Side::Primary => State::Primary,
            Side::Backup => State::Backup,
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Primary => "primary",
            Side::Backup => "backup",
        })
    }
}
