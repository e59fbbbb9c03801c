//! The runner's error type.

use crate::fsm::FsmError;

/// Why a [`BinaryStar`](crate::BinaryStar) could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pair is broken (dual actives / dual passives): the server must stop.
    #[error("fatal: {0}")]
    Fatal(#[from] FsmError),
    /// A socket failed (bind, or the socket was closed under the runner).
    #[error("socket: {0}")]
    Socket(#[from] zmtp::Error),
    /// The [`Config`](crate::Config) is unusable.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

impl Error {
    /// The FSM error, when this is a fatal pair failure.
    pub fn fsm(&self) -> Option<FsmError> {
        match self {
            Error::Fatal(e) => Some(*e),
            _ => None,
        }
    }
}
