//! The six CHP commands as types, and the subtree specification.
//!
//! Which command a message is depends on the socket it arrived on, so parsing is per direction:
//!
//! | Socket | Parser | Commands |
//! |---|---|---|
//! | server SNAPSHOT (ROUTER), after the routing id | [`IcanHaz::parse`] | ICANHAZ? |
//! | client SNAPSHOT (DEALER) | [`SnapshotReply::parse`] | KVSYNC, KTHXBAI |
//! | client SUBSCRIBER (SUB) | [`Update::parse`] | KVPUB, HUGZ |
//! | server COLLECTOR (SUB) | [`KvSet::parse`] | KVSET |
//!
//! ```
//! use chp::command::{Subtree, Update};
//! use chp::kvmsg::KvMsg;
//!
//! let subtree = Subtree::new("/client/").unwrap();
//! assert!(subtree.contains(b"/client/42"));
//! assert!(Subtree::new("/client").is_err()); // must end in a slash
//!
//! let hugz = Update::Hugz { sequence: 7 }.to_message();
//! assert_eq!(Update::parse(hugz.frames()).unwrap(), Update::Hugz { sequence: 7 });
//! let kvpub = Update::KvPub(KvMsg::new("/client/42", "x")).to_message();
//! assert!(matches!(Update::parse(kvpub.frames()).unwrap(), Update::KvPub(m) if m.body == "x"));
//! ```

use std::fmt;

use bytes::Bytes;
use zmtp::Message;

use crate::kvmsg::{KvMsg, KvMsgError, MAX_KEY_LEN, sequence_frame};

/// Frame 0 of a snapshot request.
pub const ICANHAZ: &str = "ICANHAZ?";
/// Key of the snapshot terminator.
pub const KTHXBAI: &str = "KTHXBAI";
/// Key of the heartbeat.
pub const HUGZ: &str = "HUGZ";

/// `PEERSYNC?`: a chp extension used between the two servers of a high-availability pair. The
/// passive server sends `["PEERSYNC?"]` to the active's SNAPSHOT socket and gets the whole map as
/// KVSYNCs whose properties frame carries each key's *remaining* time to live (`ttl=SECONDS`, on
/// the sender's clock), then KTHXBAI. Plain ICANHAZ? snapshots stay exactly as 12/CHP says
/// (frames 2 and 3 empty).
pub const PEERSYNC: &str = "PEERSYNC?";

/// How new a pair server's map is, as two durable servers compare them: its epoch (promotions in
/// the pair's history, see `server::ha`), then its sequence. A durable server sends its own with
/// `PEERSYNC?` (`["PEERSYNC?", epoch u64 BE ‖ sequence u64 BE]`); the active's KTHXBAI to a peer
/// carries `epoch=N` in its properties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Freshness {
    /// The epoch.
    pub epoch: u64,
    /// The sequence of the last update.
    pub sequence: u64,
}

/// The active's answer to a `PEERSYNC?` whose sender holds a newer map than its own (both
/// durable, after a restart of both): `["NEWER"]`. The active then falls silent, the peer takes
/// over, and the former active yields to it and follows.
pub const PEER_NEWER: &str = "NEWER";

/// `PEERSYNC?`, with the sender's [`Freshness`] when it keeps its map on disk.
pub fn peersync_message(freshness: Option<Freshness>) -> Message {
    let mut frames = vec![Bytes::from_static(PEERSYNC.as_bytes())];
    if let Some(f) = freshness {
        let mut fresh = Vec::with_capacity(16);
        fresh.extend_from_slice(&f.epoch.to_be_bytes());
        fresh.extend_from_slice(&f.sequence.to_be_bytes());
        frames.push(Bytes::from(fresh));
    }
    Message::from(frames)
}

