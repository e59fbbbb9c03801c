//! The CURVE mechanism's handshakes (RFC 25, CurveZMQ RFC 26), for both roles. The keys, boxes and
//! MESSAGE cipher they use are in `curve_crypto.rs`.
//!
//! Long-term keys C/c (client) and S/s (server); per-connection transient keys C'/c' and S'/s'. The
//! cookie is a `crypto_secretbox` under a key that lives only as long as the connection. Secrets are
//! compared in constant time and zeroized on drop.

use alloc::{string::String, vec, vec::Vec};
use bytes::{BufMut, Bytes, BytesMut};
use crypto_box::aead::{Aead, KeyInit};
use crypto_box::{PublicKey, SalsaBox};
use crypto_secretbox::XSalsa20Poly1305;
use rand_core::CryptoRngCore;
use subtle::ConstantTimeEq;

use super::command::split_name;
use super::curve_crypto::{nonce, open, public_key, random, seal};
use super::greeting::Mechanism;
use super::handshake::{HandshakeConfig, HandshakeError, PeerInfo, Step, authenticated, peer_error, refuse};
use super::metadata::Metadata;
use super::zap::ZapReply;

pub use super::curve_crypto::{CurveCipher, CurveDecoder, CurveEncoder, CurveError, KEY_LEN, KeyPair, decode_key};

const HELLO_LEN: usize = 200;
const WELCOME_LEN: usize = 168;
const INITIATE_MIN: usize = 257;
const READY_MIN: usize = 30;

fn check_len(command: &'static str, body: &[u8], ok: bool, expected: &'static str) -> Result<(), CurveError> {
    if ok { Ok(()) } else { Err(CurveError::BadLength { command, len: body.len(), expected }) }
}

enum ClientState {
    AwaitWelcome,
    AwaitReady { server_transient: PublicKey },
    Finished,
}

/// CURVE client handshake.
pub struct CurveClient {
    config: HandshakeConfig,
    ours: KeyPair,
    server: PublicKey,
    transient: KeyPair,
    vouch_nonce: [u8; 16],
    next_nonce: u64,
    state: ClientState,
}

impl core::fmt::Debug for CurveClient {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CurveClient")
    }
}

impl CurveClient {
    /// A client with its long-term key pair, talking to the server whose public key is `server`.
    /// Everything random the handshake needs (its transient key pair, the vouch's nonce) is drawn
    /// from `rng` here, so the state machine itself is deterministic.
    pub fn new(config: HandshakeConfig, ours: KeyPair, server: [u8; KEY_LEN], rng: &mut impl CryptoRngCore) -> Self {
        CurveClient {
            config,
            ours,
            server: PublicKey::from(server),
            transient: KeyPair::generate_with(rng),
            vouch_nonce: random(rng),
            next_nonce: 1,
            state: ClientState::AwaitWelcome,
        }
    }

    fn take_nonce(&mut self) -> [u8; 8] {
        let n = self.next_nonce;
        self.next_nonce += 1;
        n.to_be_bytes()
    }

    /// HELLO: exactly 200 bytes.
    pub fn start(&mut self) -> Result<Bytes, HandshakeError> {
        let short = self.take_nonce();
        let hello_box = SalsaBox::new(&self.server, &self.transient.secret);
        let signature = seal(&hello_box, b"CurveZMQHELLO---", &short, &[0u8; 64]);
        let mut out = BytesMut::with_capacity(HELLO_LEN);
        out.put_slice(b"\x05HELLO\x01\x00");
        out.put_bytes(0, 72);
        out.put_slice(self.transient.public.as_bytes());
        out.put_slice(&short);
        out.put_slice(&signature);
        debug_assert_eq!(out.len(), HELLO_LEN);
        Ok(out.freeze())
    }

