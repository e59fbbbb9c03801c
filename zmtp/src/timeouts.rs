//! # Timeouts and retries
//!
//! libzmq has socket options for how long a call may wait (`ZMQ_RCVTIMEO`, `ZMQ_SNDTIMEO`, then
//! `EAGAIN`). Here a wait is a future, and tokio's [`timeout`](tokio::time::timeout) bounds any of
//! them. [`Socket::send`](crate::Socket::send) and [`Socket::recv`](crate::Socket::recv) are
//! **cancel-safe**, so a timeout that fires loses nothing: the message was either queued whole or
//! not at all, taken whole or left in the queue.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> zmtp::Result<()> {
//! use std::time::Duration;
//! use zmtp::{Socket, SocketType};
//!
//! let pull = Socket::new(SocketType::Pull);
//! pull.bind("tcp://127.0.0.1:*").await?;
//! match tokio::time::timeout(Duration::from_millis(100), pull.recv()).await {
//!     Ok(message) => println!("got {:?}", message?),
//!     Err(_) => println!("nothing within 100 ms"), // libzmq: EAGAIN after RCVTIMEO
//! }
//! # Ok(()) }
//! ```
//!
//! Without tokio, [`blocking::Socket`](crate::blocking::Socket) has
//! [`recv_timeout`](crate::blocking::Socket::recv_timeout) and
//! [`send_timeout`](crate::blocking::Socket::send_timeout), which return
//! [`Error::WouldBlock`](crate::Error::WouldBlock) as libzmq returns `EAGAIN`.
//!
//! ## Retrying a request: Lazy Pirate
//!
//! A REQ socket that timed out waiting for a reply is stuck in libzmq (the next send fails with
//! `EFSM`); the Guide's Lazy Pirate closes it and opens a new one. With `ZMQ_REQ_RELAXED` a REQ may
//! send again at once, and with `ZMQ_REQ_CORRELATE` a late reply to the abandoned request is
//! dropped instead of being taken for the new one's, so one socket does:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> zmtp::Result<()> {
//! use std::time::Duration;
//! use zmtp::{Socket, SocketType};
//!
//! // A server that loses the first request it gets (a ROUTER, so it need not answer in turn).
//! let server = Socket::new(SocketType::Router);
//! let endpoint = server.bind("tcp://127.0.0.1:*").await?;
//! tokio::spawn(async move {
//!     let _lost = server.recv().await?;
//!     let request = server.recv().await?; // [routing id, request id, "", body]
//!     server.send(request).await // echoed with its envelope
//! });
//!
//! let client = Socket::new(SocketType::Req);
//! client.set_req_relaxed(true);
//! client.set_req_correlate(true);
//! client.connect(&endpoint).await?;
//! let mut reply = None;
//! for _attempt in 0..3 {
//!     client.send("work").await?;
//!     if let Ok(answer) = tokio::time::timeout(Duration::from_millis(200), client.recv()).await {
//!         reply = Some(answer?);
//!         break;
//!     }
//! }
//! assert_eq!(reply.expect("answered on the second attempt")[0], "work");
//! # Ok(()) }
//! ```
//!
//! The `ppp` crate's Lazy Pirate client (`ppp::Client`) packages this — timeout, retries, a fresh
//! connection after each loss — and its queue and workers add heartbeats on both sides (6/PPP).
