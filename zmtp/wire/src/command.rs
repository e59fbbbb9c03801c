//! ZMTP commands: `name_len(u8) name data` inside a COMMAND frame.

use bytes::{BufMut, Bytes, BytesMut};

use super::frame::{FLAG_COMMAND, encode_header};
use super::metadata::{Metadata, MetadataError};

/// Longest PING context that is echoed back (RFC 37).
pub const MAX_PING_CONTEXT: usize = 16;

/// A decoded command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `READY` with the sender's metadata.
    Ready(Metadata),
    /// `ERROR` with a reason (libzmq: a 3-digit ZAP status).
    Error(Bytes),
    /// `SUBSCRIBE` (ZMTP 3.1) with a topic prefix.
    Subscribe(Bytes),
    /// `CANCEL` (ZMTP 3.1) with a topic prefix.
    Cancel(Bytes),
    /// `JOIN` (RFC 48, DISH to RADIO) with a group name.
    Join(Bytes),
    /// `LEAVE` (RFC 48, DISH to RADIO) with a group name.
    Leave(Bytes),
    /// `PING` with a TTL in deciseconds and an opaque context.
    Ping {
        /// Time to live the peer asks us to apply, in tenths of a second (0 = none).
        ttl_deciseconds: u16,
        /// Up to 16 bytes echoed in the PONG.
        context: Bytes,
    },
    /// `PONG` echoing a PING's context.
    Pong(Bytes),
    /// Any other command (mechanism-specific or unknown); ignored after the handshake.
    Other {
        /// Command name.
        name: Bytes,
        /// Command data.
        data: Bytes,
    },
}

