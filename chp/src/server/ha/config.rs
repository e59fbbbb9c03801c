//! How one server of the pair is set up ([`HaConfig`]), and why it could not start or stopped
//! ([`HaError`]). Kept apart from the running server so a reader of the settings sees only the
//! settings, and the CLI and tests build them without touching sockets.

use std::time::Duration;

use bstar::Side;

use crate::address::ServerAddress;
use crate::security::ServerCurve;
use crate::server::pending::PendingConfig;
use crate::server::{ServerConfig, ServerError};

/// How one server of the pair is set up.
#[derive(Clone, Debug)]
pub struct HaConfig {
    /// The CHP side: interface, P (must be given: the peer needs it), HUGZ interval, limits.
    pub server: ServerConfig,
    /// Primary or backup.
    pub side: Side,
    /// Where this server's Binary Star state PUB binds (e.g. `tcp://*:5003`).
    pub state: String,
    /// The peer's state PUB (e.g. `tcp://backup-host:5004`).
    pub peer_state: String,
    /// The peer's CHP address (its P): a passive server follows the peer's P+1 and asks its P
    /// for a snapshot.
    pub peer: ServerAddress,
    /// Binary Star heartbeat; the peer expires after twice this. Default 1 s.
    pub heartbeat: Duration,
    /// Pending list limits.
    pub pending: PendingConfig,
    /// A passive server's snapshot of the active that makes no progress for this long is
    /// abandoned and asked for again on a fresh socket. Default 2 s.
    pub peer_sync_timeout: Duration,
    /// With a [`data_dir`](ServerConfig::data_dir): may a primary restarted alone serve the map
    /// it has, once its peer has been silent past expiry and a client votes? Default false: it
    /// waits for its peer, whose map may be newer (the pair then serves the newer one). Set it to
    /// bring one server back when the other is gone for good. Without a data directory a primary
    /// always may (the Guide's behaviour: both maps were lost anyway).
    pub start_alone: bool,
}

impl HaConfig {
    /// A server of `side` with CHP port `port`, state PUB at `state`, peer state PUB at
    /// `peer_state` and peer CHP address `peer`; defaults elsewhere (binds all interfaces).
    pub fn new(
        side: Side,
        port: u16,
        state: impl Into<String>,
        peer_state: impl Into<String>,
        peer: ServerAddress,
    ) -> HaConfig {
        HaConfig {
            server: ServerConfig { port, ..ServerConfig::default() },
            side,
            state: state.into(),
            peer_state: peer_state.into(),
            peer,
            heartbeat: bstar::DEFAULT_HEARTBEAT,
            pending: PendingConfig::default(),
            peer_sync_timeout: Duration::from_secs(2),
            start_alone: false,
        }
    }

    /// The Guide's primary: P=5556, state `tcp://*:5003`, peer state `tcp://localhost:5004`, peer
    /// P=5566 on localhost.
    pub fn reference_primary() -> HaConfig {
        let peer = ServerAddress::new("localhost", 5566).expect("valid");
        HaConfig::new(Side::Primary, 5556, "tcp://*:5003", "tcp://localhost:5004", peer)
    }

    /// The Guide's backup: P=5566, state `tcp://*:5004`, peer state `tcp://localhost:5003`, peer
    /// P=5556 on localhost.
    pub fn reference_backup() -> HaConfig {
        let peer = ServerAddress::new("localhost", 5556).expect("valid");
        HaConfig::new(Side::Backup, 5566, "tcp://*:5004", "tcp://localhost:5003", peer)
    }

    /// Sets the interface to bind.
    pub fn bind(mut self, interface: impl Into<String>) -> HaConfig {
        self.server.bind = interface.into();
        self
    }

    /// Sets the Binary Star heartbeat.
    pub fn heartbeat(mut self, interval: Duration) -> HaConfig {
        self.heartbeat = interval;
        self
    }

    /// Sets the HUGZ interval.
    pub fn hugz(mut self, interval: Duration) -> HaConfig {
        self.server.hugz_interval = interval;
        self
    }

    /// Runs the server over CURVE ([`ServerCurve`]; set [`ServerCurve::peer`] when the peer has
    /// its own key pair): its CHP sockets, the Binary Star voter and state link, and the passive
    /// side's connections to the peer.
    pub fn curve(mut self, curve: ServerCurve) -> HaConfig {
        self.server.curve = Some(curve);
        self
    }
}

/// Why a pair server could not start, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HaError {
    /// Binding a CHP socket failed.
    #[error(transparent)]
    Bind(#[from] ServerError),
    /// Binary Star could not start (state or voter socket), or its socket failed.
    #[error("binary star: {0}")]
    Star(bstar::Error),
    /// The pair is broken: dual actives or dual passives. The server stopped.
    #[error("fatal: {0}")]
    Fatal(bstar::FsmError),
    /// This server's journal could not be written (the server stopped: nothing unwritten was
    /// published), or its map is older than its peer's (both durable, restarted together): it
    /// stopped so the peer takes over with the newer map; restarted, it follows the peer.
    #[error("{0}")]
    Journal(String),
    /// A setting out of its range (a zero interval would make the server spin).
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}

impl HaConfig {
    /// What [`HaServer::bind`](super::HaServer::bind) checks before it opens anything (its data
    /// directory, a socket).
    pub(crate) fn validate(&self) -> Result<(), HaError> {
        if self.peer_sync_timeout.is_zero() {
            return Err(HaError::Config("the peer sync timeout must be positive"));
        }
        if self.server.hugz_interval.is_zero() {
            return Err(HaError::Config("the HUGZ interval must be positive"));
        }
        if self.heartbeat.is_zero() {
            return Err(HaError::Config("the heartbeat interval must be positive"));
        }
        Ok(())
    }
}

impl From<bstar::Error> for HaError {
    fn from(e: bstar::Error) -> Self {
        match e.fsm() {
            Some(fatal) => HaError::Fatal(fatal),
            None => HaError::Star(e),
        }
    }
}
