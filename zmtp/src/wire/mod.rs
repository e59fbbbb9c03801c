//! The sans-IO ZMTP 3.x wire layer: bytes in, typed values out.
//!
//! Nothing in here knows about tokio networking, sockets or tasks. Each module owns one piece of the
//! protocol and reports every bad input as a typed error, which is what makes the layer testable byte by
//! byte and fuzzable.

pub mod command;
pub mod curve;
pub mod curve_crypto;
pub mod frame;
pub mod greeting;
pub mod handshake;
pub mod mechanism;
pub mod metadata;
pub mod null;
pub mod plain;
pub mod socket_type;
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
