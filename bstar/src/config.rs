//! Runner configuration: the pair's endpoints, the voter socket and the heartbeat.

use std::time::Duration;

use zmtp::SocketType;

use crate::Error;
use crate::fsm::Side;
use crate::security::Curve;

/// The reference heartbeat interval.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(1000);

/// How many accepted requests may wait unread in [`Notices`](crate::Notices) before the runner stops
/// reading the voter socket (heartbeats go on regardless).
pub const DEFAULT_REQUEST_QUEUE: usize = 1000;

/// How a [`BinaryStar`](crate::BinaryStar) is set up.
///
/// ```
/// use std::time::Duration;
/// use bstar::Config;
/// use zmtp::SocketType;
///
/// let config = Config::primary("tcp://*:5003", "tcp://localhost:5004")
///     .voter("tcp://*:5001", SocketType::Router)
///     .heartbeat(Duration::from_millis(100));
/// assert_eq!(config.peer_expiry(), Duration::from_millis(200));
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    /// Primary or backup.
    pub side: Side,
    /// Where this server's state PUB binds.
    pub local: String,
    /// The peer's state PUB, which this server's SUB connects to.
    pub remote: String,
    /// Where the voter socket binds (`None` until [`voter`](Self::voter) is called; required).
    pub voter: Option<String>,
    /// The voter socket's type (default ROUTER).
    pub voter_type: SocketType,
    /// The voter's ZMQ_BACKLOG: connections it queues before accepting them (default
    /// [`zmtp::DEFAULT_BACKLOG`]). Every client votes again after a failover, all at once.
    pub voter_backlog: u32,
    /// Heartbeat interval; the peer expires after twice this.
    pub heartbeat: Duration,
    /// See [`DEFAULT_REQUEST_QUEUE`].
    pub request_queue: usize,
    /// CURVE on the voter and the state link (`None`: NULL security, the default).
    pub curve: Option<Curve>,
    /// Heal dual actives / dual passives ([`crate::split`]) instead of stopping (the Guide's
    /// behaviour, the default).
    pub heal_split_brain: bool,
}

impl Config {
    /// A server of `side` publishing its state on `local` and listening to its peer on `remote`.
    pub fn new(side: Side, local: impl Into<String>, remote: impl Into<String>) -> Config {
        Config {
            side,
            local: local.into(),
            remote: remote.into(),
            voter: None,
            voter_type: SocketType::Router,
            voter_backlog: zmtp::DEFAULT_BACKLOG,
            heartbeat: DEFAULT_HEARTBEAT,
            request_queue: DEFAULT_REQUEST_QUEUE,
            curve: None,
            heal_split_brain: false,
        }
    }

    /// [`Config::new`] for the primary.
    pub fn primary(local: impl Into<String>, remote: impl Into<String>) -> Config {
        Config::new(Side::Primary, local, remote)
    }

    /// [`Config::new`] for the backup.
    pub fn backup(local: impl Into<String>, remote: impl Into<String>) -> Config {
        Config::new(Side::Backup, local, remote)
    }

    /// The socket whose messages are client requests (votes): bound at `endpoint`. It must be able
    /// to receive without replying (ROUTER, DEALER, PULL, SUB, XSUB, PAIR): a rejected request is
    /// read and discarded, which REP cannot do.
    pub fn voter(mut self, endpoint: impl Into<String>, socket_type: SocketType) -> Config {
        self.voter = Some(endpoint.into());
        self.voter_type = socket_type;
        self
    }

    /// Sets the heartbeat interval (default 1000 ms).
    pub fn heartbeat(mut self, interval: Duration) -> Config {
        self.heartbeat = interval;
        self
    }

    /// Heals a split brain instead of stopping both servers (see [`crate::split`]): after a stall
    /// or a partition the server that took over stays active and the other yields, becoming
    /// passive ([`Notice::BecamePassive`](crate::Notice::BecamePassive)). Off by default, as in the
    /// Guide, where dual actives or dual passives stop the server.
    pub fn heal_split_brain(mut self, heal: bool) -> Config {
        self.heal_split_brain = heal;
        self
    }

    /// Sets the voter's ZMQ_BACKLOG (see [`Config::voter_backlog`](Self#structfield.voter_backlog)).
    pub fn voter_backlog(mut self, backlog: u32) -> Config {
        self.voter_backlog = backlog;
        self
    }

    /// Sets the accepted-request queue bound (default [`DEFAULT_REQUEST_QUEUE`], at least 1).
    pub fn request_queue(mut self, len: usize) -> Config {
        self.request_queue = len;
        self
    }

    /// Secures the voter and the state link with CURVE (see [`Curve`]).
    pub fn curve(mut self, curve: Curve) -> Config {
        self.curve = Some(curve);
        self
    }

    /// 2 × heartbeat: how long the peer may stay silent before it counts as expired.
    pub fn peer_expiry(&self) -> Duration {
        self.heartbeat.saturating_mul(2)
    }

    pub(crate) fn validate(&self) -> Result<&str, Error> {
        let voter = self.voter.as_deref().ok_or(Error::Config("no voter socket configured"))?;
        if self.heartbeat.is_zero() {
            return Err(Error::Config("the heartbeat interval must be positive"));
        }
        if self.request_queue == 0 {
            return Err(Error::Config("the request queue must hold at least one request"));
        }
        match self.voter_type {
            SocketType::Router
            | SocketType::Dealer
            | SocketType::Pull
            | SocketType::Sub
            | SocketType::XSub
            | SocketType::Pair => Ok(voter),
            _ => Err(Error::Config("the voter must be a socket that can receive without replying")),
        }
    }
}
