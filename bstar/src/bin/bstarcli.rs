//! The Guide's Binary Star example client: sends numbered requests over REQ; when no reply comes
//! within the request timeout it closes the socket, switches to the other server, waits the settle
//! delay, and resends the *same* request on a fresh socket. Retries forever.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use bstar::endpoint::connect_arg;
use clap::Parser;
use tokio::time::{Instant, sleep, sleep_until, timeout_at};
use zmtp::{Socket, SocketType};

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
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let servers: Vec<String> = args.servers.iter().map(|s| connect_arg(s)).collect();
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
            match attempt(&client, &request, request_timeout).await {
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
                    client.close().await;
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

/// Sends `request` and waits for the matching reply; a wrong reply is reported and the attempt
/// runs into its timeout (a REQ socket takes one reply per request).
async fn attempt(client: &Socket, request: &str, limit: Duration) -> Result<(), Failure> {
    let deadline = Instant::now() + limit;
    let exchange = async {
        client.send(request.to_owned()).await?;
        client.recv().await
    };
    match timeout_at(deadline, exchange).await {
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

async fn open(endpoint: &str) -> zmtp::Result<Socket> {
    println!("I: connecting to server at {endpoint}...");
    let socket = Socket::new(SocketType::Req);
    socket.set_linger(Some(Duration::ZERO));
    socket.connect(endpoint).await?;
    Ok(socket)
}
