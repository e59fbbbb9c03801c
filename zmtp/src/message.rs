//! `Message`: a multipart ZeroMQ message, each frame a `Bytes` (cheap to clone, never copied on send).

use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::wire::PeerInfo;

/// Properties of the connection a message came from (libzmq's `zmq_msg_gets`): `Socket-Type`,
/// `Identity`, `User-Id`, `Peer-Address`, the peer's application metadata and the authenticator's.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Properties {
    /// Every name, back to back.
    names: String,
    /// Per property: where its name ends in `names`, and its value. The values are copies, in one
    /// buffer: slices of the peer's READY command would keep that whole read buffer (512 bytes)
    /// for as long as the connection lives.
    entries: Vec<(usize, Bytes)>,
}

impl Properties {
    pub(crate) fn of_peer(peer: &PeerInfo, peer_addr: &str) -> Arc<Properties> {
        let address = peer_addr.parse::<std::net::SocketAddr>().ok().map(|a| a.ip().to_string());
        let all: Vec<(&str, &[u8])> = peer
            .metadata
            .iter()
            .map(|(n, v)| (n, &v[..]))
            .chain(peer.user_id.as_deref().map(|user| ("User-Id", user.as_bytes())))
            .chain(address.as_deref().map(|ip| ("Peer-Address", ip.as_bytes())))
            .chain(peer.zap_metadata.iter().map(|(n, v)| (n, &v[..])))
            .collect();
        let mut names = String::with_capacity(all.iter().map(|(n, _)| n.len()).sum());
        let mut values = bytes::BytesMut::with_capacity(all.iter().map(|(_, v)| v.len()).sum());
        let mut ends = Vec::with_capacity(all.len());
        for (name, value) in &all {
            names.push_str(name);
            values.extend_from_slice(value);
            ends.push((names.len(), values.len()));
        }
        let values = values.freeze();
        let mut start = 0;
        let entries = ends
            .into_iter()
            .map(|(name_end, value_end)| {
                let value = values.slice(start..value_end);
                start = value_end;
                (name_end, value)
            })
            .collect();
        Arc::new(Properties { names, entries })
    }

    /// A property by name (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    /// Every property in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Bytes)> {
        let starts = std::iter::once(0).chain(self.entries.iter().map(|(end, _)| *end));
        starts.zip(&self.entries).map(|(start, (end, value))| (self.names.get(start..*end).unwrap_or_default(), value))
    }
}

/// The longest RADIO/DISH group (libzmq's `ZMQ_GROUP_MAX_LENGTH`).
#[cfg_attr(not(feature = "draft"), allow(dead_code))]
pub const MAX_GROUP_LEN: usize = 255;

/// A multipart message: one or more frames, delivered atomically.
///
/// Anything byte-like is one frame; lists and arrays of them are several:
///
/// ```
/// use zmtp::Message;
/// assert_eq!(Message::from("hi").len(), 1);
/// assert_eq!(Message::from(b"hi").len(), 1);
/// assert_eq!(Message::from(vec![1u8, 2, 3]).len(), 1); // a Vec<u8> is one frame of 3 bytes
/// let msg = Message::from(["header", "body"]);
/// assert_eq!(msg.len(), 2);
/// assert_eq!(msg[1], "body");
/// ```
#[derive(Clone, Debug, Default)]
pub struct Message {
    frames: SmallVec<[Bytes; 2]>,
    /// What a message carries beside its frames (connection properties on receipt, a routing id,
    /// a group), behind one pointer, so that a message stays 80 bytes: it is moved several times on
    /// its way, and `bench/instructions.sh` (64 B PUSH/PULL over TCP, both sides) counted 1697
    /// instructions per message with the routing id and group as fields of their own (120 bytes),
    /// 1656 with the group as a hidden first frame and a flag (88 bytes), and 1512 as it is (1525 before
    /// the draft types). A received message shares its connection's `Meta`; setting a routing id
    /// or group allocates one.
    meta: Option<Arc<Meta>>,
}

/// A message's companions; see [`Message`]'s `meta`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    pub properties: Option<Arc<Properties>>,
    /// SERVER and PEER: the peer a received message came from, or a sent one goes to (0: none).
    pub routing_id: u32,
    /// RADIO and DISH: the group a message is published to, or was received in.
    pub group: Option<Bytes>,
}

/// Messages are equal when their frames, routing ids and groups are; properties do not take part.
impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.frames == other.frames && self.routing_id() == other.routing_id() && self.group() == other.group()
    }
}

impl Eq for Message {}

impl Message {
    /// An empty message (no frames); push frames before sending.
    pub fn new() -> Self {
        Self::default()
    }

