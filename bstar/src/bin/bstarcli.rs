//! The Guide's Binary Star example client: sends numbered requests over REQ; when no reply comes
//! within the request timeout it closes the socket, switches to the other server, waits the settle
//! delay, and resends the *same* request on a fresh socket. Retries forever.
//!
//! With `--curve-serverkey PUBLIC` it talks CURVE (once for both servers when they share a key
//! pair, or once per `--server`, in the same order).
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use bstar::endpoint::connect_arg;
use clap::Parser;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use zmtp::Security;
use zmtp::security::{KeyPair, PublicKey};
use zmtp::{Monitor, MonitorEvent, Socket, SocketType};

#[derive(Parser, Debug)]
#[command(name = "bstarcli", about = "Binary Star example client (fails over between two servers)")]
struct Args {
    /// The servers, tried in order (endpoint or port); give it twice for a pair.
    #[arg(long = "server", value_name = "ENDPOINT|PORT", default_values_t = ["tcp://localhost:5001".to_string(), "tcp://localhost:5002".to_string()])]
    servers: Vec<String>,
    /// How long to wait for a reply before failing over, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    timeout: u64,
    /// How long to wait after failing over before resending, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    settle: u64,
    /// Pause between successful requests, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    interval: u64,
    /// Stop after this many replies (0 = never).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Talk CURVE to servers with this public key (Z85): once for both, or once per --server in order
    #[arg(long, value_name = "PUBLIC", allow_hyphen_values = true, help_heading = "Security")]
    curve_serverkey: Vec<PublicKey>,
    /// Our CURVE secret key (Z85; default: a fresh key pair for this run)
    #[arg(
        long,
        value_name = "SECRET",
        allow_hyphen_values = true,
        help_heading = "Security",
        requires = "curve_serverkey"
    )]
    curve_secretkey: Option<KeyPair>,
}

/// Where to connect, and with which CURVE keys (server public key, ours).
struct Target {
    endpoint: String,
    curve: Option<(PublicKey, KeyPair)>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let keys = args.curve_secretkey.clone().unwrap_or_else(KeyPair::generate);
    let server_keys = &args.curve_serverkey;
    if server_keys.len() > 1 && server_keys.len() != args.servers.len() {
        eprintln!("bstarcli: give --curve-serverkey once, or once per --server ({})", args.servers.len());
        return ExitCode::from(2);
    }
    let servers: Vec<Target> = args
        .servers
        .iter()
        .enumerate()
        .map(|(i, s)| Target {
            endpoint: connect_arg(s),
            curve: server_keys.get(i).or(server_keys.first()).map(|server| (*server, keys.clone())),
        })
        .collect();
    let request_timeout = Duration::from_millis(args.timeout);
    let settle = Duration::from_millis(args.settle);
    let mut server = 0;
    let mut sequence: u64 = 0;
    let mut client = match open(&servers[server]).await {
        Ok(socket) => socket,
        Err(e) => {
            println!("E: {e}");
            return ExitCode::from(1);
        }
    };
    while args.count == 0 || sequence < args.count {
        sequence += 1;
        let request = sequence.to_string();
        loop {
            match attempt(&mut client, &request, request_timeout).await {
                Ok(()) => {
                    println!("I: server replied OK ({sequence})");
                    break;
                }
                Err(Failure::Socket(e)) => {
                    println!("E: {e}");
                    return ExitCode::from(1);
                }
                Err(Failure::Timeout) => {
                    println!("W: no response from server, failing over");
                    client.socket.close().await;
                    server = (server + 1) % servers.len();
                    sleep(settle).await;
                    client = match open(&servers[server]).await {
                        Ok(socket) => socket,
                        Err(e) => {
                            println!("E: {e}");
                            return ExitCode::from(1);
                        }
                    };
                }
            }
        }
        if args.count == 0 || sequence < args.count {
            sleep(Duration::from_millis(args.interval)).await;
        }
    }
    ExitCode::SUCCESS
}

enum Failure {
    Timeout,
    Socket(zmtp::Error),
}

/// A REQ socket to one server, and its connection events.
struct Client {
    socket: Socket,
    monitor: Monitor,
    /// Whether a failed security handshake was already reported for this socket.
    reported: bool,
}

/// Sends `request` and waits for the matching reply; a wrong reply is reported and the attempt
/// runs into its timeout (a REQ socket takes one reply per request). The first failed security
/// handshake of a socket is reported too (wrong server key, or our key not allowed).
async fn attempt(client: &mut Client, request: &str, limit: Duration) -> Result<(), Failure> {
    let deadline = Instant::now() + limit;
    let Client { socket, monitor, reported } = client;
    let exchange = async {
        socket.send(request.to_owned()).await?;
        socket.recv().await
    };
    let watch = async {
        while let Some(event) = monitor.next_event().await {
            if let MonitorEvent::HandshakeFailed { error, .. } = event
                && !*reported
            {
                *reported = true;
                println!("W: security handshake with server failed: {error}");
            }
        }
        std::future::pending::<()>().await;
    };
    let outcome = tokio::select! {
        outcome = timeout_at(deadline, exchange) => outcome,
        () = watch => unreachable!("pending forever"),
    };
    match outcome {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::Socket(e)),
        Ok(Ok(reply)) if reply.len() == 1 && reply[0] == request.as_bytes() => Ok(()),
        Ok(Ok(reply)) => {
            println!("E: bad reply from server: {:?}", reply.frames());
            sleep_until(deadline).await;
            Err(Failure::Timeout)
        }
    }
}

async fn open(target: &Target) -> zmtp::Result<Client> {
    println!("I: connecting to server at {}...", target.endpoint);
    let socket = Socket::new(SocketType::Req);
    socket.set_linger(Some(Duration::ZERO));
    if let Some((server, keys)) = &target.curve {
        socket.set_security(&Security::curve_client(*server, keys.clone()));
    }
    let monitor = socket.monitor();
    socket.connect(&target.endpoint).await?;
    Ok(Client { socket, monitor, reported: false })
}
