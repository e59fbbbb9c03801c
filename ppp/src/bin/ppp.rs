//! `ppp`: run a Paranoid Pirate queue, echo worker or Lazy Pirate client from the command line.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ppp::Security;
use tokio::time::Instant;
use zmtp::Message;
use zmtp::security::{KeyPair, PublicKey};

/// Reliable request-reply with a pool of workers: the Paranoid Pirate Protocol (ZeroMQ RFC 6/PPP).
///
/// Start a queue, one or more workers, then a client, each in its own terminal:
///
///   ppp queue                      # clients on tcp://*:5555, workers on tcp://*:5556
///   ppp worker                     # an echo worker (try --slow-ms 500 or --crash-after 5)
///   ppp client --requests 10       # sends "1" … "10", prints each reply and a summary
///
/// Kill and restart workers or the queue while the client runs: workers reconnect with backoff,
/// the queue re-dispatches requests of dead workers, the client retries after a timeout.
/// Logs go to stderr (RUST_LOG overrides the level).
///
/// Over CURVE (`ppp keygen` prints a key pair):
///
///   ppp queue --curve-server SECRET
///   ppp worker --curve-serverkey PUBLIC
///   ppp client --curve-serverkey PUBLIC
#[derive(Parser, Debug)]
#[command(name = "ppp", version, verbatim_doc_comment)]
struct Cli {
    /// Log debug details too (each request, each reconnect step).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the queue (broker): clients connect to the frontend, workers to the backend.
    ///
    /// Prints the bound endpoints ("frontend: …", "backend: …") on stdout, then runs until Ctrl-C.
    Queue(QueueArgs),
    /// Run an echo worker connected to a queue's backend.
    ///
    /// Replies to each request with the request itself. Use --slow-ms and --crash-after to watch
    /// the queue and the clients cope with slow and crashing workers.
    Worker(WorkerArgs),
    /// Send requests through a queue and print the replies (Lazy Pirate: timeout, retry, reconnect).
    ///
    /// Sends "1", "2", … one at a time and expects each to be echoed back. Exits with status 1 if a
    /// request gets no reply after all retries, 3 if a reply differs from its request (2 is a usage
    /// error, in every ppp command).
    Client(ClientArgs),
    /// Print a new CURVE key pair ("public: …", "secret: …", Z85).
    Keygen,
}

#[derive(Args, Debug)]
struct QueueArgs {
    /// Endpoint clients connect to (tcp://HOST:PORT, ipc://PATH; port * picks a free one).
    #[arg(long, default_value = "tcp://*:5555", value_name = "EP")]
    frontend: String,
    /// Endpoint workers connect to.
    #[arg(long, default_value = "tcp://*:5556", value_name = "EP")]
    backend: String,
    /// Heartbeat intervals a worker may stay silent before it is purged (HEARTBEAT_LIVENESS).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    liveness: u32,
    /// Heartbeat interval in milliseconds (HEARTBEAT_INTERVAL).
    #[arg(long, default_value_t = 1000, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    interval_ms: u64,
    /// Most requests waiting for a free worker.
    #[arg(long, default_value_t = 1000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_pending: u64,
    /// When --max-pending requests wait: stop reading clients (backpressure) or drop the oldest.
    #[arg(long, value_enum, default_value_t = OverflowArg::Backpressure)]
    overflow: OverflowArg,
    /// A request a worker holds this long without replying goes to another worker (default:
    /// liveness x interval); the worker rejoins the idle list on its next heartbeat.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout_ms: Option<u64>,
    #[command(flatten)]
    security: ServerSecurityArgs,
}

