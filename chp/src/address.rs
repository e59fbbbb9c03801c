//! A CHP server address: `tcp://host:P`, which names three endpoints (P, P+1, P+2).

use std::fmt;

/// Why a server address is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid server address {address:?}: {reason}")]
pub struct AddressError {
    /// The rejected address.
    pub address: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A server's base address. CHP is defined over port numbers (SNAPSHOT at P, PUBLISHER at P+1,
/// COLLECTOR at P+2), so only `tcp://` is meaningful.
///
/// ```
/// use chp::ServerAddress;
/// let a: ServerAddress = "tcp://localhost:5556".parse().unwrap();
/// assert_eq!(a.snapshot(), "tcp://localhost:5556");
/// assert_eq!(a.publisher(), "tcp://localhost:5557");
/// assert_eq!(a.collector(), "tcp://localhost:5558");
/// assert!("tcp://localhost:65534".parse::<ServerAddress>().is_err()); // P+2 would overflow
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerAddress {
    host: String,
    port: u16,
}

impl ServerAddress {
    /// An address from a host (name, IPv4, or bracketed IPv6) and the SNAPSHOT port.
    pub fn new(host: impl Into<String>, port: u16) -> Result<ServerAddress, AddressError> {
        let host = host.into();
        let fail = |reason| Err(AddressError { address: format!("tcp://{host}:{port}"), reason });
        if host.is_empty() {
            return fail("empty host");
        }
        if port == 0 || port > u16::MAX - 2 {
            return fail("port must be 1..=65533 (the server also uses P+1 and P+2)");
        }
        Ok(ServerAddress { host, port })
    }

    /// The host part.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// P, the SNAPSHOT port.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn at(&self, offset: u16) -> String {
        format!("tcp://{}:{}", self.host, self.port + offset)
    }

    /// SNAPSHOT (ROUTER) endpoint, port P.
    pub fn snapshot(&self) -> String {
        self.at(0)
    }

    /// PUBLISHER (PUB) endpoint, port P+1.
    pub fn publisher(&self) -> String {
        self.at(1)
    }

    /// COLLECTOR (SUB) endpoint, port P+2.
    pub fn collector(&self) -> String {
        self.at(2)
    }
}

impl std::str::FromStr for ServerAddress {
    type Err = AddressError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |reason| Err(AddressError { address: s.to_owned(), reason });
        let Some(rest) = s.strip_prefix("tcp://") else {
            return fail("expected tcp://host:port");
        };
        let Some((host, port)) = rest.rsplit_once(':') else {
            return fail("missing :port");
        };
        let Ok(port) = port.parse::<u16>() else {
            return fail("port is not a number 1..=65533");
        };
        ServerAddress::new(host, port).map_err(|e| AddressError { address: s.to_owned(), reason: e.reason })
    }
}

impl fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tcp://{}:{}", self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse() {
        let a: ServerAddress = "tcp://[::1]:7000".parse().unwrap();
        assert_eq!((a.host(), a.port()), ("[::1]", 7000));
        assert_eq!(a.to_string(), "tcp://[::1]:7000");
        for bad in ["ipc:///tmp/x", "tcp://host", "tcp://host:x", "tcp://:5556", "tcp://h:0", "tcp://h:65535"] {
            assert!(bad.parse::<ServerAddress>().is_err(), "{bad}");
        }
    }
}
