//! TCP: wildcard, interface names and OS-assigned ports on bind, name resolution on connect,
//! TCP_NODELAY always.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::{TcpListener, TcpStream, lookup_host};

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
fn interface_address(name: &str, ipv6: bool) -> Option<IpAddr> {
    let interfaces = if_addrs::get_if_addrs().ok()?;
    interfaces.into_iter().filter(|i| i.name == name).map(|i| i.ip()).find(|ip| ip.is_ipv4() || ipv6)
}

pub(super) async fn bind(host: &str, port: u16, ipv6: bool) -> io::Result<(TcpListener, String)> {
    let addr = bind_address(host, port, ipv6).await?;
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
}
