//! The 6/PPP wire vocabulary: the two one-frame commands and the envelope that wraps every request
//! and reply.
//!
//! ```text
//! READY      one frame, the single byte 0x01   (worker → queue, first message of a conversation)
//! HEARTBEAT  one frame, the single byte 0x02   (both ways, every interval)
//! REQUEST    [address stack…, "", content…]   (content: one or more frames)
//! REPLY      [address stack…, "", content…]   (the worker echoes the request's address stack)
//! ```
//!
//! Parsing is total: anything that is not one of these comes back as a [`ProtocolError`], which the
//! queue, worker and client log and drop without tearing down the peer.

use bytes::Bytes;
use zmtp::Message;

/// READY: the worker starts (or restarts) a conversation.
pub const READY: u8 = 0x01;
/// HEARTBEAT: "I am still here", sent by both peers every interval.
pub const HEARTBEAT: u8 = 0x02;

/// A one-frame PPP command.
///
/// ```
/// use ppp::protocol::Command;
/// let msg = Command::Ready.message();
/// assert_eq!(msg.frames(), &[bytes::Bytes::from_static(&[0x01])]);
/// assert_eq!(Command::parse(&msg), Ok(Command::Ready));
/// assert!(Command::parse(&zmtp::Message::single("hello")).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// `0x01`: the worker is ready for work (first message of every conversation).
    Ready,
    /// `0x02`: a heartbeat.
    Heartbeat,
}

impl Command {
    /// The command's byte.
    pub const fn byte(self) -> u8 {
        match self {
            Command::Ready => READY,
            Command::Heartbeat => HEARTBEAT,
        }
    }

    /// The command's single frame.
    pub fn frame(self) -> Bytes {
        static READY_FRAME: [u8; 1] = [READY];
        static HEARTBEAT_FRAME: [u8; 1] = [HEARTBEAT];
        match self {
            Command::Ready => Bytes::from_static(&READY_FRAME),
            Command::Heartbeat => Bytes::from_static(&HEARTBEAT_FRAME),
        }
    }

    /// The command as a one-frame message.
    pub fn message(self) -> Message {
        Message::single(self.frame())
    }

    /// Parses one frame.
    pub fn from_frame(frame: &[u8]) -> Result<Command, ProtocolError> {
        match frame {
            [READY] => Ok(Command::Ready),
            [HEARTBEAT] => Ok(Command::Heartbeat),
            other => Err(ProtocolError::UnknownCommand(Bytes::copy_from_slice(&other[..other.len().min(16)]))),
        }
    }

    /// Parses a whole message, which must have exactly one frame.
    pub fn parse(msg: &Message) -> Result<Command, ProtocolError> {
        match msg.frames() {
            [frame] => Command::from_frame(frame),
            [] => Err(ProtocolError::Empty),
            _ => Err(ProtocolError::NotACommand(msg.len())),
        }
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Ready => "READY",
            Command::Heartbeat => "HEARTBEAT",
        })
    }
}

/// Why a message is not valid PPP. Every variant is recoverable: the message is dropped, the peer
/// that sent it stays usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A message with no frames at all.
    #[error("empty message")]
    Empty,
    /// A one-frame message that is neither READY (0x01) nor HEARTBEAT (0x02).
    #[error("unknown one-frame command {}", hex(.0))]
    UnknownCommand(Bytes),
    /// A command was expected but the message has this many frames.
    #[error("expected a one-frame command, got {0} frames")]
    NotACommand(usize),
    /// A multi-frame message without the empty frame that ends the address stack.
    #[error("missing envelope: no empty delimiter frame")]
    MissingEnvelope,
    /// An envelope with no content frame after the delimiter.
    #[error("envelope without content")]
    MissingContent,
    /// The envelope's address stack is shorter than this end needs (e.g. no client address).
    #[error("address stack too short: need {needed} frame(s), got {got}")]
    ShortAddressStack {
        /// Address frames required.
        needed: usize,
        /// Address frames present.
        got: usize,
    },
    /// An address frame this end put there came back changed (e.g. a corrupted dispatch tag).
    #[error("malformed address frame {}", hex(.0))]
    BadAddress(Bytes),
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::from("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    if bytes.is_empty() {
        s.push_str("(empty)");
    }
    s
}

/// The address stack of a request or reply: the frames before the empty delimiter.
///
/// ```
/// use ppp::protocol::Envelope;
/// use zmtp::Message;
/// let request = Message::from(vec!["client-7", "", "hello", "world"]);
/// let (envelope, content) = Envelope::split(request.clone()).unwrap();
/// assert_eq!(envelope.addresses(), &[bytes::Bytes::from("client-7")]);
/// assert_eq!(content, Message::from(vec!["hello", "world"]));
/// assert_eq!(envelope.wrap(content), request);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    addresses: Vec<Bytes>,
}

