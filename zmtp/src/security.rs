//! Authentication: the [`Authenticator`] a server socket consults during PLAIN, CURVE (and optionally
//! NULL) handshakes — the ZAP model (RFC 27) as a Rust trait — and [`StaticAuthenticator`], a ready-made
//! one with address allow/deny lists, PLAIN passwords and CURVE public-key allow lists.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use subtle::ConstantTimeEq;

use crate::Socket;

pub use crate::wire::curve::{KeyPair, decode_key};
pub use crate::wire::z85::Z85Error;
pub use crate::wire::{Mechanism, ZapReply, ZapRequest};

/// A CURVE public key: 32 bytes, written and read as 40 Z85 characters (what libzmq's
/// `zmq_curve_keypair` prints), so other crates need not reach into the wire layer's Z85.
///
/// ```
/// use zmtp::security::{KeyPair, PublicKey};
/// let pair = KeyPair::generate();
/// let key = PublicKey::from(pair.public());
/// let text = key.to_string();
/// assert_eq!(text.len(), 40);
/// assert_eq!(text.parse::<PublicKey>().unwrap(), key);
/// assert!("too short".parse::<PublicKey>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; 32]);

/// A CURVE secret key: 32 bytes, read from and written as 40 Z85 characters; `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretKey([u8; 32]);

macro_rules! z85_key {
    ($t:ident) => {
        impl $t {
            /// The key's 32 bytes.
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }
        }

        impl From<[u8; 32]> for $t {
            fn from(bytes: [u8; 32]) -> Self {
                $t(bytes)
            }
        }

        impl From<$t> for [u8; 32] {
            fn from(key: $t) -> [u8; 32] {
                key.0
            }
        }

        impl std::fmt::Display for $t {
            /// The 40 Z85 characters.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&crate::wire::z85::encode(&self.0).expect("32 bytes are a multiple of 4"))
            }
        }

        impl std::str::FromStr for $t {
            type Err = Z85Error;
            fn from_str(text: &str) -> Result<Self, Z85Error> {
                decode_key(text).map($t)
            }
        }
    };
}
z85_key!(PublicKey);
z85_key!(SecretKey);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(<hidden>)")
    }
}

/// How a socket secures its connections, as one value: the mechanism, its role and its keys or
/// passwords, with the authenticator a server role needs. The crates built on zmtp (ppp, chp,
/// bstar) take or build one and [`apply`](Security::apply) it to every socket they make, fresh
/// sockets after a reconnect included; the same value works on a socket of your own.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> zmtp::Result<()> {
/// use zmtp::security::{KeyPair, Security};
/// use zmtp::{Socket, SocketType};
///
/// let server_keys = KeyPair::generate();
/// let client_keys = KeyPair::generate();
/// let rep = Socket::new(SocketType::Rep);
/// Security::curve_server_allowing(server_keys.clone(), [client_keys.public()]).apply(&rep);
/// let endpoint = rep.bind("tcp://127.0.0.1:*").await?;
///
/// let req = Socket::new(SocketType::Req);
/// Security::curve_client(server_keys.public(), client_keys).apply(&req);
/// req.connect(&endpoint).await?;
/// req.send("hello").await?;
/// assert_eq!(rep.recv().await?[0], "hello");
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub enum Security {
    /// No security (ZMTP's NULL mechanism): anyone who can connect may talk.
    #[default]
    Null,
    /// A CURVE server: the connection is encrypted and clients must
    /// know the public half of `keys`.
    CurveServer {
        /// The server's long-term key pair.
        keys: KeyPair,
        /// Client public keys allowed to connect; empty: any client that knows the server key.
        clients: Vec<[u8; 32]>,
    },
    /// A CURVE client of the server with public key `server`.
    CurveClient {
        /// The server's public key.
        server: [u8; 32],
        /// This client's long-term key pair (what a server's allow list checks).
        keys: KeyPair,
    },
    /// A PLAIN server (clear-text user names and passwords: only on trusted networks).
    PlainServer {
        /// The accepted `(user, password)` pairs.
        users: Vec<(String, String)>,
    },
    /// A PLAIN client.
    PlainClient {
        /// The user name.
        username: String,
        /// The password.
        password: String,
    },
    /// Anything else (address allow lists, a custom authenticator, a ZAP domain …): called on each
    /// new socket before it binds or connects.
    Custom(Arc<dyn Fn(&Socket) + Send + Sync>),
}

