//! Socket types as named in READY's `Socket-Type`, and which pairs may talk (RFC 23 / libzmq).

use alloc::{borrow::ToOwned, string::String};
use core::fmt;
use core::str::FromStr;

/// The ZeroMQ socket types: the classic ones, libzmq's draft ones (SERVER to CHANNEL), and STREAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SocketType {
    /// Exclusive pair.
    Pair,
    /// Publisher.
    Pub,
    /// Subscriber.
    Sub,
    /// Request (strict send/recv alternation).
    Req,
    /// Reply.
    Rep,
    /// Asynchronous request: load-balances out, fair-queues in.
    Dealer,
    /// Asynchronous reply: addresses peers by routing id.
    Router,
    /// Pipeline sink.
    Pull,
    /// Pipeline source.
    Push,
    /// Publisher that sees subscriptions.
    XPub,
    /// Subscriber that sends subscriptions as messages.
    XSub,
    /// Draft ([RFC 41](https://rfc.zeromq.org/spec/41/)), the peer of CLIENT. Messages are single
    /// frames. A received message carries its sender's 32-bit routing id; a sent one goes to the
    /// peer its routing id names (an unknown id is EHOSTUNREACH, a full peer makes the send wait).
    Server,
    /// Draft ([RFC 41](https://rfc.zeromq.org/spec/41/)), the peer of SERVER. Single-frame
    /// messages, sent round-robin to the SERVERs with room and received fair-queued.
    Client,
    /// Draft ([RFC 48](https://rfc.zeromq.org/spec/48/)), the peer of DISH. Each single-frame
    /// message carries a group (an exact name of at most 255 bytes) and goes to the DISHes that
    /// joined it; a full DISH, or one whose JOIN has not arrived yet, misses it, as with PUB. Also
    /// over `udp://` (unicast or multicast datagrams, no handshake).
    Radio,
    /// Draft ([RFC 48](https://rfc.zeromq.org/spec/48/)), the peer of RADIO. Joins and leaves
    /// groups (JOIN/LEAVE commands to every RADIO) and receives their messages with the group.
    Dish,
    /// Draft ([RFC 49](https://rfc.zeromq.org/spec/49/)), the peer of SCATTER: PULL for single
    /// frames, fair-queued.
    Gather,
    /// Draft ([RFC 49](https://rfc.zeromq.org/spec/49/)), the peer of GATHER: PUSH for single
    /// frames, round-robin.
    Scatter,
    /// Draft ([RFC 51](https://rfc.zeromq.org/spec/51/)), the peer of PEER. Single frames
    /// addressed by routing id as SERVER's are, on both ends; a connect names its peer's id at once
    /// (`connect_peer`).
    Peer,
    /// Draft ([RFC 52](https://rfc.zeromq.org/spec/52/)), the peer of CHANNEL: PAIR for single
    /// frames (one peer).
    Channel,
    /// Raw TCP (or ipc) with no ZMTP: each connection has a routing id, and a message is
    /// `[routing id, bytes]` — the bytes as they arrived, or to write. `[id, ""]` is received when a
    /// connection opens and when it closes, and sent it closes the connection.
    Stream,
}

