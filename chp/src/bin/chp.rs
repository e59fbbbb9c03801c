//! `chp`: run a CHP server, or read and write the map of any 12/CHP server.
//!
//! ```text
//! chp server --port 5556 [--bind ADDR] [--hugz-ms 1000]
//! chp server --primary|--backup [--port P] [--state EP] [--peer-state EP] [--peer tcp://host:P2]
//!            [--heartbeat-ms 1000] [--status-ms 0]
//! chp set KEY VALUE [--ttl SECONDS]      --server tcp://host:5556
//! chp get KEY | chp del KEY              --server tcp://host:5556
//! chp dump [--subtree /a/]               --server tcp://host:5556
//! chp watch [--subtree /a/]              --server tcp://host:5556
//! chp keygen
//! ```
//!
//! Over CURVE (`chp keygen` prints a key pair): `chp server --curve-server SECRET [--curve-allow
//! PUBLIC]... [--curve-peer PUBLIC]`, and the client commands with `--curve-serverkey PUBLIC
//! [--curve-secretkey SECRET]` (`--curve-serverkey` once for all servers, or once per `--server`,
//! in the same order).
//!
//! Output lines: `KEY=VALUE` per entry (dump, and watch's snapshot), in key order, with
//! non-printable bytes escaped (`\n`, `\xff`) and `=` in keys written `\x3d`; then, for watch,
//! `-- synced at sequence N (K keys)` and one line per change: `set N KEY=VALUE` or `del N KEY`.
//! `--server` may be given twice (a high-availability pair): the client fails over between them.
//!
//! A pair server prints `listening on …`, then one line per role change (`role: ACTIVE …`,
//! `role: PASSIVE`), peer event (`peer: alive (ACTIVE)`, `peer: silent`, `peer: synced at
//! sequence N (K keys)`) and, with `--status-ms`, periodic `status: …` lines. Dual actives and
//! dual passives are healed (`bstar::split`): the server that yields prints `role: PASSIVE`.

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use bstar::Side;
use chp::durable::Durability;
use chp::server::ha::{HaConfig, HaEvent, HaServer};
use chp::server::pending::PendingConfig;
use chp::{
    Client, ClientCurve, ClientOptions, Event, Server, ServerAddress, ServerConfig, ServerCurve, Status, Subtree,
};
use clap::{Args, Parser, Subcommand};
use zmtp::security::{KeyPair, PublicKey};