    /// WELCOME → INITIATE; READY → done.
    pub fn on_command(&mut self, body: Bytes) -> Result<Step, HandshakeError> {
        let (name, data) = split_name(&body)?;
        if &name[..] == b"ERROR" {
            return Err(peer_error(&data));
        }
        match (&self.state, &name[..]) {
            (ClientState::AwaitWelcome, b"WELCOME") => {
                check_len("WELCOME", &body, body.len() == WELCOME_LEN, "168")?;
                let welcome_box = SalsaBox::new(&self.server, &self.transient.secret);
                let plain = open(&welcome_box, b"WELCOME-", &body[8..24], &body[24..], "WELCOME")?;
                let server_transient = public_key(&plain[..KEY_LEN]);
                let cookie = &plain[KEY_LEN..];
                let session = SalsaBox::new(&server_transient, &self.transient.secret);
                let vouch_nonce = self.vouch_nonce;
                let mut vouched = Vec::with_capacity(2 * KEY_LEN);
                vouched.extend_from_slice(self.transient.public.as_bytes());
                vouched.extend_from_slice(self.server.as_bytes());
                let vouch =
                    seal(&SalsaBox::new(&server_transient, &self.ours.secret), b"VOUCH---", &vouch_nonce, &vouched);
                let mut plain = BytesMut::new();
                plain.put_slice(self.ours.public.as_bytes());
                plain.put_slice(&vouch_nonce);
                plain.put_slice(&vouch);
                self.config.metadata().encode(&mut plain);
                let short = self.take_nonce();
                let initiate_box = seal(&session, b"CurveZMQINITIATE", &short, &plain);
                let mut out = BytesMut::with_capacity(9 + 96 + 8 + initiate_box.len());
                out.put_slice(b"\x08INITIATE");
                out.put_slice(cookie);
                out.put_slice(&short);
                out.put_slice(&initiate_box);
                self.state = ClientState::AwaitReady { server_transient };
                Ok(Step::Send(vec![out.freeze()]))
            }
            (ClientState::AwaitReady { server_transient }, b"READY") => {
                check_len("READY", &body, body.len() >= READY_MIN, ">= 30")?;
                let session = SalsaBox::new(server_transient, &self.transient.secret);
                let metadata = open(&session, b"CurveZMQREADY---", &body[6..14], &body[14..], "READY")?;
                let peer = PeerInfo::from_ready(self.config.socket_type, Metadata::parse(&metadata)?)?;
                let server_nonce = u64::from_be_bytes(body[6..14].try_into().expect("8 bytes"));
                let cipher =
                    CurveCipher::new(server_transient, &self.transient.secret, true, self.next_nonce, server_nonce);
                self.state = ClientState::Finished;
                Ok(Step::Done { send: vec![], peer, cipher: Some(cipher) })
            }
            _ => Err(HandshakeError::UnexpectedCommand(String::from_utf8_lossy(&name).into_owned())),
        }
    }
}

enum ServerState {
    AwaitHello,
    AwaitInitiate { client_transient: PublicKey, transient: KeyPair },
    AwaitAuth { client_transient: PublicKey, transient: KeyPair, peer: PeerInfo, client_nonce: u64 },
    Finished,
}

/// CURVE server handshake.
pub struct CurveServer {
    config: HandshakeConfig,
    ours: KeyPair,
    cookie_key: crypto_secretbox::Key,
    /// Drawn at construction so the state machine is deterministic; the transient key pair is
    /// derived from its secret only once a HELLO has been verified (the scalar multiplication is
    /// not spent on a peer that never sends one).
    transient_secret: [u8; KEY_LEN],
    cookie_nonce: [u8; 16],
    welcome_nonce: [u8; 16],
    state: ServerState,
}

impl core::fmt::Debug for CurveServer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CurveServer")
    }
}

impl Drop for CurveServer {
    fn drop(&mut self) {
        // The cookie key is a secret too, and so is the transient secret until it is used.
        self.cookie_key.iter_mut().for_each(|b| *b = 0);
        self.transient_secret.iter_mut().for_each(|b| *b = 0);
    }
}

impl CurveServer {
    /// A server with its long-term key pair. Everything random the handshake needs (the cookie key,
    /// the transient secret, two nonces) is drawn from `rng` here.
    pub fn new(config: HandshakeConfig, ours: KeyPair, rng: &mut impl CryptoRngCore) -> Self {
        CurveServer {
            config,
            ours,
            cookie_key: random::<32>(rng).into(),
            transient_secret: random(rng),
            cookie_nonce: random(rng),
            welcome_nonce: random(rng),
            state: ServerState::AwaitHello,
        }
    }

