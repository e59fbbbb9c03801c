//! Command-line parsing: one subcommand per socket type (sharing [`SocketArgs`], with the options that
//! do not apply to a type hidden from its help and rejected), plus `proxy`.

use std::str::FromStr;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use zmtp::SocketType;

use crate::error::{CliError, usage};
use crate::frames::Format;
use crate::help;

/// Whether an endpoint is to be bound or connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// `--bind`
    Bind,
    /// `--connect`
    Connect,
}

/// One side of the proxy: `TYPE:bind:ENDPOINT` or `TYPE:connect:ENDPOINT`.
#[derive(Clone, Debug)]
pub struct SocketSpec {
    pub socket_type: SocketType,
    pub direction: Direction,
    pub endpoint: String,
}

impl FromStr for SocketSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let form = "write TYPE:bind:ENDPOINT or TYPE:connect:ENDPOINT, e.g. xsub:bind:tcp://*:5559";
        let (name, rest) = s.split_once(':').ok_or_else(|| form.to_owned())?;
        let socket_type = name.parse::<SocketType>().map_err(|e| format!("{e}; {form}"))?;
        let (direction, endpoint) = if let Some(ep) = rest.strip_prefix("bind:") {
            (Direction::Bind, ep)
        } else if let Some(ep) = rest.strip_prefix("connect:") {
            (Direction::Connect, ep)
        } else {
            return Err(format!("missing 'bind:' or 'connect:' after the socket type; {form}"));
        };
        Ok(SocketSpec { socket_type, direction, endpoint: endpoint.to_owned() })
    }
}

/// The options of `zmtp proxy`.
#[derive(Args, Clone, Debug)]
pub struct ProxyArgs {
    /// The socket clients talk to, e.g. xsub:bind:tcp://*:5559 or router:bind:tcp://*:5559
    #[arg(long, value_name = "TYPE:bind|connect:ENDPOINT")]
    pub frontend: SocketSpec,

    /// The socket on the other side, e.g. xpub:bind:tcp://*:5560 or dealer:bind:tcp://*:5560
    #[arg(long, value_name = "TYPE:bind|connect:ENDPOINT")]
    pub backend: SocketSpec,

    /// Also send a copy of every forwarded message here, e.g. pub:bind:tcp://127.0.0.1:5561
    #[arg(long, value_name = "TYPE:bind|connect:ENDPOINT")]
    pub capture: Option<SocketSpec>,

    /// Print connection events (connected, handshake failures, disconnects) on stderr
    #[arg(short, long)]
    pub verbose: bool,
}

/// Every socket type, in the order `--help` lists them.
pub const SOCKET_TYPES: [SocketType; 20] = [
    SocketType::Pub,
    SocketType::Sub,
    SocketType::Req,
    SocketType::Rep,
    SocketType::Push,
    SocketType::Pull,
    SocketType::Dealer,
    SocketType::Router,
    SocketType::Pair,
    SocketType::XPub,
    SocketType::XSub,
    SocketType::Server,
    SocketType::Client,
    SocketType::Radio,
    SocketType::Dish,
    SocketType::Scatter,
    SocketType::Gather,
    SocketType::Peer,
    SocketType::Channel,
    SocketType::Stream,
];

/// What a socket type does with messages, which decides how `zmtp` drives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// PUB, PUSH: send the messages, then exit.
    SendOnly,
    /// SUB, PULL: print what arrives.
    RecvOnly,
    /// REQ: send each message and print its reply.
    Request,
    /// REP: print each request and answer it.
    Reply,
    /// PAIR, DEALER, ROUTER, XPUB, XSUB: send and print at the same time.
    Duplex,
}

/// The role of a socket type.
pub fn role(t: SocketType) -> Role {
    match t {
        SocketType::Pub | SocketType::Push | SocketType::Radio | SocketType::Scatter => Role::SendOnly,
        SocketType::Sub | SocketType::Pull | SocketType::Dish | SocketType::Gather => Role::RecvOnly,
        SocketType::Req | SocketType::Client => Role::Request,
        SocketType::Rep | SocketType::Server => Role::Reply,
        _ => Role::Duplex,
    }
}

/// The options of every socket subcommand.
#[derive(Args, Clone, Debug)]
pub struct SocketArgs {
    /// Listen on ENDPOINT (repeatable): tcp://*:5555, tcp://127.0.0.1:* (a free port)
    #[arg(short, long, value_name = "ENDPOINT", help_heading = "Endpoints")]
    pub bind: Vec<String>,