/// Why a command frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// Empty body, or a name length that runs past the frame.
    #[error("malformed command frame ({0} bytes)")]
    Malformed(usize),
    /// A command whose fixed fields are too short (e.g. PING without TTL).
    #[error("truncated {0} command")]
    Truncated(&'static str),
    /// READY metadata that does not parse.
    #[error("bad READY metadata: {0}")]
    Metadata(#[from] MetadataError),
}

/// Splits a command body into (name, data): the one place the name is cut out, for the commands
/// below and for the mechanisms' own (HELLO, WELCOME, INITIATE…).
pub(crate) fn split_name(body: &Bytes) -> Result<(Bytes, Bytes), CommandError> {
    let name_len = *body.first().ok_or(CommandError::Malformed(0))? as usize;
    if name_len == 0 || body.len() < 1 + name_len {
        return Err(CommandError::Malformed(body.len()));
    }
    Ok((body.slice(1..1 + name_len), body.slice(1 + name_len..)))
}

/// The reason an ERROR command's data carries: `reason_len reason` (libzmq); liberal about a length
/// that disagrees with the data.
pub(crate) fn error_reason(data: &Bytes) -> Bytes {
    match data.first() {
        Some(&len) => data.slice(1..(1 + len as usize).min(data.len())),
        None => Bytes::new(),
    }
}

impl Command {
    /// Parses a command frame body.
    pub fn parse(body: Bytes) -> Result<Command, CommandError> {
        let (name, data) = split_name(&body)?;
        Ok(match &name[..] {
            b"READY" => Command::Ready(Metadata::parse(&data)?),
            b"ERROR" => Command::Error(error_reason(&data)),
            b"SUBSCRIBE" => Command::Subscribe(data),
            b"CANCEL" => Command::Cancel(data),
            b"JOIN" => Command::Join(data),
            b"LEAVE" => Command::Leave(data),
            b"PING" => {
                if data.len() < 2 {
                    return Err(CommandError::Truncated("PING"));
                }
                let ttl_deciseconds = u16::from_be_bytes([data[0], data[1]]);
                Command::Ping { ttl_deciseconds, context: data.slice(2..) }
            }
            b"PONG" => Command::Pong(data),
            _ => Command::Other { name, data },
        })
    }

    fn name(&self) -> &[u8] {
        match self {
            Command::Ready(_) => b"READY",
            Command::Error(_) => b"ERROR",
            Command::Subscribe(_) => b"SUBSCRIBE",
            Command::Cancel(_) => b"CANCEL",
            Command::Join(_) => b"JOIN",
            Command::Leave(_) => b"LEAVE",
            Command::Ping { .. } => b"PING",
            Command::Pong(_) => b"PONG",
            Command::Other { name, .. } => name,
        }
    }

    fn data_len(&self) -> usize {
        match self {
            Command::Ready(md) => md.encoded_len(),
            Command::Error(reason) => 1 + reason.len().min(255),
            Command::Subscribe(t) | Command::Cancel(t) | Command::Join(t) | Command::Leave(t) => t.len(),
            Command::Ping { context, .. } => 2 + context.len().min(MAX_PING_CONTEXT),
            Command::Pong(context) => context.len().min(MAX_PING_CONTEXT),
            Command::Other { data, .. } => data.len(),
        }
    }

    /// The command body (without frame header).
    pub fn body(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(1 + self.name().len() + self.data_len());
        self.encode_body(&mut out);
        out.freeze()
    }

    fn encode_body(&self, out: &mut BytesMut) {
        let name = self.name();
        out.put_u8(name.len() as u8);
        out.put_slice(name);
        match self {
            Command::Ready(md) => md.encode(out),
            Command::Error(reason) => {
                let reason = &reason[..reason.len().min(255)];
                out.put_u8(reason.len() as u8);
                out.put_slice(reason);
            }
            Command::Subscribe(t) | Command::Cancel(t) | Command::Join(t) | Command::Leave(t) => out.put_slice(t),
            Command::Ping { ttl_deciseconds, context } => {
                out.put_u16(*ttl_deciseconds);
                out.put_slice(&context[..context.len().min(MAX_PING_CONTEXT)]);
            }
            Command::Pong(context) => out.put_slice(&context[..context.len().min(MAX_PING_CONTEXT)]),
            Command::Other { data, .. } => out.put_slice(data),
        }
    }

    /// Appends the whole command frame (header and body) to `out`.
    pub fn encode_frame(&self, out: &mut BytesMut) {
        let len = 1 + self.name().len() + self.data_len();
        out.reserve(9 + len);
        encode_header(FLAG_COMMAND, len, out);
        self.encode_body(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_bytes(cmd: &Command) -> Vec<u8> {
        let mut out = BytesMut::new();
        cmd.encode_frame(&mut out);
        out.to_vec()
    }

    #[test]
    fn ready_from_libzmq_dealer_exact_bytes() {
        let mut wire = vec![0x04, 0x29, 0x05];
        wire.extend_from_slice(b"READY");
        wire.extend_from_slice(b"\x0bSocket-Type\x00\x00\x00\x06DEALER");
        wire.extend_from_slice(b"\x08Identity\x00\x00\x00\x00");
        assert_eq!(wire.len(), 43);
        let cmd = Command::parse(Bytes::copy_from_slice(&wire[2..])).unwrap();
        let Command::Ready(md) = &cmd else { panic!("not READY: {cmd:?}") };
        assert_eq!(md.get("socket-type").unwrap(), "DEALER");
        assert_eq!(md.get("identity").unwrap(), "");
        assert_eq!(frame_bytes(&cmd), wire);
    }

    #[test]
    fn subscribe_and_cancel_31_form() {
        let sub = Command::Subscribe(Bytes::from_static(b"topic"));
        let mut expect = vec![0x04, 15, 9];
        expect.extend_from_slice(b"SUBSCRIBEtopic");
        assert_eq!(frame_bytes(&sub), expect);
        let cancel = Command::Cancel(Bytes::from_static(b"ab"));
        assert_eq!(frame_bytes(&cancel), b"\x04\x09\x06CANCELab".to_vec());
        assert_eq!(Command::parse(Bytes::from(expect[2..].to_vec())).unwrap(), sub);
    }

    #[test]
    fn join_and_leave_as_libzmq_writes_them() {
        // libzmq's dish session: a COMMAND frame "\4JOIN" + group, "\5LEAVE" + group (dish.cpp).
        let join = Command::Join(Bytes::from_static(b"weather"));
        assert_eq!(frame_bytes(&join), b"\x04\x0c\x04JOINweather".to_vec());
        let leave = Command::Leave(Bytes::from_static(b"tv"));
        assert_eq!(frame_bytes(&leave), b"\x04\x08\x05LEAVEtv".to_vec());
        assert_eq!(Command::parse(join.body()).unwrap(), join);
        assert_eq!(Command::parse(leave.body()).unwrap(), leave);
        assert_eq!(Command::parse(Bytes::from_static(b"\x04JOIN")).unwrap(), Command::Join(Bytes::new()));
    }

    #[test]
    fn ping_pong_with_context() {
        let ping = Command::Ping { ttl_deciseconds: 10, context: Bytes::from_static(b"ctx") };
        assert_eq!(frame_bytes(&ping), b"\x04\x0a\x04PING\x00\x0actx".to_vec());
        assert_eq!(Command::parse(ping.body()).unwrap(), ping);
        let pong = Command::Pong(Bytes::from_static(b"ctx"));
        assert_eq!(frame_bytes(&pong), b"\x04\x08\x04PONGctx".to_vec());
        // Context longer than 16 bytes is truncated on the echo.
        let long = Command::Pong(Bytes::from(vec![b'x'; 40]));
        assert_eq!(frame_bytes(&long).len(), 2 + 5 + 16);
    }

    #[test]
    fn error_with_zap_status() {
        let err = Command::Error(Bytes::from_static(b"400"));
        assert_eq!(frame_bytes(&err), b"\x04\x0a\x05ERROR\x03400".to_vec());
        assert_eq!(Command::parse(err.body()).unwrap(), err);
    }

    #[test]
    fn malformed_commands_are_typed() {
        assert_eq!(Command::parse(Bytes::new()), Err(CommandError::Malformed(0)));
        assert_eq!(Command::parse(Bytes::from_static(b"\x09PING")), Err(CommandError::Malformed(5)));
        assert_eq!(Command::parse(Bytes::from_static(b"\x04PING\x00")), Err(CommandError::Truncated("PING")));
        assert!(matches!(Command::parse(Bytes::from_static(b"\x05READY\x03abc")), Err(CommandError::Metadata(_))));
        assert!(matches!(Command::parse(Bytes::from_static(b"\x03FOO12")), Ok(Command::Other { .. })));
    }
}