#[derive(Parser)]
#[command(name = "chp", version, about = "Clustered Hashmap Protocol (ZeroMQ 12/CHP) server and client")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a server: SNAPSHOT at PORT, PUBLISHER at PORT+1, COLLECTOR at PORT+2. With --primary or
    /// --backup, one server of a high-availability pair (Binary Star).
    Server {
        /// The SNAPSHOT port P [default: 5556, 5566 with --backup] (0 = pick free ports and print
        /// them; single server only).
        #[arg(long)]
        port: Option<u16>,
        /// Interface to bind (`*` = all).
        #[arg(long, default_value = "*")]
        bind: String,
        /// HUGZ interval in milliseconds.
        #[arg(long, default_value_t = 1000)]
        hugz_ms: u64,
        /// Largest value accepted, in bytes.
        #[arg(long, default_value_t = 1 << 20)]
        max_value: usize,
        /// Keep the map in this directory: a restarted server serves the map, ttl deadlines and
        /// sequence it had (a pair: give both servers one; see the README's "A durable pair")
        #[arg(long, value_name = "DIR", help_heading = "Durability")]
        data_dir: Option<std::path::PathBuf>,
        /// When updates reach the disk: `always` (fsync before an update is published: nothing
        /// published is ever lost), `interval:MS` (fsync at most every MS ms: a power failure loses
        /// up to MS ms of updates), `never` (leave it to the OS: a power failure loses what it had
        /// not written; a crash of the server alone loses nothing in any mode)
        #[arg(long, value_name = "POLICY", default_value = "always", value_parser = durability, help_heading = "Durability", requires = "data_dir")]
        durability: Durability,
        /// Serve the server's counters in the Prometheus text format at http://ADDR/metrics (no
        /// authentication: bind it to loopback or a management network)
        #[arg(long, value_name = "ADDR")]
        metrics: Option<std::net::SocketAddr>,
        /// Worker threads that run the server's tasks [default: 1; 2 with --primary or --backup].
        /// Every update goes through the one task that owns the map, so more workers mostly add
        /// wake-ups between them (2 cores: server CPU per update 0.85-0.92 µs on 1, 1.22-1.28 on
        /// 2); a pair's second one keeps Binary Star's heartbeat from waiting behind work on the
        /// map (copying a large one from the peer). What the command prints, and durable writes,
        /// have threads of their own.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        threads: Option<u16>,
        #[command(flatten)]
        pair: Pair,
        #[command(flatten)]
        security: ServerSecurity,
    },
    /// Set KEY to VALUE and wait until the server has published it.
    Set {
        /// The key.
        key: String,
        /// The value (an empty value deletes).
        value: String,
        /// Time to live in seconds (decimals allowed); the server deletes the key afterwards.
        #[arg(long)]
        ttl: Option<f64>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print the value of KEY.
    Get {
        /// The key.
        key: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Delete KEY.
    Del {
        /// The key.
        key: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print every KEY=VALUE of the map (or of a subtree).
    Dump {
        /// Only this subtree (`/a/b/`).
        #[arg(long, default_value = "")]
        subtree: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print the map (or a subtree), then every change as it happens.
    Watch {
        /// Only this subtree (`/a/b/`).
        #[arg(long, default_value = "")]
        subtree: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print a new CURVE key pair ("public: …", "secret: …", Z85).
    Keygen,
}

/// `always`, `interval:MS` or `never` (see `chp server --help`).
fn durability(text: &str) -> Result<Durability, String> {
    match text {
        "always" => Ok(Durability::Always),
        "never" => Ok(Durability::Never),
        _ => match text.strip_prefix("interval:").and_then(|ms| ms.parse::<u64>().ok()).filter(|&ms| ms > 0) {
            Some(ms) => Ok(Durability::Interval(Duration::from_millis(ms))),
            None => Err("expected always, interval:MS (MS > 0) or never".into()),
        },
    }
}

/// A server's security. Key arguments take `allow_hyphen_values`: a Z85 key may begin with `-`
/// (about 1 key in 85).
#[derive(Args)]
struct ServerSecurity {
    /// Be a CURVE server with this secret key (Z85, from `chp keygen`) on every socket (and, for a
    /// pair, on the Binary Star voter and state link); clients need its public key
    #[arg(long, value_name = "SECRET", help_heading = "Security", allow_hyphen_values = true)]
    curve_server: Option<KeyPair>,
    /// Accept only clients with this CURVE public key (repeatable; default: any that knows the
    /// server key). A pair's peer is always accepted
    #[arg(
        long,
        value_name = "PUBLIC",
        help_heading = "Security",
        allow_hyphen_values = true,
        requires = "curve_server"
    )]
    curve_allow: Vec<PublicKey>,
    /// Pair: the peer's CURVE public key (default: ours, the two servers sharing one key pair)
    #[arg(
        long,
        value_name = "PUBLIC",
        help_heading = "Security",
        allow_hyphen_values = true,
        requires = "curve_server"
    )]
    curve_peer: Option<PublicKey>,
}

impl ServerSecurity {
    fn curve(&self, pair: bool) -> Fallible<Option<ServerCurve>> {
        if self.curve_peer.is_some() && !pair {
            return Err(usage("--curve-peer needs --primary or --backup"));
        }
        Ok(self.curve_server.as_ref().map(|keys| {
            let mut curve = ServerCurve::new(keys.clone());
            curve.clients = self.curve_allow.iter().map(|&key| key.into()).collect();
            curve.peer = self.curve_peer.map(Into::into);
            curve
        }))
    }
}

