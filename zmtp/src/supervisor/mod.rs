//! The connection supervisor: the tasks behind `bind` (accept, and run each accepted connection)
//! and `connect` (connect, run the connection, and reconnect with backoff until told to stop).
//! Above the engine, which runs one connection, and below the socket, which only starts and stops
//! these tasks; like the engine it reaches the socket through [`Host`](crate::engine::Host) alone.

mod backoff;
mod connect;
mod listen;
mod run;
mod udp;

pub(crate) use self::connect::connect;
pub(crate) use self::listen::listen;
pub(crate) use self::udp::check as check_transport;