/// `Some(freshness)` if `frames` are a `PEERSYNC?` (`Some(None)`: one without freshness, from a
/// server that keeps no data directory); `None` for anything else.
pub fn parse_peersync(frames: &[Bytes]) -> Option<Option<Freshness>> {
    match frames {
        [cmd] if cmd == PEERSYNC => Some(None),
        [cmd, fresh] if cmd == PEERSYNC && fresh.len() == 16 => Some(Some(Freshness {
            epoch: u64::from_be_bytes(fresh[..8].try_into().expect("8 bytes")),
            sequence: u64::from_be_bytes(fresh[8..].try_into().expect("8 bytes")),
        })),
        _ => None,
    }
}

/// Keys a client may not set: they would be read as KTHXBAI or HUGZ.
pub fn is_reserved_key(key: &[u8]) -> bool {
    key == KTHXBAI.as_bytes() || key == HUGZ.as_bytes()
}

/// Why a message is not a valid command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The frames are not a valid kvmsg.
    #[error(transparent)]
    KvMsg(#[from] KvMsgError),
    /// A snapshot request that is not `["ICANHAZ?", subtree]`.
    #[error("not a snapshot request (expected [\"ICANHAZ?\", subtree], got {0} frames starting {1:?})")]
    NotIcanHaz(usize, String),
    /// A bad subtree specification.
    #[error(transparent)]
    Subtree(#[from] SubtreeError),
    /// A client tried to set a reserved key (`HUGZ`, `KTHXBAI`).
    #[error("key {0:?} is reserved")]
    ReservedKey(String),
}

/// Why a subtree specification is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid subtree {spec:?}: {reason}")]
pub struct SubtreeError {
    /// The rejected specification (lossy UTF-8).
    pub spec: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A subtree specification: empty (the whole map), or a slash followed by one or more non-empty path
/// segments, ending in a slash (`/a/`, `/a/b/`). A key is in the subtree when it starts with it.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subtree(Bytes);

impl Subtree {
    /// The whole map (empty specification).
    pub fn all() -> Subtree {
        Subtree(Bytes::new())
    }

    /// Validates a specification.
    pub fn new(spec: impl Into<Bytes>) -> Result<Subtree, SubtreeError> {
        let spec = spec.into();
        let fail = |reason| Err(SubtreeError { spec: String::from_utf8_lossy(&spec).into_owned(), reason });
        if spec.is_empty() {
            return Ok(Subtree(spec));
        }
        if spec.len() > MAX_KEY_LEN {
            return fail("longer than the key limit");
        }
        if spec[0] != b'/' || spec[spec.len() - 1] != b'/' {
            return fail("must start and end with '/'");
        }
        if spec.len() < 3 {
            return fail("needs at least one path segment");
        }
        if spec.windows(2).any(|w| w == b"//") {
            return fail("empty path segment");
        }
        Ok(Subtree(spec))
    }

    /// Any byte prefix of at most [`MAX_KEY_LEN`] bytes, unchecked otherwise: what a server accepts
    /// in an ICANHAZ?. 12/CHP's subtrees are path-like, but the reference server serves whatever
    /// prefix it is asked for, and refusing (with no reply at all) would leave such a client waiting
    /// forever; [`Subtree::new`] stays strict for what we let users type.
    ///
    /// ```
    /// use chp::command::Subtree;
    /// let loose = Subtree::prefix("/ho").unwrap();
    /// assert!(loose.contains(b"/hosts/a"));
    /// assert!(Subtree::new("/ho").is_err());
    /// ```
    pub fn prefix(spec: impl Into<Bytes>) -> Result<Subtree, SubtreeError> {
        let spec = spec.into();
        if spec.len() > MAX_KEY_LEN {
            let shown = String::from_utf8_lossy(&spec[..64]).into_owned();
            return Err(SubtreeError { spec: shown, reason: "longer than the key limit" });
        }
        Ok(Subtree(spec))
    }

    /// The subtree that holds `key`: everything up to and including its last `/`, if that is a valid
    /// subtree (`/a/b/c` → `/a/b/`), else the whole map.
    ///
    /// ```
    /// use chp::command::Subtree;
    /// assert_eq!(Subtree::parent_of(b"/a/b/c").as_bytes(), b"/a/b/");
    /// assert!(Subtree::parent_of(b"plain").is_all());
    /// ```
    pub fn parent_of(key: &[u8]) -> Subtree {
        match key.iter().rposition(|&b| b == b'/') {
            Some(at) => Subtree::new(Bytes::copy_from_slice(&key[..=at])).unwrap_or_default(),
            None => Subtree::all(),
        }
    }

    /// True for the whole map.
    pub fn is_all(&self) -> bool {
        self.0.is_empty()
    }

    /// True when `key` is in the subtree.
    pub fn contains(&self, key: &[u8]) -> bool {
        key.starts_with(&self.0)
    }

    /// The specification bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The specification as a frame.
    pub fn to_bytes(&self) -> Bytes {
        self.0.clone()
    }
}

impl fmt::Debug for Subtree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Subtree({:?})", String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Display for Subtree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.escape_ascii())
    }
}

