//! Endpoint strings: `tcp://host:port` (with libzmq's `tcp://source;host:port` to connect from a
//! chosen interface or address), `ipc://path`, `inproc://name`, and for RADIO/DISH
//! `udp://[interface;]host:port`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::Error;

/// A parsed endpoint.
///
/// ```
/// use zmtp::Endpoint;
/// let ep: Endpoint = "tcp://127.0.0.1:5555".parse().unwrap();
/// assert_eq!(ep, Endpoint::Tcp { host: "127.0.0.1".into(), port: 5555, source: None });
/// assert!("tcp://[::1]:*".parse::<Endpoint>().is_ok());
/// // Connect from the interface `eth0` (any local port), as libzmq writes it:
/// let ep: Endpoint = "tcp://eth0:0;10.0.0.1:5555".parse().unwrap();
/// assert_eq!(ep, Endpoint::Tcp { host: "10.0.0.1".into(), port: 5555, source: Some("eth0:0".into()) });
/// // RADIO/DISH datagrams, multicast from the interface `eth0`:
/// let ep: Endpoint = "udp://eth0;239.0.0.1:5555".parse().unwrap();
/// assert_eq!(ep, Endpoint::Udp { host: "239.0.0.1".into(), port: 5555, interface: Some("eth0".into()) });
/// assert!("pgm://x:1".parse::<Endpoint>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// TCP; `host` is `*` for the wildcard, brackets stripped from IPv6; `port` 0 = OS-assigned.
    Tcp {
        /// Host name, address, or `*`.
        host: String,
        /// Port (0 when `*` or `0` was given).
        port: u16,
        /// Connect only: where the connection comes from, as libzmq's `tcp://SOURCE;host:port`
        /// writes it — an interface name, an IP address or `*`, with an optional `:port` (`:0`
        /// or none: any). Never resolved through DNS, as in libzmq.
        source: Option<String>,
    },
    /// A Unix domain socket path (`*` = a fresh temporary path on bind). Unix only: elsewhere
    /// `ipc://` does not parse ([`Error::UnsupportedTransport`]).
    Ipc(PathBuf),
    /// An in-process name.
    Inproc(String),
    /// UDP datagrams, RADIO (connect: where to send, unicast or a multicast group) and DISH (bind:
    /// where to receive; a multicast address joins that group) only, as in libzmq.
    Udp {
        /// Address or host name; `*` on bind for every interface.
        host: String,
        /// Port (a bind needs one: there is no OS-assigned port to report for datagrams).
        port: u16,
        /// libzmq's `udp://interface;host:port`: the interface (a name or an address) that
        /// multicast is joined on or sent from.
        interface: Option<String>,
    },
}

impl FromStr for Endpoint {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |why| Error::InvalidEndpoint(s.to_owned(), why);
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("expected transport://address"))?;
        match scheme {
            "tcp" => {
                let (source, rest) = match rest.split_once(';') {
                    Some((source, rest)) => {
                        if SourceAddress::parse(source).is_none() || rest.contains(';') {
                            return Err(bad("expected source;host:port with source an interface or address"));
                        }
                        (Some(source.to_owned()), rest)
                    }
                    None => (None, rest),
                };
                let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("expected host:port"))?;
                let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
                if host.is_empty() {
                    return Err(bad("empty host"));
                }
                let port = match port {
                    "*" | "0" => 0,
                    p => p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad("invalid port"))?,
                };
                Ok(Endpoint::Tcp { host: host.to_owned(), port, source })
            }
            "udp" if cfg!(feature = "draft") => {
                let (interface, rest) = match rest.split_once(';') {
                    Some((interface, _))
                        if interface.is_empty() || interface.contains(':') && !interface.contains('.') =>
                    {
                        return Err(bad("expected interface;host:port with interface a name or an IPv4 address"));
                    }
                    Some((interface, rest)) => (Some(interface.to_owned()), rest),
                    None => (None, rest),
                };
                let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("expected host:port"))?;
                let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
                let port = port.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad("invalid port"))?;
                if host.is_empty() || rest.contains(';') {
                    return Err(bad("expected host:port"));
                }
                Ok(Endpoint::Udp { host: host.to_owned(), port, interface })
            }
            // ipc:// is Unix domain sockets: refused at once where the OS has none, rather than
            // failing on every reconnect.
            "ipc" if !cfg!(unix) => Err(Error::UnsupportedTransport(format!("{s} (no Unix domain sockets here)"))),
            "ipc" if !rest.is_empty() => Ok(Endpoint::Ipc(PathBuf::from(rest))),
            "inproc" if !rest.is_empty() => Ok(Endpoint::Inproc(rest.to_owned())),
            "ipc" | "inproc" => Err(bad("empty address")),
            _ => Err(Error::UnsupportedTransport(s.to_owned())),
        }
    }
}

