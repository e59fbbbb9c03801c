//! CURVE for a Binary Star server: the voter and the state PUB are CURVE servers, the state SUB is
//! a CURVE client of the peer's PUB.
//!
//! The state link is authenticated both ways: the SUB proves itself with this server's key pair
//! and the state PUB admits only the peer's public key, so nobody but the peer can listen to
//! (or, knowing only the public keys, pose as) either server. The two servers may share one key
//! pair ([`Curve::shared`]) or each have their own ([`Curve::with_peer`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bstar::{BinaryStar, Config, Curve, State};
//! use std::time::Duration;
//! use zmtp::SocketType;
//! use zmtp::security::KeyPair;
//!
//! let dir = std::env::temp_dir();
//! let ep = |name: &str| format!("ipc://{}/bstar-curve-doc-{}-{name}", dir.display(), std::process::id());
//! let keys = KeyPair::generate(); // one pair for both servers
//! let config = |c: Config, voter: &str| {
//!     c.voter(ep(voter), SocketType::Router).heartbeat(Duration::from_millis(50)).curve(Curve::shared(keys.clone()))
//! };
//! let (primary, _p) = BinaryStar::bind(config(Config::primary(ep("p"), ep("b")), "pv")).await?;
//! let (backup, _b) = BinaryStar::bind(config(Config::backup(ep("b"), ep("p")), "bv")).await?;
//! let (p, b) = (primary.handle(), backup.handle());
//! tokio::spawn(primary.run());
//! tokio::spawn(backup.run());
//! p.wait_for(|s| s.state == State::Active).await;
//! b.wait_for(|s| s.state == State::Passive).await;
//!
//! // Clients need the server public key.
//! let client = zmtp::Socket::new(SocketType::Dealer);
//! client.set_curve_serverkey_bytes(keys.public());
//! client.set_curve_keypair(KeyPair::generate());
//! client.connect(p.voter_endpoint()).await?;
//! p.close();
//! b.close();
//! # Ok(()) }
//! ```

use std::fmt;

use zmtp::Security;
use zmtp::Socket;
use zmtp::security::KeyPair;

/// CURVE keys of one Binary Star server.
#[derive(Clone)]
pub struct Curve {
    /// This server's long-term key pair: the server key of its voter and state PUB, and the client
    /// key its SUB presents to the peer.
    pub keys: KeyPair,
    /// The peer's public key: the server key of the peer's state PUB, and the only client key this
    /// server's state PUB admits.
    pub peer: [u8; 32],
    /// Client public keys the voter admits; empty: any client that knows this server's public key.
    pub clients: Vec<[u8; 32]>,
}

impl Curve {
    /// Both servers use the same key pair (the peer's public key is ours).
    pub fn shared(keys: KeyPair) -> Curve {
        let peer = keys.public();
        Curve { keys, peer, clients: Vec::new() }
    }

    /// This server's key pair and the peer's public key.
    pub fn with_peer(keys: KeyPair, peer: [u8; 32]) -> Curve {
        Curve { keys, peer, clients: Vec::new() }
    }

    /// Admits only listed client keys on the voter (call once per key).
    pub fn allow_client(mut self, public: [u8; 32]) -> Curve {
        self.clients.push(public);
        self
    }

    /// This server's public key (what its clients need).
    pub fn public(&self) -> [u8; 32] {
        self.keys.public()
    }

    pub(crate) fn state_pub(&self, socket: &Socket) {
        socket.set_security(&Security::curve_server_allowing(self.keys.clone(), [self.peer]));
    }

    pub(crate) fn state_sub(&self, socket: &Socket) {
        socket.set_security(&Security::curve_client(self.peer, self.keys.clone()));
    }

    pub(crate) fn voter(&self, socket: &Socket) {
        socket.set_security(&Security::curve_server_allowing(self.keys.clone(), self.clients.iter().copied()));
    }
}

/// Public keys in Z85; never the secret key.
impl fmt::Debug for Curve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let z85 = |key: &[u8; 32]| zmtp::security::PublicKey::from(*key).to_string();
        f.debug_struct("Curve")
            .field("public", &self.keys.public_z85())
            .field("peer", &z85(&self.peer))
            .field("clients", &self.clients.iter().map(z85).collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_public_keys_only() {
        let keys = KeyPair::generate();
        let text = format!("{:?}", Curve::shared(keys.clone()).allow_client(keys.public()));
        assert!(text.contains(&keys.public_z85()), "{text}");
        assert!(!text.contains(&keys.secret_z85()), "{text}");
        assert_eq!(Curve::shared(keys.clone()).peer, keys.public());
    }
}
