//! The key-value message: CHP's one wire format, five frames.
//!
//! | Frame | Content |
//! |---|---|
//! | 0 | key (a 0MQ string, 1..=[`MAX_KEY_LEN`] bytes) |
//! | 1 | sequence number, 8 bytes big-endian |
//! | 2 | UUID, 16 bytes, or empty |
//! | 3 | properties, zero or more `name=value\n` lines ([`Properties`]) |
//! | 4 | body (value); empty means "delete" |
//!
//! [`KvMsg::parse`] accepts exactly this and nothing else: every malformed message is a typed
//! [`KvMsgError`], so a receiver can log and drop it without ever panicking.
//!
//! ```
//! use chp::kvmsg::{KvMsg, KvMsgError};
//!
//! let mut msg = KvMsg::new("/weather/paris", "21C");
//! msg.sequence = 7;
//! msg.properties.insert("ttl", "30").unwrap();
//! let wire = msg.to_message();
//! assert_eq!(wire.len(), 5);
//! assert_eq!(KvMsg::parse(wire.frames()).unwrap(), msg);
//!
//! // Four frames is not a kvmsg.
//! let short = zmtp::Message::from(vec!["key", "12345678", "", ""]);
//! assert_eq!(KvMsg::parse(short.frames()), Err(KvMsgError::FrameCount(4)));
//! ```

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;

use crate::uuid::Uuid;
use bytes::Bytes;
use zmtp::Message;

/// Longest key (and subtree) accepted, in bytes. Longer keys are rejected with
/// [`KvMsgError::KeyTooLong`]: keys are routing material (PUB/SUB prefix filters, snapshot ranges),
/// not payload, and a bound keeps a hostile client from growing the server's index without limit.
pub const MAX_KEY_LEN: usize = 1024;

/// Most properties one kvmsg may carry. 12/CHP itself defines one (`ttl`); the bound keeps a peer
/// from making a receiver build (and a server re-publish) an index of arbitrarily many names.
/// More is rejected with [`KvMsgError::TooManyProperties`].
pub const MAX_PROPERTIES: usize = 256;

/// Longest properties frame accepted, in bytes (frame 3). Longer is rejected with
/// [`KvMsgError::PropertiesTooLong`] before any of it is parsed.
pub const MAX_PROPERTIES_LEN: usize = 64 * 1024;

/// Why a multipart message is not a valid kvmsg.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KvMsgError {
    /// A kvmsg has exactly five frames.
    #[error("expected 5 frames, got {0}")]
    FrameCount(usize),
    /// Frame 0 is empty.
    #[error("empty key")]
    EmptyKey,
    /// Frame 0 is longer than [`MAX_KEY_LEN`].
    #[error("key of {0} bytes is longer than the limit of {MAX_KEY_LEN}")]
    KeyTooLong(usize),
    /// Frame 1 is not 8 bytes.
    #[error("sequence frame has {0} bytes, expected 8")]
    SequenceLength(usize),
    /// Frame 2 is neither empty nor 16 bytes.
    #[error("UUID frame has {0} bytes, expected 0 or 16")]
    UuidLength(usize),
    /// Frame 3 is not UTF-8.
    #[error("properties are not UTF-8")]
    PropertiesNotUtf8,
    /// A property line has no `=`.
    #[error("property {0:?} has no '='")]
    PropertyWithoutEquals(String),
    /// A property line starts with `=`.
    #[error("property {0:?} has an empty name")]
    EmptyPropertyName(String),
    /// A property name contains `=` or a newline, or a value contains a newline (cannot be encoded).
    #[error("property {0:?} cannot be encoded (newline in name or value, or '=' in name)")]
    UnencodableProperty(String),
    /// More than [`MAX_PROPERTIES`] distinct names (counting lines while parsing, names when inserting).
    #[error("more than {MAX_PROPERTIES} properties")]
    TooManyProperties,
    /// Frame 3 is longer than [`MAX_PROPERTIES_LEN`].
    #[error("properties frame of {0} bytes is longer than the limit of {MAX_PROPERTIES_LEN}")]
    PropertiesTooLong(usize),
}