#[derive(Args)]
struct Pair {
    /// Run as the primary server of a high-availability pair.
    #[arg(long, conflicts_with = "backup")]
    primary: bool,
    /// Run as the backup server of a high-availability pair.
    #[arg(long)]
    backup: bool,
    /// Pair: this server's Binary Star state endpoint [default: tcp://*:5003, tcp://*:5004 with --backup].
    #[arg(long)]
    state: Option<String>,
    /// Pair: the peer's state endpoint [default: tcp://localhost:5004, tcp://localhost:5003 with --backup].
    #[arg(long)]
    peer_state: Option<String>,
    /// Pair: the peer's CHP address [default: tcp://localhost:5566, tcp://localhost:5556 with --backup].
    #[arg(long)]
    peer: Option<String>,
    /// Pair: Binary Star heartbeat in milliseconds (the peer expires after twice this).
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
    /// Pair: a client update the active has not published after this many milliseconds (of the
    /// active being heard) is dropped from the pending list.
    #[arg(long, default_value_t = 5000)]
    pending_window_ms: u64,
    /// Pair: give up on a snapshot of the peer making no progress for this many milliseconds.
    #[arg(long, default_value_t = 2000)]
    peer_sync_timeout_ms: u64,
    /// Pair with --data-dir: a primary restarted while its peer is down serves the map it has
    /// (once a client votes) instead of waiting for the peer, whose map may be newer. For bringing
    /// one server back when the other is gone for good.
    #[arg(long)]
    start_alone: bool,
    /// Pair: print a status line every this many milliseconds (0 = never).
    #[arg(long, default_value_t = 0)]
    status_ms: u64,
}

impl Pair {
    fn side(&self) -> Option<Side> {
        match (self.primary, self.backup) {
            (true, _) => Some(Side::Primary),
            (_, true) => Some(Side::Backup),
            _ => None,
        }
    }

    fn given(&self) -> bool {
        self.state.is_some() || self.peer_state.is_some() || self.peer.is_some()
    }
}

#[derive(Args)]
struct Conn {
    /// The server: tcp://host:P (its SNAPSHOT port). Give it twice for a high-availability pair.
    #[arg(long, default_value = "tcp://127.0.0.1:5556")]
    server: Vec<String>,
    /// Seconds to wait for a server.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// Seconds without a message (HUGZ) after which a server counts as lost.
    #[arg(long, default_value_t = 5.0)]
    server_ttl: f64,
    /// Be a CURVE client of the server with this public key (Z85: the public half of its
    /// --curve-server secret). Once for all servers, or once per --server in the same order
    #[arg(long, value_name = "PUBLIC", help_heading = "Security", allow_hyphen_values = true)]
    curve_serverkey: Vec<PublicKey>,
    /// Our CURVE secret key (Z85; default: a fresh key pair for this run); needed when the server
    /// accepts only listed keys (--curve-allow)
    #[arg(
        long,
        value_name = "SECRET",
        help_heading = "Security",
        allow_hyphen_values = true,
        requires = "curve_serverkey"
    )]
    curve_secretkey: Option<KeyPair>,
}

type Fallible<T = ()> = Result<T, Failure>;

/// Why a command failed, and the exit status that says so (the same contract as the `zmtp` tool):
/// 2 for a usage error (clap's own, and the combinations of arguments it cannot check), 1 for
/// anything that went wrong while running, 3 when a high-availability pair failed fatally.
#[derive(Debug)]
enum Failure {
    Usage(String),
    Failed(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Failed(message)
    }
}