    /// Connect to ENDPOINT (repeatable): tcp://host:5555, ipc:///tmp/sock
    ///
    /// ZeroMQ connects in the background and keeps retrying until the peer is there (-v shows it).
    #[arg(short, long, value_name = "ENDPOINT", help_heading = "Endpoints")]
    pub connect: Vec<String>,

    /// Routing id announced to ROUTER peers (text, or 0x<hex>); ZMQ_ROUTING_ID, as
    /// `Socket::set_routing_id` (`--identity`, libzmq's older name, is accepted too)
    #[arg(long, value_name = "ID", help_heading = "Endpoints", alias = "identity")]
    pub routing_id: Option<String>,

    /// Receive only messages whose first frame starts with PREFIX (repeatable)
    ///
    /// A SUB without --subscribe receives everything; an XSUB receives nothing.
    #[arg(short, long, value_name = "PREFIX", help_heading = "Endpoints")]
    pub subscribe: Vec<String>,

    /// DISH: receive the messages RADIOs send to GROUP (repeatable; exact names, not prefixes)
    #[arg(short, long, value_name = "GROUP", help_heading = "Endpoints")]
    pub join: Vec<String>,

    /// RADIO: the group every message is sent to (at most 255 bytes)
    #[arg(short, long, value_name = "GROUP", default_value = "", help_heading = "Sending")]
    pub group: String,

    /// Messages to send, one per argument; '|' separates frames: 'topic|body'
    ///
    /// Without MESSAGE arguments, each line of stdin is one message.
    #[arg(value_name = "MESSAGE")]
    pub messages: Vec<String>,

    /// Frame separator in messages to send and printed messages
    #[arg(short, long, value_name = "STRING", default_value = "|", value_parser = non_empty, help_heading = "Message format")]
    pub delimiter: String,

    /// Frames to send are hex, e.g. '00ff|6869' (a 0x prefix is allowed)
    #[arg(short = 'x', long, help_heading = "Message format")]
    pub hex: bool,

    /// How to print messages (auto: text, or 0x<hex> for frames that are not text)
    #[arg(short, long, value_enum, default_value = "auto", help_heading = "Message format")]
    pub format: Format,

    /// Send the messages over and over (until --count, --timeout or Ctrl-C)
    #[arg(short, long, help_heading = "Sending")]
    pub repeat: bool,

    /// Wait MS milliseconds between messages
    #[arg(short, long, value_name = "MS", help_heading = "Sending")]
    pub interval: Option<u64>,

    /// Wait MS milliseconds before the first message (lets PUB subscribers join)
    #[arg(long, value_name = "MS", help_heading = "Sending")]
    pub delay: Option<u64>,

    /// Answer each request with itself (REP). Without it, each request is answered with the next
    /// MESSAGE argument or stdin line, and a request left without one is an error (exit 1)
    #[arg(short, long, help_heading = "Sending")]
    pub echo: bool,

    /// Exit after N messages (received, or sent for pub/push)
    #[arg(short = 'n', long, value_name = "N", help_heading = "Stopping")]
    pub count: Option<usize>,

    /// Give up after SECS seconds; exit status 3 if the work is unfinished
    ///
    /// Unfinished means: fewer than --count messages, MESSAGE arguments not all sent, a request
    /// without its reply, or (with none of those) no message received at all. Fractions allowed.
    #[arg(short, long, value_name = "SECS", value_parser = seconds, help_heading = "Stopping")]
    pub timeout: Option<Duration>,

    /// Print connection events on stderr (connected, handshake failures, disconnects)
    #[arg(short, long)]
    pub verbose: bool,

    /// Queue at most N outgoing messages per peer (0 = no limit)
    #[arg(long, value_name = "N", help_heading = "Socket options")]
    pub sndhwm: Option<usize>,

    /// Queue at most N incoming messages per peer (0 = no limit)
    #[arg(long, value_name = "N", help_heading = "Socket options")]
    pub rcvhwm: Option<usize>,

    /// On exit, wait at most MS milliseconds for unsent messages (default: until sent)
    #[arg(long, value_name = "MS", help_heading = "Socket options")]
    pub linger: Option<u64>,

    /// Wait MS milliseconds before reconnecting (default 100)
    #[arg(long, value_name = "MS", help_heading = "Socket options")]
    pub reconnect_ivl: Option<u64>,