/// The properties frame: `name=value` pairs, one per line. Setting a name again replaces its value
/// ("last write wins", also when parsing a frame that repeats a name).
///
/// ```
/// use chp::kvmsg::Properties;
/// let props = Properties::parse(b"ttl=5\nowner=me\nttl=9\n").unwrap();
/// assert_eq!(props.get("ttl"), Some("9"));
/// assert_eq!(props.encode(), "ttl=9\nowner=me\n");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Properties {
    pairs: Vec<(String, String)>,
}

impl Properties {
    /// No properties.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a properties frame. Empty lines are skipped (the frame normally ends with `\n`).
    ///
    /// Linear in the frame's length: a frame longer than [`MAX_PROPERTIES_LEN`] is refused before
    /// it is looked at, more than [`MAX_PROPERTIES`] lines are refused as they are counted, and a
    /// repeated name is found through a hash index, not by scanning the names seen so far.
    pub fn parse(frame: &[u8]) -> Result<Properties, KvMsgError> {
        if frame.len() > MAX_PROPERTIES_LEN {
            return Err(KvMsgError::PropertiesTooLong(frame.len()));
        }
        let text = std::str::from_utf8(frame).map_err(|_| KvMsgError::PropertiesNotUtf8)?;
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (count, line) in text.split('\n').filter(|l| !l.is_empty()).enumerate() {
            if count == MAX_PROPERTIES {
                return Err(KvMsgError::TooManyProperties);
            }
            let (name, value) = line.split_once('=').ok_or_else(|| KvMsgError::PropertyWithoutEquals(excerpt(line)))?;
            if name.is_empty() {
                return Err(KvMsgError::EmptyPropertyName(excerpt(line)));
            }
            match index.entry(name) {
                Entry::Occupied(at) => pairs[*at.get()].1 = value.to_owned(),
                Entry::Vacant(slot) => {
                    slot.insert(pairs.len());
                    pairs.push((name.to_owned(), value.to_owned()));
                }
            }
        }
        Ok(Properties { pairs })
    }

    /// Sets `name` to `value`, replacing an earlier value. Fails if the pair cannot be encoded, or
    /// if it would be property number [`MAX_PROPERTIES`] + 1 (a receiver would refuse the message).
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) -> Result<(), KvMsgError> {
        let (name, value) = (name.into(), value.into());
        if name.is_empty() {
            return Err(KvMsgError::EmptyPropertyName(format!("={value}")));
        }
        if name.contains(['=', '\n']) || value.contains('\n') {
            return Err(KvMsgError::UnencodableProperty(format!("{name}={value}")));
        }
        let full = self.pairs.len() == MAX_PROPERTIES;
        match self.pairs.iter_mut().find(|(n, _)| *n == name) {
            Some(pair) => pair.1 = value,
            None if full => return Err(KvMsgError::TooManyProperties),
            None => self.pairs.push((name, value)),
        }
        Ok(())
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Removes `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let at = self.pairs.iter().position(|(n, _)| n == name)?;
        Some(self.pairs.remove(at).1)
    }

    /// True when there are no properties.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The pairs in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The frame: `name=value\n` per pair (empty when there are none).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for (n, v) in &self.pairs {
            out.push_str(n);
            out.push('=');
            out.push_str(v);
            out.push('\n');
        }
        out
    }
}

/// The first bytes of a peer's line, for an error message: errors are logged, and a log line must
/// not grow with what a peer sent.
fn excerpt(line: &str) -> String {
    const SHOWN: usize = 64;
    match line.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

/// One key-value message (see the [module docs](self) for the frames).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvMsg {
    /// Frame 0.
    pub key: Bytes,
    /// Frame 1.
    pub sequence: u64,
    /// Frame 2 (`None` = empty frame).
    pub uuid: Option<Uuid>,
    /// Frame 3.
    pub properties: Properties,
    /// Frame 4; empty means "delete the key".
    pub body: Bytes,
}

impl KvMsg {
    /// A message with sequence 0, no UUID and no properties.
    pub fn new(key: impl Into<Bytes>, body: impl Into<Bytes>) -> KvMsg {
        KvMsg { key: key.into(), sequence: 0, uuid: None, properties: Properties::new(), body: body.into() }
    }

    /// Parses the five frames of a kvmsg.
    pub fn parse(frames: &[Bytes]) -> Result<KvMsg, KvMsgError> {
        let (sequence, uuid, properties) = parse_fields(frames)?;
        Ok(KvMsg { key: frames[0].clone(), sequence, uuid, properties, body: frames[4].clone() })
    }

    /// [`parse`](Self::parse) that moves the key and body out of `frames` (left empty there; on
    /// an error `frames` is untouched) instead of sharing them: for a receiver done with the
    /// message, that saves an atomic increment and decrement of a reference count per frame.
    ///
    /// ```
    /// use chp::KvMsg;
    ///
    /// let mut wire = KvMsg::new("/a", "1").to_message();
    /// let msg = KvMsg::parse_mut(wire.frames_mut()).unwrap();
    /// assert_eq!((&msg.key[..], &msg.body[..]), (&b"/a"[..], &b"1"[..]));
    /// assert!(wire.frames()[0].is_empty());
    /// ```
    pub fn parse_mut(frames: &mut [Bytes]) -> Result<KvMsg, KvMsgError> {
        let (sequence, uuid, properties) = parse_fields(frames)?;
        let key = std::mem::take(&mut frames[0]);
        Ok(KvMsg { key, sequence, uuid, properties, body: std::mem::take(&mut frames[4]) })
    }

    /// True when the body is empty (the message deletes its key).
    pub fn is_delete(&self) -> bool {
        self.body.is_empty()
    }

    /// The five frames.
    pub fn to_message(&self) -> Message {
        let mut msg = Message::with_capacity(5);
        self.push_frames(&mut msg);
        msg
    }

    /// Appends the five frames to `msg` (after a routing id, for ROUTER sockets).
    pub fn push_frames(&self, msg: &mut Message) {
        msg.reserve(5);
        msg.push(self.key.clone());
        msg.push(Bytes::copy_from_slice(&self.sequence.to_be_bytes()));
        msg.push(self.uuid.map(|u| Bytes::copy_from_slice(u.as_bytes())).unwrap_or_default());
        msg.push(Bytes::from(self.properties.encode()));
        msg.push(self.body.clone());
    }
}

