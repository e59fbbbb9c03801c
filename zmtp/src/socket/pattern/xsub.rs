//! SUB and XSUB: the application's subscriptions, refcounted as in libzmq, told to every
//! publisher — when they change and again to each publisher that (re)connects. Every subscribe
//! goes upstream (an XPUB there filters duplicates), a cancel only when its refcount reaches zero.
//! An XSUB also sends: `\x01topic` / `\x00topic` messages change its subscriptions, anything else
//! goes to every publisher. (A SUB's receive-side filter is the inbox's.)

use bytes::Bytes;

use super::{Pattern, SendFlags, TrySend, dist};
use crate::error::{Error, Result};
use crate::link::peer_id::PeerId;
use crate::link::pipe::Outbound;
use crate::message::Message;
use crate::options::Options;
use crate::socket::peers::Peers;
use crate::socket::subscriptions::Subscriptions;
use crate::wire::SocketType;

#[derive(Debug)]
pub(crate) struct XSub {
    subscriptions: Subscriptions,
    /// XSUB (sends) rather than SUB.
    extended: bool,
}

impl XSub {
    pub fn new(extended: bool) -> Self {
        XSub { subscriptions: Subscriptions::default(), extended }
    }
}

/// The subscription an XSUB's message asks for, if it is one.
fn as_subscription(msg: &Message) -> Option<(&[u8], bool)> {
    match (msg.len(), msg.first().map(|f| &f[..])) {
        (1, Some([flag @ (0 | 1), topic @ ..])) => Some((topic, *flag == 1)),
        _ => None,
    }
}

impl XSub {
    /// Every subscribe goes upstream; an unsubscribe when it drops the last reference, or always
    /// with XSUB_VERBOSE_UNSUBSCRIBE on an XSUB (even of a topic never subscribed, as libzmq).
    fn change(&mut self, peers: &Peers, topic: &[u8], subscribe: bool, verbose_unsubscribe: bool) {
        let forward = if subscribe {
            self.subscriptions.add(topic);
            true
        } else {
            self.subscriptions.remove(topic) || (self.extended && verbose_unsubscribe)
        };
        if forward {
            let topic = Bytes::copy_from_slice(topic);
            for p in peers.map.values().filter(|p| p.connected) {
                p.out.push_command(Outbound::Subscribe(topic.clone(), subscribe));
            }
        }
    }
}

#[cfg(feature = "draft")]
impl XSub {
    /// A multipart message, frame by frame as libzmq's xsub.cpp reads it (see
    /// [`crate::link::subscription`]): its subscriptions count here and travel upstream inside it,
    /// and an unsubscribe that drops no last reference (without XSUB_VERBOSE_UNSUBSCRIBE) is taken
    /// out of it.
    fn multipart(&mut self, msg: Message, flags: &SendFlags<'_>) -> Message {
        let mut rule = crate::link::subscription::FrameRule::new(flags.only_first_subscribe);
        let mut out = Message::new();
        for frame in msg.into_frames() {
            let keep = match rule.next(&frame) {
                Some((topic, true)) => {
                    self.subscriptions.add(topic);
                    true
                }
                Some((topic, false)) => self.subscriptions.remove(topic) || flags.xsub_verbose_unsubscribe,
                None => true,
            };
            if keep {
                out.push(frame);
            }
        }
        out
    }
}

impl Pattern for XSub {
    fn attached(&mut self, peers: &Peers, id: PeerId, _: Option<Bytes>, _: &Options) {
        if let Some(p) = peers.map.get(&id) {
            for topic in self.subscriptions.iter() {
                p.out.push_command(Outbound::Subscribe(topic.clone(), true));
            }
        }
    }

    fn send(&mut self, peers: &mut Peers, msg: Message, flags: &SendFlags<'_>) -> Result<TrySend> {
        if !self.extended {
            return Err(Error::NotSupported(SocketType::Sub));
        }
        if let Some((topic, subscribe)) = as_subscription(&msg) {
            self.change(peers, topic, subscribe, flags.xsub_verbose_unsubscribe);
            return Ok(TrySend::Sent);
        }
        #[cfg(feature = "draft")]
        if msg.len() > 1 {
            return Ok(dist::to_all(peers, self.multipart(msg, flags)));
        }
        Ok(dist::to_all(peers, msg))
    }

    fn local_subscription(&mut self, peers: &Peers, topic: &[u8], subscribe: bool, options: &Options) -> Result<()> {
        #[cfg(feature = "draft")]
        let verbose = options.xsub_verbose_unsubscribe;
        #[cfg(not(feature = "draft"))]
        let verbose = {
            let _ = options;
            false
        };
        self.change(peers, topic, subscribe, verbose);
        Ok(())
    }

    fn topics_count(&self) -> Option<usize> {
        Some(self.subscriptions.len())
    }

    fn socket_type(&self) -> SocketType {
        if self.extended { SocketType::XSub } else { SocketType::Sub }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::pattern::testing::{add_peer, msg, taken};

    #[test]
    fn subscriptions_are_refcounted_and_replayed_to_a_new_publisher() {
        let (mut x, mut s) = (XSub::new(false), Peers::default());
        let a = add_peer(&mut x, &mut s, 1, "", 10);
        x.local_subscription(&s, b"t", true, &Options::default()).unwrap();
        x.local_subscription(&s, b"t", true, &Options::default()).unwrap();
        x.local_subscription(&s, b"t", false, &Options::default()).unwrap();
        assert_eq!(taken(&s, a), [["SUBSCRIBE", "t"], ["SUBSCRIBE", "t"]], "one reference left: no cancel");
        let b = add_peer(&mut x, &mut s, 2, "", 10);
        assert_eq!(taken(&s, b), [["SUBSCRIBE", "t"]]);
        x.local_subscription(&s, b"t", false, &Options::default()).unwrap();
        assert_eq!(taken(&s, a), [["CANCEL", "t"]]);
        assert!(matches!(x.send(&mut s, msg(&["m"]), &SendFlags::default()), Err(Error::NotSupported(_))));
    }

    #[test]
    fn an_xsub_sends_subscriptions_as_messages_and_the_rest_to_every_publisher() {
        let (mut x, mut s) = (XSub::new(true), Peers::default());
        let (a, b) = (add_peer(&mut x, &mut s, 1, "", 10), add_peer(&mut x, &mut s, 2, "", 10));
        let flags = SendFlags::default();
        x.send(&mut s, msg(&["\x01news"]), &flags).unwrap();
        x.send(&mut s, msg(&["data"]), &flags).unwrap();
        x.send(&mut s, msg(&["\x01two", "frames"]), &flags).unwrap();
        for p in [a, b] {
            assert_eq!(taken(&s, p), [vec!["SUBSCRIBE", "news"], vec!["data"], vec!["\x01two", "frames"]]);
        }
    }
}
