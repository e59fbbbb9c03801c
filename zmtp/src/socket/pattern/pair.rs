//! PAIR: one peer; a message waits while there is none or it is full.

use crate::message::Message;
use crate::socket::state::{State, TrySend};

pub(crate) fn send(state: &mut State, msg: Message) -> TrySend {
    match state.order.first() {
        Some((_, out)) => out.try_push(msg).map_or_else(TrySend::Full, |_| TrySend::Sent),
        None => TrySend::Full(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, msg, taken};

    #[test]
    fn waits_for_its_peer_then_for_room() {
        let mut s = State::default();
        assert!(matches!(send(&mut s, msg(&["early"])), TrySend::Full(_)));
        let p = add_peer(&mut s, 7, "", 1);
        assert!(matches!(send(&mut s, msg(&["a"])), TrySend::Sent));
        assert!(matches!(send(&mut s, msg(&["b"])), TrySend::Full(_)));
        assert_eq!(taken(&s, p), [["a"]]);
    }
}