    /// HELLO → WELCOME; INITIATE → authenticate.
    pub fn on_command(&mut self, body: Bytes) -> Result<Step, HandshakeError> {
        let (name, _) = split_name(&body)?;
        // The state is taken by value, so each step owns what it needs; a failed step leaves the
        // handshake finished (the connection ends).
        match (core::mem::replace(&mut self.state, ServerState::Finished), &name[..]) {
            (ServerState::AwaitHello, b"HELLO") => self.on_hello(&body),
            (ServerState::AwaitInitiate { client_transient, transient }, b"INITIATE") => {
                self.on_initiate(&body, client_transient, transient)
            }
            (state, _) => {
                self.state = state;
                Err(HandshakeError::UnexpectedCommand(String::from_utf8_lossy(&name).into_owned()))
            }
        }
    }

    fn on_hello(&mut self, body: &[u8]) -> Result<Step, HandshakeError> {
        check_len("HELLO", body, body.len() == HELLO_LEN, "200")?;
        if body[6] != 1 || body[7] != 0 {
            return Err(CurveError::BadVersion(body[6], body[7]).into());
        }
        let client_transient = public_key(&body[80..112]);
        let hello_box = SalsaBox::new(&client_transient, &self.ours.secret);
        open(&hello_box, b"CurveZMQHELLO---", &body[112..120], &body[120..200], "HELLO")?;
        let transient = KeyPair::from_secret_bytes(core::mem::take(&mut self.transient_secret));
        let cookie_nonce = self.cookie_nonce;
        let mut cookie_plain = [0u8; 2 * KEY_LEN];
        cookie_plain[..KEY_LEN].copy_from_slice(client_transient.as_bytes());
        cookie_plain[KEY_LEN..].copy_from_slice(&transient.secret.to_bytes());
        let cookie_box = XSalsa20Poly1305::new(&self.cookie_key)
            .encrypt(&nonce(b"COOKIE--", &cookie_nonce), &cookie_plain[..])
            .expect("secretbox of 64 bytes");
        cookie_plain.iter_mut().for_each(|b| *b = 0);
        let mut welcome_plain = Vec::with_capacity(KEY_LEN + 96);
        welcome_plain.extend_from_slice(transient.public.as_bytes());
        welcome_plain.extend_from_slice(&cookie_nonce);
        welcome_plain.extend_from_slice(&cookie_box);
        let welcome_nonce = self.welcome_nonce;
        let welcome_box = seal(&hello_box, b"WELCOME-", &welcome_nonce, &welcome_plain);
        let mut out = BytesMut::with_capacity(WELCOME_LEN);
        out.put_slice(b"\x07WELCOME");
        out.put_slice(&welcome_nonce);
        out.put_slice(&welcome_box);
        debug_assert_eq!(out.len(), WELCOME_LEN);
        self.state = ServerState::AwaitInitiate { client_transient, transient };
        Ok(Step::Send(vec![out.freeze()]))
    }

    fn on_initiate(
        &mut self,
        body: &[u8],
        client_transient: PublicKey,
        transient: KeyPair,
    ) -> Result<Step, HandshakeError> {
        check_len("INITIATE", body, body.len() >= INITIATE_MIN, ">= 257")?;
        let cookie = &body[9..105];
        let cookie_plain = XSalsa20Poly1305::new(&self.cookie_key)
            .decrypt(&nonce(b"COOKIE--", &cookie[..16]), &cookie[16..])
            .map_err(|_| CurveError::BadCookie)?;
        let expected_client: bool = cookie_plain[..KEY_LEN].ct_eq(client_transient.as_bytes()).into();
        let expected_secret: bool = cookie_plain[KEY_LEN..].ct_eq(&transient.secret.to_bytes()).into();
        if !(expected_client && expected_secret) {
            return Err(CurveError::BadCookie.into());
        }
        let session = SalsaBox::new(&client_transient, &transient.secret);
        let client_nonce = u64::from_be_bytes(body[105..113].try_into().expect("8 bytes"));
        let plain = open(&session, b"CurveZMQINITIATE", &body[105..113], &body[113..], "INITIATE")?;
        let client_key = public_key(&plain[..KEY_LEN]);
        let vouch = open(
            &SalsaBox::new(&client_key, &transient.secret),
            b"VOUCH---",
            &plain[KEY_LEN..KEY_LEN + 16],
            &plain[KEY_LEN + 16..KEY_LEN + 96],
            "vouch",
        )?;
        let same_transient: bool = vouch[..KEY_LEN].ct_eq(client_transient.as_bytes()).into();
        let same_server: bool = vouch[KEY_LEN..].ct_eq(self.ours.public.as_bytes()).into();
        if !(same_transient && same_server) {
            return Err(CurveError::VouchMismatch.into());
        }
        let peer = PeerInfo::from_ready(self.config.socket_type, Metadata::parse(&plain[KEY_LEN + 96..])?)?;
        let request = self.config.zap_request(
            Mechanism::Curve,
            peer.identity.clone(),
            vec![Bytes::copy_from_slice(client_key.as_bytes())],
        );
        self.state = ServerState::AwaitAuth { client_transient, transient, peer, client_nonce };
        Ok(Step::Authenticate(request))
    }

