//! UDP for RADIO and DISH (libzmq's udp_address.cpp): a DISH binds an address to receive on — a
//! multicast group address joins that group, on the endpoint's interface or the default one — and
//! a RADIO connects to the address it sends to, unicast or multicast (sent from the endpoint's
//! interface, with ZMQ_MULTICAST_HOPS and ZMQ_MULTICAST_LOOP). No connection and no handshake:
//! the datagram format is [`crate::wire::udp`].

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{UdpSocket, lookup_host};

use super::tcp::interface_address;

/// `host` as an address: `*` (every interface), an IP address, or a name that resolves.
async fn resolve(host: &str, port: u16) -> io::Result<SocketAddr> {
    if host == "*" {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let mut found = lookup_host((host, port)).await?;
    found.next().ok_or_else(|| io::Error::new(io::ErrorKind::AddrNotAvailable, format!("{host:?} does not resolve")))
}

/// The IPv4 address of `interface` (a name or an address), for multicast.
fn interface_v4(interface: Option<&str>) -> io::Result<Ipv4Addr> {
    let Some(name) = interface else { return Ok(Ipv4Addr::UNSPECIFIED) };
    let ip = name.parse::<IpAddr>().ok().or_else(|| interface_address(name, false));
    match ip {
        Some(IpAddr::V4(ip)) => Ok(ip),
        _ => Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("{name:?} is neither an IPv4 address nor a network interface with one"),
        )),
    }
}

fn datagram_socket(addr: &SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(*addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// A DISH's bind: the socket and the endpoint as bound.
pub(crate) async fn bind(host: &str, port: u16, interface: Option<&str>) -> io::Result<(UdpSocket, String)> {
    let addr = resolve(host, port).await?;
    let socket = datagram_socket(&addr)?;
    if addr.ip().is_multicast() {
        // Several receivers on one host share a multicast port (libzmq sets SO_REUSEADDR too).
        socket.set_reuse_address(true)?;
        match addr.ip() {
            IpAddr::V4(group) => {
                socket.bind(&SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port).into())?;
                socket.join_multicast_v4(&group, &interface_v4(interface)?)?;
            }
            IpAddr::V6(group) => {
                socket.bind(&SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port).into())?;
                socket.join_multicast_v6(&group, 0)?;
            }
        }
    } else {
        socket.bind(&addr.into())?;
    }
    let socket = UdpSocket::from_std(socket.into())?;
    let name = match (addr.ip().is_multicast(), socket.local_addr()?) {
        (true, _) => addr,
        (false, local) => local,
    };
    let interface = interface.map(|i| format!("{i};")).unwrap_or_default();
    Ok((socket, format!("udp://{interface}{name}")))
}

/// A RADIO's connect: a socket that sends to `host:port`.
pub(crate) async fn connect(
    host: &str,
    port: u16,
    interface: Option<&str>,
    hops: u32,
    multicast_loop: bool,
) -> io::Result<UdpSocket> {
    let dest = resolve(host, port).await?;
    let socket = datagram_socket(&dest)?;
    let any = if dest.is_ipv4() { IpAddr::V4(Ipv4Addr::UNSPECIFIED) } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
    match dest.ip() {
        IpAddr::V4(_) if dest.ip().is_multicast() => {
            socket.set_multicast_ttl_v4(hops)?;
            socket.set_multicast_loop_v4(multicast_loop)?;
            socket.set_multicast_if_v4(&interface_v4(interface)?)?;
            socket.bind(&SocketAddr::new(any, 0).into())?;
        }
        IpAddr::V6(_) if dest.ip().is_multicast() => {
            socket.set_multicast_hops_v6(hops)?;
            socket.set_multicast_loop_v6(multicast_loop)?;
            socket.bind(&SocketAddr::new(any, 0).into())?;
        }
        _ => {
            let local = match interface {
                Some(_) => IpAddr::V4(interface_v4(interface)?),
                None => any,
            };
            socket.bind(&SocketAddr::new(local, 0).into())?;
        }
    }
    let socket = UdpSocket::from_std(socket.into())?;
    socket.connect(dest).await?;
    Ok(socket)
}
