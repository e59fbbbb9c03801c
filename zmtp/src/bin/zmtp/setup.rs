//! Opening a socket: checking endpoints (with errors a human understands), applying options,
//! binding and connecting, and optionally narrating connection events on stderr.

use std::collections::HashSet;
use std::io::ErrorKind;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use zmtp::Endpoint;
use zmtp::{MonitorEvent, Socket, SocketType};

use crate::cli::{Direction, SocketArgs};
use crate::error::{CliError, failed, usage};
use crate::frames::parse_id;

/// Checks an endpoint before any socket exists, so mistakes fail fast with a hint.
pub async fn check_endpoint(endpoint: &str, direction: Direction) -> Result<(), CliError> {
    let hint = "endpoints look like tcp://HOST:PORT or ipc:///path/to/socket";
    let parsed: Endpoint = endpoint.parse().map_err(|e| usage(format!("{e}\n  ({hint})")))?;
    match (&parsed, direction) {
        (Endpoint::Inproc(_), _) => Err(usage(format!(
            "{endpoint:?}: inproc:// only reaches sockets inside one process; use tcp:// or ipc:// to reach \
             other programs"
        ))),
        (Endpoint::Tcp { host, .. }, Direction::Connect) if host == "*" => Err(usage(format!(
            "cannot connect to {endpoint:?}: '*' means every interface, which only --bind understands; \
             name a host, e.g. tcp://localhost:PORT"
        ))),
        (Endpoint::Tcp { port: 0, .. }, Direction::Connect) => {
            Err(usage(format!("cannot connect to {endpoint:?}: name the port to connect to")))
        }
        (Endpoint::Tcp { host, port, .. }, Direction::Connect) => {
            match tokio::net::lookup_host((host.as_str(), *port)).await {
                Ok(_) => Ok(()),
                Err(e) => Err(failed(format!("cannot connect to {endpoint:?}: cannot resolve host {host:?}: {e}"))),
            }
        }
        _ => Ok(()),
    }
}

/// Tracks which `--connect` endpoints have completed a handshake at least once, and why the last
/// handshake with one that never has failed (said when the run times out: without it, a wrong
/// CURVE key would only show as "no reply").
pub struct ConnectWatch {
    connected: watch::Receiver<usize>,
    wanted: usize,
    failure: Arc<Mutex<Option<String>>>,
    /// PEER: the routing ids of the `--connect` peers, in order.
    peers: Vec<u32>,
}

impl ConnectWatch {
    /// Starts watching; call before connecting so that no event is missed. `curve`: this socket is
    /// a CURVE client (a server closing during the handshake then means a wrong server key).
    fn start(socket: &Socket, endpoints: &[String], curve: bool) -> ConnectWatch {
        let wanted: HashSet<String> = endpoints.iter().cloned().collect();
        let (tx, connected) = watch::channel(0);
        let mut events = socket.monitor();
        let count = wanted.len();
        let failure = Arc::new(Mutex::new(None));
        let last_failure = failure.clone();
        tokio::spawn(async move {
            let mut seen = HashSet::new();
            while let Some(event) = events.next_event().await {
                match event {
                    MonitorEvent::HandshakeSucceeded { endpoint, .. }
                        if wanted.contains(&endpoint) && seen.insert(endpoint.clone()) =>
                    {
                        tx.send_replace(seen.len());
                    }
                    MonitorEvent::HandshakeFailed { endpoint, error, .. }
                        if wanted.contains(&endpoint) && !seen.contains(&endpoint) =>
                    {
                        let hint = match (error.closed_by_peer(), curve) {
                            (true, true) => {
                                " (a CURVE server closes the connection on a HELLO it cannot \
                                             decrypt: wrong --curve-serverkey?)"
                            }
                            (true, false) => " (does the server require CURVE or PLAIN?)",
                            (false, _) => "",
                        };
                        *last_failure.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(format!("the handshake with {endpoint} failed: {error}{hint}"));
                    }
                    _ => {}
                }
            }
        });
        ConnectWatch { connected, wanted: count, failure, peers: Vec::new() }
    }

