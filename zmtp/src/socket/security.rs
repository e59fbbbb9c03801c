//! A socket's security as one value ([`Security`]): what the crates built on zmtp take and set on
//! every socket they make. It lives with the socket, not in [`crate::security`], because it
//! names the socket (a custom setup is a function of one) while the keys and authenticators there
//! are below the socket layer.

use std::fmt;
use std::sync::Arc;

use super::Socket;
use crate::security::{KeyPair, PublicKey, StaticAuthenticator};

/// How a socket secures its connections, as one value: the mechanism, its role and its keys or
/// passwords, with the authenticator a server role needs. The crates built on zmtp (ppp, chp,
/// bstar) take or build one and set it ([`Socket::set_security`]) on every socket they make,
/// fresh sockets after a reconnect included; the same value works on a socket of your own.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> zmtp::Result<()> {
/// use zmtp::security::KeyPair;
/// use zmtp::{Security, Socket, SocketType};
///
/// let server_keys = KeyPair::generate();
/// let client_keys = KeyPair::generate();
/// let rep = Socket::new(SocketType::Rep);
/// rep.set_security(&Security::curve_server_allowing(server_keys.clone(), [client_keys.public()]));
/// let endpoint = rep.bind("tcp://127.0.0.1:*").await?;
///
/// let req = Socket::new(SocketType::Req);
/// req.set_security(&Security::curve_client(server_keys.public(), client_keys));
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

impl Socket {
    /// Sets the security options of [`Security`] at once (before `bind`/`connect`): mechanism,
    /// role and keys or passwords. A server role also installs the authenticator that enforces its
    /// allow list or passwords.
    pub fn set_security(&self, security: &Security) {
        let socket = self;
        match security {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
