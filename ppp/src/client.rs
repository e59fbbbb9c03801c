//! The Lazy Pirate client: reliable request-reply on top of an unreliable server, by timeout, retry
//! and socket re-creation (the Guide's `lpclient`).
//!
//! The client behaves like the Guide's `lpclient` on a REQ socket: one request at a time, sent as
//! the body alone (on the wire `["", content…]`, exactly what REQ sends), so it works through the
//! Guide's queue to the Guide's worker, which take only three-frame requests. It is built on a
//! DEALER so that it can give up on a request: after `timeout` without a reply the socket is
//! closed, a new one is connected (a fresh identity, so no late reply can reach it) and the same
//! request is sent again; after `retries` attempts in all, [`ClientError::NoReply`] says the server
//! is unreachable. Nothing is added to the request for bookkeeping: a reply that arrived after its
//! request was answered (a server that answered twice) is discarded before the next request goes
//! out, and [`Client::stale_replies`] counts them.

use std::time::Duration;

use futures::FutureExt;
use tokio::time::{Instant, timeout_at};
use zmtp::{Message, Monitor, MonitorEvent, Socket, SocketType};

use crate::protocol::Envelope;
use crate::security::Security;

/// The reason of the last handshake failure among the events already queued on `monitor`.
fn last_handshake_failure(monitor: &mut Monitor) -> Option<String> {
    let mut last = None;
    while let Some(Some(event)) = monitor.next_event().now_or_never() {
        if let MonitorEvent::HandshakeFailed { error, .. } = event {
            last = Some(error.to_string());
        }
    }
    last
}

