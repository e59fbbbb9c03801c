//! REP: a request's envelope (routing ids up to the empty delimiter) is kept while the
//! application answers; the reply goes back along it. One request at a time.

use crate::error::{Error, Result};
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::socket::state::{State, TrySend};

pub(crate) fn send(state: &mut State, msg: Message) -> Result<TrySend> {
    let Some((peer, envelope)) = state.rep.pending.take() else {
        return Err(Error::InvalidState);
    };
    let mut out = envelope;
    for frame in msg {
        out.push(frame);
    }
    // A reply to a peer that is gone or full is dropped, as in libzmq.
    if let Some(p) = state.peers.get(&peer) {
        let _ = p.out.try_push(out);
    }
    Ok(TrySend::Sent)
}

/// A receive while a request waits for its reply is out of turn.
pub(crate) fn check_recv(state: &State) -> Result<()> {
    if state.rep.pending.is_some() { Err(Error::InvalidState) } else { Ok(()) }
}

/// The request without its envelope, which is kept for the reply; `None` drops a request without
/// an empty delimiter (libzmq).
pub(crate) fn on_recv(state: &mut State, from: PeerId, mut msg: Message) -> Option<Message> {
    let envelope = msg.split_envelope()?;
    state.rep.pending = Some((from, envelope));
    Some(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, frames, msg, taken};

    #[test]
    fn the_reply_goes_back_along_the_envelope() {
        let mut s = State::default();
        let p = add_peer(&mut s, 3, "", 10);
        assert!(matches!(send(&mut s, msg(&["early"])), Err(Error::InvalidState)));
        assert!(on_recv(&mut s, p, msg(&["no delimiter"])).is_none());
        let req = on_recv(&mut s, p, msg(&["hop1", "hop2", "", "q"])).unwrap();
        assert_eq!(frames(&req), ["q"]);
        assert!(matches!(check_recv(&s), Err(Error::InvalidState)), "answer first");
        assert!(matches!(send(&mut s, msg(&["r"])), Ok(TrySend::Sent)));
        assert_eq!(taken(&s, p), [["hop1", "hop2", "", "r"]]);
        assert!(check_recv(&s).is_ok());
    }
}
