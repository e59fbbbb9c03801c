//! TCP: wildcard, interface names and OS-assigned ports on bind, name resolution on connect (from
//! a chosen source interface or address if asked), TCP_NODELAY always.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::{TcpListener, TcpSocket, TcpStream, lookup_host};

use super::endpoint::SourceAddress;

/// The bind address of `host`, in libzmq's order: `*` (every interface), an IP address, the name
/// of a network interface (`lo`, `eth0`: its first IPv4 address, or IPv6 too with the IPV6
/// option), then a host name.
async fn bind_address(host: &str, port: u16, ipv6: bool) -> io::Result<SocketAddr> {
    if host == "*" {
        let ip = if ipv6 { IpAddr::V6(Ipv6Addr::UNSPECIFIED) } else { IpAddr::V4(Ipv4Addr::UNSPECIFIED) };
        return Ok(SocketAddr::new(ip, port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    if let Some(ip) = interface_address(host, ipv6) {
        return Ok(SocketAddr::new(ip, port));
    }
    lookup_host((host, port)).await.ok().and_then(|mut found| found.next()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("{host:?} is not an IP address, a network interface or a host name that resolves"),
        )
    })
}

/// The first address of the interface called `name` (IPv4, or either family with `ipv6`).
pub(super) fn interface_address(name: &str, ipv6: bool) -> Option<IpAddr> {
    let interfaces = if_addrs::get_if_addrs().ok()?;
    interfaces.into_iter().filter(|i| i.name == name).map(|i| i.ip()).find(|ip| ip.is_ipv4() || ipv6)
}

pub(super) async fn bind(host: &str, port: u16, how: super::BindOptions) -> io::Result<(TcpListener, String)> {
    let addr = bind_address(host, port, how.ipv6).await?;
    // What `TcpListener::bind` does, with the socket's backlog: SO_REUSEADDR on Unix, as libzmq
    // (on Windows it would let another socket take the port; libzmq uses SO_EXCLUSIVEADDRUSE there).
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    // Before `listen`, as libzmq does: accepted connections inherit the sizes, and the window
    // they offer in the handshake is already the one they keep (see `connect`).
    how.buffers.apply(&socket)?;
    socket.bind(addr)?;
    let listener = socket.listen(how.backlog)?;
    let local = listener.local_addr()?;
    let name = match local {
        SocketAddr::V6(a) => format!("tcp://[{}]:{}", a.ip(), a.port()),
        SocketAddr::V4(a) => format!("tcp://{a}"),
    };
    Ok((listener, name))
}

/// Connects to the first address of `host` that accepts (as `TcpStream::connect` does), the
/// socket's kernel buffers sized before the handshake. Sized after it, a receive buffer smaller
/// than the 64 KiB window first offered leaves the sender (Linux) with a segment size larger than
/// the window the receiver can offer afterwards: each segment then waits for a zero-window probe
/// (200 ms), and throughput collapses to a window per probe.
pub(super) async fn connect(
    host: &str,
    port: u16,
    source: Option<&str>,
    buffers: super::Buffers,
) -> io::Result<TcpStream> {
    let stream = match source {
        None => connect_any(host, port, buffers).await?,
        Some(source) => connect_from(source, host, port, buffers).await?,
    };
    configure(&stream);
    Ok(stream)
}

/// Tries each resolved address of `host` in turn; the last failure if none accepts.
async fn connect_any(host: &str, port: u16, buffers: super::Buffers) -> io::Result<TcpStream> {
    let mut last = None;
    for remote in lookup_host((host, port)).await? {
        let attempt = async {
            let socket = if remote.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
            buffers.apply(&socket)?;
            socket.connect(remote).await
        };
        match attempt.await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} resolves to no address"))))
}

/// Connects from `source` (libzmq's `tcp://source;host:port`): binds the local end to that address
/// first. The source is `*`, an IP address or an interface name — never looked up in DNS, as in
/// libzmq. The destination is its first resolved address that the source has a local address of
/// the same family for.
async fn connect_from(source: &str, host: &str, port: u16, buffers: super::Buffers) -> io::Result<TcpStream> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    let source = SourceAddress::parse(source).ok_or_else(|| invalid(format!("invalid source address {source:?}")))?;
    let locals: Vec<IpAddr> = match source.name {
        "*" => vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V6(Ipv6Addr::UNSPECIFIED)],
        name => match name.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => if_addrs::get_if_addrs()?.into_iter().filter(|i| i.name == name).map(|i| i.ip()).collect(),
        },
    };
    if locals.is_empty() {
        return Err(invalid(format!("source {:?} is neither an IP address nor a network interface", source.name)));
    }
    let (local, remote) = lookup_host((host, port))
        .await?
        .find_map(|remote| locals.iter().find(|ip| ip.is_ipv4() == remote.is_ipv4()).map(|&ip| (ip, remote)))
        .ok_or_else(|| invalid(format!("{host:?} has no address of the family of source {:?}", source.name)))?;
    let socket = if remote.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    if source.port != 0 {
        // A fixed source port can be bound again at once when the connection is remade.
        socket.set_reuseaddr(true)?;
    }
    buffers.apply(&socket)?;
    socket.bind(SocketAddr::new(local, source.port))?;
    socket.connect(remote).await
}