impl Envelope {
    /// An envelope with these address frames (none may be empty).
    pub fn new(addresses: Vec<Bytes>) -> Self {
        debug_assert!(addresses.iter().all(|a| !a.is_empty()), "address frames are never empty");
        Envelope { addresses }
    }

    /// Splits a message at its first empty frame into the address stack and the content
    /// (one or more frames).
    pub fn split(msg: Message) -> Result<(Envelope, Message), ProtocolError> {
        if msg.is_empty() {
            return Err(ProtocolError::Empty);
        }
        let at = msg.iter().position(Bytes::is_empty).ok_or(ProtocolError::MissingEnvelope)?;
        if at + 1 == msg.len() {
            return Err(ProtocolError::MissingContent);
        }
        let mut frames = msg.into_frames();
        let content: Message = frames.drain(at + 1..).collect();
        frames.truncate(at);
        Ok((Envelope { addresses: frames }, content))
    }

    /// Checks that `msg` is `[addresses…, "", content…]` with at least `min_addresses` address
    /// frames, without taking it apart.
    pub fn check(msg: &Message, min_addresses: usize) -> Result<(), ProtocolError> {
        let at = msg.iter().position(Bytes::is_empty).ok_or(ProtocolError::MissingEnvelope)?;
        if at + 1 == msg.len() {
            return Err(ProtocolError::MissingContent);
        }
        if at < min_addresses {
            return Err(ProtocolError::ShortAddressStack { needed: min_addresses, got: at });
        }
        Ok(())
    }

    /// The address frames, outermost first.
    pub fn addresses(&self) -> &[Bytes] {
        &self.addresses
    }

    /// Puts `content` back into this envelope: `[addresses…, "", content…]`.
    pub fn wrap(&self, content: Message) -> Message {
        let mut msg: Message = self.addresses.iter().cloned().collect();
        msg.push(Bytes::new());
        for frame in content {
            msg.push(frame);
        }
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        for cmd in [Command::Ready, Command::Heartbeat] {
            assert_eq!(Command::parse(&cmd.message()), Ok(cmd));
            assert_eq!(cmd.frame().as_ref(), &[cmd.byte()]);
        }
        assert_eq!(Command::Ready.byte(), 0x01);
        assert_eq!(Command::Heartbeat.byte(), 0x02);
    }

    #[test]
    fn unknown_commands_are_typed_errors() {
        assert_eq!(
            Command::parse(&Message::single(Bytes::from_static(&[0x03]))),
            Err(ProtocolError::UnknownCommand(Bytes::from_static(&[0x03])))
        );
        assert!(matches!(Command::parse(&Message::single(Bytes::new())), Err(ProtocolError::UnknownCommand(_))));
        assert!(matches!(
            Command::parse(&Message::single(Bytes::from_static(&[0x01, 0x01]))),
            Err(ProtocolError::UnknownCommand(_))
        ));
        assert_eq!(Command::parse(&Message::from(vec!["a", "b"])), Err(ProtocolError::NotACommand(2)));
        assert_eq!(Command::parse(&Message::new()), Err(ProtocolError::Empty));
        let shown = ProtocolError::UnknownCommand(Bytes::from_static(&[0xab, 0x01])).to_string();
        assert_eq!(shown, "unknown one-frame command 0xab01");
    }

    #[test]
    fn envelopes() {
        let (env, body) = Envelope::split(Message::from(vec!["a", "b", "", "x"])).unwrap();
        assert_eq!(env.addresses(), &[Bytes::from("a"), Bytes::from("b")]);
        assert_eq!(body, Message::from(vec!["x"]));
        // The first empty frame ends the stack; later empty frames are content.
        let (env, body) = Envelope::split(Message::from(vec!["", "x", ""])).unwrap();
        assert!(env.addresses().is_empty());
        assert_eq!(body, Message::from(vec!["x", ""]));
        assert_eq!(Envelope::split(Message::from(vec!["a", "x"])), Err(ProtocolError::MissingEnvelope));
        assert_eq!(Envelope::split(Message::from(vec!["a", ""])), Err(ProtocolError::MissingContent));
        assert_eq!(Envelope::split(Message::new()), Err(ProtocolError::Empty));
        assert_eq!(Envelope::check(&Message::from(vec!["a", "", "x"]), 1), Ok(()));
        assert_eq!(
            Envelope::check(&Message::from(vec!["", "x"]), 1),
            Err(ProtocolError::ShortAddressStack { needed: 1, got: 0 })
        );
        assert_eq!(Envelope::check(&Message::from(vec!["a"]), 1), Err(ProtocolError::MissingEnvelope));
    }
}
