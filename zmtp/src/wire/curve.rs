//! The CURVE mechanism (RFC 25, CurveZMQ RFC 26): the handshake for both roles and the MESSAGE cipher.
//!
//! Long-term keys C/c (client) and S/s (server); per-connection transient keys C'/c' and S'/s'. Every box is
//! NaCl `crypto_box` (X25519 + XSalsa20-Poly1305, tag first), the cookie a `crypto_secretbox` under a key
//! that lives only as long as the connection. Secrets are compared in constant time and zeroized on drop.

use bytes::{BufMut, Bytes, BytesMut};
use crypto_box::aead::generic_array::GenericArray;
use crypto_box::aead::{Aead, AeadInPlace, KeyInit, OsRng};
use crypto_box::{PublicKey, SalsaBox, SecretKey};
use crypto_secretbox::XSalsa20Poly1305;
use rand::RngCore;
use subtle::ConstantTimeEq;

use super::frame::{FLAG_COMMAND, FLAG_MORE, Frame, encode_header};
use super::greeting::Mechanism;
use super::mechanism::{HandshakeConfig, Step, authenticated, refuse};
use super::metadata::Metadata;
use super::null::{HandshakeError, PeerInfo};
use super::plain::split_command;
use super::zap::ZapReply;

/// Length of a CURVE key.
pub const KEY_LEN: usize = 32;
const TAG: usize = 16;
const HELLO_LEN: usize = 200;
const WELCOME_LEN: usize = 168;
const INITIATE_MIN: usize = 257;
const READY_MIN: usize = 30;
const MESSAGE_MIN: usize = 33;

/// Why a CURVE handshake or MESSAGE was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CurveError {
    /// A command of the wrong size.
    #[error("CURVE {command} of {len} bytes (expected {expected})")]
    BadLength {
        /// Which command.
        command: &'static str,
        /// Its length.
        len: usize,
        /// What was expected.
        expected: &'static str,
    },
    /// HELLO with a version other than 1.0.
    #[error("CURVE version {0}.{1} is not supported")]
    BadVersion(u8, u8),
    /// A box that does not open: wrong keys or tampering.
    #[error("CURVE {0} box does not decrypt (wrong key or tampered)")]
    Decrypt(&'static str),
    /// INITIATE's cookie is not the one we issued on this connection.
    #[error("CURVE cookie does not match this connection")]
    BadCookie,
    /// The vouch names another transient key or another server.
    #[error("CURVE vouch does not match the client's transient key and our public key")]
    VouchMismatch,
    /// A MESSAGE nonce that does not increase (replay or reordering).
    #[error("CURVE MESSAGE nonce {got} is not above the last one ({last})")]
    NonceReplay {
        /// The nonce received.
        got: u64,
        /// The last accepted nonce.
        last: u64,
    },
    /// A data frame that is not a MESSAGE command.
    #[error("expected a CURVE MESSAGE")]
    NotMessage,
    /// 2^64 messages sent on one connection.
    #[error("CURVE nonce counter exhausted")]
    NonceExhausted,
}

fn nonce(prefix: &[u8], tail: &[u8]) -> GenericArray<u8, crypto_box::aead::consts::U24> {
    debug_assert_eq!(prefix.len() + tail.len(), 24);
    let mut n = [0u8; 24];
    n[..prefix.len()].copy_from_slice(prefix);
    n[prefix.len()..].copy_from_slice(tail);
    n.into()
}

fn seal(key: &SalsaBox, prefix: &[u8], tail: &[u8], plain: &[u8]) -> Vec<u8> {
    key.encrypt(&nonce(prefix, tail), plain).expect("crypto_box encryption of a bounded buffer")
}

fn open(key: &SalsaBox, prefix: &[u8], tail: &[u8], cipher: &[u8], stage: &'static str) -> Result<Vec<u8>, CurveError> {
    key.decrypt(&nonce(prefix, tail), cipher).map_err(|_| CurveError::Decrypt(stage))
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    OsRng.fill_bytes(&mut b);
    b
}