impl std::str::FromStr for Subtree {
    type Err = SubtreeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Subtree::new(Bytes::copy_from_slice(s.as_bytes()))
    }
}

/// ICANHAZ?: a snapshot request, `["ICANHAZ?", subtree]` (after the routing id on the ROUTER).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IcanHaz {
    /// The requested subtree.
    pub subtree: Subtree,
}

impl IcanHaz {
    /// Parses the frames after the routing id. A lone `"ICANHAZ?"` (Clone models 2–3, which predate
    /// subtrees) is read as a request for the whole map. The subtree may be any prefix (see
    /// [`Subtree::prefix`]): be liberal in what a server accepts.
    pub fn parse(frames: &[Bytes]) -> Result<IcanHaz, CommandError> {
        match frames {
            [cmd] if cmd == ICANHAZ => Ok(IcanHaz { subtree: Subtree::all() }),
            [cmd, subtree] if cmd == ICANHAZ => Ok(IcanHaz { subtree: Subtree::prefix(subtree.clone())? }),
            _ => Err(CommandError::NotIcanHaz(
                frames.len(),
                frames.first().map(|f| String::from_utf8_lossy(&f[..f.len().min(16)]).into_owned()).unwrap_or_default(),
            )),
        }
    }

    /// The two frames.
    pub fn to_message(&self) -> Message {
        Message::from(vec![Bytes::from_static(ICANHAZ.as_bytes()), self.subtree.to_bytes()])
    }
}

/// KVSYNC: one key-value pair of a snapshot. Frames 2–3 are empty; the sequence has no significance
/// (this server sends the snapshot's sequence, the same as the KTHXBAI that follows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvSync {
    /// The key.
    pub key: Bytes,
    /// Sequence (no significance).
    pub sequence: u64,
    /// The value.
    pub value: Bytes,
}

/// KTHXBAI: the end of a snapshot, with its sequence and (frame 4) the subtree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KthxBai {
    /// Updates with a sequence at or below this are already in the snapshot.
    pub sequence: u64,
    /// The subtree of the request (the C reference sends it empty).
    pub subtree: Bytes,
}

/// What a client's snapshot (DEALER) socket receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotReply {
    /// One pair.
    KvSync(KvSync),
    /// The end.
    KthxBai(KthxBai),
}

impl SnapshotReply {
    /// Parses a reply. Frames 2–3 of a KVSYNC are not required to be empty (the reference server
    /// sends the stored UUID and properties) but must still be well-formed.
    pub fn parse(frames: &[Bytes]) -> Result<SnapshotReply, CommandError> {
        Ok(Self::from_kvmsg(KvMsg::parse(frames)?))
    }

    /// [`parse`](Self::parse), moving key and value out of `frames` (see [`KvMsg::parse_mut`]).
    pub fn parse_mut(frames: &mut [Bytes]) -> Result<SnapshotReply, CommandError> {
        Ok(Self::from_kvmsg(KvMsg::parse_mut(frames)?))
    }

    fn from_kvmsg(msg: KvMsg) -> SnapshotReply {
        if msg.key == KTHXBAI {
            SnapshotReply::KthxBai(KthxBai { sequence: msg.sequence, subtree: msg.body })
        } else {
            SnapshotReply::KvSync(KvSync { key: msg.key, sequence: msg.sequence, value: msg.body })
        }
    }