    /// Double the reconnect wait after each failure, up to MS milliseconds
    #[arg(long, value_name = "MS", help_heading = "Socket options")]
    pub reconnect_ivl_max: Option<u64>,

    /// Send a ZMTP PING every MS milliseconds to detect dead peers
    #[arg(long, value_name = "MS", help_heading = "Socket options")]
    pub heartbeat_ivl: Option<u64>,

    /// Drop a connection silent for MS milliseconds after a PING (default: the interval)
    #[arg(long, value_name = "MS", help_heading = "Socket options")]
    pub heartbeat_timeout: Option<u64>,

    /// Ask peers to drop us after MS milliseconds of silence
    #[arg(long, value_name = "MS", help_heading = "Socket options")]
    pub heartbeat_ttl: Option<u64>,

    /// Limit for the ZMTP handshake in milliseconds (0 = none; default 30000)
    #[arg(long, value_name = "MS", help_heading = "Socket options")]
    pub handshake_ivl: Option<u64>,

    /// Drop peers that send a frame larger than BYTES
    #[arg(long, value_name = "BYTES", help_heading = "Socket options")]
    pub maxmsgsize: Option<u64>,

    /// Queue messages only for completed connections
    #[arg(long, help_heading = "Socket options")]
    pub immediate: bool,

    /// Keep only the newest message in each queue (single-frame messages)
    #[arg(long, help_heading = "Socket options")]
    pub conflate: bool,

    /// Make tcp://* bind the IPv6 wildcard (dual stack) instead of 0.0.0.0
    #[arg(long, help_heading = "Socket options")]
    pub ipv6: bool,

    /// Turn TCP keepalive on
    #[arg(long, help_heading = "Socket options")]
    pub tcp_keepalive: bool,

    /// TCP keepalive: idle SECS before the first probe
    #[arg(long, value_name = "SECS", help_heading = "Socket options")]
    pub tcp_keepalive_idle: Option<u64>,

    /// TCP keepalive: SECS between probes
    #[arg(long, value_name = "SECS", help_heading = "Socket options")]
    pub tcp_keepalive_intvl: Option<u64>,

    /// TCP keepalive: unanswered probes before the connection drops
    #[arg(long, value_name = "N", help_heading = "Socket options")]
    pub tcp_keepalive_cnt: Option<u32>,

    /// Kernel send buffer of each connection (SO_SNDBUF), in BYTES
    #[arg(long, value_name = "BYTES", help_heading = "Socket options")]
    pub sndbuf: Option<usize>,

    /// Kernel receive buffer of each connection (SO_RCVBUF), in BYTES
    #[arg(long, value_name = "BYTES", help_heading = "Socket options")]
    pub rcvbuf: Option<usize>,

    /// IP type-of-service byte of tcp connections (IPv6: traffic class)
    #[arg(long, value_name = "N", help_heading = "Socket options")]
    pub tos: Option<u32>,

    /// Allow a new request before the reply to the previous one arrived
    #[arg(long, help_heading = "Socket options")]
    pub req_relaxed: bool,

    /// Tag requests with an id and ignore replies that do not carry it
    #[arg(long, help_heading = "Socket options")]
    pub req_correlate: bool,

    /// Send an empty message to each new peer, so that a ROUTER learns our routing id at once
    #[arg(long, help_heading = "Socket options")]
    pub probe_router: bool,

    /// A new peer with a routing id already in use takes it over (instead of being refused)
    #[arg(long, help_heading = "Socket options")]
    pub router_handover: bool,

    /// Print every subscription, not only the first for each prefix
    #[arg(long, help_heading = "Socket options")]
    pub xpub_verbose: bool,

    /// Print every subscription and every unsubscription
    #[arg(long, help_heading = "Socket options")]
    pub xpub_verboser: bool,

    /// Wait for slow subscribers (at their --sndhwm) instead of dropping their messages
    #[arg(long, help_heading = "Socket options")]
    pub xpub_nodrop: bool,

    /// Send MESSAGE to every new subscriber
    #[arg(long, value_name = "MESSAGE", help_heading = "Socket options")]
    pub xpub_welcome_msg: Option<String>,

    /// Do not print ID| when a connection is made or ends (ZMQ_STREAM_NOTIFY off)
    #[arg(long = "no-stream-notify", help_heading = "Socket options")]
    pub stream_notify: bool,