fn public_key(bytes: &[u8]) -> PublicKey {
    PublicKey::from(<[u8; KEY_LEN]>::try_from(bytes).expect("32-byte slice"))
}

/// A long-term CURVE key pair. The secret half is zeroized when dropped.
///
/// ```
/// let pair = zmtp::wire::curve::KeyPair::generate();
/// let text = pair.public_z85();
/// assert_eq!(text.len(), 40);
/// let again = zmtp::wire::curve::KeyPair::from_secret_z85(&pair.secret_z85()).unwrap();
/// assert_eq!(again.public_z85(), text);
/// ```
#[derive(Clone)]
pub struct KeyPair {
    secret: SecretKey,
    public: PublicKey,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyPair {{ public: {}, secret: <hidden> }}", self.public_z85())
    }
}

impl KeyPair {
    /// A fresh key pair from the OS random number generator.
    pub fn generate() -> KeyPair {
        Self::from_secret(SecretKey::generate(&mut OsRng))
    }

    fn from_secret(secret: SecretKey) -> KeyPair {
        let public = secret.public_key();
        KeyPair { secret, public }
    }

    /// The pair of a 32-byte secret key.
    pub fn from_secret_bytes(secret: [u8; KEY_LEN]) -> KeyPair {
        Self::from_secret(SecretKey::from(secret))
    }

    /// The pair of a Z85-encoded secret key (40 characters).
    pub fn from_secret_z85(secret: &str) -> Result<KeyPair, super::z85::Z85Error> {
        let bytes = decode_key(secret)?;
        Ok(Self::from_secret_bytes(bytes))
    }

    /// The public key.
    pub fn public(&self) -> [u8; KEY_LEN] {
        *self.public.as_bytes()
    }

    /// The public key in Z85.
    pub fn public_z85(&self) -> String {
        super::z85::encode(self.public.as_bytes()).expect("32 bytes")
    }

    /// The secret key in Z85 (handle with care).
    pub fn secret_z85(&self) -> String {
        super::z85::encode(&self.secret.to_bytes()).expect("32 bytes")
    }
}

/// Decodes a 40-character Z85 key.
///
/// ```
/// use zmtp::security::decode_key;
/// let short = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf"; // 39 characters
/// assert_eq!(decode_key(short).unwrap_err().to_string(), "a CURVE key is 40 Z85 characters, this one has 39");
/// ```
pub fn decode_key(text: &str) -> Result<[u8; KEY_LEN], super::z85::Z85Error> {
    let chars = text.chars().count();
    if chars != KEY_LEN * 5 / 4 {
        return Err(super::z85::Z85Error::KeyLength(chars));
    }
    let bytes = super::z85::decode(text)?;
    bytes.try_into().map_err(|v: Vec<u8>| super::z85::Z85Error::KeyLength(v.len() * 5 / 4))
}

/// The established session: encrypts and decrypts MESSAGE commands with per-direction nonces.
pub struct CurveCipher {
    encoder: CurveEncoder,
    decoder: CurveDecoder,
}

impl std::fmt::Debug for CurveCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CurveCipher")
    }
}

impl CurveCipher {
    /// The session between the peer's transient public key and our transient secret key.
    fn new(peer: &PublicKey, ours: &SecretKey, client: bool, send_nonce: u64, last_recv: u64) -> CurveCipher {
        let (send, recv): (&'static [u8; 16], &'static [u8; 16]) = if client {
            (b"CurveZMQMESSAGEC", b"CurveZMQMESSAGES")
        } else {
            (b"CurveZMQMESSAGES", b"CurveZMQMESSAGEC")
        };
        CurveCipher {
            encoder: CurveEncoder { session: SalsaBox::new(peer, ours), prefix: send, next: send_nonce },
            decoder: CurveDecoder { session: SalsaBox::new(peer, ours), prefix: recv, last: last_recv },
        }
    }

    /// The two directions, for a reader and a writer that run independently.
    pub fn split(self) -> (CurveEncoder, CurveDecoder) {
        (self.encoder, self.decoder)
    }
}