impl SocketType {
    /// The name sent in READY.
    pub fn as_str(self) -> &'static str {
        match self {
            SocketType::Pair => "PAIR",
            SocketType::Pub => "PUB",
            SocketType::Sub => "SUB",
            SocketType::Req => "REQ",
            SocketType::Rep => "REP",
            SocketType::Dealer => "DEALER",
            SocketType::Router => "ROUTER",
            SocketType::Pull => "PULL",
            SocketType::Push => "PUSH",
            SocketType::XPub => "XPUB",
            SocketType::XSub => "XSUB",
            SocketType::Server => "SERVER",
            SocketType::Client => "CLIENT",
            SocketType::Radio => "RADIO",
            SocketType::Dish => "DISH",
            SocketType::Gather => "GATHER",
            SocketType::Scatter => "SCATTER",
            SocketType::Peer => "PEER",
            SocketType::Channel => "CHANNEL",
            SocketType::Stream => "STREAM",
        }
    }

    /// Whether a peer of type `peer` may connect to us (zmtp-wire.md §1.8).
    pub fn accepts(self, peer: SocketType) -> bool {
        use SocketType::*;
        match self {
            Req => matches!(peer, Rep | Router),
            Rep => matches!(peer, Req | Dealer),
            Dealer => matches!(peer, Rep | Dealer | Router),
            Router => matches!(peer, Req | Dealer | Router),
            Pub | XPub => matches!(peer, Sub | XSub),
            Sub | XSub => matches!(peer, Pub | XPub),
            Push => peer == Pull,
            Pull => peer == Push,
            Pair => peer == Pair,
            Server => peer == Client,
            Client => peer == Server,
            Radio => peer == Dish,
            Dish => peer == Radio,
            Gather => peer == Scatter,
            Scatter => peer == Gather,
            Peer => peer == Peer,
            Channel => peer == Channel,
            // Speaks no ZMTP, so no ZMTP peer.
            Stream => false,
        }
    }

    /// Every type, classic then draft.
    pub const ALL: [SocketType; 20] = {
        use SocketType::*;
        [
            Pair, Pub, Sub, Req, Rep, Dealer, Router, Pull, Push, XPub, XSub, Server, Client, Radio, Dish, Gather,
            Scatter, Peer, Channel, Stream,
        ]
    };

    /// Whether this is one of libzmq's draft types (built there only with `--enable-drafts`): they
    /// carry single-frame messages only, and SERVER/PEER address peers by a 32-bit routing id.
    pub fn is_draft(self) -> bool {
        use SocketType::*;
        matches!(self, Server | Client | Radio | Dish | Gather | Scatter | Peer | Channel)
    }

    /// Whether this type sends ZMQ_HELLO_MSG to its peers (libzmq: ROUTER, DEALER, CLIENT, SERVER,
    /// PEER).
    pub fn sends_hello_msg(self) -> bool {
        use SocketType::*;
        matches!(self, Router | Dealer | Client | Server | Peer)
    }

    /// Whether this type receives ZMQ_DISCONNECT_MSG when a peer it accepted goes (libzmq: ROUTER,
    /// SERVER, PEER).
    pub fn receives_disconnect_msg(self) -> bool {
        use SocketType::*;
        matches!(self, Router | Server | Peer)
    }

    /// Whether this type receives ZMQ_HICCUP_MSG when a connection it made drops (libzmq: DEALER,
    /// CLIENT, PEER).
    pub fn receives_hiccup_msg(self) -> bool {
        use SocketType::*;
        matches!(self, Dealer | Client | Peer)
    }

    /// Whether READY from this type carries `Identity` (libzmq: REQ, DEALER, ROUTER).
    pub fn sends_identity(self) -> bool {
        matches!(self, SocketType::Req | SocketType::Dealer | SocketType::Router)
    }
}

impl fmt::Display for SocketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown socket type name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown socket type {0:?}")]
pub struct UnknownSocketType(pub String);

impl FromStr for SocketType {
    type Err = UnknownSocketType;

    /// Parses a type name in any casing.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SocketType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownSocketType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SocketType::*;

    const ALL: [SocketType; 20] = SocketType::ALL;

    #[test]
    fn compatibility_is_symmetric_and_matches_the_table() {
        let mut pairs = 0;
        for a in ALL {
            for b in ALL {
                assert_eq!(a.accepts(b), b.accepts(a), "{a} vs {b}");
                pairs += a.accepts(b) as usize;
            }
        }
        // REQ:2 REP:2 DEALER:3 ROUTER:3 PUB:2 XPUB:2 SUB:2 XSUB:2 PUSH:1 PULL:1 PAIR:1, and one each
        // for the eight draft types
        assert_eq!(pairs, 29);
        assert!(Server.accepts(Client) && !Server.accepts(Server) && !Client.accepts(Dealer));
        assert!(Peer.accepts(Peer) && Channel.accepts(Channel) && !Channel.accepts(Pair));
        assert!(Radio.accepts(Dish) && Gather.accepts(Scatter) && !Dish.accepts(Pub));
        assert!(!Dealer.accepts(Push));
        assert!(Router.accepts(Router));
    }

    #[test]
    fn names_round_trip_in_any_case() {
        for t in ALL {
            assert_eq!(t.as_str().parse::<SocketType>().unwrap(), t);
            assert_eq!(t.as_str().to_lowercase().parse::<SocketType>().unwrap(), t);
        }
        assert!("DGRAM".parse::<SocketType>().is_err());
    }
}
