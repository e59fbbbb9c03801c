//! # chp — the Clustered Hashmap Protocol (ZeroMQ RFC 12/CHP) over zmtp
//!
//! A key-value map held by a server and replicated to any number of clients, each of which can
//! update it: the ZeroMQ Guide's *Clone* pattern, in pure Rust on the [`zmtp`] stack and
//! wire-compatible with libzmq implementations.
//!
//! - [`kvmsg`]: the five-frame message, with typed rejection of every malformation.
//! - [`command`]: ICANHAZ?, KVSYNC, KTHXBAI, KVPUB, KVSET, HUGZ as types; subtrees.
//! - [`server`]: the server ([`Server`]) and its socket-free state machine ([`server::ServerState`]);
//!   the high-availability pair ([`HaServer`], Binary Star + Clone Model Six) in [`server::ha`].
//! - [`client`]: the client ([`Client`]): an agent task keeping a replica in sync.
//! - [`store`]: the server's compact ordered store.
//! - [`security`]: CURVE for servers ([`ServerCurve`]), pairs and clients ([`ClientCurve`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use chp::{Client, ClientOptions, Server, ServerConfig, Subtree};
//!
//! let server = Server::bind(ServerConfig { bind: "127.0.0.1".into(), ..Default::default() }).await?;
//! let address = server.address().to_string(); // tcp://127.0.0.1:P
//!
//! let writer = Client::connect(&address).await?; // returns once in sync with the server
//! writer.set("/hosts/web1", "10.0.0.1", Some(Duration::from_secs(30))).await?; // ephemeral
//! writer.set("/users/ann", "admin", None).await?;
//!
//! // A client of one subtree sees only that part of the map.
//! let options = ClientOptions::new(&address)?.subtree("/hosts/".parse::<Subtree>()?);
//! let hosts = Client::start(options)?;
//! hosts.synced().await?;
//! assert_eq!(hosts.get("/hosts/web1").as_deref(), Some(&b"10.0.0.1"[..]));
//! assert_eq!(hosts.len(), 1);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod client;
pub mod command;
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
pub use client::{Client, ClientError, ClientOptions, Event, Events, GapPolicy, Snapshot, Status};
pub use command::Subtree;
pub use kvmsg::KvMsg;
pub use security::{ClientCurve, ServerCurve};
pub use server::ha::{HaConfig, HaServer};
pub use server::{Server, ServerConfig};
pub use uuid::Uuid;
