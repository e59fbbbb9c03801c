//! The Guide's Binary Star example server pair: run one with `-p` (primary) and one with `-b`
//! (backup). The active one echoes every request on its frontend; the passive one drops them, so
//! clients time out and fail over (see `bstarcli`).
//!
//! Defaults as in the Guide: primary frontend 5001, state 5003 (peer 5004); backup frontend 5002,
//! state 5004 (peer 5003). Endpoint options take a full endpoint or just a port.
//!
//! With `--curve-server SECRET` the frontend and the state link use CURVE: clients need this
//! server's public key, and the two servers either share one key pair or are told each other's
//! public key with `--curve-peer`.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use bstar::endpoint::{bind_arg, connect_arg};
use bstar::{BinaryStar, Config, Curve, Error, Notice, Side};
use clap::Parser;
use zmtp::SocketType;
use zmtp::security::{KeyPair, PublicKey};

#[derive(Parser, Debug)]
#[command(name = "bstarsrv", about = "Binary Star example server (echoes requests while active)")]
#[command(group(clap::ArgGroup::new("side").required(true).args(["primary", "backup"])))]
struct Args {
    /// Run as the primary.
    #[arg(short = 'p', long)]
    primary: bool,
    /// Run as the backup.
    #[arg(short = 'b', long)]
    backup: bool,
    /// Frontend (voter, ROUTER) to bind: endpoint or port [default: 5001 primary, 5002 backup].
    #[arg(long, value_name = "ENDPOINT|PORT")]
    frontend: Option<String>,
    /// State PUB to bind: endpoint or port [default: 5003 primary, 5004 backup].
    #[arg(long, value_name = "ENDPOINT|PORT")]
    state: Option<String>,
    /// The peer's state PUB to connect to: endpoint or port [default: 5004 primary, 5003 backup].
    #[arg(long, value_name = "ENDPOINT|PORT")]
    peer: Option<String>,
    /// Heartbeat interval in milliseconds (the peer expires after twice this).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    heartbeat: u64,
    /// Print every echoed request.
    #[arg(short, long)]
    verbose: bool,
    /// Use CURVE with this secret key (Z85, from `zmtp keygen`): the frontend and the state PUB are
    /// CURVE servers, the state SUB a CURVE client of the peer
    #[arg(long, value_name = "SECRET", allow_hyphen_values = true, help_heading = "Security")]
    curve_server: Option<KeyPair>,
    /// The peer's CURVE public key (Z85) [default: ours, i.e. both servers share one key pair]
    #[arg(
        long,
        value_name = "PUBLIC",
        allow_hyphen_values = true,
        help_heading = "Security",
        requires = "curve_server"
    )]
    curve_peer: Option<PublicKey>,
    /// Accept only clients with this CURVE public key on the frontend (repeatable; default: any
    /// client that knows our public key)
    #[arg(
        long,
        value_name = "PUBLIC",
        allow_hyphen_values = true,
        help_heading = "Security",
        requires = "curve_server"
    )]
    curve_allow: Vec<PublicKey>,
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    let args = Args::parse();
    let side = if args.primary { Side::Primary } else { Side::Backup };
    let (frontend, state, peer) = match side {
        Side::Primary => ("5001", "5003", "5004"),
        Side::Backup => ("5002", "5004", "5003"),
    };
    let frontend = bind_arg(args.frontend.as_deref().unwrap_or(frontend));
    let state = bind_arg(args.state.as_deref().unwrap_or(state));
    let peer = connect_arg(args.peer.as_deref().unwrap_or(peer));
    let mut config = Config::new(side, state, &peer)
        .voter(frontend, SocketType::Router)
        .heartbeat(Duration::from_millis(args.heartbeat.max(1)));
    if let Some(keys) = args.curve_server {
        println!("I: CURVE public key {}", keys.public_z85());
        let curve = match args.curve_peer {
            Some(peer) => Curve::with_peer(keys, peer.into()),
            None => Curve::shared(keys),
        };
        config = config.curve(args.curve_allow.iter().fold(curve, |curve, key| curve.allow_client((*key).into())));
    }

    let (star, mut notices) = match BinaryStar::bind(config).await {
        Ok(bound) => bound,
        Err(e) => {
            println!("E: cannot start: {e}");
            // An endpoint that does not parse, or a configuration that cannot work, is a usage
            // error (2, as clap's own); a bind that fails is a failure (1).
            let usage = matches!(
                e,
                Error::Config(_)
                    | Error::Socket(zmtp::Error::InvalidEndpoint(..) | zmtp::Error::UnsupportedTransport(_))
            );
            return ExitCode::from(if usage { 2 } else { 1 });
        }
    };
    let handle = star.handle();
    println!(
        "I: {side} ready: frontend {}, state {}, peer {peer}, heartbeat {} ms",
        handle.voter_endpoint(),
        handle.state_endpoint(),
        args.heartbeat
    );
    let run = tokio::spawn(star.run());
    while let Some(notice) = notices.recv().await {
        match notice {
            Notice::BecameActive => println!("I: became ACTIVE"),
            Notice::BecamePassive => println!("I: became PASSIVE"),
            Notice::PeerAlive(state) => println!("I: peer alive ({state})"),
            Notice::PeerSilent => println!("W: peer silent (this server is {})", handle.state()),
            Notice::HandshakeFailed { link, peer, reason } => {
                let from = if peer.is_empty() { String::new() } else { format!(" with {peer}") };
                println!("W: security handshake failed on the {link}{from}: {reason}");
            }
            Notice::Request(request) => {
                if args.verbose {
                    println!("I: echoing {:?}", request.last());
                }
                if let Err(e) = handle.voter().send(request).await {
                    println!("W: cannot reply: {e}");
                }
            }
            other => println!("I: {other:?}"),
        }
    }
    match run.await {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(Error::Fatal(e))) => {
            // 3: the pair failed (dual actives or passives), as `chp server --primary` reports it.
            println!("E: fatal: {e}, aborting");
            ExitCode::from(3)
        }
        Ok(Err(e)) => {
            println!("E: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            println!("E: runner panicked: {e}");
            ExitCode::from(101)
        }
    }
}

fn init_tracing() {
    zmtp::logging::init("off", true);
}
