//! XPUB_MANUAL and XPUB_MANUAL_LAST_VALUE (libzmq's xpub.cpp; feature `draft`): every
//! subscription change is passed up and nobody is subscribed by it, until the application, having
//! received a notice, calls `subscribe`/`unsubscribe`, which applies to the subscriber that notice
//! came from. With LAST_VALUE also, the first send after a notice goes to that subscriber alone.
//! A subscriber that goes is told up as `\x00topic` for each topic it had asked for, in byte order
//! (libzmq walks its trie).

use bytes::Bytes;

use crate::error::LimitError;
use crate::link::peer_id::{PeerId, PeerMap};
use crate::options::Options;
use crate::socket::subscriptions::Subscriptions;

#[derive(Debug, Default)]
pub(crate) struct Manual {
    /// What each subscriber asked for (the trie holds what the application granted).
    asked: PeerMap<Subscriptions>,
    /// The subscriber the last received message came from.
    pub last_from: Option<PeerId>,
    /// XPUB_MANUAL_LAST_VALUE, as the options said at the last change.
    pub last_value: bool,
}

/// Whether the options put an XPUB in manual mode.
pub(crate) fn on(options: &Options) -> bool {
    options.xpub_manual || options.xpub_manual_last_value
}

impl Manual {
    /// A change a subscriber asks for is only recorded, within its limits.
    pub fn asked_for(
        &mut self,
        peer: PeerId,
        topic: &[u8],
        subscribe: bool,
        options: &Options,
    ) -> Result<(), LimitError> {
        self.last_value = options.xpub_manual_last_value;
        let asked = self.asked.entry(peer).or_default();
        if !subscribe {
            asked.remove_all(topic);
            return Ok(());
        }
        if !asked.contains(topic) {
            if let Some(limit) = options.max_subscriptions
                && asked.len() >= limit
            {
                return Err(LimitError::Subscriptions { limit });
            }
            if let Some(limit) = options.max_subscription_bytes
                && asked.bytes() + topic.len() > limit
            {
                return Err(LimitError::SubscriptionBytes { limit });
            }
        }
        asked.insert_once(topic);
        Ok(())
    }

    /// `peer` left: the topics it had asked for, in byte order; `None` if it asked for none here.
    pub fn left(&mut self, peer: PeerId) -> Option<Vec<Bytes>> {
        if self.last_from == Some(peer) {
            self.last_from = None;
        }
        let asked = self.asked.remove(&peer)?;
        let mut topics: Vec<Bytes> = asked.iter().cloned().collect();
        topics.sort();
        Some(topics)
    }

    /// LAST_VALUE: the subscriber a send goes to alone, once.
    pub fn last_value_target(&mut self) -> Option<PeerId> {
        if self.last_value { self.last_from.take() } else { None }
    }
}