    /// The authenticator's verdict on the client's long-term key.
    pub fn on_auth(&mut self, reply: ZapReply) -> Result<Step, HandshakeError> {
        let ServerState::AwaitAuth { client_transient, transient, peer, client_nonce } =
            core::mem::replace(&mut self.state, ServerState::Finished)
        else {
            return Err(HandshakeError::Misuse("an authenticator reply with no peer awaiting one"));
        };
        if !reply.is_allowed() {
            return Ok(refuse(&reply));
        }
        let session = SalsaBox::new(&client_transient, &transient.secret);
        let mut metadata = BytesMut::new();
        self.config.metadata().encode(&mut metadata);
        let short = 1u64.to_be_bytes();
        let ready_box = seal(&session, b"CurveZMQREADY---", &short, &metadata);
        let mut out = BytesMut::with_capacity(14 + ready_box.len());
        out.put_slice(b"\x05READY");
        out.put_slice(&short);
        out.put_slice(&ready_box);
        let cipher = CurveCipher::new(&client_transient, &transient.secret, false, 2, client_nonce);
        Ok(Step::Done { send: vec![out.freeze()], peer: authenticated(peer, Some(reply)), cipher: Some(cipher) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SocketType;
    use rand::rngs::OsRng;

    fn config(t: SocketType) -> HandshakeConfig {
        HandshakeConfig { peer_address: "127.0.0.1".into(), authenticate: true, ..HandshakeConfig::new(t) }
    }

    fn handshake(server_key: [u8; 32]) -> (CurveClient, CurveServer, Result<(Step, Bytes), HandshakeError>) {
        let server_pair = KeyPair::generate_with(&mut OsRng);
        let mut client =
            CurveClient::new(config(SocketType::Dealer), KeyPair::generate_with(&mut OsRng), server_key, &mut OsRng);
        let mut server = CurveServer::new(config(SocketType::Router), server_pair, &mut OsRng);
        let hello = client.start().unwrap();
        let result = server.on_command(hello.clone()).map(|s| (s, hello));
        (client, server, result)
    }

    /// A REQ client with a fresh key pair and a REP server with `server_pair`, before HELLO.
    fn req_rep(server_pair: &KeyPair) -> (CurveClient, CurveServer) {
        let client = CurveClient::new(
            config(SocketType::Req),
            KeyPair::generate_with(&mut OsRng),
            server_pair.public(),
            &mut OsRng,
        );
        (client, CurveServer::new(config(SocketType::Rep), server_pair.clone(), &mut OsRng))
    }

    fn sends(step: Step) -> Vec<Bytes> {
        match step {
            Step::Send(v) => v,
            Step::Done { send, .. } => send,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn full_handshake_and_messages_both_ways() {
        let server_pair = KeyPair::generate_with(&mut OsRng);
        let client_pair = KeyPair::generate_with(&mut OsRng);
        let mut client =
            CurveClient::new(config(SocketType::Dealer), client_pair.clone(), server_pair.public(), &mut OsRng);
        let mut server = CurveServer::new(config(SocketType::Router), server_pair, &mut OsRng);
        let hello = client.start().unwrap();
        assert_eq!(hello.len(), 200);
        let welcome = sends(server.on_command(hello).unwrap()).remove(0);
        assert_eq!(welcome.len(), 168);
        let initiate = sends(client.on_command(welcome).unwrap()).remove(0);
        assert!(initiate.len() >= 257);
        let Step::Authenticate(req) = server.on_command(initiate).unwrap() else { panic!() };
        assert_eq!(&req.credentials[0][..], &client_pair.public());
        let Step::Done { send, peer, cipher } = server.on_auth(ZapReply::allow("c1")).unwrap() else { panic!() };
        assert_eq!(peer.socket_type, Some(SocketType::Dealer));
        let Step::Done { cipher: client_cipher, .. } = client.on_command(send[0].clone()).unwrap() else { panic!() };
        let (mut s_enc, mut s_dec) = cipher.unwrap().split();
        let (mut c_enc, mut c_dec) = client_cipher.unwrap().split();
        let mut wire = BytesMut::new();
        c_enc.encode_frame(true, false, b"hello", &mut wire).unwrap();
        let frame = crate::FrameCodec::default();
        let mut codec = frame;
        let outer = codec.decode(&mut wire).unwrap().unwrap();
        assert_eq!(outer.flags, 0, "outer frame is a plain data frame");
        let inner = s_dec.decode_frame(&outer.body).unwrap();
        assert!(inner.more() && !inner.is_command());
        assert_eq!(&inner.body[..], b"hello");
        // Replaying the same MESSAGE is refused.
        assert!(matches!(s_dec.decode_frame(&outer.body), Err(CurveError::NonceReplay { got: 3, last: 3 })));
        s_enc.encode_frame(false, true, b"\x04PING\x00\x00", &mut wire).unwrap();
        let outer = codec.decode(&mut wire).unwrap().unwrap();
        let inner = c_dec.decode_frame(&outer.body).unwrap();
        assert!(inner.is_command() && !inner.more());
    }

    #[test]
    fn wrong_server_key_fails_at_hello() {
        let (_, _, result) = handshake(KeyPair::generate_with(&mut OsRng).public());
        assert!(matches!(result, Err(HandshakeError::Curve(CurveError::Decrypt("HELLO")))));
    }

    #[test]
    fn malformed_hello_and_initiate() {
        let mut server = CurveServer::new(config(SocketType::Rep), KeyPair::generate_with(&mut OsRng), &mut OsRng);
        let short = Bytes::from_static(b"\x05HELLO\x01\x00");
        assert!(matches!(server.on_command(short), Err(HandshakeError::Curve(CurveError::BadLength { .. }))));
        let server_pair = KeyPair::generate_with(&mut OsRng);
        let (mut client, mut server) = req_rep(&server_pair);
        let mut hello = BytesMut::from(&client.start().unwrap()[..]);
        hello[6] = 2;
        assert!(matches!(server.on_command(hello.freeze()), Err(HandshakeError::Curve(CurveError::BadVersion(2, 0)))));
        // A tampered cookie in INITIATE.
        let (mut client, mut server) = req_rep(&server_pair);
        let welcome = sends(server.on_command(client.start().unwrap()).unwrap()).remove(0);
        let mut initiate = BytesMut::from(&sends(client.on_command(welcome).unwrap())[0][..]);
        initiate[20] ^= 1;
        assert!(matches!(server.on_command(initiate.freeze()), Err(HandshakeError::Curve(CurveError::BadCookie))));
    }

    #[test]
    fn denied_client_gets_error_400() {
        let server_pair = KeyPair::generate_with(&mut OsRng);
        let (mut client, mut server) = req_rep(&server_pair);
        let welcome = sends(server.on_command(client.start().unwrap()).unwrap()).remove(0);
        let initiate = sends(client.on_command(welcome).unwrap()).remove(0);
        server.on_command(initiate).unwrap();
        let Step::Refuse { send, .. } = server.on_auth(ZapReply::deny("unknown key")).unwrap() else { panic!() };
        assert_eq!(&send[0][..], b"\x05ERROR\x03400");
        assert!(matches!(client.on_command(send[0].clone()), Err(HandshakeError::PeerError(r)) if r == "400"));
    }
}