    /// A message with a single frame.
    pub fn single(frame: impl Into<Bytes>) -> Self {
        let mut frames = SmallVec::new();
        frames.push(frame.into());
        Message::of(frames)
    }

    fn of(frames: SmallVec<[Bytes; 2]>) -> Self {
        Message { frames, meta: None }
    }

    /// The message's own `Meta`, to change (a copy if it shares its connection's).
    fn meta_mut(&mut self) -> &mut Meta {
        Arc::make_mut(self.meta.get_or_insert_with(Arc::default))
    }

    /// A message of these frames, in order: `Message::from_frames([header, body])`.
    ///
    /// ```
    /// use bytes::Bytes;
    /// let msg = zmtp::Message::from_frames([Bytes::from_static(b"id"), Bytes::new(), Bytes::from("body")]);
    /// assert_eq!(msg.len(), 3);
    /// ```
    pub fn from_frames<T: Into<Bytes>>(frames: impl IntoIterator<Item = T>) -> Self {
        frames.into_iter().collect()
    }

    /// Appends a frame.
    pub fn push(&mut self, frame: impl Into<Bytes>) -> &mut Self {
        self.frames.push(frame.into());
        self
    }

    /// An empty message with room for `frames` frames: one allocation for the frame list
    /// (none for up to two), where pushing them one by one grows it step by step.
    ///
    /// ```
    /// let mut msg = zmtp::Message::with_capacity(3);
    /// msg.push("key").push("sequence").push("value");
    /// assert_eq!(msg.len(), 3);
    /// ```
    pub fn with_capacity(frames: usize) -> Self {
        let mut msg = Self::new();
        msg.reserve(frames);
        msg
    }

    /// Makes room for `additional` more frames, in one allocation if they do not fit.
    pub fn reserve(&mut self, additional: usize) {
        self.frames.reserve_exact(additional);
    }

    /// Inserts a frame at the front (envelopes).
    pub fn push_front(&mut self, frame: impl Into<Bytes>) -> &mut Self {
        self.frames.insert(0, frame.into());
        self
    }

    /// Removes and returns the first frame.
    pub fn pop_front(&mut self) -> Option<Bytes> {
        if self.frames.is_empty() { None } else { Some(self.frames.remove(0)) }
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True when there are no frames.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The frames in order.
    pub fn frames(&self) -> &[Bytes] {
        &self.frames
    }

    /// The frames, to change in place: a relay that forwards what it received with one frame
    /// rewritten (a sequence number, say) keeps the other frames and the frame list itself.
    ///
    /// ```
    /// let mut msg = zmtp::Message::from(vec!["key", "0"]);
    /// msg.frames_mut()[1] = bytes::Bytes::from_static(b"7");
    /// assert_eq!(msg[1], "7");
    /// ```
    pub fn frames_mut(&mut self) -> &mut [Bytes] {
        &mut self.frames
    }

    /// The first frame, if any.
    pub fn first(&self) -> Option<&Bytes> {
        self.frames.first()
    }

    /// The last frame, if any.
    pub fn last(&self) -> Option<&Bytes> {
        self.frames.last()
    }

    /// Iterates over the frames.
    pub fn iter(&self) -> std::slice::Iter<'_, Bytes> {
        self.frames.iter()
    }

    /// Total payload bytes over all frames.
    pub fn byte_len(&self) -> usize {
        self.frames.iter().map(Bytes::len).sum()
    }

    /// Consumes the message into its frames.
    pub fn into_frames(self) -> Vec<Bytes> {
        self.frames.into_vec()
    }

    /// A property of the connection this message arrived on, as text (`"User-Id"`, `"Peer-Address"`,
    /// `"Socket-Type"`, …); `None` for messages built locally, absent properties, or non-UTF-8 values.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// let pull = zmtp::Socket::new(zmtp::SocketType::Pull);
    /// let ep = pull.bind("tcp://127.0.0.1:*").await?;
    /// let push = zmtp::Socket::new(zmtp::SocketType::Push);
    /// push.connect(&ep).await?;
    /// push.send("hi").await?;
    /// let msg = pull.recv().await?;
    /// assert_eq!(msg.property("Socket-Type"), Some("PUSH"));
    /// assert_eq!(msg.property("Peer-Address"), Some("127.0.0.1"));
    /// # Ok(()) }
    /// ```
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties()?.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// All properties of the connection this message arrived on.
    pub fn properties(&self) -> Option<&Properties> {
        self.meta.as_ref()?.properties.as_deref()
    }

