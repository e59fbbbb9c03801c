//! Where a connection's inbound messages go: the socket's core, as one of its peers. Shared by the
//! ZMTP reader and the inproc shortcut, so both apply the same rules (PUB/XPUB take subscriptions from
//! the stream, in arrival order with the data; PUB drops anything else).

use std::collections::VecDeque;
use std::sync::Arc;

use super::host::Host;
#[cfg(feature = "draft")]
use crate::error::ConnectionError;
use crate::error::LimitError;
use crate::link::peer_id::PeerId;
use crate::message::Message;
use crate::wire::SocketType;

/// The receiving side of one connection.
pub(crate) struct Inlet<H> {
    pub core: Arc<H>,
    pub peer: PeerId,
}

impl<H: Host> Inlet<H> {
    fn publisher(&self) -> bool {
        matches!(self.core.socket_type(), SocketType::Pub | SocketType::XPub | SocketType::Radio)
    }

    /// A whole message from the peer, queued in `batch`. A subscription in message form (PUB/XPUB) is
    /// handed back for [`Inlet::subscription_message`]: the common case stays a plain function call.
    #[inline(always)] // the per-message hot path of every reader: not inlining it cost 6% at 64 B
    pub fn message(&self, msg: Message, batch: &mut VecDeque<Message>) -> Option<Message> {
        if self.publisher() {
            // Subscriptions in the ZMTP 3.0 message form; XPUB passes anything else up, PUB drops it.
            if msg.len() == 1 && matches!(msg[0].first(), Some(0 | 1)) {
                return Some(msg);
            }
            // Frames of a multipart message may be subscriptions too (feature `draft`).
            if cfg!(feature = "draft") && msg.len() > 1 && msg.iter().any(|f| matches!(f.first(), Some(0 | 1))) {
                return Some(msg);
            }
            // A RADIO hears only JOIN/LEAVE commands, PUB only subscriptions (radio.cpp, pub.cpp).
            if self.core.socket_type() != SocketType::XPub {
                return None;
            }
        }
        batch.push_back(msg);
        None
    }

    /// Applies a subscription that [`Inlet::message`] handed back.
    pub async fn subscription_message(&self, msg: Message, batch: &mut VecDeque<Message>) -> Result<(), LimitError> {
        #[cfg(feature = "draft")]
        if msg.len() > 1 {
            return self.multipart(msg, batch).await;
        }
        self.subscription(&msg[0][1..], msg[0][0] == 1, batch).await
    }

    /// A multipart message to a PUB/XPUB, frame by frame as libzmq's xpub.cpp reads it (see
    /// [`crate::link::subscription`]): each subscription frame is applied, and an XPUB's
    /// application gets what libzmq's would — the data frames so far with the notice as the last
    /// frame, or the data frames alone (a PUB: nothing).
    #[cfg(feature = "draft")]
    async fn multipart(&self, msg: Message, batch: &mut VecDeque<Message>) -> Result<(), LimitError> {
        let xpub = self.core.socket_type() == SocketType::XPub;
        let only_first = self.core.options_snapshot().only_first_subscribe;
        let mut rule = crate::link::subscription::FrameRule::new(only_first);
        let mut current = Message::new();
        for frame in msg.into_frames() {
            match rule.next(&frame) {
                Some((topic, subscribe)) => {
                    if let Some(notice) = self.core.subscription_notice(self.peer, topic, subscribe)? {
                        // libzmq queues the notice with no MORE flag: it ends the message so far.
                        current.push(notice.into_frames().into_iter().next().unwrap_or_default());
                        batch.push_back(std::mem::take(&mut current));
                    }
                }
                None => {
                    current.push(frame);
                }
            }
        }
        // A PUB takes nothing but subscriptions; its notices are none (see XPub::notice).
        if !current.is_empty() && xpub {
            batch.push_back(current);
        }
        self.flush(batch).await;
        if xpub {
            self.core.wait_below_hwm(self.peer).await;
        }
        Ok(())
    }

    /// A SUBSCRIBE/CANCEL from the peer; ignored unless this socket publishes. Over the peer's
    /// subscription limits it is refused: the caller ends the connection.
    pub async fn subscription(
        &self,
        topic: &[u8],
        subscribe: bool,
        batch: &mut VecDeque<Message>,
    ) -> Result<(), LimitError> {
        if self.publisher() {
            // XPUB delivers notices and data in arrival order: data received so far goes first.
            self.flush(batch).await;
            self.core.peer_subscription(self.peer, topic, subscribe)?;
            if self.core.socket_type() == SocketType::XPub {
                self.core.wait_below_hwm(self.peer).await;
            }
        }
        Ok(())
    }

    /// A DISH's JOIN/LEAVE; ignored unless this socket is a RADIO. A group over 255 bytes breaks the
    /// protocol (libzmq cannot even hold one); over the peer's limits it is refused. Either ends the
    /// connection.
    #[cfg(feature = "draft")]
    pub async fn group(&self, group: &[u8], join: bool, batch: &mut VecDeque<Message>) -> Result<(), ConnectionError> {
        if self.core.socket_type() == SocketType::Radio {
            if group.len() > crate::message::MAX_GROUP_LEN {
                return Err(ConnectionError::PeerViolation("a JOIN or LEAVE of a group over 255 bytes"));
            }
            // Messages sent before the JOIN are not the group's: keep the order (RADIO receives none).
            self.flush(batch).await;
            self.core.peer_group(self.peer, group, join)?;
        }
        Ok(())
    }

    /// Hands `batch` to the socket; parks while the peer's inbound queue is at RCVHWM.
    pub async fn flush(&self, batch: &mut VecDeque<Message>) {
        if !batch.is_empty() {
            self.core.deliver(self.peer, batch).await;
        }
    }
}
