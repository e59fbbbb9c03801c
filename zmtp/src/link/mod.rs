//! What a socket and its connections share, below both: the outbound pipe a socket fills and a
//! connection drains, the ids a socket gives its peers, and the wake-up signal for "readable" and
//! "room", and the count of running connection tasks. The engine (a connection) and the socket (routing) both build on this; neither needs
//! the other's internals for it.

pub(crate) mod direct;
pub(crate) mod live;
pub(crate) mod peer_id;
pub(crate) mod pipe;
#[cfg(feature = "draft")]
pub(crate) mod subscription;
pub(crate) mod waiters;