/// A usage error (exit status 2).
fn usage(message: impl Into<String>) -> Failure {
    Failure::Usage(message.into())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Worker threads for the tasks (a server's, or a client's agent). The command's own future
    // (which prints) runs on this thread, apart from them: a stdout that blocks (a paused
    // terminal, a slow pipe) then stalls the printing, never the server, its heartbeats or the
    // client's agent, as it would if they shared the thread.
    let threads = match &cli.command {
        Cmd::Server { threads: Some(n), .. } => usize::from(*n),
        Cmd::Server { pair, .. } if pair.side().is_some() => 2,
        _ => 1,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("chp: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(cli_main(cli))
}

async fn cli_main(cli: Cli) -> ExitCode {
    // What a server does (listening, roles, the peer) is said once, as a line on stdout; the log
    // (stderr) carries what goes wrong, so its default is `warn` (`RUST_LOG=info` adds the
    // library's own account of the same events). Client commands report connection problems
    // themselves (a refused handshake, say), so zmtp's own connection warnings would repeat them.
    let default_level = if matches!(cli.command, Cmd::Server { .. }) { "warn" } else { "warn,zmtp=error" };
    zmtp::logging::init(default_level, true);
    match run(cli.command).await {
        Ok(code) => code,
        Err(Failure::Usage(message)) => {
            eprintln!("chp: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Failed(message)) => {
            eprintln!("chp: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cmd: Cmd) -> Fallible<ExitCode> {
    match cmd {
        Cmd::Server { port, bind, hugz_ms, max_value, data_dir, durability, metrics, threads: _, pair, security } => {
            let curve = security.curve(pair.side().is_some())?;
            let metrics = match metrics {
                Some(addr) => Some(
                    tokio::net::TcpListener::bind(addr)
                        .await
                        .map_err(|e| format!("cannot bind --metrics {addr}: {e}"))?,
                ),
                None => None,
            };
            let base = ServerConfig {
                bind,
                hugz_interval: Duration::from_millis(hugz_ms.max(1)),
                max_value_len: max_value,
                data_dir,
                durability,
                ..ServerConfig::default()
            };
            if let Some(side) = pair.side() {
                return pair_server(side, port, base, pair, curve, metrics).await;
            }
            if pair.given() {
                return Err(usage("--state, --peer-state and --peer need --primary or --backup"));
            }
            let config = ServerConfig { port: port.unwrap_or(5556), curve: curve.clone(), ..base };
            let server = Server::bind(config).await.map_err(|e| e.to_string())?;
            let a = server.address();
            println!(
                "listening on {a} (snapshot {}, publisher {}, collector {}{})",
                a.port(),
                a.port() + 1,
                a.port() + 2,
                curve_note(curve.as_ref())
            );
            serve_metrics(metrics, &server)?;
            std::io::stdout().flush().map_err(|e| e.to_string())?;
            server.wait().await;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Set { key, value, ttl, conn } => {
            let ttl = ttl.map(parse_ttl).transpose()?;
            let client = conn.start_synced(Subtree::parent_of(key.as_bytes())).await?;
            client.set(key, value, ttl).await.map_err(|e| e.to_string())?;
            client.close().await;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Del { key, conn } => {
            let client = conn.start_synced(Subtree::parent_of(key.as_bytes())).await?;
            client.delete(key).await.map_err(|e| e.to_string())?;
            client.close().await;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Get { key, conn } => {
            let client = conn.start_synced(Subtree::parent_of(key.as_bytes())).await?;
            let value = client.get(&key);
            client.close().await;
            match value {
                Some(v) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&v).and_then(|()| out.write_all(b"\n")).map_err(|e| e.to_string())?;
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    eprintln!("chp: no such key: {key}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Cmd::Dump { subtree, conn } => {
            let client = conn.start_synced(parse_subtree(&subtree)?).await?;
            let snapshot = client.snapshot();
            client.close().await;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for (k, v) in &snapshot.map {
                writeln!(out, "{}={}", escape_key(k), v.escape_ascii()).map_err(|e| e.to_string())?;
            }
            out.flush().map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Watch { subtree, conn } => watch(parse_subtree(&subtree)?, conn).await,
        Cmd::Keygen => {
            zmtp::security::print_keygen(&KeyPair::generate());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `; CURVE, public key …` for the `listening on` line.
fn curve_note(curve: Option<&ServerCurve>) -> String {
    match curve {
        Some(c) if c.clients.is_empty() => format!("; CURVE, public key {}", c.public_z85()),
        Some(c) => format!("; CURVE, public key {}, {} client keys allowed", c.public_z85(), c.clients.len()),
        None => String::new(),
    }
}

impl Conn {
    fn timeout(&self) -> Fallible<Duration> {
        Duration::try_from_secs_f64(self.timeout).map_err(|_| usage(format!("invalid --timeout {}", self.timeout)))
    }

    fn options(&self, subtree: Subtree) -> Fallible<ClientOptions> {
        let timeout = self.timeout()?;
        let servers = self
            .server
            .iter()
            .map(|s| s.parse::<ServerAddress>().map_err(|e| usage(e.to_string())))
            .collect::<Fallible<Vec<_>>>()?;
        let server_ttl = Duration::try_from_secs_f64(self.server_ttl)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| usage(format!("invalid --server-ttl {}", self.server_ttl)))?;
        let curve = match self.curve_serverkey.as_slice() {
            [] => None,
            [key] => Some(ClientCurve::new((*key).into())),
            keys if keys.len() == servers.len() => {
                Some(ClientCurve::per_server(servers.iter().cloned().zip(keys.iter().map(|&key| key.into()))))
            }
            keys => {
                return Err(usage(format!(
                    "--curve-serverkey given {} times for {} servers: give it once, or once per --server",
                    keys.len(),
                    servers.len()
                )));
            }
        };
        let mut options = ClientOptions::for_servers(servers).server_ttl(server_ttl);
        if let Some(mut curve) = curve {
            if let Some(keys) = &self.curve_secretkey {
                curve = curve.keys(keys.clone());
            }
            options = options.curve(curve);
        }
        Ok(options.subtree(subtree).set_timing(Duration::from_millis(500), timeout))
    }

    /// Starts a client for a one-shot command and waits (up to --timeout) until it holds a
    /// snapshot (`Client::loaded`: it answers as of that snapshot, without waiting for the server's
    /// first publication, as the reference client does).
    async fn start_synced(&self, subtree: Subtree) -> Fallible<Client> {
        let client = Client::start(self.options(subtree)?).map_err(|e| e.to_string())?;
        self.wait_for(client, false).await
    }

    /// Waits (up to --timeout) until `client` is in sync (`exact`: proven exact, as a watcher
    /// needs; else holding a snapshot).
    async fn wait_for(&self, client: Client, exact: bool) -> Fallible<Client> {
        let ready = async {
            match exact {
                true => client.synced().await,
                false => client.loaded().await,
            }
        };
        match tokio::time::timeout(self.timeout()?, ready).await {
            Ok(Ok(_)) => Ok(client),
            Ok(Err(e)) => Err(e.to_string().into()),
            Err(_) => Err(Failure::Failed(format!(
                "no CHP server answered at {} within {}s (is one running there?)",
                self.server.join(" or "),
                self.timeout
            ))),
        }
    }
}

async fn watch(subtree: Subtree, conn: Conn) -> Fallible<ExitCode> {
    let mut options = conn.options(subtree)?;
    options.event_capacity = 1 << 16; // room for bursts while stdout is slow
    let client = conn.wait_for(Client::start(options).map_err(|e| e.to_string())?, true).await?;
    let (snapshot, mut events) = client.watch();
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| e.to_string();
    for (k, v) in &snapshot.map {
        writeln!(out, "{}={}", escape_key(k), v.escape_ascii()).map_err(io)?;
    }
    writeln!(out, "-- synced at sequence {} ({} keys)", snapshot.sequence, snapshot.map.len()).map_err(io)?;
    out.flush().map_err(io)?;
    drop(out);
    while let Some(event) = events.next().await {
        let mut out = std::io::stdout().lock();
        match event {
            Event::Set { key, value, sequence } => {
                writeln!(out, "set {sequence} {}={}", escape_key(&key), value.escape_ascii()).map_err(io)?
            }
            Event::Deleted { key, sequence } => writeln!(out, "del {sequence} {}", escape_key(&key)).map_err(io)?,
            Event::Synced { sequence, keys, .. } => {
                writeln!(out, "-- synced at sequence {sequence} ({keys} keys)").map_err(io)?
            }
            Event::ServerLost { server, reason } => eprintln!("chp: lost server {server}: {reason}; reconnecting"),
            Event::Failover { from, to, outage, .. } => {
                eprintln!("chp: failed over from {from} to {to} ({} ms without updates)", outage.as_millis())
            }
            Event::Gap { expected, got } => eprintln!("chp: updates lost (expected {expected}, got {got}); re-syncing"),
            Event::Lagged { missed } => return Err(format!("output too slow: {missed} changes dropped").into()),
        }
        out.flush().map_err(io)?;
    }
    match client.status() {
        Status::Failed(why) => Err(why.to_string().into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// One server of a high-availability pair; returns when it stops (exit code 3 on a fatal pair
/// failure).
/// Serves the server's counters on the `--metrics` listener, if one was given, and says where.
fn serve_metrics(listener: Option<tokio::net::TcpListener>, view: &chp::ServerView) -> Fallible {
    let Some(listener) = listener else { return Ok(()) };
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("metrics on http://{addr}/metrics");
    tokio::spawn(chp::server::metrics::serve(listener, view.clone()));
    Ok(())
}

async fn pair_server(
    side: Side,
    port: Option<u16>,
    base: ServerConfig,
    pair: Pair,
    curve: Option<ServerCurve>,
    metrics: Option<tokio::net::TcpListener>,
) -> Fallible<ExitCode> {
    let (default_port, state, peer_state, peer) = match side {
        Side::Primary => (5556, "tcp://*:5003", "tcp://localhost:5004", "tcp://localhost:5566"),
        Side::Backup => (5566, "tcp://*:5004", "tcp://localhost:5003", "tcp://localhost:5556"),
    };
    let port = port.unwrap_or(default_port);
    if port == 0 {
        return Err(usage("a pair server needs a fixed --port (its peer connects to it)"));
    }
    let peer: ServerAddress =
        pair.peer.as_deref().unwrap_or(peer).parse().map_err(|e: chp::address::AddressError| usage(e.to_string()))?;
    let state = pair.state.clone().unwrap_or_else(|| state.to_owned());
    let peer_state = pair.peer_state.clone().unwrap_or_else(|| peer_state.to_owned());
    let mut config = HaConfig::new(side, port, &state, &peer_state, peer.clone())
        .bind(base.bind)
        .hugz(base.hugz_interval)
        .heartbeat(Duration::from_millis(pair.heartbeat_ms.max(1)));
    config.server.max_value_len = base.max_value_len;
    config.server.data_dir = base.data_dir;
    config.server.durability = base.durability;
    config.pending =
        PendingConfig { window: Duration::from_millis(pair.pending_window_ms), ..PendingConfig::default() };
    config.peer_sync_timeout = Duration::from_millis(pair.peer_sync_timeout_ms.max(1));
    config.start_alone = pair.start_alone;
    let note = curve_note(curve.as_ref());
    config.server.curve = curve;
    let server = HaServer::bind(config).await.map_err(|e| e.to_string())?;
    let mut events = server.events();
    let a = server.address();
    say(format!(
        "listening on {a} (snapshot {}, publisher {}, collector {}; {side}, state {state}, peer state {peer_state}, peer {peer}, heartbeat {} ms{note})",
        a.port(),
        a.port() + 1,
        a.port() + 2,
        pair.heartbeat_ms
    ))?;
    serve_metrics(metrics, &server)?;
    let mut status = (pair.status_ms > 0).then(|| tokio::time::interval(Duration::from_millis(pair.status_ms)));
    loop {
        let tick = async {
            match status.as_mut() {
                Some(t) => t.tick().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = events.next() => match event {
                Some(HaEvent::BecameActive { replayed, sequence, keys, complete }) => say(format!(
                    "role: ACTIVE (replayed {replayed} pending updates; sequence {sequence}, {keys} keys{})",
                    if complete { "" } else { "; the copy of the peer's map was incomplete" }
                ))?,
                Some(HaEvent::BecamePassive) => say("role: PASSIVE".into())?,
                Some(HaEvent::PeerSynced { sequence, keys }) => say(format!("peer: synced at sequence {sequence} ({keys} keys)"))?,
                Some(HaEvent::PeerAlive(state)) => say(format!("peer: alive ({state})"))?,
                Some(HaEvent::PeerSilent) => say("peer: silent".into())?,
                Some(HaEvent::Stopped(_)) | None => break,
            },
            _ = tick => {
                let s = server.status();
                say(format!(
                    "status: state={} sequence={} keys={} pending={} peer={:?} synced={} matched={} late={} \
                     pruned={} replayed={} duplicates={}",
                    s.state,
                    s.sequence,
                    s.keys,
                    s.pending,
                    s.peer,
                    s.peer_synced,
                    s.stats.pending.matched,
                    s.stats.pending.late_copies,
                    s.stats.pending.pruned,
                    s.stats.pending.replayed,
                    s.stats.duplicates
                ))?;
            }
        }
    }
    match server.wait().await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("chp: {e}");
            Ok(ExitCode::from(3))
        }
    }
}

/// One line on stdout, flushed at once (tests and scripts read it as it comes).
fn say(line: String) -> Fallible {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| e.to_string().into())
}

fn parse_subtree(s: &str) -> Fallible<Subtree> {
    s.parse().map_err(|e: chp::command::SubtreeError| usage(e.to_string()))
}

fn parse_ttl(secs: f64) -> Fallible<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| usage(format!("invalid --ttl {secs}: expected seconds >= 0")))
}

/// A key for output: non-printable bytes escaped, and `=` as `\x3d` so the first `=` separates.
fn escape_key(key: &[u8]) -> String {
    key.escape_ascii().to_string().replace('=', "\\x3d")
}
