//! The sans-IO ZMTP 3.x wire layer: bytes in, typed values out.
//!
//! Nothing in here knows about tokio networking, sockets or tasks. Each module owns one piece of the
//! protocol and reports every bad input as a typed error, which is what makes the layer testable byte by
//! byte and fuzzable.

pub mod command;
pub mod frame;
pub mod greeting;
pub mod metadata;
pub mod null;
pub mod socket_type;

pub use command::{Command, CommandError};
pub use frame::{Frame, FrameCodec, FrameError};
pub use greeting::{Greeting, GreetingDecoder, GreetingError, Mechanism};
pub use metadata::{Metadata, MetadataError};
pub use null::{HandshakeError, NullHandshake, PeerInfo};
pub use socket_type::SocketType;