    /// The five frames (prefix the routing id to send on a ROUTER).
    pub fn to_message(&self) -> Message {
        let (key, sequence, body) = match self {
            SnapshotReply::KvSync(s) => (s.key.clone(), s.sequence, s.value.clone()),
            SnapshotReply::KthxBai(k) => (Bytes::from_static(KTHXBAI.as_bytes()), k.sequence, k.subtree.clone()),
        };
        Message::from(vec![key, sequence_frame(sequence), Bytes::new(), Bytes::new(), body])
    }
}

/// What a client's subscriber (SUB) socket receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// KVPUB: a sequenced update (empty body = delete).
    KvPub(KvMsg),
    /// HUGZ: the server is alive; it never touches the map. 12/CHP gives its sequence as 0; the
    /// Guide's reference servers (clonesrv6.c, clonesrv6.py) and ours send the server's current
    /// sequence, which lets a client prove a snapshot exact without asking twice (see the client's
    /// `sync` module). 0 means "not said".
    Hugz {
        /// The server's sequence when it sent this HUGZ (0: not said).
        sequence: u64,
    },
}

impl Update {
    /// Parses a message from the publisher.
    pub fn parse(frames: &[Bytes]) -> Result<Update, CommandError> {
        Ok(Self::from_kvmsg(KvMsg::parse(frames)?))
    }

    /// [`parse`](Self::parse), moving key and body out of `frames` (see [`KvMsg::parse_mut`]).
    pub fn parse_mut(frames: &mut [Bytes]) -> Result<Update, CommandError> {
        Ok(Self::from_kvmsg(KvMsg::parse_mut(frames)?))
    }

    fn from_kvmsg(msg: KvMsg) -> Update {
        if msg.key == HUGZ { Update::Hugz { sequence: msg.sequence } } else { Update::KvPub(msg) }
    }

    /// The five frames. HUGZ is `["HUGZ", sequence u64, "", "", ""]`.
    pub fn to_message(&self) -> Message {
        match self {
            Update::KvPub(msg) => msg.to_message(),
            Update::Hugz { sequence } => hugz_message(*sequence),
        }
    }
}

/// The HUGZ heartbeat as sent: `["HUGZ", sequence u64, "", "", ""]`, `sequence` being the server's
/// current one (as the Guide's reference servers send it; 12/CHP shows 0).
pub fn hugz_message(sequence: u64) -> Message {
    Message::from(vec![
        Bytes::from_static(HUGZ.as_bytes()),
        sequence_frame(sequence),
        Bytes::new(),
        Bytes::new(),
        Bytes::new(),
    ])
}

/// KVSET: a client's update to the server's collector. Reserved keys are rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvSet(pub KvMsg);

impl KvSet {
    /// Parses a message from a client publisher.
    pub fn parse(frames: &[Bytes]) -> Result<KvSet, CommandError> {
        let msg = KvMsg::parse(frames)?;
        if is_reserved_key(&msg.key) {
            return Err(CommandError::ReservedKey(String::from_utf8_lossy(&msg.key).into_owned()));
        }
        Ok(KvSet(msg))
    }