    /// SERVER and PEER: the routing id of the peer this message came from, or is to go to
    /// (libzmq's `zmq_msg_routing_id`). `None` until set: 0 is never a peer's id.
    ///
    /// ```
    /// let reply = zmtp::Message::from("pong").with_routing_id(7);
    /// assert_eq!(reply.routing_id(), Some(7));
    /// assert_eq!(zmtp::Message::from("x").routing_id(), None);
    /// ```
    pub fn routing_id(&self) -> Option<u32> {
        self.meta.as_ref().map(|m| m.routing_id).filter(|&id| id != 0)
    }

    /// Sets the routing id a SERVER or PEER sends this message to (0 clears it).
    pub fn set_routing_id(&mut self, routing_id: u32) -> &mut Self {
        if routing_id != self.routing_id().unwrap_or(0) {
            self.meta_mut().routing_id = routing_id;
        }
        self
    }

    /// This message with its routing id set, for a SERVER's or PEER's `send`.
    pub fn with_routing_id(mut self, routing_id: u32) -> Self {
        self.set_routing_id(routing_id);
        self
    }

    /// RADIO and DISH: the group this message is published to, or was received in (libzmq's
    /// `zmq_msg_group`). A RADIO sends a message without one to the empty group.
    pub fn group(&self) -> Option<&Bytes> {
        self.meta.as_ref()?.group.as_ref()
    }

    /// Sets the group a RADIO publishes this message to (at most 255 bytes, checked on send).
    pub fn set_group(&mut self, group: impl Into<Bytes>) -> &mut Self {
        self.meta_mut().group = Some(group.into());
        self
    }

    /// This message with its group set, for a RADIO's `send`.
    ///
    /// ```
    /// let news = zmtp::Message::from("sunny").with_group("weather");
    /// assert_eq!(news.group().map(|g| &g[..]), Some(&b"weather"[..]));
    /// ```
    pub fn with_group(mut self, group: impl Into<Bytes>) -> Self {
        self.set_group(group);
        self
    }

    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub(crate) fn take_group(&mut self) -> Option<Bytes> {
        self.group()?;
        self.meta_mut().group.take()
    }

    /// What a received message carries from its connection (properties, a SERVER's routing id).
    pub(crate) fn set_meta(&mut self, meta: Arc<Meta>) {
        self.meta = Some(meta);
    }

    /// Splits the envelope off: frames up to and including the first empty delimiter frame.
    /// Returns `None` (and leaves the message untouched) when there is no delimiter.
    pub(crate) fn split_envelope(&mut self) -> Option<Message> {
        let at = self.frames.iter().position(Bytes::is_empty)?;
        let body: SmallVec<[Bytes; 2]> = self.frames.drain(at + 1..).collect();
        let envelope = std::mem::replace(&mut self.frames, body);
        Some(Message::of(envelope))
    }
}

impl std::ops::Index<usize> for Message {
    type Output = Bytes;
    fn index(&self, i: usize) -> &Bytes {
        &self.frames[i]
    }
}

impl IntoIterator for Message {
    type Item = Bytes;
    type IntoIter = smallvec::IntoIter<[Bytes; 2]>;
    fn into_iter(self) -> Self::IntoIter {
        self.frames.into_iter()
    }
}

impl<'a> IntoIterator for &'a Message {
    type Item = &'a Bytes;
    type IntoIter = std::slice::Iter<'a, Bytes>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Into<Bytes>> FromIterator<T> for Message {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Message::of(iter.into_iter().map(Into::into).collect())
    }
}

// One frame: every byte-like type is one frame. `Bytes`, `String` and `Vec<u8>` move in without a
// copy; borrowed slices and strings are copied (use `Bytes::from_static` for a zero-copy literal).

impl From<Bytes> for Message {
    fn from(frame: Bytes) -> Self {
        Message::single(frame)
    }
}

impl From<String> for Message {
    fn from(frame: String) -> Self {
        Message::single(frame)
    }
}

impl From<Vec<u8>> for Message {
    /// One frame (a list of frames is `Vec<Bytes>`, `Vec<&str>`, … or [`Message::from_frames`]).
    fn from(frame: Vec<u8>) -> Self {
        Message::single(frame)
    }
}

impl From<&str> for Message {
    fn from(frame: &str) -> Self {
        Message::single(Bytes::copy_from_slice(frame.as_bytes()))
    }
}

impl From<&String> for Message {
    fn from(frame: &String) -> Self {
        Message::from(frame.as_str())
    }
}

impl From<&[u8]> for Message {
    fn from(frame: &[u8]) -> Self {
        Message::single(Bytes::copy_from_slice(frame))
    }
}

impl<const N: usize> From<&[u8; N]> for Message {
    /// One frame: `b"hello"`.
    fn from(frame: &[u8; N]) -> Self {
        Message::from(&frame[..])
    }
}

impl From<&Bytes> for Message {
    fn from(frame: &Bytes) -> Self {
        Message::single(frame.clone())
    }
}