/// The queue's security: both endpoints are servers.
#[derive(Args, Debug)]
struct ServerSecurityArgs {
    /// Be a CURVE server on both endpoints with this secret key (Z85, from `ppp keygen`); clients
    /// and workers need its public key
    #[arg(
        long,
        value_name = "SECRET",
        allow_hyphen_values = true,
        help_heading = "Security",
        conflicts_with = "plain_server"
    )]
    curve_server: Option<KeyPair>,
    /// Accept only clients and workers with this CURVE public key (repeatable; default: any that
    /// knows the server key)
    #[arg(
        long,
        value_name = "PUBLIC",
        allow_hyphen_values = true,
        help_heading = "Security",
        requires = "curve_server"
    )]
    curve_allow: Vec<PublicKey>,
    /// On the backend, accept only workers with this CURVE public key (repeatable; replaces
    /// --curve-allow there, so a client that knows the server key cannot pose as a worker)
    #[arg(
        long,
        value_name = "PUBLIC",
        allow_hyphen_values = true,
        help_heading = "Security",
        requires = "curve_server"
    )]
    curve_allow_worker: Vec<PublicKey>,
    /// Be a PLAIN server on both endpoints accepting USER:PASSWORD (repeatable; clear text: trusted
    /// networks only)
    #[arg(long, value_name = "USER:PASSWORD", help_heading = "Security", value_parser = user_password)]
    plain_server: Vec<(String, String)>,
}

/// A worker's or client's security: a client of the queue.
#[derive(Args, Debug)]
struct ClientSecurityArgs {
    /// Be a CURVE client of the queue with this public key (Z85: the public half of the queue's
    /// --curve-server secret)
    #[arg(
        long,
        value_name = "PUBLIC",
        allow_hyphen_values = true,
        help_heading = "Security",
        conflicts_with = "plain_username"
    )]
    curve_serverkey: Option<PublicKey>,
    /// Our CURVE secret key (Z85; default: a fresh key pair for this run); needed when the queue
    /// allows only listed keys
    #[arg(
        long,
        value_name = "SECRET",
        allow_hyphen_values = true,
        help_heading = "Security",
        requires = "curve_serverkey"
    )]
    curve_secretkey: Option<KeyPair>,
    /// Be a PLAIN client with this user name (needs --plain-password)
    #[arg(long, value_name = "USER", help_heading = "Security", requires = "plain_password")]
    plain_username: Option<String>,
    /// The PLAIN client's password
    #[arg(long, value_name = "PASSWORD", help_heading = "Security", requires = "plain_username")]
    plain_password: Option<String>,
}

fn user_password(text: &str) -> Result<(String, String), String> {
    text.split_once(':').map(|(u, p)| (u.to_owned(), p.to_owned())).ok_or_else(|| "expected USER:PASSWORD".to_owned())
}

impl ServerSecurityArgs {
    /// (frontend, backend) security.
    fn security(&self) -> (Security, Security) {
        if let Some(keys) = &self.curve_server {
            let front = Security::curve_server_allowing(keys.clone(), self.curve_allow.iter().copied());
            let workers = if self.curve_allow_worker.is_empty() { &self.curve_allow } else { &self.curve_allow_worker };
            let back = Security::curve_server_allowing(keys.clone(), workers.iter().copied());
            tracing::info!(public_key = %keys.public_z85(), "CURVE server");
            (front, back)
        } else if !self.plain_server.is_empty() {
            let plain = Security::plain_server(self.plain_server.iter().cloned());
            (plain.clone(), plain)
        } else {
            (Security::Null, Security::Null)
        }
    }
}