    /// Be a CURVE server with this secret key (Z85, from `zmtp keygen`); clients must know its public key
    #[arg(long, value_name = "SECRET", allow_hyphen_values = true, help_heading = "Security", conflicts_with_all = ["curve_serverkey", "plain_server", "plain_username"])]
    pub curve_server: Option<String>,

    /// Be a CURVE client of the server with this public key (Z85)
    #[arg(long, value_name = "PUBLIC", allow_hyphen_values = true, help_heading = "Security", conflicts_with_all = ["plain_server", "plain_username"])]
    pub curve_serverkey: Option<String>,

    /// Our CURVE secret key as a client (Z85; default: a fresh key pair for this run)
    #[arg(
        long,
        value_name = "SECRET",
        allow_hyphen_values = true,
        help_heading = "Security",
        requires = "curve_serverkey"
    )]
    pub curve_secretkey: Option<String>,

    /// As a CURVE server, accept only clients with this public key (repeatable; default: any client)
    #[arg(
        long,
        value_name = "PUBLIC",
        allow_hyphen_values = true,
        help_heading = "Security",
        requires = "curve_server"
    )]
    pub curve_allow: Vec<String>,

    /// Be a PLAIN server accepting USER:PASSWORD (repeatable)
    #[arg(
        long = "plain-server",
        value_name = "USER:PASSWORD",
        help_heading = "Security",
        conflicts_with = "plain_username"
    )]
    pub plain_server: Vec<String>,

    /// Be a PLAIN client with this user name (needs --plain-password)
    #[arg(long, value_name = "USER", help_heading = "Security", requires = "plain_password")]
    pub plain_username: Option<String>,

    /// The PLAIN client's password
    #[arg(long, value_name = "PASSWORD", help_heading = "Security", requires = "plain_username")]
    pub plain_password: Option<String>,

    /// As a server, accept connections only from this IP address (repeatable)
    #[arg(long, value_name = "IP", help_heading = "Security")]
    pub allow: Vec<std::net::IpAddr>,

    /// As a server, refuse connections from this IP address (repeatable)
    #[arg(long, value_name = "IP", help_heading = "Security")]
    pub deny: Vec<std::net::IpAddr>,
}

/// A parsed command line.
pub enum Invocation {
    /// `zmtp <socket type> …`
    Socket(SocketType, Box<SocketArgs>),
    /// `zmtp proxy …`
    Proxy(ProxyArgs),
    /// `zmtp keygen`
    Keygen,
}