impl Security {
    /// A CURVE server accepting any client that knows its public key.
    pub fn curve_server(keys: KeyPair) -> Security {
        Security::CurveServer { keys, clients: Vec::new() }
    }

    /// A CURVE server accepting only the listed client public keys.
    pub fn curve_server_allowing(keys: KeyPair, clients: impl IntoIterator<Item = impl Into<[u8; 32]>>) -> Security {
        Security::CurveServer { keys, clients: clients.into_iter().map(Into::into).collect() }
    }

    /// A CURVE client of the server whose public key is `server`, proving itself with `keys`
    /// (`KeyPair::generate()` when the server accepts any client key).
    pub fn curve_client(server: impl Into<[u8; 32]>, keys: KeyPair) -> Security {
        Security::CurveClient { server: server.into(), keys }
    }

    /// A PLAIN server accepting these `(user, password)` pairs.
    pub fn plain_server<U: Into<String>, P: Into<String>>(users: impl IntoIterator<Item = (U, P)>) -> Security {
        Security::PlainServer { users: users.into_iter().map(|(u, p)| (u.into(), p.into())).collect() }
    }

    /// A PLAIN client.
    pub fn plain_client(username: impl Into<String>, password: impl Into<String>) -> Security {
        Security::PlainClient { username: username.into(), password: password.into() }
    }

    /// A custom setup applied to every new socket.
    pub fn custom(setup: impl Fn(&Socket) + Send + Sync + 'static) -> Security {
        Security::Custom(Arc::new(setup))
    }

    /// True for NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Security::Null)
    }

    /// `Some(true)` for the server roles, `Some(false)` for the client roles, `None` for NULL and
    /// custom setups (which fit either).
    pub fn is_server(&self) -> Option<bool> {
        match self {
            Security::CurveServer { .. } | Security::PlainServer { .. } => Some(true),
            Security::CurveClient { .. } | Security::PlainClient { .. } => Some(false),
            Security::Null | Security::Custom(_) => None,
        }
    }

    /// Sets the socket's security options (before it binds or connects). A server role also installs
    /// the authenticator that enforces the allow list or the passwords.
    pub fn apply(&self, socket: &Socket) {
        match self {
            Security::Null => {}
            Security::CurveServer { keys, clients } => {
                socket.set_curve_server(true);
                socket.set_curve_keypair(keys.clone());
                let auth = if clients.is_empty() {
                    StaticAuthenticator::new().allow_any_curve_key()
                } else {
                    clients.iter().fold(StaticAuthenticator::new(), |auth, key| auth.curve_key(*key))
                };
                socket.set_authenticator(auth);
            }
            Security::CurveClient { server, keys } => {
                socket.set_curve_serverkey_bytes(*server);
                socket.set_curve_keypair(keys.clone());
            }
            Security::PlainServer { users } => {
                socket.set_plain_server(true);
                let auth = users.iter().fold(StaticAuthenticator::new(), |auth, (u, p)| auth.plain_user(u, p));
                socket.set_authenticator(auth);
            }
            Security::PlainClient { username, password } => {
                socket.set_plain_username(username.clone());
                socket.set_plain_password(password.clone());
            }
            Security::Custom(setup) => setup(socket),
        }
    }

    /// `Err` (saying why) when this is a client role but a server is needed, or the other way round.
    pub fn check_role(&self, server: bool) -> Result<(), &'static str> {
        match self.is_server() {
            Some(s) if s != server && server => Err("a server socket needs Security::CurveServer or PlainServer"),
            Some(s) if s != server => Err("a client socket needs Security::CurveClient or PlainClient"),
            _ => Ok(()),
        }
    }
}

