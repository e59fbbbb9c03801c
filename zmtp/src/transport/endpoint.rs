//! Endpoint strings: `tcp://host:port`, `ipc://path`, `inproc://name`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::Error;

/// A parsed endpoint.
///
/// ```
/// use zmtp::Endpoint;
/// let ep: Endpoint = "tcp://127.0.0.1:5555".parse().unwrap();
/// assert_eq!(ep, Endpoint::Tcp { host: "127.0.0.1".into(), port: 5555 });
/// assert!("tcp://[::1]:*".parse::<Endpoint>().is_ok());
/// assert!("udp://x:1".parse::<Endpoint>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// TCP; `host` is `*` for the wildcard, brackets stripped from IPv6; `port` 0 = OS-assigned.
    Tcp {
        /// Host name, address, or `*`.
        host: String,
        /// Port (0 when `*` or `0` was given).
        port: u16,
    },
    /// A Unix domain socket path (`*` = a fresh temporary path on bind). Unix only: elsewhere
    /// `ipc://` does not parse ([`Error::UnsupportedTransport`]).
    Ipc(PathBuf),
    /// An in-process name.
    Inproc(String),
}

impl FromStr for Endpoint {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |why| Error::InvalidEndpoint(s.to_owned(), why);
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("expected transport://address"))?;
        match scheme {
            "tcp" => {
                let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("expected host:port"))?;
                let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
                if host.is_empty() {
                    return Err(bad("empty host"));
                }
                let port = match port {
                    "*" | "0" => 0,
                    p => p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| bad("invalid port"))?,
                };
                Ok(Endpoint::Tcp { host: host.to_owned(), port })
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

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp { host, port } if host.contains(':') => {
                write!(f, "tcp://[{host}]:{port}")
            }
            Endpoint::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
            Endpoint::Ipc(p) => write!(f, "ipc://{}", p.display()),
            Endpoint::Inproc(n) => write!(f, "inproc://{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let tcp = |h: &str, p| Endpoint::Tcp { host: h.into(), port: p };
        assert_eq!("tcp://*:0".parse::<Endpoint>().unwrap(), tcp("*", 0));
        assert_eq!("tcp://*:*".parse::<Endpoint>().unwrap(), tcp("*", 0));
        assert_eq!("tcp://[::1]:5".parse::<Endpoint>().unwrap(), tcp("::1", 5));
        assert_eq!("tcp://localhost:80".parse::<Endpoint>().unwrap(), tcp("localhost", 80));
        assert_eq!("ipc:///tmp/x".parse::<Endpoint>().unwrap(), Endpoint::Ipc("/tmp/x".into()));
        assert_eq!("inproc://a".parse::<Endpoint>().unwrap(), Endpoint::Inproc("a".into()));
        assert_eq!(tcp("::1", 5).to_string(), "tcp://[::1]:5");
        for bad in ["tcp://host", "tcp://:5", "tcp://h:70000", "tcp://h:x", "inproc://", "ipc://", "nope", "pgm://a:1"]
        {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }
}
