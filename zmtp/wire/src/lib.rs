#![doc = include_str!("../README.md")]
//!
//! ## Map of the crate
//!
//! - [`greeting`]: the 64-byte greeting, sent and decoded ([`Greeting`], [`GreetingDecoder`]);
//! - [`frame`]: the frame codec ([`FrameCodec`]), zero-copy over [`bytes`];
//! - [`command`] and [`metadata`]: READY, ERROR, PING/PONG, SUBSCRIBE/CANCEL and their properties;
//! - [`null`], [`plain`], [`curve`]: each security mechanism's handshake as a state machine fed
//!   command bodies, with one interface over them in [`mechanism`] ([`Handshake`]);
//! - [`curve_crypto`]: CurveZMQ's keys and the per-connection MESSAGE cipher; [`z85`]: key text;
//! - [`zap`]: the request/reply an authenticator (RFC 27) sees.
//!
//! ## A handshake by hand
//!
//! A NULL handshake driven by hand, bytes in and bytes out (`examples/handshake_by_hand.rs` does the
//! same for CURVE, and talks to libzmq over a TCP stream):
//!
//! ```
//! use bytes::BytesMut;
//! use zmtp_wire::{Frame, FrameCodec, Greeting, GreetingDecoder, HandshakeConfig, Mechanism, NullHandshake, SocketType, Step};
//!
//! // Each side sends its greeting...
//! let mut wire = BytesMut::new();
//! wire.extend_from_slice(&Greeting::new(Mechanism::Null, false).encode());
//! // ...and decodes the peer's (here: its own, as if echoed) as the bytes arrive.
//! let mut greeting = GreetingDecoder::new();
//! let (used, peer) = greeting.feed(&wire).unwrap();
//! assert_eq!(used, 64);
//! assert_eq!(peer.expect("64 bytes are a whole greeting").mechanism(), Some(Mechanism::Null));
//! wire.clear();
//!
//! // Then the mechanism's commands, as frames.
//! let mut hs = NullHandshake::new(HandshakeConfig::new(SocketType::Dealer));
//! let mut codec = FrameCodec::default();
//! for command in hs.start() {
//!     codec.encode(Frame::command(command), &mut wire);
//! }
//! let frame = codec.decode(&mut wire).unwrap().expect("a whole frame");
//! // A ROUTER on the other side reads our READY and is done.
//! let mut router = NullHandshake::new(HandshakeConfig::new(SocketType::Router));
//! match router.on_command(frame.body).unwrap() {
//!     Step::Done { peer, .. } => assert_eq!(peer.socket_type, Some(SocketType::Dealer)),
//!     other => panic!("unexpected {other:?}"),
//! }
//! ```
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(all(feature = "std", not(test)))]
extern crate std;

pub use bytes;
pub use rand_core;

pub mod command;
pub mod curve;
pub mod curve_crypto;
mod curve_message;
pub mod frame;
pub mod greeting;
pub mod handshake;
pub mod mechanism;
pub mod metadata;
pub mod null;
pub mod plain;
mod salsa_lanes;
pub mod socket_type;
pub mod udp;
pub mod z85;
pub mod zap;

pub use command::{Command, CommandError};
pub use curve_crypto::{CurveError, KeyPair};
pub use frame::{Frame, FrameCodec, FrameError};
pub use greeting::{Greeting, GreetingDecoder, GreetingError, Mechanism};
pub use handshake::{HandshakeConfig, HandshakeError, PeerInfo, Step};
pub use mechanism::Handshake;
pub use metadata::{Metadata, MetadataError};
pub use null::NullHandshake;
pub use socket_type::SocketType;
pub use zap::{ZapReply, ZapRequest};