/// The sending half of a CURVE session.
pub struct CurveEncoder {
    session: SalsaBox,
    prefix: &'static [u8; 16],
    next: u64,
}

impl CurveEncoder {
    /// Appends one frame as an encrypted MESSAGE (a plain outer data frame, as libzmq expects).
    pub fn encode_frame(
        &mut self,
        more: bool,
        command: bool,
        payload: &[u8],
        out: &mut BytesMut,
    ) -> Result<(), CurveError> {
        let nonce_value = self.next;
        self.next = self.next.checked_add(1).ok_or(CurveError::NonceExhausted)?;
        let body_len = 8 + 8 + TAG + 1 + payload.len();
        out.reserve(9 + body_len);
        encode_header(0, body_len, out);
        out.put_slice(b"\x07MESSAGE");
        out.put_u64(nonce_value);
        let tag_at = out.len();
        out.put_bytes(0, TAG);
        out.put_u8((more as u8) | ((command as u8) << 1));
        out.put_slice(payload);
        let tag = self
            .session
            .encrypt_in_place_detached(&nonce(self.prefix, &nonce_value.to_be_bytes()), b"", &mut out[tag_at + TAG..])
            .expect("crypto_box encryption of a bounded buffer");
        out[tag_at..tag_at + TAG].copy_from_slice(&tag);
        Ok(())
    }
}

/// The receiving half of a CURVE session.
pub struct CurveDecoder {
    session: SalsaBox,
    prefix: &'static [u8; 16],
    last: u64,
}

impl CurveDecoder {
    /// Opens one MESSAGE frame body into the frame it carries.
    pub fn decode_frame(&mut self, body: &[u8]) -> Result<Frame, CurveError> {
        if !body.starts_with(b"\x07MESSAGE") {
            return Err(CurveError::NotMessage);
        }
        if body.len() < MESSAGE_MIN {
            return Err(CurveError::BadLength { command: "MESSAGE", len: body.len(), expected: ">= 33" });
        }
        let got = u64::from_be_bytes(body[8..16].try_into().expect("8 bytes"));
        if got <= self.last {
            return Err(CurveError::NonceReplay { got, last: self.last });
        }
        let tag = GenericArray::clone_from_slice(&body[16..16 + TAG]);
        let mut plain = BytesMut::from(&body[16 + TAG..]);
        self.session
            .decrypt_in_place_detached(&nonce(self.prefix, &body[8..16]), b"", &mut plain, &tag)
            .map_err(|_| CurveError::Decrypt("MESSAGE"))?;
        self.last = got;
        let inner = plain[0];
        let payload = plain.split_off(1).freeze();
        let flags = if inner & 1 != 0 { FLAG_MORE } else { 0 } | if inner & 2 != 0 { FLAG_COMMAND } else { 0 };
        Ok(Frame { flags, body: payload })
    }
}

fn check_len(command: &'static str, body: &[u8], ok: bool, expected: &'static str) -> Result<(), CurveError> {
    if ok { Ok(()) } else { Err(CurveError::BadLength { command, len: body.len(), expected }) }
}

fn peer_error(data: &Bytes) -> HandshakeError {
    let reason = match data.first() {
        Some(&len) => data.slice(1..(1 + len as usize).min(data.len())),
        None => Bytes::new(),
    };
    HandshakeError::PeerError(reason)
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
    next_nonce: u64,
    state: ClientState,
}

impl std::fmt::Debug for CurveClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CurveClient")
    }
}

impl CurveClient {
    /// A client with its long-term key pair, talking to the server whose public key is `server`.
    pub fn new(config: HandshakeConfig, ours: KeyPair, server: [u8; KEY_LEN]) -> Self {
        CurveClient {
            config,
            ours,
            server: PublicKey::from(server),
            transient: KeyPair::generate(),
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
        let (name, data) = split_command(&body)?;
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
                let vouch_nonce: [u8; 16] = random();
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
    state: ServerState,
}

impl std::fmt::Debug for CurveServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CurveServer")
    }
}

