//! TCP: wildcard and OS-assigned ports on bind, name resolution on connect, TCP_NODELAY always.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::{TcpListener, TcpStream, lookup_host};

pub(super) async fn bind(host: &str, port: u16, ipv6: bool) -> io::Result<(TcpListener, String)> {
    let addr = if host == "*" {
        let ip = if ipv6 { IpAddr::V6(Ipv6Addr::UNSPECIFIED) } else { IpAddr::V4(Ipv4Addr::UNSPECIFIED) };
        SocketAddr::new(ip, port)
    } else {
        lookup_host((host, port))
            .await?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::AddrNotAvailable, format!("cannot resolve {host}")))?
    };
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let name = match local {
        SocketAddr::V6(a) => format!("tcp://[{}]:{}", a.ip(), a.port()),
        SocketAddr::V4(a) => format!("tcp://{a}"),
    };
    Ok((listener, name))
}

pub(super) async fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let stream = TcpStream::connect((host, port)).await?;
    configure(&stream);
    Ok(stream)
}

pub(super) fn configure(stream: &TcpStream) {
    // Small messages are batched by the writer; Nagle would only add latency (libzmq sets it too).
    let _ = stream.set_nodelay(true);
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