impl fmt::Display for KvMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[seq:{}][key:{}][size:{}]", self.sequence, self.key.escape_ascii(), self.body.len())
    }
}

/// Checks the five frames of a kvmsg; returns what is decoded from frames 1-3 (the key and body
/// are taken as they are).
fn parse_fields(frames: &[Bytes]) -> Result<(u64, Option<Uuid>, Properties), KvMsgError> {
    let [key, sequence, uuid, properties, _body] = frames else {
        return Err(KvMsgError::FrameCount(frames.len()));
    };
    check_key(key)?;
    Ok((parse_sequence(sequence)?, parse_uuid(uuid)?, Properties::parse(properties)?))
}

/// Checks a key (frame 0): non-empty and at most [`MAX_KEY_LEN`] bytes.
pub fn check_key(key: &[u8]) -> Result<(), KvMsgError> {
    match key.len() {
        0 => Err(KvMsgError::EmptyKey),
        n if n > MAX_KEY_LEN => Err(KvMsgError::KeyTooLong(n)),
        _ => Ok(()),
    }
}

/// Decodes an 8-byte big-endian sequence frame.
pub fn parse_sequence(frame: &[u8]) -> Result<u64, KvMsgError> {
    let bytes: [u8; 8] = frame.try_into().map_err(|_| KvMsgError::SequenceLength(frame.len()))?;
    Ok(u64::from_be_bytes(bytes))
}

/// Decodes a UUID frame: empty, or 16 bytes.
pub fn parse_uuid(frame: &[u8]) -> Result<Option<Uuid>, KvMsgError> {
    match frame.len() {
        0 => Ok(None),
        16 => Ok(Some(Uuid::from_slice(frame).expect("16 bytes"))),
        n => Err(KvMsgError::UuidLength(n)),
    }
}

/// Encodes a sequence frame.
pub fn sequence_frame(sequence: u64) -> Bytes {
    Bytes::copy_from_slice(&sequence.to_be_bytes())
}

/// Sequence frames cut from one shared buffer: a publisher stamping many updates pays one
/// allocation per [`SequenceFrames::PER_BUFFER`] frames instead of one per frame.
///
/// ```
/// let mut frames = chp::kvmsg::SequenceFrames::default();
/// assert_eq!(frames.frame(7), chp::kvmsg::sequence_frame(7));
/// ```
#[derive(Debug, Default)]
pub struct SequenceFrames {
    buf: bytes::BytesMut,
}

