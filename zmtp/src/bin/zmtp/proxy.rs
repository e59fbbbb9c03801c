//! `zmtp proxy`: a forwarding device between two sockets (zmtp::Proxy), with an optional capture.

use zmtp::{Proxy, Socket, SocketType};

use crate::cli::{Direction, ProxyArgs, SocketSpec};
use crate::error::{CliError, failed, usage};
use crate::setup::{self, check_endpoint};

/// Runs the proxy until a socket fails (or the process is stopped).
pub async fn run(args: ProxyArgs) -> Result<(), CliError> {
    for (role, spec) in [("frontend", &args.frontend), ("backend", &args.backend)] {
        if matches!(spec.socket_type, SocketType::Req | SocketType::Rep) {
            return Err(usage(format!(
                "the {role} cannot be {}: a proxy passes messages in any order, which REQ/REP forbid; \
                 use router (frontend) and dealer (backend) for request-reply",
                spec.socket_type
            )));
        }
    }
    if let Some(capture) = &args.capture {
        use SocketType::*;
        if !matches!(capture.socket_type, Pub | Push | Pair | Dealer | XPub) {
            return Err(usage(format!(
                "the capture socket cannot be {}: it must send, so use pub, push, pair, dealer or xpub",
                capture.socket_type
            )));
        }
    }
    let mut all = vec![("frontend", &args.frontend), ("backend", &args.backend)];
    all.extend(args.capture.iter().map(|c| ("capture", c)));
    for (_, spec) in &all {
        check_endpoint(&spec.endpoint, spec.direction).await?;
    }
    let frontend = open(&args.frontend, "frontend", args.verbose).await?;
    let backend = open(&args.backend, "backend", args.verbose).await?;
    let mut proxy = Proxy::new(frontend, backend);
    if let Some(spec) = &args.capture {
        proxy = proxy.with_capture(open(spec, "capture", args.verbose).await?);
    }
    eprintln!("zmtp: proxy running (Ctrl-C to stop)");
    proxy.run().await.map_err(|e| failed(format!("proxy stopped: {e}")))
}

async fn open(spec: &SocketSpec, role: &str, verbose: bool) -> Result<Socket, CliError> {
    let t = spec.socket_type;
    let socket = Socket::new(t);
    if verbose {
        setup::narrate_as(&socket, format!("{role} {t}"));
    }
    match spec.direction {
        Direction::Bind => {
            let bound = setup::bind(&socket, &spec.endpoint).await?;
            eprintln!("zmtp: {role} {t} listening on {bound}");
        }
        Direction::Connect => socket
            .connect(&spec.endpoint)
            .await
            .map_err(|e| failed(format!("cannot connect to {:?}: {e}", spec.endpoint)))?,
    }
    if t == SocketType::Sub {
        // A SUB side of a proxy forwards everything.
        socket.subscribe("").map_err(|e| failed(format!("cannot subscribe: {e}")))?;
    }
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_socket_specs() {
        let spec: SocketSpec = "XSUB:bind:tcp://*:5559".parse().unwrap();
        assert_eq!(spec.socket_type, SocketType::XSub);
        assert_eq!(spec.direction, Direction::Bind);
        assert_eq!(spec.endpoint, "tcp://*:5559");
        let spec: SocketSpec = "dealer:connect:ipc:///tmp/x".parse().unwrap();
        assert_eq!((spec.direction, spec.endpoint.as_str()), (Direction::Connect, "ipc:///tmp/x"));
        assert!("xsub:tcp://*:1".parse::<SocketSpec>().unwrap_err().contains("missing 'bind:'"));
        assert!("dgram:bind:tcp://*:1".parse::<SocketSpec>().unwrap_err().contains("unknown socket type"));
        assert!("xsub".parse::<SocketSpec>().is_err());
    }
}
