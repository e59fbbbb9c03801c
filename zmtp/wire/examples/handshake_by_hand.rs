//! A ZMTP connection driven by hand, bytes in and bytes out: what an embedded user wires to their
//! own TCP stack (smoltcp, a modem's AT socket, an RTOS's lwIP), with nothing but `zmtp-wire`.
//!
//! [`Session`] is the whole protocol side of one connection — greeting, CURVE (or NULL) handshake,
//! then encrypted multipart messages — and does no I/O: feed it what arrived with
//! [`Session::input`], write out what [`Session::output`] returns. The rest of this file moves those
//! bytes over `std::net` to show it working against libzmq:
//!
//! ```text
//! cargo run -p zmtp-wire --example handshake_by_hand
//!     # a CURVE client and server in memory: every byte they exchange, counted
//! cargo run -p zmtp-wire --example handshake_by_hand -- connect 127.0.0.1:5555 SERVER_PUBLIC_Z85
//!     # as a REQ, to a libzmq REP that is a CURVE server: sends "hello", prints the reply
//! cargo run -p zmtp-wire --example handshake_by_hand -- serve 127.0.0.1:5555 SERVER_SECRET_Z85
//!     # as a REP and CURVE server: answers one request from a libzmq REQ, then exits
//! ```
//!
//! Everything `Session` uses exists without `std` (the crate builds for `thumbv7em-none-eabihf`);
//! only the randomness differs: pass your hardware RNG where this passes `OsRng`.

use std::error::Error;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use bytes::{Bytes, BytesMut};
use zmtp_wire::curve::{CurveClient, CurveDecoder, CurveEncoder, CurveServer, KeyPair, decode_key};
use zmtp_wire::rand_core::OsRng;
use zmtp_wire::{
    Frame, FrameCodec, Greeting, GreetingDecoder, Handshake, HandshakeConfig, HandshakeError, SocketType, Step,
    ZapReply,
};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// The most one message may hold, all frames together: the codec bounds each frame, this bounds
/// what a peer can pile up with an endless run of MORE frames.
const MAX_MESSAGE: usize = 1 << 20;

/// What a [`Session`] reports from the bytes it was fed.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// The handshake is complete: messages can flow.
    Ready {
        /// The socket type the peer announced.
        peer: Option<SocketType>,
    },
    /// A whole multipart message.
    Message(Vec<Bytes>),
}

/// One ZMTP connection's protocol state, without I/O.
pub struct Session {
    handshake: Handshake,
    greeting: Option<GreetingDecoder>,
    codec: FrameCodec,
    /// Bytes received but not yet a whole frame.
    input: BytesMut,
    /// Bytes to send.
    output: BytesMut,
    /// After a CURVE handshake: every frame is a MESSAGE box.
    cipher: Option<(CurveEncoder, CurveDecoder)>,
    ready: bool,
    partial: Vec<Bytes>,
    partial_bytes: usize,
}

impl Session {
    /// A session that runs `handshake`; its greeting is the first output.
    pub fn new(handshake: Handshake) -> Session {
        let mut output = BytesMut::new();
        output.extend_from_slice(&Greeting::new(handshake.mechanism(), handshake.as_server()).encode());
        Session {
            handshake,
            greeting: Some(GreetingDecoder::new()),
            codec: FrameCodec::new(Some(MAX_MESSAGE as u64)),
            input: BytesMut::new(),
            output,
            cipher: None,
            ready: false,
            partial: Vec::new(),
            partial_bytes: 0,
        }
    }

    /// A CURVE client (REQ) of the server whose public key is `server`.
    pub fn curve_client(server: [u8; 32]) -> Session {
        let ours = KeyPair::generate_with(&mut OsRng);
        let config = HandshakeConfig::new(SocketType::Req);
        Session::new(Handshake::CurveClient(Box::new(CurveClient::new(config, ours, server, &mut OsRng))))
    }

    /// A CURVE server (REP) with its long-term key pair; it accepts any client key.
    pub fn curve_server(ours: KeyPair) -> Session {
        let config = HandshakeConfig::new(SocketType::Rep);
        Session::new(Handshake::CurveServer(Box::new(CurveServer::new(config, ours, &mut OsRng))))
    }

    /// The bytes to send now (empty when there is nothing).
    pub fn output(&mut self) -> BytesMut {
        self.output.split()
    }

    /// Feeds bytes that arrived; returns what they completed.
    pub fn input(&mut self, mut bytes: &[u8]) -> Result<Vec<Event>> {
        if let Some(decoder) = &mut self.greeting {
            let (used, greeting) = decoder.feed(bytes)?;
            bytes = &bytes[used..];
            let Some(greeting) = greeting else { return Ok(Vec::new()) };
            greeting.check_peer(self.handshake.mechanism())?;
            self.greeting = None;
            for body in self.handshake.start()? {
                self.codec.encode(Frame::command(body), &mut self.output);
            }
        }
        self.input.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(frame) = self.codec.decode(&mut self.input)? {
            if self.ready {
                self.on_frame(frame, &mut events)?;
            } else if frame.is_command() {
                self.on_handshake_command(frame.body, &mut events)?;
            } else {
                return Err(HandshakeError::UnexpectedMessage.into());
            }
        }
        Ok(events)
    }

    fn on_handshake_command(&mut self, body: Bytes, events: &mut Vec<Event>) -> Result<()> {
        let mut step = self.handshake.on_command(body)?;
        loop {
            match step {
                Step::Send(bodies) => {
                    self.send_commands(bodies);
                    return Ok(());
                }
                // A server asks its authenticator (ZAP) here; this one lets every key in.
                Step::Authenticate(_request) => step = self.handshake.on_auth(ZapReply::allow(""))?,
                Step::Done { send, peer, cipher } => {
                    self.send_commands(send);
                    self.cipher = cipher.map(|c| c.split());
                    self.ready = true;
                    events.push(Event::Ready { peer: peer.socket_type });
                    return Ok(());
                }
                Step::Refuse { send, error } => {
                    self.send_commands(send);
                    return Err(error.into());
                }
            }
        }
    }

