#![doc = include_str!("../README.md")]
//!
//! ## Map of the crate
//!
//! - [`Queue`]: the broker. See [`queue`] for how it detects dead workers and re-dispatches
//!   their requests without ever delivering a duplicate reply.
//! - [`Worker`]: runs an application [`Handler`] (any `async` closure `Message -> Message`).
//! - [`Client`]: the Lazy Pirate client.
//! - [`protocol`]: READY / HEARTBEAT and envelopes.
//! - [`Security`]: CURVE or PLAIN for every socket a queue, worker or client makes (see [`security`]).
//!
//! All constants default to the Guide's values (liveness 3, heartbeat 1 s, reconnect backoff
//! 1 s → 32 s, request timeout 2.5 s, 3 attempts) and are plain public fields.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod protocol;
pub mod queue;
pub mod security;
pub mod worker;

pub use client::{Client, ClientConfig, ClientError};
pub use protocol::{Command, Envelope, ProtocolError};
pub use queue::{Overflow, Queue, QueueError, QueueEvent, QueueHandle, QueueStats};
pub use security::Security;
pub use worker::{Handler, Worker, WorkerEvent, WorkerHandle};

/// Events buffered per subscriber before the oldest are skipped.
pub(crate) const EVENT_CAPACITY: usize = 1024;

/// A routing id for logs: as text when it is printable ASCII, else as hex.
pub fn display_id(id: &[u8]) -> String {
    if !id.is_empty() && id.iter().all(|b| b.is_ascii_graphic()) {
        String::from_utf8_lossy(id).into_owned()
    } else {
        let mut s = String::with_capacity(2 + 2 * id.len());
        s.push_str("0x");
        for b in id {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}
