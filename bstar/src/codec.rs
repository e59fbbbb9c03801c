//! The state message: one frame holding the sender's state as an ASCII decimal (`"1"` … `"4"`).
//!
//! Decoding is strict and never panics: anything but one frame of ASCII digits naming a state is a
//! typed [`MalformedState`] that the runner logs and drops (it does not count as a heartbeat).
//!
//! ```
//! use bstar::codec::{decode, encode, MalformedState};
//! use bstar::fsm::State;
//! use zmtp::Message;
//!
//! assert_eq!(encode(State::Passive), Message::single("4"));
//! assert_eq!(decode(&Message::single("3")), Ok(State::Active));
//! assert!(matches!(decode(&Message::single("9")), Err(MalformedState::UnknownState(_))));
//! assert!(matches!(decode(&Message::from(vec!["3", "x"])), Err(MalformedState::FrameCount(2))));
//! ```

use std::fmt;

use bytes::Bytes;
use zmtp::Message;

use crate::fsm::State;

/// Longest digit string considered (so a hostile peer cannot make us parse megabytes).
const MAX_DIGITS: usize = 20;

/// Why a message is not a state message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedState {
    /// Not exactly one frame.
    #[error("state message has {0} frames, expected 1")]
    FrameCount(usize),
    /// The frame is empty, too long, or holds something other than ASCII digits.
    #[error("state message is not an ASCII decimal: {}", Shown(.0))]
    NotDecimal(Bytes),
    /// A decimal, but not a state's wire value (1..=4).
    #[error("state message names no state: {}", Shown(.0))]
    UnknownState(Bytes),
}

/// The one-frame state message for `state`.
pub fn encode(state: State) -> Message {
    const DIGITS: [&str; 5] = ["0", "1", "2", "3", "4"];
    Message::single(DIGITS[state.wire() as usize])
}

/// Parses a state message.
pub fn decode(msg: &Message) -> Result<State, MalformedState> {
    let [frame] = msg.frames() else { return Err(MalformedState::FrameCount(msg.len())) };
    if frame.is_empty() || frame.len() > MAX_DIGITS || !frame.iter().all(u8::is_ascii_digit) {
        return Err(MalformedState::NotDecimal(frame.clone()));
    }
    let value = frame.iter().fold(0u64, |acc, d| acc.saturating_mul(10).saturating_add(u64::from(d - b'0')));
    State::from_wire(value).ok_or_else(|| MalformedState::UnknownState(frame.clone()))
}

/// Displays at most 32 bytes of a frame, escaped.
struct Shown<'a>(&'a Bytes);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = &self.0[..self.0.len().min(32)];
        write!(f, "\"{}\"", head.escape_ascii())?;
        if self.0.len() > head.len() {
            write!(f, "… ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}