    fn send_commands(&mut self, bodies: Vec<Bytes>) {
        for body in bodies {
            self.codec.encode(Frame::command(body), &mut self.output);
        }
    }

    fn on_frame(&mut self, frame: Frame, events: &mut Vec<Event>) -> Result<()> {
        let frame = match &mut self.cipher {
            Some((_, decoder)) => decoder.decode_frame(&frame.body)?,
            None => frame,
        };
        if frame.is_command() {
            return Ok(()); // PING/PONG: a long-lived connection answers PING with PONG here.
        }
        let more = frame.more();
        // Each frame costs its bytes plus a handle: count both, so empty frames are not free.
        self.partial_bytes += frame.body.len() + std::mem::size_of::<Bytes>();
        if self.partial_bytes > MAX_MESSAGE {
            return Err(format!("a message of more than {MAX_MESSAGE} bytes").into());
        }
        self.partial.push(frame.body);
        if !more {
            self.partial_bytes = 0;
            events.push(Event::Message(std::mem::take(&mut self.partial)));
        }
        Ok(())
    }

    /// Queues a multipart message (after [`Event::Ready`]).
    pub fn send(&mut self, frames: &[&[u8]]) -> Result<()> {
        for (i, payload) in frames.iter().enumerate() {
            let more = i + 1 < frames.len();
            match &mut self.cipher {
                Some((encoder, _)) => encoder.encode_frame(more, false, payload, &mut self.output)?,
                None => self.codec.encode(Frame::message(Bytes::copy_from_slice(payload), more), &mut self.output),
            }
        }
        Ok(())
    }
}

/// Moves bytes between a session and a blocking TCP stream until the session reports an event.
pub fn next_event(session: &mut Session, stream: &mut TcpStream) -> Result<Event> {
    let mut buf = [0u8; 4096];
    loop {
        stream.write_all(&session.output())?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err("the peer closed the connection".into());
        }
        if let Some(event) = session.input(&buf[..n])?.into_iter().next() {
            stream.write_all(&session.output())?;
            return Ok(event);
        }
    }
}

/// As a REQ: the handshake with a CURVE server at `address`, one request, its reply.
pub fn request(address: &str, server: [u8; 32], body: &[u8]) -> Result<Vec<Bytes>> {
    let mut stream = TcpStream::connect(address)?;
    let mut session = Session::curve_client(server);
    let Event::Ready { .. } = next_event(&mut session, &mut stream)? else { return Err("no handshake".into()) };
    session.send(&[b"", body])?; // REQ's empty delimiter, then the body
    match next_event(&mut session, &mut stream)? {
        Event::Message(mut frames) if frames.first().is_some_and(|f| f.is_empty()) => Ok(frames.split_off(1)),
        other => Err(format!("expected a reply, got {other:?}").into()),
    }
}

/// As a REP and CURVE server: accepts one connection and echoes one request; returns it.
pub fn serve_one(listener: &TcpListener, ours: KeyPair) -> Result<Vec<Bytes>> {
    let (mut stream, _) = listener.accept()?;
    let mut session = Session::curve_server(ours);
    let Event::Ready { .. } = next_event(&mut session, &mut stream)? else { return Err("no handshake".into()) };
    let Event::Message(request) = next_event(&mut session, &mut stream)? else { return Err("no request".into()) };
    let reply: Vec<&[u8]> = request.iter().map(|f| &f[..]).collect();
    session.send(&reply)?; // the envelope (the empty delimiter) goes back first
    stream.write_all(&session.output())?;
    // Wait for the peer to close, so the reply is read before we go.
    let _ = stream.read(&mut [0u8; 64]);
    Ok(request)
}

/// Both ends in memory: every byte they exchange, counted.
fn in_memory() -> Result<()> {
    let server_keys = KeyPair::generate_with(&mut OsRng);
    let mut client = Session::curve_client(server_keys.public());
    let mut server = Session::curve_server(server_keys);
    let (mut client_ready, mut server_ready) = (false, false);
    while !(client_ready && server_ready) {
        let to_server = client.output();
        println!("client → server {:4} bytes", to_server.len());
        server_ready |= server.input(&to_server)?.iter().any(|e| matches!(e, Event::Ready { .. }));
        let to_client = server.output();
        println!("server → client {:4} bytes", to_client.len());
        client_ready |= client.input(&to_client)?.iter().any(|e| matches!(e, Event::Ready { .. }));
    }
    client.send(&[b"", b"hello"])?;
    let request = server.input(&client.output())?;
    println!("server got {request:?}");
    server.send(&[b"", b"world"])?;
    let reply = client.input(&server.output())?;
    println!("client got {reply:?}");
    Ok(())
}

#[allow(dead_code)] // also compiled into the interop test, which calls the functions above instead
fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => in_memory(),
        ["connect", address, server] => {
            let reply = request(address, decode_key(server)?, b"hello")?;
            println!("reply: {reply:?}");
            Ok(())
        }
        ["serve", address, secret] => {
            let listener = TcpListener::bind(address)?;
            let request = serve_one(&listener, KeyPair::from_secret_z85(secret)?)?;
            println!("answered: {request:?}");
            Ok(())
        }
        _ => {
            Err("usage: handshake_by_hand [connect ADDRESS SERVER_PUBLIC_Z85 | serve ADDRESS SERVER_SECRET_Z85]".into())
        }
    }
}
