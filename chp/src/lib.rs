#![doc = include_str!("../README.md")]
//!
//! ## Map of the crate
//!
//! - [`kvmsg`]: the five-frame message, with typed rejection of every malformation.
//! - [`command`]: ICANHAZ?, KVSYNC, KTHXBAI, KVPUB, KVSET, HUGZ as types; subtrees.
//! - [`server`]: the server ([`Server`]) and its socket-free state machine ([`server::ServerState`]);
//!   the high-availability pair ([`HaServer`], Binary Star + Clone Model Six) in [`server::ha`].
//! - [`client`]: the client ([`Client`]): an agent task keeping a replica in sync.
//! - [`store`]: the server's compact ordered store.
//! - [`security`]: CURVE for servers ([`ServerCurve`]), pairs and clients ([`ClientCurve`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod client;
pub mod command;
pub mod durable;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod kvmsg;
pub mod security;
pub mod server;
pub mod store;
pub mod ttl;
pub mod uuid;

pub use address::ServerAddress;
pub use client::{
    Client, ClientError, ClientOptions, Confirmation, Event, Events, Failure, GapPolicy, Refusal, RefusalKind,
    ServerLoss, Snapshot, Status,
};
pub use command::Subtree;
pub use kvmsg::KvMsg;
pub use security::{ClientCurve, ServerCurve};
pub use server::ha::{HaConfig, HaServer};
pub use server::{Server, ServerConfig, ServerView};
pub use uuid::Uuid;