/// A parsed source address: `name[:port]`, `[v6]:port` or a bare IPv6 literal; `name` is `*`, an IP
/// address or an interface name (resolved when connecting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceAddress<'a> {
    pub(crate) name: &'a str,
    pub(crate) port: u16,
}

impl<'a> SourceAddress<'a> {
    pub(crate) fn parse(text: &'a str) -> Option<SourceAddress<'a>> {
        if text.is_empty() || text.contains(';') {
            return None;
        }
        if text.parse::<std::net::Ipv6Addr>().is_ok() {
            return Some(SourceAddress { name: text, port: 0 });
        }
        let (name, port) = match text.rsplit_once(':') {
            Some((name, port)) => {
                let port = match port {
                    "*" => 0,
                    p => p.parse::<u16>().ok()?,
                };
                (name, port)
            }
            None => (text, 0),
        };
        let name = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
        (!name.is_empty()).then_some(SourceAddress { name, port })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp { host, port, source } => {
                f.write_str("tcp://")?;
                if let Some(source) = source {
                    write!(f, "{source};")?;
                }
                if host.contains(':') { write!(f, "[{host}]:{port}") } else { write!(f, "{host}:{port}") }
            }
            Endpoint::Ipc(p) => write!(f, "ipc://{}", p.display()),
            Endpoint::Inproc(n) => write!(f, "inproc://{n}"),
            Endpoint::Udp { host, port, interface } => {
                f.write_str("udp://")?;
                if let Some(interface) = interface {
                    write!(f, "{interface};")?;
                }
                if host.contains(':') { write!(f, "[{host}]:{port}") } else { write!(f, "{host}:{port}") }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let tcp = |h: &str, p| Endpoint::Tcp { host: h.into(), port: p, source: None };
        assert_eq!("tcp://*:0".parse::<Endpoint>().unwrap(), tcp("*", 0));
        assert_eq!("tcp://*:*".parse::<Endpoint>().unwrap(), tcp("*", 0));
        assert_eq!("tcp://[::1]:5".parse::<Endpoint>().unwrap(), tcp("::1", 5));
        assert_eq!("tcp://localhost:80".parse::<Endpoint>().unwrap(), tcp("localhost", 80));
        assert_eq!("ipc:///tmp/x".parse::<Endpoint>().unwrap(), Endpoint::Ipc("/tmp/x".into()));
        assert_eq!("inproc://a".parse::<Endpoint>().unwrap(), Endpoint::Inproc("a".into()));
        assert_eq!(tcp("::1", 5).to_string(), "tcp://[::1]:5");
        let from = |s: &str, h: &str, p| Endpoint::Tcp { host: h.into(), port: p, source: Some(s.into()) };
        for (text, ep) in [
            ("tcp://eth0:0;10.0.0.1:5555", from("eth0:0", "10.0.0.1", 5555)),
            ("tcp://eth0;host:1", from("eth0", "host", 1)),
            ("tcp://192.168.1.17:5555;192.168.1.1:5555", from("192.168.1.17:5555", "192.168.1.1", 5555)),
            ("tcp://[::1]:*;[::1]:7", from("[::1]:*", "::1", 7)),
        ] {
            assert_eq!(text.parse::<Endpoint>().unwrap(), ep, "{text}");
            assert_eq!(ep.to_string(), text);
        }
        let udp = |i: Option<&str>, h: &str, p| Endpoint::Udp { host: h.into(), port: p, interface: i.map(Into::into) };
        for (text, ep) in [
            ("udp://127.0.0.1:5555", udp(None, "127.0.0.1", 5555)),
            ("udp://*:5556", udp(None, "*", 5556)),
            ("udp://eth0;239.0.0.1:5555", udp(Some("eth0"), "239.0.0.1", 5555)),
            ("udp://192.168.1.2;239.0.0.1:5555", udp(Some("192.168.1.2"), "239.0.0.1", 5555)),
        ] {
            assert_eq!(text.parse::<Endpoint>().unwrap(), ep, "{text}");
            assert_eq!(ep.to_string(), text);
        }
        for bad in ["udp://h:0", "udp://h:*", "udp://:5", "udp://;h:5", "udp://a;b;h:5", "udp://h"] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
        assert_eq!(SourceAddress::parse("::1"), Some(SourceAddress { name: "::1", port: 0 }));
        assert_eq!(SourceAddress::parse("[::1]:9"), Some(SourceAddress { name: "::1", port: 9 }));
        assert_eq!(SourceAddress::parse("lo"), Some(SourceAddress { name: "lo", port: 0 }));
        for bad in [
            "tcp://host",
            "tcp://:5",
            "tcp://h:70000",
            "tcp://h:x",
            "inproc://",
            "ipc://",
            "nope",
            "pgm://a:1",
            "tcp://;h:1",
            "tcp://eth0:x;h:1",
            "tcp://a;b;h:1",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }
}
