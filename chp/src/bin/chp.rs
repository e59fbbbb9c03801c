//! `chp`: run a CHP server, or read and write the map of any 12/CHP server.
//!
//! ```text
//! chp server --port 5556 [--bind ADDR] [--hugz-ms 1000]
//! chp set KEY VALUE [--ttl SECONDS]      --server tcp://host:5556
//! chp get KEY | chp del KEY              --server tcp://host:5556
//! chp dump [--subtree /a/]               --server tcp://host:5556
//! chp watch [--subtree /a/]              --server tcp://host:5556
//! ```
//!
//! Output lines: `KEY=VALUE` per entry (dump, and watch's snapshot), in key order, with
//! non-printable bytes escaped (`\n`, `\xff`) and `=` in keys written `\x3d`; then, for watch,
//! `-- synced at sequence N (K keys)` and one line per change: `set N KEY=VALUE` or `del N KEY`.

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use chp::{Client, ClientOptions, Event, Server, ServerConfig, Status, Subtree};
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "chp", version, about = "Clustered Hashmap Protocol (ZeroMQ 12/CHP) server and client")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a server: SNAPSHOT at PORT, PUBLISHER at PORT+1, COLLECTOR at PORT+2.
    Server {
        /// The SNAPSHOT port P (0 = pick free ports and print them).
        #[arg(long, default_value_t = 5556)]
        port: u16,
        /// Interface to bind (`*` = all).
        #[arg(long, default_value = "*")]
        bind: String,
        /// HUGZ interval in milliseconds.
        #[arg(long, default_value_t = 1000)]
        hugz_ms: u64,
        /// Largest value accepted, in bytes.
        #[arg(long, default_value_t = 1 << 20)]
        max_value: usize,
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
}

#[derive(Args)]
struct Conn {
    /// The server: tcp://host:P (its SNAPSHOT port).
    #[arg(long, default_value = "tcp://127.0.0.1:5556")]
    server: String,
    /// Seconds to wait for the server.
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
}

type Fallible<T = ()> = Result<T, String>;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Cmd::Server { .. }) { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    match run(cli.command).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("chp: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cmd: Cmd) -> Fallible<ExitCode> {
    match cmd {
        Cmd::Server { port, bind, hugz_ms, max_value } => {
            let config = ServerConfig {
                bind,
                port,
                hugz_interval: Duration::from_millis(hugz_ms.max(1)),
                max_value_len: max_value,
                ..ServerConfig::default()
            };
            let server = Server::bind(config).await.map_err(|e| e.to_string())?;
            let a = server.address();
            println!(
                "listening on {a} (snapshot {}, publisher {}, collector {})",
                a.port(),
                a.port() + 1,
                a.port() + 2
            );
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
    }
}

impl Conn {
    fn timeout(&self) -> Fallible<Duration> {
        Duration::try_from_secs_f64(self.timeout).map_err(|_| format!("invalid --timeout {}", self.timeout))
    }

    fn options(&self, subtree: Subtree) -> Fallible<ClientOptions> {
        let timeout = self.timeout()?;
        let options = ClientOptions::new(&self.server).map_err(|e| e.to_string())?;
        Ok(options.subtree(subtree).set_timing(Duration::from_millis(500), timeout))
    }

    /// Starts a client and waits (up to --timeout) until it is in sync.
    async fn start_synced(&self, subtree: Subtree) -> Fallible<Client> {
        self.synced(Client::start(self.options(subtree)?).map_err(|e| e.to_string())?).await
    }

    /// Waits (up to --timeout) until `client` is in sync.
    async fn synced(&self, client: Client) -> Fallible<Client> {
        match tokio::time::timeout(self.timeout()?, client.synced()).await {
            Ok(Ok(_)) => Ok(client),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no CHP server answered at {} within {}s (is one running there?)",
                self.server, self.timeout
            )),
        }
    }
}

async fn watch(subtree: Subtree, conn: Conn) -> Fallible<ExitCode> {
    let mut options = conn.options(subtree)?;
    options.event_capacity = 1 << 16; // room for bursts while stdout is slow
    let client = conn.synced(Client::start(options).map_err(|e| e.to_string())?).await?;
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
            Event::Gap { expected, got } => eprintln!("chp: updates lost (expected {expected}, got {got}); re-syncing"),
            Event::Lagged { missed } => return Err(format!("output too slow: {missed} changes dropped")),
        }
        out.flush().map_err(io)?;
    }
    match client.status() {
        Status::Failed(why) => Err(why),
        _ => Ok(ExitCode::SUCCESS),
    }
}

fn parse_subtree(s: &str) -> Fallible<Subtree> {
    s.parse().map_err(|e: chp::command::SubtreeError| e.to_string())
}

fn parse_ttl(secs: f64) -> Fallible<Duration> {
    Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid --ttl {secs}: expected seconds >= 0"))
}

/// A key for output: non-printable bytes escaped, and `=` as `\x3d` so the first `=` separates.
fn escape_key(key: &[u8]) -> String {
    key.escape_ascii().to_string().replace('=', "\\x3d")
}