/// Timeout and retries; defaults are the Guide's (2500 ms, 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long to wait for each attempt's reply (REQUEST_TIMEOUT). Default 2500 ms.
    pub timeout: Duration,
    /// Attempts in all before giving up, the first included (REQUEST_RETRIES, as the Guide counts
    /// it: one send plus two resends). Default 3.
    pub retries: u32,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig { timeout: Duration::from_millis(2500), retries: 3 }
    }
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Every attempt timed out.
    #[error(
        "no reply from {endpoint} after {attempts} attempt(s) of {} ms each: {}",
        timeout.as_millis(),
        match handshake {
            Some(reason) => format!("the security handshake failed ({reason}): check the server key or credentials"),
            None => "the server seems to be offline".to_owned(),
        }
    )]
    NoReply {
        /// The server endpoint.
        endpoint: String,
        /// Attempts made.
        attempts: u32,
        /// The timeout of each attempt.
        timeout: Duration,
        /// Why the last security handshake failed, if one did during the last attempt (the server
        /// is up but refuses this client: wrong CURVE server key, key not allowed, bad password).
        handshake: Option<String>,
    },
    /// The request had no frames.
    #[error("a request needs at least one frame")]
    EmptyRequest,
    /// The configuration is out of range (zero retries or timeout, a server security role).
    #[error("invalid client configuration: {0}")]
    Config(&'static str),
    /// A socket error (e.g. an invalid endpoint).
    #[error(transparent)]
    Socket(#[from] zmtp::Error),
}

/// A Lazy Pirate client connected to one server endpoint.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ppp::ClientError> {
/// let mut client = ppp::Client::connect("tcp://127.0.0.1:5555", ppp::ClientConfig::default()).await?;
/// match client.request("hello").await {
///     Ok(reply) => println!("reply: {:?}", reply[0]),
///     Err(e) => eprintln!("{e}"), // "no reply from tcp://127.0.0.1:5555 after 3 attempt(s) …"
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Client {
    endpoint: String,
    config: ClientConfig,
    security: Security,
    socket: Option<(Socket, Monitor)>,
    sequence: u64,
    resends: u64,
    stale: u64,
}

impl Client {
    /// Checks the configuration and connects (in the background: a server that is down is only
    /// noticed when a request times out).
    pub async fn connect(endpoint: impl Into<String>, config: ClientConfig) -> Result<Client, ClientError> {
        Client::connect_secure(endpoint, config, Security::Null).await
    }

    /// [`connect`](Self::connect) with security: a client role ([`Security::CurveClient`],
    /// [`Security::PlainClient`]) matching the queue's frontend, applied to every socket the client
    /// makes.
    pub async fn connect_secure(
        endpoint: impl Into<String>,
        config: ClientConfig,
        security: Security,
    ) -> Result<Client, ClientError> {
        security.check_role(false).map_err(ClientError::Config)?;
        if config.retries == 0 {
            return Err(ClientError::Config("retries must be at least 1"));
        }
        if config.timeout.is_zero() {
            return Err(ClientError::Config("timeout must be positive"));
        }
        let mut client =
            Client { endpoint: endpoint.into(), config, security, socket: None, sequence: 0, resends: 0, stale: 0 };
        client.socket = Some(client.open().await?);
        Ok(client)
    }

    async fn open(&self) -> Result<(Socket, Monitor), ClientError> {
        let socket = Socket::new(SocketType::Dealer);
        socket.set_linger(Some(Duration::ZERO));
        socket.set_security(&self.security);
        let monitor = socket.monitor();
        socket.connect(&self.endpoint).await?;
        Ok((socket, monitor))
    }

    /// The server endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Resends so far (attempts after the first, over all requests).
    pub fn resends(&self) -> u64 {
        self.resends
    }

    /// Replies discarded so far because no request was waiting for them.
    pub fn stale_replies(&self) -> u64 {
        self.stale
    }

    /// Sends a request and waits for its reply, resending on a fresh socket after each timeout.
    pub async fn request(&mut self, request: impl Into<Message>) -> Result<Message, ClientError> {
        let request = request.into();
        if request.is_empty() {
            return Err(ClientError::EmptyRequest);
        }
        self.sequence += 1;
        let wire = Envelope::new(Vec::new()).wrap(request);
        let mut handshake = None;
        for attempt in 1..=self.config.retries {
            if attempt > 1 {
                self.resends += 1;
            }
            let socket = match &self.socket {
                Some((s, _)) => s.clone(),
                None => {
                    let (s, monitor) = self.open().await?;
                    self.socket = Some((s.clone(), monitor));
                    s
                }
            };
            let deadline = Instant::now() + self.config.timeout;
            match timeout_at(deadline, self.attempt(&socket, wire.clone())).await {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => {
                    // Lazy Pirate: the socket may be wedged on a dead server; start afresh.
                    let (_, mut monitor) = self.socket.take().expect("the attempt's socket");
                    handshake = last_handshake_failure(&mut monitor);
                    if let Some(reason) = &handshake {
                        tracing::warn!(attempt, endpoint = %self.endpoint, %reason, "security handshake failed (wrong server key or credentials?)");
                    }
                    if attempt < self.config.retries {
                        tracing::warn!(attempt, endpoint = %self.endpoint, "no reply; reconnecting and resending");
                    }
                }
            }
        }
        tracing::error!(endpoint = %self.endpoint, attempts = self.config.retries, "no reply, abandoning");
        Err(ClientError::NoReply {
            endpoint: self.endpoint.clone(),
            attempts: self.config.retries,
            timeout: self.config.timeout,
            handshake,
        })
    }

    /// One attempt: drop whatever arrived since the last reply, send, then read the reply.
    async fn attempt(&mut self, socket: &Socket, wire: Message) -> zmtp::Result<Message> {
        while socket.try_recv().is_ok() {
            self.stale += 1;
            tracing::debug!("a reply nobody was waiting for discarded");
        }
        socket.send(wire).await?;
        loop {
            let msg = socket.recv().await?;
            match Envelope::split(msg) {
                Ok((envelope, content)) if envelope.addresses().is_empty() => return Ok(content),
                Ok(_) => {
                    self.stale += 1;
                    tracing::debug!("reply with an address stack ignored (not ours)");
                }
                Err(error) => tracing::warn!(%error, "malformed reply ignored"),
            }
        }
    }
}