impl SequenceFrames {
    /// Frames per shared buffer.
    pub const PER_BUFFER: usize = 256;

    /// The 8-byte big-endian frame of `sequence`.
    pub fn frame(&mut self, sequence: u64) -> Bytes {
        if self.buf.capacity() < 8 {
            self.buf = bytes::BytesMut::with_capacity(8 * Self::PER_BUFFER);
        }
        self.buf.extend_from_slice(&sequence.to_be_bytes());
        self.buf.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(v: Vec<&'static [u8]>) -> Vec<Bytes> {
        v.into_iter().map(Bytes::from_static).collect()
    }

    #[test]
    fn round_trip_with_every_field() {
        let mut msg = KvMsg::new("/a/b", "value");
        msg.sequence = u64::MAX - 1;
        msg.uuid = Some(Uuid::new_v4());
        msg.properties.insert("ttl", "1.5").unwrap();
        msg.properties.insert("x", "a=b").unwrap();
        let wire = msg.to_message();
        assert_eq!(wire[1].as_ref(), &(u64::MAX - 1).to_be_bytes());
        assert_eq!(wire[2].len(), 16);
        assert_eq!(wire[3], "ttl=1.5\nx=a=b\n");
        let back = KvMsg::parse(wire.frames()).unwrap();
        assert_eq!(back, msg);
        assert_eq!(back.properties.get("x"), Some("a=b"));
    }

    #[test]
    fn parse_mut_takes_key_and_body_and_leaves_a_bad_message_as_it_was() {
        let mut msg = KvMsg::new("/a/b", "value");
        msg.sequence = 9;
        msg.properties.insert("ttl", "2").unwrap();
        let mut wire = msg.to_message();
        assert_eq!(KvMsg::parse_mut(wire.frames_mut()).unwrap(), msg);
        assert!(wire[0].is_empty() && wire[4].is_empty());
        assert_eq!(wire[1].as_ref(), &9u64.to_be_bytes());

        let mut bad = msg.to_message();
        bad.frames_mut()[1] = Bytes::from_static(b"short");
        let before = bad.clone();
        assert_eq!(KvMsg::parse_mut(bad.frames_mut()), Err(KvMsgError::SequenceLength(5)));
        assert_eq!(bad, before);
    }

    #[test]
    fn empty_uuid_and_properties_round_trip() {
        let msg = KvMsg::new("k", "");
        let wire = msg.to_message();
        assert!(wire[2].is_empty() && wire[3].is_empty() && wire[4].is_empty());
        let back = KvMsg::parse(wire.frames()).unwrap();
        assert_eq!(back, msg);
        assert!(back.is_delete());
    }

    #[test]
    fn rejects_every_malformation() {
        let seq: &'static [u8] = &[0, 0, 0, 0, 0, 0, 0, 1];
        let uuid: &'static [u8] = &[7; 16];
        let ok = frames(vec![b"k", seq, uuid, b"a=1\n", b"v"]);
        assert!(KvMsg::parse(&ok).is_ok());
        for n in [0, 1, 4, 6] {
            let f: Vec<Bytes> = (0..n).map(|_| Bytes::from_static(b"x")).collect();
            assert_eq!(KvMsg::parse(&f), Err(KvMsgError::FrameCount(n)));
        }
        assert_eq!(KvMsg::parse(&frames(vec![b"", seq, b"", b"", b"v"])), Err(KvMsgError::EmptyKey));
        let long = Bytes::from(vec![b'k'; MAX_KEY_LEN + 1]);
        let mut f = ok.clone();
        f[0] = long;
        assert_eq!(KvMsg::parse(&f), Err(KvMsgError::KeyTooLong(MAX_KEY_LEN + 1)));
        let mut f = ok.clone();
        f[0] = Bytes::from(vec![b'k'; MAX_KEY_LEN]);
        assert!(KvMsg::parse(&f).is_ok());
        for bad in [&b""[..], b"1234567", b"123456789"] {
            let mut f = ok.clone();
            f[1] = Bytes::copy_from_slice(bad);
            assert_eq!(KvMsg::parse(&f), Err(KvMsgError::SequenceLength(bad.len())));
        }
        for n in [1, 15, 17, 36] {
            let mut f = ok.clone();
            f[2] = Bytes::from(vec![1u8; n]);
            assert_eq!(KvMsg::parse(&f), Err(KvMsgError::UuidLength(n)));
        }
        let mut f = ok.clone();
        f[3] = Bytes::from_static(b"ttl=1\nbroken\n");
        assert_eq!(KvMsg::parse(&f), Err(KvMsgError::PropertyWithoutEquals("broken".into())));
        let mut f = ok.clone();
        f[3] = Bytes::from_static(b"=1\n");
        assert_eq!(KvMsg::parse(&f), Err(KvMsgError::EmptyPropertyName("=1".into())));
        let mut f = ok;
        f[3] = Bytes::from_static(b"a=\xff\n");
        assert_eq!(KvMsg::parse(&f), Err(KvMsgError::PropertiesNotUtf8));
    }

    #[test]
    fn properties_are_bounded_in_count_and_bytes() {
        let at_limit: String = (0..MAX_PROPERTIES).map(|i| format!("p{i}=v\n")).collect();
        assert_eq!(Properties::parse(at_limit.as_bytes()).unwrap().iter().count(), MAX_PROPERTIES);
        // Repeating a name does not count twice when inserting, but every line counts when parsing:
        // the parser refuses before it has looked at more than MAX_PROPERTIES lines.
        let over = format!("{at_limit}extra=1\n");
        assert_eq!(Properties::parse(over.as_bytes()), Err(KvMsgError::TooManyProperties));
        // The reported attack: 60,000 distinct names (~0.5 MB) is refused by its size alone.
        let attack: String = (0..60_000).map(|i| format!("name{i}=x\n")).collect();
        assert_eq!(Properties::parse(attack.as_bytes()), Err(KvMsgError::PropertiesTooLong(attack.len())));
        let mut f: Vec<Bytes> = vec!["k".into(), sequence_frame(1), Bytes::new(), attack.into(), "v".into()];
        assert!(matches!(KvMsg::parse(&f), Err(KvMsgError::PropertiesTooLong(_))));
        f[3] = Bytes::from(vec![b'a'; MAX_PROPERTIES_LEN]);
        assert_eq!(KvMsg::parse(&f), Err(KvMsgError::PropertyWithoutEquals(format!("{}…", "a".repeat(64)))));
        let mut p = Properties::new();
        for i in 0..MAX_PROPERTIES {
            p.insert(format!("p{i}"), "v").unwrap();
        }
        p.insert("p0", "again").unwrap();
        assert_eq!(p.insert("one-more", "v"), Err(KvMsgError::TooManyProperties));
    }

    #[test]
    fn repeated_names_in_a_long_frame_keep_the_last_value_in_first_position() {
        let mut text = String::new();
        for round in 0..100 {
            for name in ["a", "b", "c"] {
                text.push_str(&format!("{name}={round}\n"));
            }
        }
        // 300 lines is over the count limit: repetition is no way around it.
        assert_eq!(Properties::parse(text.as_bytes()), Err(KvMsgError::TooManyProperties));
        let text: String = text.lines().take(MAX_PROPERTIES).map(|l| format!("{l}\n")).collect();
        let p = Properties::parse(text.as_bytes()).unwrap();
        assert_eq!(p.iter().collect::<Vec<_>>(), vec![("a", "85"), ("b", "84"), ("c", "84")]);
    }

    #[test]
    fn properties_last_write_wins_and_validation() {
        let p = Properties::parse(b"a=1\n\nb=2\na=3").unwrap();
        assert_eq!(p.iter().collect::<Vec<_>>(), vec![("a", "3"), ("b", "2")]);
        let mut p = Properties::new();
        assert!(p.insert("a\nb", "1").is_err());
        assert!(p.insert("a=b", "1").is_err());
        assert!(p.insert("a", "1\n").is_err());
        assert!(p.insert("", "1").is_err());
        p.insert("a", "").unwrap();
        assert_eq!(p.encode(), "a=\n");
        assert_eq!(Properties::parse(b"a=\n").unwrap().get("a"), Some(""));
        assert_eq!(p.remove("a").as_deref(), Some(""));
        assert!(p.is_empty());
    }
}