impl Drop for CurveServer {
    fn drop(&mut self) {
        // The cookie key is a secret too.
        self.cookie_key.iter_mut().for_each(|b| *b = 0);
    }
}

impl CurveServer {
    /// A server with its long-term key pair.
    pub fn new(config: HandshakeConfig, ours: KeyPair) -> Self {
        CurveServer { config, ours, cookie_key: random::<32>().into(), state: ServerState::AwaitHello }
    }

    /// HELLO → WELCOME; INITIATE → authenticate.
    pub fn on_command(&mut self, body: Bytes) -> Result<Step, HandshakeError> {
        let (name, _) = split_command(&body)?;
        match (&self.state, &name[..]) {
            (ServerState::AwaitHello, b"HELLO") => self.on_hello(&body),
            (ServerState::AwaitInitiate { .. }, b"INITIATE") => self.on_initiate(&body),
            _ => Err(HandshakeError::UnexpectedCommand(String::from_utf8_lossy(&name).into_owned())),
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
        let transient = KeyPair::generate();
        let cookie_nonce: [u8; 16] = random();
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
        let welcome_nonce: [u8; 16] = random();
        let welcome_box = seal(&hello_box, b"WELCOME-", &welcome_nonce, &welcome_plain);
        let mut out = BytesMut::with_capacity(WELCOME_LEN);
        out.put_slice(b"\x07WELCOME");
        out.put_slice(&welcome_nonce);
        out.put_slice(&welcome_box);
        debug_assert_eq!(out.len(), WELCOME_LEN);
        self.state = ServerState::AwaitInitiate { client_transient, transient };
        Ok(Step::Send(vec![out.freeze()]))
    }

    fn on_initiate(&mut self, body: &[u8]) -> Result<Step, HandshakeError> {
        check_len("INITIATE", body, body.len() >= INITIATE_MIN, ">= 257")?;
        let ServerState::AwaitInitiate { client_transient, transient } = &self.state else { unreachable!("checked") };
        let cookie = &body[9..105];
        let cookie_plain = XSalsa20Poly1305::new(&self.cookie_key)
            .decrypt(&nonce(b"COOKIE--", &cookie[..16]), &cookie[16..])
            .map_err(|_| CurveError::BadCookie)?;
        let expected_client: bool = cookie_plain[..KEY_LEN].ct_eq(client_transient.as_bytes()).into();
        let expected_secret: bool = cookie_plain[KEY_LEN..].ct_eq(&transient.secret.to_bytes()).into();
        if !(expected_client && expected_secret) {
            return Err(CurveError::BadCookie.into());
        }
        let session = SalsaBox::new(client_transient, &transient.secret);
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
        let (client_transient, transient) = (client_transient.clone(), transient.clone());
        self.state = ServerState::AwaitAuth { client_transient, transient, peer, client_nonce };
        Ok(Step::Authenticate(request))
    }

    /// The authenticator's verdict on the client's long-term key.
    pub fn on_auth(&mut self, reply: ZapReply) -> Result<Step, HandshakeError> {
        let ServerState::AwaitAuth { .. } = self.state else {
            return Err(HandshakeError::UnexpectedCommand("ZAP reply".into()));
        };
        if !reply.is_allowed() {
            return Ok(refuse(&reply));
        }
        let ServerState::AwaitAuth { client_transient, transient, peer, client_nonce } =
            std::mem::replace(&mut self.state, ServerState::Finished)
        else {
            unreachable!("checked")
        };
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
    use crate::wire::SocketType;

    fn config(t: SocketType) -> HandshakeConfig {
        HandshakeConfig {
            socket_type: t,
            routing_id: Bytes::new(),
            zap_domain: String::new(),
            peer_address: "127.0.0.1".into(),
            authenticate: true,
        }
    }

    fn handshake(server_key: [u8; 32]) -> (CurveClient, CurveServer, Result<(Step, Bytes), HandshakeError>) {
        let server_pair = KeyPair::generate();
        let mut client = CurveClient::new(config(SocketType::Dealer), KeyPair::generate(), server_key);
        let mut server = CurveServer::new(config(SocketType::Router), server_pair);
        let hello = client.start().unwrap();
        let result = server.on_command(hello.clone()).map(|s| (s, hello));
        (client, server, result)
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
        let server_pair = KeyPair::generate();
        let client_pair = KeyPair::generate();
        let mut client = CurveClient::new(config(SocketType::Dealer), client_pair.clone(), server_pair.public());
        let mut server = CurveServer::new(config(SocketType::Router), server_pair);
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
        let frame = crate::wire::FrameCodec::default();
        let mut codec = frame;
        let outer = tokio_util::codec::Decoder::decode(&mut codec, &mut wire).unwrap().unwrap();
        assert_eq!(outer.flags, 0, "outer frame is a plain data frame");
        let inner = s_dec.decode_frame(&outer.body).unwrap();
        assert!(inner.more() && !inner.is_command());
        assert_eq!(&inner.body[..], b"hello");
        // Replaying the same MESSAGE is refused.
        assert!(matches!(s_dec.decode_frame(&outer.body), Err(CurveError::NonceReplay { got: 3, last: 3 })));
        s_enc.encode_frame(false, true, b"\x04PING\x00\x00", &mut wire).unwrap();
        let outer = tokio_util::codec::Decoder::decode(&mut codec, &mut wire).unwrap().unwrap();
        let inner = c_dec.decode_frame(&outer.body).unwrap();
        assert!(inner.is_command() && !inner.more());
    }

    #[test]
    fn wrong_server_key_fails_at_hello() {
        let (_, _, result) = handshake(KeyPair::generate().public());
        assert!(matches!(result, Err(HandshakeError::Curve(CurveError::Decrypt("HELLO")))));
    }

    #[test]
    fn malformed_hello_and_initiate() {
        let mut server = CurveServer::new(config(SocketType::Rep), KeyPair::generate());
        let short = Bytes::from_static(b"\x05HELLO\x01\x00");
        assert!(matches!(server.on_command(short), Err(HandshakeError::Curve(CurveError::BadLength { .. }))));
        let server_pair = KeyPair::generate();
        let mut client = CurveClient::new(config(SocketType::Req), KeyPair::generate(), server_pair.public());
        let mut hello = BytesMut::from(&client.start().unwrap()[..]);
        hello[6] = 2;
        let mut server = CurveServer::new(config(SocketType::Rep), server_pair.clone());
        assert!(matches!(server.on_command(hello.freeze()), Err(HandshakeError::Curve(CurveError::BadVersion(2, 0)))));
        // A tampered cookie in INITIATE.
        let mut client = CurveClient::new(config(SocketType::Req), KeyPair::generate(), server_pair.public());
        let mut server = CurveServer::new(config(SocketType::Rep), server_pair);
        let welcome = sends(server.on_command(client.start().unwrap()).unwrap()).remove(0);
        let mut initiate = BytesMut::from(&sends(client.on_command(welcome).unwrap())[0][..]);
        initiate[20] ^= 1;
        assert!(matches!(server.on_command(initiate.freeze()), Err(HandshakeError::Curve(CurveError::BadCookie))));
    }

    #[test]
    fn denied_client_gets_error_400() {
        let server_pair = KeyPair::generate();
        let mut client = CurveClient::new(config(SocketType::Req), KeyPair::generate(), server_pair.public());
        let mut server = CurveServer::new(config(SocketType::Rep), server_pair);
        let welcome = sends(server.on_command(client.start().unwrap()).unwrap()).remove(0);
        let initiate = sends(client.on_command(welcome).unwrap()).remove(0);
        server.on_command(initiate).unwrap();
        let Step::Refuse { send, .. } = server.on_auth(ZapReply::deny("unknown key")).unwrap() else { panic!() };
        assert_eq!(&send[0][..], b"\x05ERROR\x03400");
        assert!(matches!(client.on_command(send[0].clone()), Err(HandshakeError::PeerError(r)) if r == "400"));
    }
}