impl ClientSecurityArgs {
    fn security(&self) -> Security {
        if let Some(server) = self.curve_serverkey {
            let keys = self.curve_secretkey.clone().unwrap_or_else(KeyPair::generate);
            tracing::info!(public_key = %keys.public_z85(), "CURVE client");
            Security::curve_client(server, keys)
        } else if let (Some(user), Some(password)) = (&self.plain_username, &self.plain_password) {
            Security::plain_client(user, password)
        } else {
            Security::Null
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OverflowArg {
    /// Stop reading new requests until a worker frees up (nothing is dropped).
    Backpressure,
    /// Keep reading and drop the oldest waiting request (its client will retry).
    DropOldest,
}

#[derive(Args, Debug)]
struct WorkerArgs {
    /// The queue's backend endpoint.
    #[arg(long, default_value = "tcp://127.0.0.1:5556", value_name = "EP")]
    connect: String,
    /// Heartbeat intervals of queue silence before reconnecting (HEARTBEAT_LIVENESS).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    liveness: u32,
    /// Heartbeat interval in milliseconds (HEARTBEAT_INTERVAL).
    #[arg(long, default_value_t = 1000, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    interval_ms: u64,
    /// First reconnect delay in milliseconds; doubles after each failed attempt (INTERVAL_INIT).
    #[arg(long, default_value_t = 1000, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    reconnect_init_ms: u64,
    /// Largest reconnect delay in milliseconds (INTERVAL_MAX).
    #[arg(long, default_value_t = 32000, value_name = "MS")]
    reconnect_max_ms: u64,
    /// Simulate slow work: wait this long before each reply (heartbeats continue meanwhile).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    slow_ms: u64,
    /// Simulate a crash: serve N requests, then exit abruptly (status 3) when the next one arrives.
    #[arg(long, value_name = "N")]
    crash_after: Option<u64>,
    #[command(flatten)]
    security: ClientSecurityArgs,
}

#[derive(Args, Debug)]
struct ClientArgs {
    /// The queue's frontend endpoint.
    #[arg(long, default_value = "tcp://127.0.0.1:5555", value_name = "EP")]
    connect: String,
    /// Requests to send, one after the other.
    #[arg(long, default_value_t = 10, value_name = "N")]
    requests: u64,
    /// Milliseconds to wait for each reply before resending (REQUEST_TIMEOUT).
    #[arg(long, default_value_t = 2500, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: u64,
    /// Attempts per request, the first included, before giving up (REQUEST_RETRIES).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    retries: u32,
    /// Print only the summary, not each reply.
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    security: ClientSecurityArgs,
}

fn init_logging(verbose: bool) {
    let default = if verbose { "ppp=debug,info" } else { "info" };
    zmtp::logging::init(default, true);
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Queue(args) => run_queue(args).await,
        Command::Worker(args) => run_worker(args).await,
        Command::Client(args) => run_client(args).await,
        Command::Keygen => {
            zmtp::security::print_keygen(&KeyPair::generate());
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("ppp: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on Ctrl-C (or SIGTERM on Unix).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn run_queue(args: QueueArgs) -> Result<ExitCode, String> {
    let (frontend_security, backend_security) = args.security.security();
    let curve_public = args.security.curve_server.as_ref().map(KeyPair::public_z85);
    let queue = ppp::Queue {
        frontend: args.frontend,
        backend: args.backend,
        liveness: args.liveness,
        interval: Duration::from_millis(args.interval_ms),
        max_pending: usize::try_from(args.max_pending).unwrap_or(usize::MAX),
        request_timeout: Duration::from_millis(
            args.request_timeout_ms.unwrap_or(args.interval_ms.saturating_mul(u64::from(args.liveness))),
        ),
        overflow: match args.overflow {
            OverflowArg::Backpressure => ppp::Overflow::Backpressure,
            OverflowArg::DropOldest => ppp::Overflow::DropOldest,
        },
        frontend_security,
        backend_security,
    }
    .spawn()
    .await;
    let queue = match queue {
        Ok(queue) => queue,
        Err(e) => {
            eprintln!("ppp: error: {e}");
            let usage = match &e {
                ppp::QueueError::Config(_) => true,
                ppp::QueueError::Bind { source, .. } => is_usage(source),
                _ => false,
            };
            return Ok(exit_status(usage));
        }
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "frontend: {}", queue.frontend());
        let _ = writeln!(out, "backend: {}", queue.backend());
        if let Some(public) = curve_public {
            let _ = writeln!(out, "curve public key: {public}");
        }
        let _ = out.flush();
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    queue.close().await;
    Ok(ExitCode::SUCCESS)
}

async fn run_worker(args: WorkerArgs) -> Result<ExitCode, String> {
    let served = Arc::new(AtomicU64::new(0));
    let slow = Duration::from_millis(args.slow_ms);
    let crash_after = args.crash_after;
    let handler = move |request: Message| {
        let served = served.clone();
        async move {
            let n = served.fetch_add(1, Ordering::SeqCst);
            if crash_after.is_some_and(|limit| n >= limit) {
                tracing::warn!(served = n, "simulating a crash");
                std::process::exit(3);
            }
            tracing::debug!(frames = request.len(), "request received");
            if !slow.is_zero() {
                tokio::time::sleep(slow).await;
            }
            request
        }
    };
    let worker = ppp::Worker {
        endpoint: args.connect.clone(),
        liveness: args.liveness,
        interval: Duration::from_millis(args.interval_ms),
        reconnect_init: Duration::from_millis(args.reconnect_init_ms),
        reconnect_max: Duration::from_millis(args.reconnect_max_ms),
        security: args.security.security(),
    }
    .spawn(handler)
    .await;
    let worker = match worker {
        Ok(worker) => worker,
        Err(e) => {
            eprintln!("ppp: error: cannot connect to {:?}: {e}", args.connect);
            return Ok(exit_status(is_usage(&e)));
        }
    };
    shutdown_signal().await;
    tracing::info!("shutting down");
    worker.close().await;
    Ok(ExitCode::SUCCESS)
}

fn show(msg: &Message) -> String {
    msg.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect::<Vec<_>>().join(" | ")
}

async fn run_client(args: ClientArgs) -> Result<ExitCode, String> {
    let config = ppp::ClientConfig { timeout: Duration::from_millis(args.timeout_ms), retries: args.retries };
    let mut client = ppp::Client::connect_secure(args.connect.clone(), config, args.security.security())
        .await
        .map_err(|e| format!("cannot connect to {:?}: {e}", args.connect))?;
    let started = Instant::now();
    let (mut replies, mut mismatches) = (0u64, 0u64);
    let mut failure = None;
    let mut out = std::io::stdout();
    for i in 1..=args.requests {
        let request = Message::single(i.to_string());
        match client.request(request.clone()).await {
            Ok(reply) => {
                replies += 1;
                if reply != request {
                    mismatches += 1;
                    let _ = writeln!(out, "reply {i}: {} (MISMATCH: expected {i})", show(&reply));
                } else if !args.quiet {
                    let _ = writeln!(out, "reply {i}: {}", show(&reply));
                }
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let elapsed = started.elapsed();
    let rate = replies as f64 / elapsed.as_secs_f64().max(1e-9);
    let _ = writeln!(
        out,
        "summary: requests={} replies={replies} resends={} stale_replies={} mismatches={mismatches} elapsed_ms={} rate={rate:.0}/s",
        args.requests,
        client.resends(),
        client.stale_replies(),
        elapsed.as_millis()
    );
    let _ = out.flush();
    if let Some(e) = failure {
        eprintln!("ppp: error: {e}");
        return Ok(ExitCode::from(1));
    }
    Ok(if mismatches > 0 { ExitCode::from(3) } else { ExitCode::SUCCESS })
}

/// An endpoint that does not parse (or a setting out of range, which the library reports the same
/// way) is the user's to fix: a usage error.
fn is_usage(error: &zmtp::Error) -> bool {
    matches!(error, zmtp::Error::InvalidEndpoint(..) | zmtp::Error::UnsupportedTransport(_))
}

/// Exit status 2 for a usage error (as clap's own), 1 for a failure while running.
fn exit_status(usage: bool) -> ExitCode {
    ExitCode::from(if usage { 2 } else { 1 })
}
