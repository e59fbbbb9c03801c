//! The connection supervisor: the tasks behind `bind` (accept, and run each accepted connection)
//! and `connect` (connect, run the connection, and reconnect with backoff until told to stop).
//! Above the engine, which runs one connection, and below the socket, which only starts and stops
//! these tasks; like the engine it reaches the socket through [`Host`](crate::engine::Host) alone.

mod backoff;
mod connect;
mod listen;
mod run;
#[cfg(feature = "draft")]
mod udp;

pub(crate) use self::connect::connect;
pub(crate) use self::listen::listen;

use crate::error::{Error, Result};
use crate::transport::Endpoint;
use crate::wire::SocketType;

/// Refuses a transport where libzmq does: udp:// is a DISH's bind and a RADIO's connect, and a
/// STREAM, which speaks raw bytes, has no inproc:// peer to speak them to.
pub(crate) fn check_transport(kind: SocketType, ep: &Endpoint, binding: bool) -> Result<()> {
    let wanted = if binding { SocketType::Dish } else { SocketType::Radio };
    let refused = match ep {
        Endpoint::Udp { .. } => kind != wanted,
        Endpoint::Inproc(_) => kind == SocketType::Stream,
        _ => false,
    };
    if refused {
        return Err(Error::IncompatibleTransport(ep.to_string(), kind));
    }
    Ok(())
}
