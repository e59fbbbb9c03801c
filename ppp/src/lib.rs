//! # ppp — the Paranoid Pirate Protocol (6/PPP) over zmtp
//!
//! Reliable request-reply with a pool of workers, from chapter 4 of the ZeroMQ Guide:
//!
//! ```text
//!  Lazy Pirate clients ──► [frontend ROUTER]  Queue  [backend ROUTER] ◄── PPP workers
//!   (timeout, retry,        LRU of idle workers, heartbeats both ways,     (READY, heartbeats,
//!    fresh socket)          expiry, re-dispatch of lost requests)           reconnect backoff)
//! ```
//!
//! **Wire-compatible with the Guide's programs by default:** a client's request is the body
//! alone (what `lpclient` sends on REQ), and a worker receives exactly `[client address…, "",
//! body…]` (what `ppworker` accepts, three frames for a one-frame body); the queue and the client
//! keep their bookkeeping to themselves. Any of the three can run against the Guide's other two.
//!
//! - [`Queue`]: the broker. See [`queue`] for how it detects dead workers and re-dispatches
//!   their requests without ever delivering a duplicate reply.
//! - [`Worker`]: runs an application [`Handler`] (any `async` closure `Message -> Message`).
//! - [`Client`]: the Lazy Pirate client.
//! - [`protocol`]: READY / HEARTBEAT and envelopes.
//! - [`Security`]: CURVE or PLAIN for every socket a queue, worker or client makes (see [`security`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use zmtp::Message;
//!
//! let queue = ppp::Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*").spawn().await?;
//! let worker = ppp::Worker::new(queue.backend())
//!     .spawn(|request: Message| async move { request }) // an echo service
//!     .await?;
//! let mut client = ppp::Client::connect(queue.frontend(), ppp::ClientConfig::default()).await?;
//! assert_eq!(client.request("ping").await?[0], "ping");
//! worker.close().await;
//! queue.close().await;
//! # Ok(()) }
//! ```
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
