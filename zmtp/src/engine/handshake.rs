//! Greeting exchange and the NULL mechanism over a live stream.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::Decoder;

use crate::error::ConnectionError;
use crate::options::Options;
use crate::wire::{
    FrameCodec, Greeting, GreetingDecoder, HandshakeError, Mechanism, NullHandshake, PeerInfo, SocketType,
};

pub(super) struct Handshaken {
    pub info: PeerInfo,
    pub minor: u8,
    /// Bytes the peer sent after its handshake, not yet decoded.
    pub read_buf: BytesMut,
}

pub(super) async fn handshake<R, W>(
    rd: &mut R,
    wr: &mut W,
    socket_type: SocketType,
    opts: &Options,
) -> Result<Handshaken, ConnectionError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // All 64 bytes at once: never wait for the peer's greeting before sending ours.
    wr.write_all(&Greeting::new(Mechanism::Null, false).encode()).await?;
    let mut buf = BytesMut::with_capacity(1024);
    let mut greeting = GreetingDecoder::new();
    let peer = loop {
        if !buf.is_empty() {
            let (used, done) = greeting.feed(&buf)?;
            buf.advance(used);
            if let Some(g) = done {
                break g;
            }
        }
        if rd.read_buf(&mut buf).await? == 0 {
            return Err(ConnectionError::PeerClosed);
        }
    };
    peer.check_peer(Mechanism::Null)?;

    let mut mechanism = NullHandshake::new(socket_type, opts.routing_id.clone());
    let mut out = BytesMut::new();
    mechanism.start().encode_frame(&mut out);
    wr.write_all(&out).await?;

    let mut codec = FrameCodec::new(opts.maxmsgsize);
    loop {
        if let Some(frame) = codec.decode(&mut buf)? {
            if !frame.is_command() {
                return Err(HandshakeError::UnexpectedMessage.into());
            }
            let info = mechanism.on_command(frame.body)?;
            return Ok(Handshaken { info, minor: peer.minor, read_buf: buf });
        }
        if rd.read_buf(&mut buf).await? == 0 {
            return Err(ConnectionError::PeerClosed);
        }
    }
}
