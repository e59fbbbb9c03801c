#![doc = include_str!("../README.md")]
//!
//! ## Map of the crate
//!
//! - [`Socket`]: every socket type, its options (libzmq's names and defaults), `bind`/`connect`,
//!   `send`/`recv` (cancel-safe), [`stream`](Socket::stream)/[`sink`](Socket::sink) and
//!   [`monitor`](Socket::monitor) ([`MonitorEvent`]); [`Message`] is a list of frames.
//! - [`security`]: CURVE keys and authenticators (the ZAP model); [`Security`] is one socket's
//!   mechanism, role and keys as a value ([`Socket::set_security`]).
//! - [`timeouts`]: how RCVTIMEO/SNDTIMEO and the Lazy Pirate retry look with tokio.
//! - [`blocking`]: the same sockets for programs that do not run tokio.
//! - [`Proxy`] / [`proxy()`]: `zmq_proxy_steerable`; [`task`]: the handle of a background component
//!   (what chp's servers and ppp's queue and worker return).
//! - [`Error`]: one error type, with the peer-caused [`Fault`]s and [`Refusal`]s.
//!
//! Layers, each importing only the ones below it: `wire` is the sans-IO protocol (greeting,
//! frames, commands, handshake) — its own `no_std` crate, [`zmtp-wire`](https://docs.rs/zmtp-wire),
//! for embedded users; the engine runs one connection; the supervisor makes and remakes
//! connections; the socket core routes messages between connections by the socket type's
//! patterns. Only the socket API, its errors, monitor events and the modules above are public;
//! the protocol layers are internal (the `internals` feature exposes them, without semver
//! promises, to the fuzz targets, the interop tests and benchmarks).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocking;
mod encoded;
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

pub use encoded::EncodedBatch;
pub use error::{ConnectionError, Error, Fault, LimitError, Refusal, Result};
pub use message::{Message, Properties};
pub use monitor::{Monitor, MonitorEvent};
pub use options::{
    DEFAULT_BACKLOG, DEFAULT_MAX_FRAMES, DEFAULT_MAX_SUBSCRIPTION_BYTES, DEFAULT_MAX_SUBSCRIPTIONS,
    DEFAULT_SNDHWM_BYTES, NOTIFY_CONNECT, NOTIFY_DISCONNECT, RECONNECT_STOP_AFTER_DISCONNECT,
    RECONNECT_STOP_CONN_REFUSED, RECONNECT_STOP_HANDSHAKE_FAILED,
};
pub use proxy::{Proxy, ProxyControl, proxy};
pub use socket::{MessageSink, SINK_BATCH, Security, Socket};
pub use transport::Endpoint;
pub use wire::{
    CommandError, CurveError, FrameError, GreetingError, HandshakeError, Mechanism, MetadataError, SocketType,
};