pub(super) fn configure(stream: &TcpStream) {
    // Small messages are batched by the writer; Nagle would only add latency (libzmq sets it too).
    let _ = stream.set_nodelay(true);
}

/// Applies ZMQ_TOS (0 leaves the OS's), as libzmq does: IP_TOS always (it also marks the IPv4
/// traffic of a dual-stack IPv6 socket), then IPV6_TCLASS on an IPv6 socket where the OS has it.
pub(crate) fn set_tos(stream: &TcpStream, tos: u32) -> io::Result<()> {
    if tos == 0 {
        return Ok(());
    }
    let sock = socket2::SockRef::from(stream);
    let ip_tos = sock.set_tos_v4(tos);
    if stream.local_addr()?.is_ipv4() {
        return ip_tos;
    }
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "freebsd"))]
    sock.set_tclass_v6(tos)?;
    Ok(())
}

/// Applies ZMQ_TCP_KEEPALIVE and its IDLE/INTVL/CNT companions (`None` leaves the OS default).
pub(crate) fn set_keepalive(stream: &TcpStream, opts: &crate::options::Options) -> io::Result<()> {
    let sock = socket2::SockRef::from(stream);
    let Some(on) = opts.tcp_keepalive else { return Ok(()) };
    sock.set_keepalive(on)?;
    if on {
        let mut ka = socket2::TcpKeepalive::new();
        if let Some(idle) = opts.tcp_keepalive_idle {
            ka = ka.with_time(idle);
        }
        if let Some(intvl) = opts.tcp_keepalive_intvl {
            ka = ka.with_interval(intvl);
        }
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "freebsd"))]
        if let Some(cnt) = opts.tcp_keepalive_cnt {
            ka = ka.with_retries(cnt);
        }
        sock.set_tcp_keepalive(&ka)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn binds_by_interface_name_address_or_host_name() {
        // Every Linux (and macOS: lo0) machine has a loopback interface.
        let lo = if cfg!(target_os = "macos") { "lo0" } else { "lo" };
        if cfg!(unix) {
            assert_eq!(bind_address(lo, 5, false).await.unwrap(), "127.0.0.1:5".parse().unwrap());
        }
        assert_eq!(bind_address("*", 5, false).await.unwrap(), "0.0.0.0:5".parse().unwrap());
        assert_eq!(bind_address("::1", 5, true).await.unwrap(), "[::1]:5".parse().unwrap());
        assert_eq!(bind_address("localhost", 5, false).await.unwrap().port(), 5);
        let err = bind_address("no-such-interface-or-host.invalid", 5, false).await.unwrap_err();
        assert!(err.to_string().contains("network interface"), "{err}");
    }

    /// The listener queues as many connections as ZMQ_BACKLOG says. Read back with `ss`, which
    /// shows a listener's backlog as its Send-Q (Linux; skipped where `ss` is missing).
    #[tokio::test(flavor = "current_thread")]
    async fn listens_with_the_backlog_asked_for() {
        let how = super::super::BindOptions { ipv6: false, backlog: 77, buffers: Default::default() };
        let (listener, _) = bind("127.0.0.1", 0, how).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let Ok(out) = std::process::Command::new("ss").args(["-ltnH", &format!("sport = :{port}")]).output() else {
            eprintln!("no `ss` here: backlog not checked");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let send_q = text.split_whitespace().nth(2);
        assert_eq!(send_q, Some("77"), "ss said {text:?}");
    }

    /// The peer address the listener sees for a connection made from `source`.
    async fn seen_from(source: &str) -> io::Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let _stream = connect("127.0.0.1", port, Some(source), Default::default()).await?;
        Ok(listener.accept().await.unwrap().1)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn connects_from_a_source_address_interface_or_port() {
        // Linux routes all of 127.0.0.0/8 to the loopback interface, so 127.0.0.2 is a local address.
        if cfg!(target_os = "linux") {
            assert_eq!(seen_from("127.0.0.2").await.unwrap().ip(), "127.0.0.2".parse::<IpAddr>().unwrap());
            assert_eq!(seen_from("lo:0").await.unwrap().ip(), "127.0.0.1".parse::<IpAddr>().unwrap());
        }
        assert!(seen_from("*").await.unwrap().ip().is_loopback());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert_eq!(seen_from(&format!("127.0.0.1:{port}")).await.unwrap().port(), port);
        let err = seen_from("no-such-interface").await.unwrap_err();
        assert!(err.to_string().contains("network interface"), "{err}");
        // An IPv6 source cannot reach an IPv4-only destination.
        let err = seen_from("::1").await.unwrap_err();
        assert!(err.to_string().contains("family"), "{err}");
    }
}