    /// Why the last handshake with a `--connect` endpoint that never completed one failed.
    pub fn failure(&self) -> Arc<Mutex<Option<String>>> {
        self.failure.clone()
    }

    /// PEER: the routing id of the first `--connect`.
    pub fn first_peer(&self) -> Option<u32> {
        self.peers.first().copied()
    }

    /// Resolves once every connect endpoint has had a connection (or the socket is gone).
    pub async fn all_connected(&mut self) {
        let wanted = self.wanted;
        let _ = self.connected.wait_for(|&n| n >= wanted).await;
    }
}

/// Creates the socket, applies the options, binds and connects.
pub async fn open(t: SocketType, args: &SocketArgs) -> Result<(Socket, ConnectWatch), CliError> {
    for ep in &args.bind {
        check_endpoint(ep, Direction::Bind).await?;
    }
    for ep in &args.connect {
        check_endpoint(ep, Direction::Connect).await?;
    }
    if args.bind.is_empty() && args.connect.is_empty() {
        return Err(usage(format!(
            "say where to talk: --bind ENDPOINT to listen, or --connect ENDPOINT (see zmtp {} --help)",
            t.as_str().to_lowercase()
        )));
    }
    let socket = Socket::new(t);
    apply_options(&socket, args)?;
    if args.verbose {
        narrate(&socket);
    }
    let watch = ConnectWatch::start(&socket, &args.connect, args.curve_serverkey.is_some());
    for ep in &args.bind {
        let bound = bind(&socket, ep).await?;
        eprintln!("zmtp: {t} listening on {bound}");
    }
    if t == SocketType::Dish {
        for group in &args.join {
            socket.join(group).map_err(|e| usage(format!("cannot join {group:?}: {e}")))?;
        }
    }
    let mut watch = watch;
    for ep in &args.connect {
        let connected = if t == SocketType::Peer {
            socket.connect_peer(ep).await.map(|id| watch.peers.push(id))
        } else {
            socket.connect(ep).await
        };
        connected.map_err(|e| match e {
            // An argument combination, not a failure while running.
            zmtp::Error::IncompatibleTransport(..) => usage(format!("cannot connect to {ep:?}: {e}")),
            e => failed(format!("cannot connect to {ep:?}: {e}")),
        })?;
    }
    match t {
        SocketType::Sub if args.subscribe.is_empty() => subscribe(&socket, "")?,
        SocketType::Sub | SocketType::XSub => {
            for prefix in &args.subscribe {
                subscribe(&socket, prefix)?;
            }
        }
        _ => {}
    }
    Ok((socket, watch))
}

fn subscribe(socket: &Socket, prefix: &str) -> Result<(), CliError> {
    socket.subscribe(prefix).map_err(|e| failed(format!("cannot subscribe to {prefix:?}: {e}")))
}

