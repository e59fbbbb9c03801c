//! Authentication: the [`Authenticator`] a server socket consults during PLAIN, CURVE (and optionally
//! NULL) handshakes — the ZAP model (RFC 27) as a Rust trait — and [`StaticAuthenticator`], a ready-made
//! one with address allow/deny lists, PLAIN passwords and CURVE public-key allow lists.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

use subtle::ConstantTimeEq;

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
}
