//! CURVE for CHP: encrypted, authenticated connections between clients and servers, and between
//! the two servers of a high-availability pair.
//!
//! Each component takes one value and applies it, as a [`zmtp::Security`], to every
//! socket it creates, reconnects and fresh sockets included (ppp's components take that
//! `Security` itself; CHP's key sets add what a pair needs on top of it):
//!
//! - [`ServerCurve`] for a [`Server`](crate::Server) or an [`HaServer`](crate::HaServer): the
//!   SNAPSHOT (ROUTER), PUBLISHER (PUB) and COLLECTOR (SUB) sockets are CURVE servers with this
//!   key pair, admitting any client that knows the public key or only the listed client keys. A
//!   pair server also secures the Binary Star voter (its SNAPSHOT socket) and state link
//!   ([`bstar::Curve`]), and, while passive, its SUB to the peer's PUBLISHER and its PEERSYNC?
//!   DEALER to the peer's SNAPSHOT are CURVE *clients* of the peer (with its own key pair, which
//!   the peer admits even when it has a client allow list).
//! - [`ClientCurve`] for a [`Client`](crate::Client): the server public key (one for all servers,
//!   or one per server) and the client's own key pair (default: a fresh one).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use chp::{Client, ClientCurve, ClientOptions, Server, ServerConfig, ServerCurve};
//! use zmtp::security::KeyPair;
//!
//! let server_keys = KeyPair::generate(); // `chp keygen`
//! let server = Server::bind(ServerConfig {
//!     bind: "127.0.0.1".into(),
//!     curve: Some(ServerCurve::new(server_keys.clone())),
//!     ..ServerConfig::default()
//! })
//! .await?;
//!
//! let options = ClientOptions::new(&server.address().to_string())?.curve(ClientCurve::new(server_keys.public()));
//! let client = Client::start(options)?;
//! client.set("/secret", "42", None).await?;
//! assert_eq!(server.get(b"/secret").as_deref(), Some(&b"42"[..]));
//! # Ok(()) }
//! ```
//!
//! A client that every server refuses — wrong server key, its own key not on the allow list, or
//! CURVE on one side only — fails ([`Status::Failed`](crate::Status::Failed)) with the reason,
//! rather than retrying for ever: see [`ClientOptions::curve`](crate::ClientOptions::curve).

use std::fmt;

use zmtp::Security;
use zmtp::Socket;
use zmtp::security::KeyPair;

use crate::address::ServerAddress;

fn z85(key: &[u8; 32]) -> String {
    zmtp::security::PublicKey::from(*key).to_string()
}

/// CURVE keys of a CHP server (single, or one of a pair).
#[derive(Clone)]
pub struct ServerCurve {
    /// The server's long-term key pair; clients need its public half.
    pub keys: KeyPair,
    /// Client public keys admitted; empty: any client that knows the server's public key.
    pub clients: Vec<[u8; 32]>,
    /// A pair server: the peer's public key (the server key of the peer's sockets, and a client
    /// key always admitted here). `None`: the peer uses the same key pair.
    pub peer: Option<[u8; 32]>,
}

impl ServerCurve {
    /// A CURVE server with `keys`, admitting any client that knows the public key.
    pub fn new(keys: KeyPair) -> ServerCurve {
        ServerCurve { keys, clients: Vec::new(), peer: None }
    }

    /// Admits only listed client keys (call once per key).
    pub fn allow_client(mut self, public: [u8; 32]) -> ServerCurve {
        self.clients.push(public);
        self
    }

    /// A pair server: the peer's public key (when the two servers have different key pairs).
    pub fn peer(mut self, public: [u8; 32]) -> ServerCurve {
        self.peer = Some(public);
        self
    }

    /// This server's public key (what its clients need).
    pub fn public(&self) -> [u8; 32] {
        self.keys.public()
    }

    /// This server's public key in Z85.
    pub fn public_z85(&self) -> String {
        self.keys.public_z85()
    }

    /// The peer's public key (ours when the pair shares one key pair).
    pub fn peer_public(&self) -> [u8; 32] {
        self.peer.unwrap_or_else(|| self.keys.public())
    }

    /// Whether a connection whose CURVE client key was `user_id` (its messages' `User-Id`
    /// property: the key in Z85, as zmtp's authenticator and libzmq's zauth set it) is the peer's.
    pub(crate) fn is_peer(&self, user_id: Option<&str>) -> bool {
        user_id == Some(z85(&self.peer_public()).as_str())
    }

    /// Client keys a socket the peer connects to admits: the allow list plus the peer (when there
    /// is an allow list at all).
    fn clients_and_peer(&self) -> Vec<[u8; 32]> {
        let mut keys = self.clients.clone();
        if !keys.is_empty() && !keys.contains(&self.peer_public()) {
            keys.push(self.peer_public());
        }
        keys
    }

    /// Makes `socket` a CURVE server with our keys and allow list (and the peer, if `peer`).
    pub(crate) fn server(&self, socket: &Socket, peer: bool) {
        let clients = if peer { self.clients_and_peer() } else { self.clients.clone() };
        socket.set_security(&Security::curve_server_allowing(self.keys.clone(), clients));
    }

    /// Makes `socket` (a passive server's SUB or DEALER) a CURVE client of the peer.
    pub(crate) fn peer_client(&self, socket: &Socket) {
        socket.set_security(&Security::curve_client(self.peer_public(), self.keys.clone()));
    }

