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