/// Binds, explaining the usual failures.
pub async fn bind(socket: &Socket, endpoint: &str) -> Result<String, CliError> {
    socket.bind(endpoint).await.map_err(|e| {
        if let zmtp::Error::IncompatibleTransport(..) = e {
            return usage(format!("cannot bind to {endpoint:?}: {e}"));
        }
        let why = match &e {
            zmtp::Error::Io(io) if io.kind() == ErrorKind::AddrInUse => {
                "address already in use (is another program listening there?)".to_owned()
            }
            zmtp::Error::Io(io) if io.kind() == ErrorKind::AddrNotAvailable => {
                "this machine has no such address (bind to tcp://*:PORT or one of its own addresses)".to_owned()
            }
            zmtp::Error::Io(io) if io.kind() == ErrorKind::PermissionDenied => {
                "permission denied (ports below 1024 and some paths need privileges)".to_owned()
            }
            other => other.to_string(),
        };
        failed(format!("cannot bind to {endpoint:?}: {why}"))
    })
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn apply_options(s: &Socket, a: &SocketArgs) -> Result<(), CliError> {
    if let Some(n) = a.sndhwm {
        s.set_sndhwm(n);
    }
    if let Some(n) = a.rcvhwm {
        s.set_rcvhwm(n);
    }
    if let Some(ms) = a.linger {
        s.set_linger(Some(millis(ms)));
    }
    if let Some(ms) = a.reconnect_ivl {
        s.set_reconnect_ivl(Some(millis(ms)));
    }
    if let Some(ms) = a.reconnect_ivl_max {
        s.set_reconnect_ivl_max(millis(ms));
    }
    if let Some(ms) = a.heartbeat_ivl {
        s.set_heartbeat_ivl(millis(ms));
    }
    if let Some(ms) = a.heartbeat_timeout {
        s.set_heartbeat_timeout(Some(millis(ms)));
    }
    if let Some(ms) = a.heartbeat_ttl {
        s.set_heartbeat_ttl(millis(ms));
    }
    if let Some(ms) = a.handshake_ivl {
        s.set_handshake_ivl((ms > 0).then(|| millis(ms)));
    }
    if let Some(bytes) = a.maxmsgsize {
        s.set_maxmsgsize(Some(bytes));
    }
    if a.tcp_keepalive
        || a.tcp_keepalive_idle.is_some()
        || a.tcp_keepalive_intvl.is_some()
        || a.tcp_keepalive_cnt.is_some()
    {
        s.set_tcp_keepalive(Some(true));
        s.set_tcp_keepalive_idle(a.tcp_keepalive_idle.map(Duration::from_secs));
        s.set_tcp_keepalive_intvl(a.tcp_keepalive_intvl.map(Duration::from_secs));
        s.set_tcp_keepalive_cnt(a.tcp_keepalive_cnt);
    }
    if a.sndbuf.is_some() {
        s.set_sndbuf(a.sndbuf);
    }
    if a.rcvbuf.is_some() {
        s.set_rcvbuf(a.rcvbuf);
    }
    if let Some(tos) = a.tos {
        s.set_tos(tos);
    }
    if let Some(id) = &a.routing_id {
        let id = parse_id(id.as_bytes()).map_err(|e| usage(format!("--routing-id: {e}")))?;
        s.set_routing_id(id).map_err(|e| usage(format!("--routing-id: {e}")))?;
    }
    if let Some(welcome) = &a.xpub_welcome_msg {
        s.set_xpub_welcome_msg(Some(welcome.clone().into()));
    }
    #[cfg(feature = "draft")]
    s.set_stream_notify(!a.stream_notify);
    s.set_immediate(a.immediate);
    s.set_conflate(a.conflate);
    apply_security(s, a)?;
    s.set_ipv6(a.ipv6);
    s.set_req_relaxed(a.req_relaxed);
    s.set_req_correlate(a.req_correlate);
    s.set_probe_router(a.probe_router);
    s.set_router_handover(a.router_handover);
    s.set_xpub_verbose(a.xpub_verbose);
    s.set_xpub_verboser(a.xpub_verboser);
    s.set_xpub_nodrop(a.xpub_nodrop);
    if s.socket_type() == SocketType::Router {
        // The CLI never drops a message silently: sends wait for the addressed peer (see run.rs).
        s.set_router_mandatory(true);
    }
    Ok(())
}

/// Prints the socket's connection events on stderr (`-v`), prefixed with `label`.
pub fn narrate_as(socket: &Socket, label: String) {
    let mut events = socket.monitor();
    tokio::spawn(async move {
        while let Some(event) = events.next_event().await {
            if let Some(text) = describe(&event) {
                eprintln!("zmtp: {label} {text}");
            }
        }
    });
}

fn narrate(socket: &Socket) {
    narrate_as(socket, socket.socket_type().to_string());
}

/// A routing id or topic as `zmtp` prints frames: text if it is, else 0x<hex>.
fn shown(bytes: &bytes::Bytes) -> String {
    crate::frames::format_message(&zmtp::Message::single(bytes.clone()), crate::frames::Format::Auto, "|", false)
}

fn describe(event: &MonitorEvent) -> Option<String> {
    let via = |peer: &str| if peer.is_empty() { String::new() } else { format!(" ({peer})") };
    Some(match event {
        // "listening on" is printed for every bind already.
        MonitorEvent::Listening { .. } => return None,
        MonitorEvent::Accepted { endpoint, peer } => format!("accepted a connection on {endpoint}{}", via(peer)),
        MonitorEvent::ConnectDelayed { endpoint } => format!("connecting to {endpoint}"),
        MonitorEvent::Connected { endpoint, peer } => format!("connected to {endpoint}{}", via(peer)),
        MonitorEvent::ConnectRetried { endpoint, retry_in, reason } => {
            format!("could not connect to {endpoint}, retrying in {retry_in:?} ({reason})")
        }
        MonitorEvent::HandshakeSucceeded { endpoint, peer, peer_type, routing_id } => {
            let with = match (peer_type, routing_id) {
                (Some(t), Some(id)) => format!(" with {t} {}", shown(id)),
                (Some(t), None) => format!(" with {t}"),
                (None, Some(id)) => format!(" with {}", shown(id)),
                (None, None) => String::new(),
            };
            format!("handshake done on {endpoint}{}{with}", via(peer))
        }
        MonitorEvent::HandshakeFailed { endpoint, peer, error } => {
            format!("handshake failed on {endpoint}{}: {error}", via(peer))
        }
        MonitorEvent::Disconnected { endpoint, peer, error, .. } => {
            format!("disconnected from {endpoint}{}: {error}", via(peer))
        }
        MonitorEvent::Subscribed { topic, routing_id } => {
            format!("{} subscribed to {}", routing_id.as_ref().map_or("a peer".into(), shown), shown(topic))
        }
        MonitorEvent::Unsubscribed { topic, routing_id } => {
            format!("{} unsubscribed from {}", routing_id.as_ref().map_or("a peer".into(), shown), shown(topic))
        }
        MonitorEvent::Closed { endpoint } => format!("closed {endpoint}"),
        _ => return None,
    })
}

/// CURVE / PLAIN options, and an address- and credential-checking authenticator for servers.
fn apply_security(s: &Socket, a: &SocketArgs) -> Result<(), CliError> {
    use zmtp::security::{KeyPair, StaticAuthenticator, decode_key};
    let key = |flag: &str, text: &str| decode_key(text).map_err(|e| usage(format!("{flag}: {e} (see `zmtp keygen`)")));
    let mut auth = StaticAuthenticator::new();
    for ip in &a.allow {
        auth = auth.allow_address(*ip);
    }
    for ip in &a.deny {
        auth = auth.deny_address(*ip);
    }
    let mut authenticate = !a.allow.is_empty() || !a.deny.is_empty();
    if let Some(secret) = &a.curve_server {
        key("--curve-server", secret)?;
        s.set_curve_server(true);
        s.set_curve_secretkey(secret).map_err(|e| usage(format!("--curve-server: {e}")))?;
        if a.curve_allow.is_empty() {
            auth = auth.allow_any_curve_key();
        }
        for public in &a.curve_allow {
            auth = auth.curve_key(key("--curve-allow", public)?);
        }
        authenticate = true;
    }
    if let Some(server) = &a.curve_serverkey {
        s.set_curve_serverkey_bytes(key("--curve-serverkey", server)?);
        let ours = match &a.curve_secretkey {
            Some(secret) => KeyPair::from_secret_bytes(key("--curve-secretkey", secret)?),
            None => KeyPair::generate(),
        };
        s.set_curve_keypair(ours);
    }
    if !a.plain_server.is_empty() {
        s.set_plain_server(true);
        for entry in &a.plain_server {
            let (user, password) = entry
                .split_once(':')
                .ok_or_else(|| usage(format!("--plain-server {entry:?}: expected USER:PASSWORD")))?;
            auth = auth.plain_user(user, password);
        }
        authenticate = true;
    }
    if let (Some(user), Some(password)) = (&a.plain_username, &a.plain_password) {
        s.set_plain_username(user.clone());
        s.set_plain_password(password.clone());
    }
    if authenticate {
        s.set_authenticator(auth);
    }
    Ok(())
}