    /// The Binary Star side: voter and state link. The voter (our SNAPSHOT socket) admits the
    /// peer too, whose DEALER asks it for PEERSYNC?.
    pub(crate) fn bstar(&self) -> bstar::Curve {
        let mut curve = bstar::Curve::with_peer(self.keys.clone(), self.peer_public());
        curve.clients = self.clients_and_peer();
        curve
    }
}

/// Public keys in Z85; never the secret key.
impl fmt::Debug for ServerCurve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerCurve")
            .field("public", &self.keys.public_z85())
            .field("clients", &self.clients.iter().map(z85).collect::<Vec<_>>())
            .field("peer", &self.peer.as_ref().map(z85))
            .finish()
    }
}

/// CURVE keys of a CHP client: the servers' public keys and the client's own key pair.
#[derive(Clone)]
pub struct ClientCurve {
    /// This client's long-term key pair (what a server's allow list checks).
    pub keys: KeyPair,
    /// The public key of every server not listed in [`servers`](Self::servers).
    pub server: Option<[u8; 32]>,
    /// Per-server public keys (a pair whose servers have different key pairs).
    pub servers: Vec<(ServerAddress, [u8; 32])>,
}

impl ClientCurve {
    /// A client of servers with public key `server`, with a fresh key pair of its own.
    pub fn new(server: [u8; 32]) -> ClientCurve {
        ClientCurve { keys: KeyPair::generate(), server: Some(server), servers: Vec::new() }
    }

    /// A client of servers with one public key each, with a fresh key pair of its own.
    pub fn per_server(servers: impl IntoIterator<Item = (ServerAddress, [u8; 32])>) -> ClientCurve {
        ClientCurve { keys: KeyPair::generate(), server: None, servers: servers.into_iter().collect() }
    }

    /// Uses `public` as the key of `server` (over the common one).
    pub fn server_key(mut self, server: ServerAddress, public: [u8; 32]) -> ClientCurve {
        self.servers.retain(|(s, _)| *s != server);
        self.servers.push((server, public));
        self
    }

    /// Proves this client with `keys` (needed when servers admit only listed client keys).
    pub fn keys(mut self, keys: KeyPair) -> ClientCurve {
        self.keys = keys;
        self
    }

    /// This client's public key in Z85 (what to put on a server's allow list).
    pub fn public_z85(&self) -> String {
        self.keys.public_z85()
    }

    /// The public key of `server`, if known.
    pub fn key_of(&self, server: &ServerAddress) -> Option<[u8; 32]> {
        self.servers.iter().find(|(s, _)| s == server).map(|(_, k)| *k).or(self.server)
    }

    /// Makes `socket` a CURVE client of `server` (whose key is known: checked at start).
    pub(crate) fn apply(&self, socket: &Socket, server: &ServerAddress) {
        if let Some(key) = self.key_of(server) {
            socket.set_security(&Security::curve_client(key, self.keys.clone()));
        }
    }
}

/// Public keys in Z85; never the secret key.
impl fmt::Debug for ClientCurve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCurve")
            .field("public", &self.keys.public_z85())
            .field("server", &self.server.as_ref().map(z85))
            .field("servers", &self.servers.iter().map(|(s, k)| (s.to_string(), z85(k))).collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_secrets() {
        let keys = KeyPair::generate();
        let peer = KeyPair::generate();
        let server = format!("{:?}", ServerCurve::new(keys.clone()).allow_client(peer.public()).peer(peer.public()));
        assert!(server.contains(&keys.public_z85()) && server.contains(&peer.public_z85()), "{server}");
        assert!(!server.contains(&keys.secret_z85()), "{server}");
        let client = format!("{:?}", ClientCurve::new(peer.public()).keys(keys.clone()));
        assert!(client.contains(&keys.public_z85()) && !client.contains(&keys.secret_z85()), "{client}");
    }

    #[test]
    fn the_peer_is_admitted_only_where_an_allow_list_exists() {
        let keys = KeyPair::generate();
        let (peer, client) = (KeyPair::generate().public(), KeyPair::generate().public());
        assert_eq!(ServerCurve::new(keys.clone()).peer_public(), keys.public());
        assert!(ServerCurve::new(keys.clone()).peer(peer).clients_and_peer().is_empty());
        let listed = ServerCurve::new(keys.clone()).peer(peer).allow_client(client);
        assert_eq!(listed.clients_and_peer(), vec![client, peer]);
        assert_eq!(listed.bstar().clients, vec![client, peer]);
        assert_eq!(listed.bstar().peer, peer);
    }

    #[test]
    fn per_server_keys_override_the_common_one() {
        let (a, b): (ServerAddress, ServerAddress) = ("tcp://a:5556".parse().unwrap(), "tcp://b:5566".parse().unwrap());
        let (ka, kb) = (KeyPair::generate().public(), KeyPair::generate().public());
        let common = ClientCurve::new(ka).server_key(b.clone(), kb);
        assert_eq!((common.key_of(&a), common.key_of(&b)), (Some(ka), Some(kb)));
        let each = ClientCurve::per_server([(a.clone(), ka)]);
        assert_eq!((each.key_of(&a), each.key_of(&b)), (Some(ka), None));
    }
}
