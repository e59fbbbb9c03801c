//! Security of the sockets a [`Queue`](crate::Queue), [`Worker`](crate::Worker) or
//! [`Client`](crate::Client) makes: NULL (the default), CURVE or PLAIN.
//!
//! The queue's frontend and backend are servers; workers and clients are clients of the queue.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ppp::Security;
//! use zmtp::Message;
//! use zmtp::security::KeyPair;
//!
//! let queue_keys = KeyPair::generate();
//! let queue = ppp::Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
//!     .security(Security::curve_server(queue_keys.clone()))
//!     .spawn()
//!     .await?;
//! let worker = ppp::Worker::new(queue.backend())
//!     .security(Security::curve_client(queue_keys.public(), KeyPair::generate()))
//!     .spawn(|request: Message| async move { request })
//!     .await?;
//! let mut client = ppp::Client::connect_secure(
//!     queue.frontend(),
//!     ppp::ClientConfig::default(),
//!     Security::curve_client(queue_keys.public(), KeyPair::generate()),
//! )
//! .await?;
//! assert_eq!(client.request("secret").await?[0], "secret");
//! worker.close().await;
//! queue.close().await;
//! # Ok(()) }
//! ```

/// The one security vocabulary of zmtp and the crates built on it (`chp`, `bstar` use it inside
/// their CURVE key sets); re-exported here, where ppp's components take it.
pub use zmtp::Security;
