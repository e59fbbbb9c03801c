//! Which frames of a multipart message are subscriptions (libzmq's xpub.cpp `xread_activated` and
//! xsub.cpp `xsend`, feature `draft`): a frame starting with `\x01` (subscribe) or `\x00` (cancel)
//! is one, the first frame always may be, and the others may be too — unless ONLY_FIRST_SUBSCRIBE
//! is set and the first frame was not a subscription, when the rest are plain data. (Set, a first
//! frame that *is* a subscription still lets the rest be read as subscriptions: libzmq's code,
//! whatever its documentation says.) A single-frame message is read the same way everywhere.

/// The rule, frame by frame through one message.
#[derive(Debug)]
pub(crate) struct FrameRule {
    only_first: bool,
    /// The next frame is the message's first.
    first: bool,
    /// Frames after the first may be subscriptions.
    later: bool,
}

impl FrameRule {
    pub fn new(only_first_subscribe: bool) -> Self {
        FrameRule { only_first: only_first_subscribe, first: true, later: true }
    }

    /// The next frame's subscription, if it is one: the topic, and whether it subscribes.
    pub fn next<'a>(&mut self, frame: &'a [u8]) -> Option<(&'a [u8], bool)> {
        let looked_at = self.first || self.later;
        let subscription = match frame {
            [flag @ (0 | 1), topic @ ..] if looked_at => Some((topic, *flag == 1)),
            _ => None,
        };
        if self.first {
            self.later = !self.only_first || subscription.is_some();
            self.first = false;
        }
        subscription
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(only_first: bool, frames: &[&[u8]]) -> Vec<Option<(Vec<u8>, bool)>> {
        let mut rule = FrameRule::new(only_first);
        frames.iter().map(|f| rule.next(f).map(|(t, on)| (t.to_vec(), on))).collect()
    }

    #[test]
    fn every_frame_may_be_a_subscription_unless_only_the_first() {
        let sub = |t: &[u8]| Some((t.to_vec(), true));
        let cancel = |t: &[u8]| Some((t.to_vec(), false));
        assert_eq!(read(false, &[b"ABC", b"\x01C"]), [None, sub(b"C")]);
        assert_eq!(read(true, &[b"ABC", b"\x01C"]), [None, None], "data first: the rest is data");
        assert_eq!(read(true, &[b"\x01D", b"xyz", b"\x00D"]), [sub(b"D"), None, cancel(b"D")]);
        assert_eq!(read(false, &[b"", b"\x01"]), [None, sub(b"")], "an empty frame is data");
    }
}
