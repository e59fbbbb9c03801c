//! What a PULL's or a SUB's receive took from its inbox ahead of the application (see
//! [`super::core::Core::try_recv`]), with the peer each run of it came from.
//!
//! The peers are kept because those messages are still unread: `disconnect()` drops a
//! connection's unread messages (libzmq's `zmq_disconnect`: "outstanding messages physically
//! received from the network but not yet received by the application … shall be discarded"),
//! and an unsubscribe drops the ones its SUB no longer wants. One run per refill in the common
//! case (one peer sending), so a receive pays a decrement for it, not a tag per message.

use std::collections::VecDeque;

use super::inbox::{Inbox, PeerId};
use crate::message::Message;

#[derive(Debug, Default)]
pub(crate) struct TakenAhead {
    messages: VecDeque<Message>,
    /// Which peer `messages` came from, front to back: (peer, how many in a row). The counts add
    /// up to `messages.len()`, and none is 0.
    runs: VecDeque<(PeerId, usize)>,
}

impl TakenAhead {
    pub fn pop_front(&mut self) -> Option<Message> {
        let message = self.messages.pop_front()?;
        if let Some((_, count)) = self.runs.front_mut() {
            *count -= 1;
            if *count == 0 {
                self.runs.pop_front();
            }
        }
        Some(message)
    }

    /// Takes up to `max` messages from `inbox`, in the order its receives would give them.
    pub fn refill(&mut self, inbox: &Inbox, max: usize) {
        let runs = &mut self.runs;
        inbox.pop_many_into(&mut self.messages, max, |peer, count| match runs.back_mut() {
            Some((last, total)) if *last == peer => *total += count,
            _ => runs.push_back((peer, count)),
        });
    }

    /// Moves up to `max` messages, the oldest first, to `out`; how many.
    pub fn drain_into(&mut self, out: &mut Vec<Message>, max: usize) -> usize {
        let count = self.messages.len().min(max);
        out.extend(self.messages.drain(..count));
        let mut left = count;
        while left > 0 {
            // The runs count every message, so there is one while any is left.
            let Some(run) = self.runs.front_mut() else { break };
            let from_run = run.1.min(left);
            run.1 -= from_run;
            left -= from_run;
            if run.1 == 0 {
                self.runs.pop_front();
            }
        }
        count
    }

    /// `disconnect()`: the peer's messages go, unread.
    pub fn drop_peer(&mut self, peer: PeerId) {
        if self.runs.iter().any(|&(from, _)| from == peer) {
            self.retain(|from, _| from != peer);
        }
    }

    /// SUB: drops what its filter, just changed, no longer wants (libzmq filters on receipt).
    pub fn refilter(&mut self, inbox: &Inbox) {
        if !self.messages.is_empty() {
            inbox.with_filter(|wanted| self.retain(|_, message| wanted(message)));
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(PeerId, &Message) -> bool) {
        let mut messages = std::mem::take(&mut self.messages).into_iter();
        for (peer, count) in std::mem::take(&mut self.runs) {
            let kept = self.messages.len();
            self.messages.extend(messages.by_ref().take(count).filter(|message| keep(peer, message)));
            let kept = self.messages.len() - kept;
            if kept > 0 {
                self.runs.push_back((peer, kept));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use bytes::Bytes;

    use super::*;

    fn inbox_with(peers: &[(PeerId, &[&'static str])], filter: bool) -> Inbox {
        let inbox = Inbox::new(filter);
        for &(peer, messages) in peers {
            inbox.add_peer(peer, 0, false, Bytes::new());
            let mut batch: VecDeque<Message> = messages.iter().map(|&m| Message::from(m)).collect();
            inbox.push(peer, &mut batch);
        }
        inbox
    }

    fn firsts(taken: &TakenAhead) -> Vec<Bytes> {
        taken.messages.iter().map(|m| m[0].clone()).collect()
    }

    fn counted(taken: &TakenAhead) -> bool {
        taken.runs.iter().all(|&(_, n)| n > 0) && taken.runs.iter().map(|r| r.1).sum::<usize>() == taken.messages.len()
    }

    #[test]
    fn a_disconnected_peers_messages_go_and_the_others_stay_in_order() {
        let inbox = inbox_with(&[(1, &["a1", "a2", "a3"]), (2, &["b1", "b2"])], false);
        let mut taken = TakenAhead::default();
        taken.refill(&inbox, 10);
        assert_eq!(firsts(&taken), ["a1", "b1", "a2", "b2", "a3"], "round robin, as pops give them");
        assert_eq!(taken.pop_front().map(|m| m[0].clone()), Some(Bytes::from("a1")));
        taken.drop_peer(2);
        assert_eq!(firsts(&taken), ["a2", "a3"]);
        assert!(counted(&taken));
        let mut out = Vec::new();
        assert_eq!(taken.drain_into(&mut out, 1), 1);
        taken.drop_peer(1);
        assert!(taken.messages.is_empty() && taken.runs.is_empty(), "{taken:?}");
    }

    #[test]
    fn runs_from_one_peer_stay_one_run_across_refills() {
        let inbox = inbox_with(&[(7, &["x1", "x2", "x3", "x4"])], false);
        let mut taken = TakenAhead::default();
        taken.refill(&inbox, 2);
        taken.refill(&inbox, 2);
        assert_eq!(taken.runs, [(7, 4)]);
        let mut out = Vec::new();
        assert_eq!(taken.drain_into(&mut out, 3), 3);
        assert_eq!(taken.runs, [(7, 1)]);
    }

    #[test]
    fn an_unsubscribe_reaches_what_a_sub_took_ahead() {
        let inbox = inbox_with(&[(1, &["a1", "c1", "b1", "a2", "c2", "b2"])], true);
        inbox.filter_update(b"a", true);
        inbox.filter_update(b"b", true);
        // The filter applies as messages are taken: the inbox above was filled before it was set.
        let mut taken = TakenAhead::default();
        taken.refill(&inbox, 3);
        assert_eq!(firsts(&taken), ["a1", "b1", "a2"], "three wanted, the unwanted skipped");
        inbox.filter_update(b"b", false);
        taken.refilter(&inbox);
        assert_eq!(firsts(&taken), ["a1", "a2"]);
        assert!(counted(&taken));
        inbox.set_invert(true);
        taken.refilter(&inbox);
        assert!(taken.messages.is_empty() && taken.runs.is_empty(), "inverted, \"a\" matches nothing it wants");
        taken.refill(&inbox, 10);
        assert_eq!(firsts(&taken), ["c2", "b2"], "inverted, what \"a\" does not match");
        assert!(counted(&taken));
    }
}