/// Z85 public keys and user names; never secrets or passwords.
impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let z85 = |key: &[u8; 32]| PublicKey::from(*key).to_string();
        match self {
            Security::Null => f.write_str("Null"),
            Security::CurveServer { keys, clients } => f
                .debug_struct("CurveServer")
                .field("public", &keys.public_z85())
                .field("clients", &clients.iter().map(z85).collect::<Vec<_>>())
                .finish(),
            Security::CurveClient { server, keys } => {
                f.debug_struct("CurveClient").field("server", &z85(server)).field("public", &keys.public_z85()).finish()
            }
            Security::PlainServer { users } => {
                f.debug_struct("PlainServer").field("users", &users.iter().map(|(u, _)| u).collect::<Vec<_>>()).finish()
            }
            Security::PlainClient { username, .. } => {
                f.debug_struct("PlainClient").field("username", username).finish()
            }
            Security::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// Writes a key pair to stdout as `zmtp keygen`, `chp keygen` and `ppp keygen` all print it:
/// `public: <Z85>` then `secret: <Z85>`. A closed stdout (`| head -1`) is not worth a panic: the
/// output is simply cut short.
pub fn print_keygen(keys: &KeyPair) {
    use std::io::Write;
    let text = format!("public: {}\nsecret: {}\n", keys.public_z85(), keys.secret_z85());
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Decides whether a peer may connect. Called once per handshake, on the connection's task.
///
/// Any `Fn(&ZapRequest) -> ZapReply` is an authenticator:
///
/// ```
/// use zmtp::security::{ZapReply, ZapRequest};
/// let sock = zmtp::Socket::new(zmtp::SocketType::Rep);
/// sock.set_plain_server(true);
/// sock.set_authenticator(|req: &ZapRequest| {
///     if req.credentials.first().is_some_and(|user| user == "admin") { ZapReply::allow("admin") } else { ZapReply::deny("who?") }
/// });
/// ```
pub trait Authenticator: Send + Sync + 'static {
    /// The verdict on one handshake.
    fn authenticate<'a>(&'a self, request: &'a ZapRequest) -> Pin<Box<dyn Future<Output = ZapReply> + Send + 'a>>;
}

impl<F> Authenticator for F
where
    F: Fn(&ZapRequest) -> ZapReply + Send + Sync + 'static,
{
    fn authenticate<'a>(&'a self, request: &'a ZapRequest) -> Pin<Box<dyn Future<Output = ZapReply> + Send + 'a>> {
        Box::pin(std::future::ready(self(request)))
    }
}

/// What a server does without an authenticator, as libzmq does without a ZAP handler: NULL and CURVE
/// accept (CURVE still requires the client to know the server key), PLAIN refuses.
pub(crate) fn default_reply(request: &ZapRequest) -> ZapReply {
    match request.mechanism {
        Mechanism::Plain => ZapReply::deny("PLAIN server without an authenticator"),
        _ => ZapReply::allow(""),
    }
}

/// An authenticator configured up front (like czmq's zauth): address lists first, then the mechanism.
///
/// - A denied address is refused; if any address is allowed, every other address is refused.
/// - NULL: allowed. PLAIN: the password must match (compared in constant time); the user id is the user name.
/// - CURVE: the client key must be listed (or `allow_any_curve_key`); the user id is the key in Z85.
///
/// ```
/// use zmtp::security::{KeyPair, StaticAuthenticator};
/// let client = KeyPair::generate();
/// let auth = StaticAuthenticator::new()
///     .allow_address("127.0.0.1".parse().unwrap())
///     .plain_user("admin", "secret")
///     .curve_key(client.public());
/// let server = zmtp::Socket::new(zmtp::SocketType::Router);
/// server.set_authenticator(auth);
/// ```
#[derive(Clone, Debug, Default)]
pub struct StaticAuthenticator {
    allowed: HashSet<IpAddr>,
    denied: HashSet<IpAddr>,
    passwords: HashMap<String, String>,
    curve_keys: HashSet<[u8; 32]>,
    any_curve_key: bool,
}

impl StaticAuthenticator {
    /// Allows nothing but NULL peers from any address until configured.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only listed addresses may connect (once any is listed).
    pub fn allow_address(mut self, ip: IpAddr) -> Self {
        self.allowed.insert(ip);
        self
    }

    /// This address may not connect.
    pub fn deny_address(mut self, ip: IpAddr) -> Self {
        self.denied.insert(ip);
        self
    }

    /// A PLAIN user and password.
    pub fn plain_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.passwords.insert(user.into(), password.into());
        self
    }

    /// A CURVE client public key that may connect.
    pub fn curve_key(mut self, public: [u8; 32]) -> Self {
        self.curve_keys.insert(public);
        self
    }

    /// Any client that knows the server's public key may connect (libzmq's CURVE without ZAP).
    pub fn allow_any_curve_key(mut self) -> Self {
        self.any_curve_key = true;
        self
    }

    fn decide(&self, req: &ZapRequest) -> ZapReply {
        let ip: Option<IpAddr> = req.address.parse().ok();
        if ip.is_some_and(|ip| self.denied.contains(&ip)) {
            return ZapReply::deny("address denied");
        }
        if !self.allowed.is_empty() && !ip.is_some_and(|ip| self.allowed.contains(&ip)) {
            return ZapReply::deny("address not allowed");
        }
        match req.mechanism {
            Mechanism::Null => ZapReply::allow(""),
            Mechanism::Plain => {
                let (Some(user), Some(password)) = (req.credentials.first(), req.credentials.get(1)) else {
                    return ZapReply::deny("missing credentials");
                };
                let user = String::from_utf8_lossy(user);
                match self.passwords.get(user.as_ref()) {
                    Some(expected) if bool::from(expected.as_bytes().ct_eq(password)) => ZapReply::allow(user),
                    _ => ZapReply::deny("invalid user name or password"),
                }
            }
            Mechanism::Curve => {
                let Some(key) = req.credentials.first().and_then(|k| <[u8; 32]>::try_from(&k[..]).ok()) else {
                    return ZapReply::deny("missing client key");
                };
                let user = crate::wire::z85::encode(&key).unwrap_or_default();
                if self.any_curve_key || self.curve_keys.contains(&key) {
                    ZapReply::allow(user)
                } else {
                    ZapReply::deny("client key not allowed")
                }
            }
        }
    }
}

