//! # zmtp — ZeroMQ in pure Rust
//!
//! A from-scratch implementation of ZMTP 3.0/3.1 on tokio, byte-compatible with libzmq, with no C
//! anywhere in its dependency graph: it builds for static musl and cross-compiles like any Rust crate.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> zmtp::Result<()> {
//! use zmtp::{Message, Socket, SocketType};
//!
//! let router = Socket::new(SocketType::Router);
//! let endpoint = router.bind("tcp://127.0.0.1:*").await?;
//!
//! let dealer = Socket::new(SocketType::Dealer);
//! dealer.set_routing_id("client-1")?;
//! dealer.connect(&endpoint).await?;
//! dealer.send("ping").await?;
//!
//! let request = router.recv().await?; // [routing id, "ping"]
//! assert_eq!(request[0], "client-1");
//! router.send(Message::from(vec![request[0].clone(), "pong".into()])).await?;
//! assert_eq!(dealer.recv().await?[0], "pong");
//! # Ok(()) }
//! ```
//!
//! Layers: `wire` is the sans-IO protocol (greeting, frames, commands, handshake) — its own `no_std`
//! crate, [`zmtp-wire`](https://docs.rs/zmtp-wire), for embedded users; the engine runs
//! one connection; the supervisor makes and remakes connections; the socket core routes messages
//! between connections by the socket type's patterns. Only the socket API, its errors, monitor
//! events and [`security`] are public; the protocol layers are internal (the `internals` feature
//! exposes them, without semver promises, to the fuzz targets, the interop tests and benchmarks).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocking;
mod engine;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod link;
#[cfg(feature = "cli")]
pub mod logging;
mod message;
mod monitor;
mod options;
mod proxy;
pub mod security;
mod socket;
mod supervisor;
pub mod task;
pub mod throttle;
pub mod timeouts;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod transport;
// Private, the protocol layers keep the parts of their API only the fuzz targets and tests use.
#[cfg(not(feature = "internals"))]
#[allow(dead_code, unused_imports)]
mod transport;
/// The sans-IO protocol layer is its own `no_std` crate, `zmtp-wire`.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use zmtp_wire as wire;
#[cfg(not(feature = "internals"))]
use zmtp_wire as wire;

pub use error::{ConnectionError, Error, Fault, LimitError, Refusal, Result};
pub use message::{Message, Properties};
pub use monitor::{Monitor, MonitorEvent};
pub use options::{
    DEFAULT_MAX_FRAMES, DEFAULT_MAX_SUBSCRIPTION_BYTES, DEFAULT_MAX_SUBSCRIPTIONS, DEFAULT_SNDHWM_BYTES,
};
pub use proxy::{Proxy, ProxyControl, proxy};
pub use socket::Socket;
pub use transport::Endpoint;
pub use wire::{
    CommandError, CurveError, FrameError, GreetingError, HandshakeError, Mechanism, MetadataError, SocketType,
};
