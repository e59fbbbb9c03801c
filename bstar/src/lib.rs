#![doc = include_str!("../README.md")]
//!
//! ## Map of the crate
//!
//! - [`fsm`]: the state machine as a pure type, with the full transition table and the fatal
//!   dual-active / dual-passive errors.
//! - [`split`]: optional healing of a split brain (dual actives after a stall or a partition)
//!   into exactly one active, instead of the Guide's abort of both servers.
//! - [`codec`]: the one-frame ASCII-decimal state message, with typed rejection of malformed ones.
//! - [`liveness`]: the peer-expiry clock and the peer's liveness.
//! - [`BinaryStar`]: the async runner over zmtp sockets; [`Notices`] (role changes, accepted
//!   requests, peer liveness, in order) and [`Handle`] (status, replies, stop).
//! - [`Curve`]: CURVE on the voter and on the state link between the pair.
//!
//! The binaries `bstarsrv` and `bstarcli` reproduce the Guide's example server pair and failover
//! client. See [`BinaryStar`] for a whole pair with a client in one process.
//!
//! ## The decisions, without any I/O
//!
//! A primary and a backup meet, then the backup takes over only
//! when the active has gone silent *and* a client votes for it:
//!
//! ```
//! use bstar::fsm::{Event, Fsm, FsmError, Role, Side, State, Vote};
//!
//! let mut primary = Fsm::new(Side::Primary);
//! let mut backup = Fsm::new(Side::Backup);
//! // Each hears the other's state message (its heartbeat): the primary serves, the backup waits.
//! assert_eq!(primary.handle(Event::PeerBackup, false)?.became, Some(Role::Active));
//! assert_eq!(backup.handle(Event::PeerActive, false)?.became, Some(Role::Passive));
//!
//! // A client that fails over to the backup while the primary is still alive is turned away...
//! assert_eq!(backup.handle(Event::ClientRequest, false)?.vote, Some(Vote::Reject));
//! // ...but once the primary's heartbeats have expired, the vote makes the backup active.
//! let takeover = backup.handle(Event::ClientRequest, true)?;
//! assert_eq!((takeover.vote, takeover.became), (Some(Vote::Accept), Some(Role::Active)));
//! assert_eq!(backup.state(), State::Active);
//! # Ok::<(), FsmError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod codec;
mod config;
pub mod endpoint;
mod error;
pub mod fsm;
mod handle;
pub mod liveness;
mod notices;
mod roles;
mod runner;
mod security;
pub mod split;

pub use config::{Config, DEFAULT_HEARTBEAT, DEFAULT_REQUEST_QUEUE};
pub use error::Error;
pub use fsm::{FsmError, Role, Side, State};
pub use handle::{Handle, Status};
pub use liveness::Liveness;
pub use notices::{Link, Notice, Notices};
pub use runner::BinaryStar;
pub use security::Curve;
