//! The socket patterns' rules, one module each, over the socket's [`State`]: what a send does
//! (which peer or peers get the message, what is added to it, when it must wait) and what a
//! receive makes of a message taken from the inbox. The strategies patterns share are modules of
//! their own: load balancing ([`lb`]) and distribution by subscription ([`dist`]). No sockets and
//! no runtime here, so each rule is unit-tested by building a state and feeding it messages.
//!
//! | type | send | receive |
//! |---|---|---|
//! | PAIR | [`pair`]: the one peer | as queued |
//! | DEALER, PUSH | [`lb`]: round-robin over peers with room | fair-queued (the inbox) |
//! | REQ | [`req`]: an empty delimiter (and REQ_CORRELATE id), load-balanced, one at a time | only the awaited peer's reply |
//! | REP | [`rep`]: back along the request's envelope | the envelope kept for the reply |
//! | ROUTER | [`router`]: by routing id (ROUTER_MANDATORY) | the sender's routing id first |
//! | PUB, XPUB | [`dist`]: every matching subscriber, once (XPUB_NODROP) | XPUB: notices and messages |
//! | XSUB | [`dist`]: every publisher | as queued |

pub(crate) mod dist;
pub(crate) mod lb;
pub(crate) mod pair;
pub(crate) mod rep;
pub(crate) mod req;
pub(crate) mod router;

use super::state::{State, TrySend};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::wire::SocketType;

/// The options a send reads, taken once per send.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SendFlags {
    pub immediate: bool,
    pub router_mandatory: bool,
    pub xpub_nodrop: bool,
    pub req_relaxed: bool,
    pub req_correlate: bool,
}

/// One non-blocking send of a (non-empty) message with `kind`'s rule. XSUB's subscription
/// messages are the socket's business (they change its own subscriptions), not this.
#[inline]
pub(crate) fn send(kind: SocketType, state: &mut State, msg: Message, flags: &SendFlags) -> Result<TrySend> {
    match kind {
        SocketType::Dealer | SocketType::Push => Ok(lb::send(state, msg, flags.immediate)),
        SocketType::Pair => Ok(pair::send(state, msg)),
        SocketType::Req => req::send(state, msg, flags),
        SocketType::Rep => rep::send(state, msg),
        SocketType::Router => router::send(state, msg, flags.router_mandatory),
        SocketType::Pub | SocketType::XPub => Ok(dist::publish(state, msg, flags.xpub_nodrop)),
        SocketType::XSub => Ok(dist::to_all(state, msg)),
        SocketType::Sub | SocketType::Pull => Err(Error::NotSupported(kind)),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A state with peers whose queues the tests read, no runtime needed.

    use std::collections::VecDeque;
    use std::sync::Arc;

    use bytes::Bytes;
    use tokio_util::sync::CancellationToken;

    use crate::link::peer_id::PeerId;
    use crate::link::pipe::{OutPipe, Outbound};
    use crate::link::waiters::Waiters;
    use crate::message::Message;
    use crate::socket::state::{Peer, State};
    use crate::socket::subscriptions::Subscriptions;

    /// Adds a connected peer (message HWM `hwm`) with this routing id; returns its id.
    pub fn add_peer(state: &mut State, id: PeerId, routing_id: &'static str, hwm: usize) -> PeerId {
        let out = Arc::new(OutPipe::new(hwm, 0, false, Arc::new(Waiters::default())));
        state.peers.insert(
            id,
            Peer {
                out: out.clone(),
                routing_id: Bytes::from_static(routing_id.as_bytes()),
                subscriptions: Subscriptions::default(),
                connected: true,
                minor: 1,
                kill: CancellationToken::new(),
                persistent: false,
                assigned_routing_id: None,
                sent_stamp: 0,
            },
        );
        state.order.push((id, out));
        if !routing_id.is_empty() {
            state.routes.insert(Bytes::from_static(routing_id.as_bytes()), id);
        }
        id
    }

    /// Everything queued for a peer, as text frames.
    pub fn taken(state: &State, id: PeerId) -> Vec<Vec<String>> {
        let mut items = VecDeque::new();
        state.peers[&id].out.drain(&mut items);
        items
            .into_iter()
            .filter_map(|item| match item {
                Outbound::Message(m) => Some(frames(&m)),
                _ => None,
            })
            .collect()
    }

    pub fn frames(m: &Message) -> Vec<String> {
        m.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect()
    }

    pub fn msg(frames: &[&'static str]) -> Message {
        frames.iter().map(|f| Bytes::from_static(f.as_bytes())).collect()
    }
}
