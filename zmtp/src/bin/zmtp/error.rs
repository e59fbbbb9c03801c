//! The CLI's error type: a message for a human and the exit status it maps to.

use std::fmt;

/// Why `zmtp` stops with a non-zero status.
#[derive(Debug)]
pub enum CliError {
    /// Bad arguments (invalid endpoint, bad hex, option not for this socket type): status 2.
    Usage(String),
    /// Something failed at run time (address in use, peer vanished): status 1.
    Failed(String),
    /// `--timeout` expired before the work was done: status 3.
    TimedOut(String),
}

impl CliError {
    /// The process exit status.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Failed(_) => 1,
            CliError::Usage(_) => 2,
            CliError::TimedOut(_) => 3,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(m) | CliError::Failed(m) | CliError::TimedOut(m) => f.write_str(m),
        }
    }
}

/// Shorthand for building a usage error.
pub fn usage(msg: impl Into<String>) -> CliError {
    CliError::Usage(msg.into())
}

/// Shorthand for building a run-time failure.
pub fn failed(msg: impl Into<String>) -> CliError {
    CliError::Failed(msg.into())
}