impl Authenticator for StaticAuthenticator {
    fn authenticate<'a>(&'a self, request: &'a ZapRequest) -> Pin<Box<dyn Future<Output = ZapReply> + Send + 'a>> {
        Box::pin(std::future::ready(self.decide(request)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn req(mechanism: Mechanism, address: &str, credentials: Vec<Bytes>) -> ZapRequest {
        ZapRequest { domain: String::new(), address: address.into(), routing_id: Bytes::new(), mechanism, credentials }
    }

    #[test]
    fn static_rules() {
        let key = KeyPair::generate().public();
        let auth = StaticAuthenticator::new()
            .deny_address("10.0.0.9".parse().unwrap())
            .plain_user("admin", "secret")
            .curve_key(key);
        assert!(auth.decide(&req(Mechanism::Null, "127.0.0.1", vec![])).is_allowed());
        assert!(!auth.decide(&req(Mechanism::Null, "10.0.0.9", vec![])).is_allowed());
        let ok = auth.decide(&req(Mechanism::Plain, "1.2.3.4", vec!["admin".into(), "secret".into()]));
        assert_eq!((ok.status_code, ok.user_id.as_str()), (200, "admin"));
        assert_eq!(
            auth.decide(&req(Mechanism::Plain, "1.2.3.4", vec!["admin".into(), "nope".into()])).status_code,
            400
        );
        assert!(auth.decide(&req(Mechanism::Curve, "", vec![Bytes::copy_from_slice(&key)])).is_allowed());
        let other = KeyPair::generate().public();
        assert!(!auth.decide(&req(Mechanism::Curve, "", vec![Bytes::copy_from_slice(&other)])).is_allowed());
        let only_local = StaticAuthenticator::new().allow_address("127.0.0.1".parse().unwrap());
        assert!(!only_local.decide(&req(Mechanism::Null, "", vec![])).is_allowed());
    }

    #[test]
    fn debug_never_shows_secrets() {
        let keys = KeyPair::generate();
        let server = format!("{:?}", Security::curve_server(keys.clone()));
        assert!(server.contains(&keys.public_z85()) && !server.contains(&keys.secret_z85()), "{server}");
        let client = format!("{:?}", Security::curve_client(keys.public(), keys.clone()));
        assert!(!client.contains(&keys.secret_z85()), "{client}");
        let plain = format!("{:?}", Security::plain_server([("admin", "hunter2")]));
        assert!(plain.contains("admin") && !plain.contains("hunter2"), "{plain}");
        let plain = format!("{:?}", Security::plain_client("admin", "hunter2"));
        assert!(!plain.contains("hunter2"), "{plain}");
    }

    #[test]
    fn roles() {
        let keys = KeyPair::generate();
        assert!(Security::curve_server(keys.clone()).check_role(true).is_ok());
        assert!(Security::curve_server(keys.clone()).check_role(false).is_err());
        assert!(Security::curve_client(keys.public(), keys.clone()).check_role(true).is_err());
        assert!(Security::plain_client("u", "p").check_role(false).is_ok());
        assert!(Security::Null.check_role(true).is_ok() && Security::custom(|_| {}).check_role(false).is_ok());
    }
}
