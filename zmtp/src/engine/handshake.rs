//! Greeting exchange and the security handshake (any mechanism) over a live stream.

use bytes::{Buf, Bytes, BytesMut};
use rand::rngs::OsRng;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::ConnectionError;
use crate::options::Options;
use crate::security::default_reply;
use crate::wire::curve::CurveCipher;
use crate::wire::frame::{FLAG_COMMAND, Frame, encode_header};
use crate::wire::plain::{PlainClient, PlainServer};
use crate::wire::{
    FrameCodec, Greeting, GreetingDecoder, Handshake, HandshakeConfig, HandshakeError, Mechanism, NullHandshake,
    PeerInfo, SocketType, Step,
};

pub(super) struct Handshaken {
    pub info: PeerInfo,
    pub minor: u8,
    /// Bytes the peer sent after its handshake, not yet decoded.
    pub read_buf: BytesMut,
    /// CURVE: the MESSAGE cipher.
    pub cipher: Option<CurveCipher>,
}

/// The handshake our options ask for.
fn mechanism(opts: &Options, config: HandshakeConfig) -> Result<Handshake, ConnectionError> {
    Ok(match (opts.mechanism, opts.as_server) {
        (Mechanism::Null, _) => Handshake::Null(NullHandshake::new(config)),
        (Mechanism::Plain, true) => Handshake::PlainServer(PlainServer::new(config)),
        (Mechanism::Plain, false) => {
            Handshake::PlainClient(PlainClient::new(config, opts.plain_username.clone(), opts.plain_password.clone()))
        }
        (Mechanism::Curve, true) => {
            let keys =
                opts.curve_keypair.clone().ok_or(HandshakeError::Malformed("CURVE server without a secret key"))?;
            Handshake::CurveServer(Box::new(crate::wire::curve::CurveServer::new(config, keys, &mut OsRng)))
        }
        (Mechanism::Curve, false) => {
            let server = opts.curve_serverkey.ok_or(HandshakeError::Malformed("CURVE client without a server key"))?;
            // A client without its own key pair gets a fresh one: servers that allow any key still work.
            let keys = opts.curve_keypair.clone().unwrap_or_else(crate::security::KeyPair::generate);
            Handshake::CurveClient(Box::new(crate::wire::curve::CurveClient::new(config, keys, server, &mut OsRng)))
        }
    })
}

async fn send_commands<W: AsyncWrite + Unpin>(wr: &mut W, commands: Vec<Bytes>) -> std::io::Result<()> {
    if commands.is_empty() {
        return Ok(());
    }
    let mut out = BytesMut::new();
    for body in commands {
        encode_header(FLAG_COMMAND, body.len(), &mut out);
        out.extend_from_slice(&body);
    }
    wr.write_all(&out).await
}

async fn next_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    codec: &mut FrameCodec,
) -> Result<Frame, ConnectionError> {
    loop {
        if let Some(frame) = codec.decode(buf)? {
            return Ok(frame);
        }
        if rd.read_buf(buf).await? == 0 {
            return Err(ConnectionError::PeerClosed);
        }
    }
}

pub(super) async fn handshake<R, W>(
    rd: &mut R,
    wr: &mut W,
    socket_type: SocketType,
    opts: &Options,
    peer_addr: &str,
) -> Result<Handshaken, ConnectionError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let config = HandshakeConfig {
        socket_type,
        routing_id: opts.routing_id.clone(),
        zap_domain: opts.zap_domain.clone(),
        peer_address: peer_ip(peer_addr),
        authenticate: opts.authenticator.is_some(),
    };
    let mut hs = mechanism(opts, config)?;
    // All 64 bytes at once: never wait for the peer's greeting before sending ours.
    wr.write_all(&Greeting::new(hs.mechanism(), hs.as_server()).encode()).await?;
    let mut buf = BytesMut::with_capacity(512);
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
    peer.check_peer(hs.mechanism())?;
    send_commands(wr, hs.start()?).await?;

    let mut codec = FrameCodec::new(opts.maxmsgsize);
    loop {
        let frame = next_frame(rd, &mut buf, &mut codec).await?;
        if !frame.is_command() {
            return Err(HandshakeError::UnexpectedMessage.into());
        }
        let mut step = hs.on_command(frame.body)?;
        loop {
            match step {
                Step::Send(commands) => {
                    send_commands(wr, commands).await?;
                    break;
                }
                Step::Authenticate(request) => {
                    let reply = match &opts.authenticator {
                        Some(auth) => auth.authenticate(&request).await,
                        None => default_reply(&request),
                    };
                    step = hs.on_auth(reply)?;
                }
                Step::Done { send, peer: info, cipher } => {
                    send_commands(wr, send).await?;
                    return Ok(Handshaken { info, minor: peer.minor, read_buf: buf, cipher });
                }
                Step::Refuse { send, error } => {
                    send_commands(wr, send).await?;
                    let _ = wr.flush().await;
                    return Err(error.into());
                }
            }
        }
    }
}

/// The IP part of `ip:port` / `[ip6]:port` (ZAP's address field); empty for ipc/inproc.
fn peer_ip(peer: &str) -> String {
    peer.parse::<std::net::SocketAddr>().map(|a| a.ip().to_string()).unwrap_or_default()
}