/// The argument ids that do not apply to a socket type.
fn not_for(t: SocketType) -> Vec<&'static str> {
    use SocketType::*;
    let r = role(t);
    let mut ids = Vec::new();
    if r == Role::RecvOnly {
        ids.extend(["messages", "hex", "repeat", "interval", "delay", "sndhwm", "linger"]);
    }
    if r == Role::SendOnly {
        ids.extend(["format", "rcvhwm"]);
    }
    let rules: [(&str, &[SocketType]); 16] = [
        ("echo", &[Rep, Server]),
        ("join", &[Dish]),
        ("group", &[Radio]),
        ("subscribe", &[Sub, XSub]),
        ("routing_id", &[Req, Dealer, Router]),
        ("stream_notify", &[Stream]),
        ("immediate", &[Dealer, Push, Req, Pair, Client, Scatter, Channel]),
        ("conflate", &[Dealer, Pull, Push, Pub, Sub]),
        ("req_relaxed", &[Req]),
        ("req_correlate", &[Req]),
        ("probe_router", &[Router, Dealer, Req]),
        ("router_handover", &[Router]),
        ("xpub_verbose", &[XPub]),
        ("xpub_verboser", &[XPub]),
        ("xpub_nodrop", &[XPub, Pub, Radio]),
        ("xpub_welcome_msg", &[XPub]),
    ];
    for (id, types) in rules {
        if !types.contains(&t) && !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

fn socket_command(t: SocketType) -> Command {
    let mut cmd = SocketArgs::augment_args(Command::new(command_name(t)))
        .about(help::about(t))
        .after_help(help::details(t))
        .next_line_help(false);
    for id in not_for(t) {
        cmd = cmd.mut_arg(id, |a| a.hide(true));
    }
    for (id, text) in help::overrides(t) {
        cmd = cmd.mut_arg(id, |a| a.help(text));
    }
    cmd
}

/// The whole command tree (also used to render `--help`).
pub fn command() -> Command {
    let mut cmd = Command::new("zmtp")
        .version(env!("CARGO_PKG_VERSION"))
        .about(help::TOOL_ABOUT)
        .long_about(help::TOOL_LONG_ABOUT)
        .after_help(help::TOOL_AFTER_HELP)
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand_value_name("SOCKET-TYPE|proxy|keygen")
        .override_usage(
            "zmtp <SOCKET-TYPE> [--bind ENDPOINT] [--connect ENDPOINT] [OPTIONS] [MESSAGE]...\n       \
             zmtp proxy --frontend TYPE:bind:ENDPOINT --backend TYPE:bind:ENDPOINT [--capture …]",
        )
        .subcommand_help_heading("Socket types (zmtp <type> --help for details)");
    for t in SOCKET_TYPES {
        cmd = cmd.subcommand(socket_command(t));
    }
    cmd.subcommand(
        ProxyArgs::augment_args(Command::new("proxy")).about(help::PROXY_ABOUT).after_help(help::PROXY_DETAILS),
    )
    .subcommand(Command::new("keygen").about(
        "Print a new CURVE key pair in Z85 (give the secret key to --curve-server, the public key to clients' --curve-serverkey)",
    ))
}

/// Parses the process arguments; clap errors (and `--help`) exit the process right here.
pub fn parse() -> Result<Invocation, CliError> {
    let matches = command().get_matches();
    let (name, sub) = matches.subcommand().expect("subcommand_required");
    if name == "proxy" {
        return ProxyArgs::from_arg_matches(sub).map(Invocation::Proxy).map_err(|e| e.exit());
    }
    if name == "keygen" {
        return Ok(Invocation::Keygen);
    }
    let t: SocketType = name.parse().expect("subcommands are socket type names");
    reject_foreign_options(t, sub)?;
    let args = SocketArgs::from_arg_matches(sub).map_err(|e| e.exit())?;
    Ok(Invocation::Socket(t, Box::new(args)))
}

fn reject_foreign_options(t: SocketType, m: &ArgMatches) -> Result<(), CliError> {
    let name = t.as_str();
    for id in not_for(t) {
        if m.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        return Err(match id {
            "messages" => usage(format!(
                "{name} sockets only receive, so there is nothing to send {:?} with; \
                 pick a type that sends (pub, push, req, dealer, …), see zmtp --help",
                m.get_many::<String>("messages").into_iter().flatten().next().map_or("", String::as_str)
            )),
            _ => usage(format!(
                "--{} does not apply to {name} sockets (see zmtp {} --help)",
                id.replace('_', "-"),
                name.to_lowercase()
            )),
        });
    }
    Ok(())
}

/// The subcommand name of a socket type.
pub fn command_name(t: SocketType) -> &'static str {
    match t {
        SocketType::Pair => "pair",
        SocketType::Pub => "pub",
        SocketType::Sub => "sub",
        SocketType::Req => "req",
        SocketType::Rep => "rep",
        SocketType::Dealer => "dealer",
        SocketType::Router => "router",
        SocketType::Pull => "pull",
        SocketType::Push => "push",
        SocketType::XPub => "xpub",
        SocketType::XSub => "xsub",
        SocketType::Server => "server",
        SocketType::Client => "client",
        SocketType::Radio => "radio",
        SocketType::Dish => "dish",
        SocketType::Scatter => "scatter",
        SocketType::Gather => "gather",
        SocketType::Peer => "peer",
        SocketType::Channel => "channel",
        SocketType::Stream => "stream",
    }
}

fn non_empty(s: &str) -> Result<String, String> {
    if s.is_empty() { Err("the delimiter cannot be empty".into()) } else { Ok(s.to_owned()) }
}

fn seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err("the timeout must be more than 0 seconds".into());
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_tree_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn every_type_keeps_its_own_options_visible() {
        assert!(!not_for(SocketType::Sub).contains(&"subscribe"));
        assert!(not_for(SocketType::Push).contains(&"subscribe"));
        assert!(not_for(SocketType::Pull).contains(&"messages"));
        assert!(!not_for(SocketType::Router).contains(&"routing_id"));
        assert!(not_for(SocketType::Sub).contains(&"repeat"));
        assert!(!not_for(SocketType::Dish).contains(&"join") && not_for(SocketType::Sub).contains(&"join"));
        assert!(!not_for(SocketType::Radio).contains(&"group") && not_for(SocketType::Dish).contains(&"messages"));
        assert!(!not_for(SocketType::Server).contains(&"echo"));
    }
}