// Several frames: only through explicit lists of frames, never a `Vec<u8>`.

impl From<Vec<Bytes>> for Message {
    fn from(frames: Vec<Bytes>) -> Self {
        Message::of(SmallVec::from_vec(frames))
    }
}

impl From<Vec<Vec<u8>>> for Message {
    fn from(frames: Vec<Vec<u8>>) -> Self {
        Message::from_frames(frames)
    }
}

impl From<Vec<String>> for Message {
    fn from(frames: Vec<String>) -> Self {
        Message::from_frames(frames)
    }
}

impl From<Vec<&str>> for Message {
    fn from(frames: Vec<&str>) -> Self {
        frames.into_iter().map(|f| Bytes::copy_from_slice(f.as_bytes())).collect()
    }
}

impl From<Vec<&[u8]>> for Message {
    fn from(frames: Vec<&[u8]>) -> Self {
        frames.into_iter().map(Bytes::copy_from_slice).collect()
    }
}

impl<const N: usize> From<[Bytes; N]> for Message {
    fn from(frames: [Bytes; N]) -> Self {
        Message::from_frames(frames)
    }
}

impl<const N: usize> From<[&str; N]> for Message {
    /// Several frames: `["topic", "body"]`.
    fn from(frames: [&str; N]) -> Self {
        frames.into_iter().map(|f| Bytes::copy_from_slice(f.as_bytes())).collect()
    }
}

impl<const N: usize> From<[&[u8]; N]> for Message {
    fn from(frames: [&[u8]; N]) -> Self {
        frames.into_iter().map(Bytes::copy_from_slice).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_properties_in_order_by_any_case() {
        let mut metadata = crate::wire::Metadata::new();
        metadata.insert("Socket-Type", "DEALER").insert("Identity", "").insert("X-Hello", "wörld");
        let mut peer = PeerInfo::from_ready(crate::wire::SocketType::Router, metadata).unwrap();
        peer.user_id = Some("alice".into());
        peer.zap_metadata.insert("X-Zap", "z");
        let p = Properties::of_peer(&peer, "10.0.0.7:5555");
        let all: Vec<(&str, &[u8])> = p.iter().map(|(n, v)| (n, &v[..])).collect();
        assert_eq!(
            all,
            [
                ("Socket-Type", &b"DEALER"[..]),
                ("Identity", b""),
                ("X-Hello", "wörld".as_bytes()),
                ("User-Id", b"alice"),
                ("Peer-Address", b"10.0.0.7"),
                ("X-Zap", b"z"),
            ]
        );
        assert_eq!(p.get("x-hello").map(|v| &v[..]), Some("wörld".as_bytes()));
        assert_eq!(p.get("socket-type").map(|v| &v[..]), Some(&b"DEALER"[..]));
        assert_eq!(p.get("nope"), None);
        assert_eq!(Properties::default().iter().count(), 0);
        // Not an address: no Peer-Address.
        assert_eq!(Properties::of_peer(&peer, "ipc").get("Peer-Address"), None);
    }

    #[test]
    fn a_group_is_not_a_frame_of_the_message() {
        let mut m = Message::from(["a", "b"]).with_group("g");
        assert_eq!((m.len(), &m[0][..], m.frames().len()), (2, &b"a"[..], 2));
        assert_eq!(m.iter().count(), 2);
        assert_eq!(m.group().map(|g| &g[..]), Some(&b"g"[..]));
        m.set_group("h");
        assert_eq!((m.group().map(|g| &g[..]), m.len()), (Some(&b"h"[..]), 2));
        m.push_front("z");
        assert_eq!(m.pop_front().as_deref(), Some(&b"z"[..]));
        assert_eq!(m.clone().into_frames(), [Bytes::from("a"), Bytes::from("b")]);
        assert_eq!(m.clone().into_iter().count(), 2);
        assert_ne!(m, Message::from(["a", "b"]), "the group is part of what a message is");
        assert_eq!(m.take_group().as_deref(), Some(&b"h"[..]));
        assert_eq!(m, Message::from(["a", "b"]));
        // Small, as every message is moved several times on its way (see `meta`).
        assert!(std::mem::size_of::<Message>() <= 80, "{}", std::mem::size_of::<Message>());
    }

    #[test]
    fn envelope_split() {
        let mut m = Message::from(vec!["id1", "id2", "", "body", ""]);
        let env = m.split_envelope().unwrap();
        assert_eq!(env, Message::from(vec!["id1", "id2", ""]));
        assert_eq!(m, Message::from(vec!["body", ""]));
        let mut no_delim = Message::from(vec!["a", "b"]);
        assert!(no_delim.split_envelope().is_none());
        assert_eq!(no_delim.len(), 2);
    }
}