    /// The five frames.
    pub fn to_message(&self) -> Message {
        self.0.to_message()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn peersync_with_and_without_freshness() {
        let plain = peersync_message(None);
        assert_eq!(parse_peersync(plain.frames()), Some(None));
        let fresh = Freshness { epoch: 3, sequence: 0x0102 };
        let msg = peersync_message(Some(fresh));
        assert_eq!(msg[1].len(), 16);
        assert_eq!(parse_peersync(msg.frames()), Some(Some(fresh)));
        assert_eq!(parse_peersync(&[Bytes::from_static(b"PEERSYNC?"), Bytes::from_static(b"short")]), None);
        assert_eq!(parse_peersync(&[Bytes::from_static(b"ICANHAZ?")]), None);
        assert!(Freshness { epoch: 2, sequence: 1 } > Freshness { epoch: 1, sequence: 9 }, "epoch first");
    }
    use super::*;

    #[test]
    fn subtree_validation() {
        for ok in ["", "/a/", "/a/b/", "/a b/c/", "/x/y/z/"] {
            assert!(ok.parse::<Subtree>().is_ok(), "{ok}");
        }
        for bad in ["/", "//", "a/", "/a", "a", "/a//b/", "//a/"] {
            assert!(bad.parse::<Subtree>().is_err(), "{bad}");
        }
        assert!(Subtree::new(Bytes::from(format!("/{}/", "a".repeat(MAX_KEY_LEN)))).is_err());
        let s: Subtree = "/a/".parse().unwrap();
        assert!(s.contains(b"/a/x") && s.contains(b"/a/") && !s.contains(b"/ab") && !s.contains(b"/b/a/"));
        assert!(Subtree::all().contains(b"anything"));
        assert_eq!(Subtree::parent_of(b"/a/"), "/a/".parse().unwrap());
        assert!(Subtree::parent_of(b"/x").is_all());
    }

    #[test]
    fn icanhaz_parse() {
        let f = |v: Vec<&'static str>| v.into_iter().map(|s| Bytes::from_static(s.as_bytes())).collect::<Vec<_>>();
        assert_eq!(IcanHaz::parse(&f(vec!["ICANHAZ?", "/a/"])).unwrap().subtree, "/a/".parse().unwrap());
        assert!(IcanHaz::parse(&f(vec!["ICANHAZ?"])).unwrap().subtree.is_all());
        // Any prefix is served (the reference does); only an over-long one is refused.
        assert_eq!(IcanHaz::parse(&f(vec!["ICANHAZ?", "/a"])).unwrap().subtree.as_bytes(), b"/a");
        let long = vec![Bytes::from_static(b"ICANHAZ?"), Bytes::from(vec![b'/'; MAX_KEY_LEN + 1])];
        assert!(matches!(IcanHaz::parse(&long), Err(CommandError::Subtree(_))));
        assert!(matches!(IcanHaz::parse(&f(vec!["GIMME", "/a/"])), Err(CommandError::NotIcanHaz(2, _))));
        assert!(matches!(IcanHaz::parse(&f(vec!["ICANHAZ?", "", ""])), Err(CommandError::NotIcanHaz(3, _))));
        assert!(matches!(IcanHaz::parse(&[]), Err(CommandError::NotIcanHaz(0, _))));
        let m = IcanHaz { subtree: "/a/".parse().unwrap() }.to_message();
        assert_eq!(m.frames(), &f(vec!["ICANHAZ?", "/a/"])[..]);
    }

    #[test]
    fn snapshot_reply_round_trip() {
        let sync = SnapshotReply::KvSync(KvSync { key: "k".into(), sequence: 3, value: "v".into() });
        let m = sync.to_message();
        assert!(m[2].is_empty() && m[3].is_empty());
        assert_eq!(SnapshotReply::parse(m.frames()).unwrap(), sync);
        let end = SnapshotReply::KthxBai(KthxBai { sequence: 9, subtree: "/a/".into() });
        assert_eq!(SnapshotReply::parse(end.to_message().frames()).unwrap(), end);
    }

    #[test]
    fn hugz_and_reserved_keys() {
        let h = hugz_message(0);
        assert_eq!(h[1].as_ref(), &[0u8; 8]);
        assert_eq!(Update::parse(h.frames()).unwrap(), Update::Hugz { sequence: 0 });
        let h = hugz_message(0x0102);
        assert_eq!(h[1].as_ref(), &[0, 0, 0, 0, 0, 0, 1, 2], "big-endian, as every sequence");
        assert_eq!(Update::parse(h.frames()).unwrap(), Update::Hugz { sequence: 0x0102 });
        assert!(matches!(KvSet::parse(h.frames()), Err(CommandError::ReservedKey(_))));
        let k = KvMsg::new(KTHXBAI, "x").to_message();
        assert!(matches!(KvSet::parse(k.frames()), Err(CommandError::ReservedKey(_))));
        assert!(KvSet::parse(KvMsg::new("HUGZ2", "x").to_message().frames()).is_ok());
    }
}
