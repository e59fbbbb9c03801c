//! Endpoint arguments of the example binaries: a full endpoint, or just a TCP port.

/// `"5001"` → `tcp://*:5001` (for binding); anything else is taken as an endpoint.
///
/// ```
/// assert_eq!(bstar::endpoint::bind_arg("5001"), "tcp://*:5001");
/// assert_eq!(bstar::endpoint::bind_arg("ipc:///tmp/x"), "ipc:///tmp/x");
/// ```
pub fn bind_arg(arg: &str) -> String {
    port(arg).map_or_else(|| arg.to_owned(), |p| format!("tcp://*:{p}"))
}

/// `"5004"` → `tcp://localhost:5004` (for connecting); anything else is taken as an endpoint.
///
/// ```
/// assert_eq!(bstar::endpoint::connect_arg("5004"), "tcp://localhost:5004");
/// ```
pub fn connect_arg(arg: &str) -> String {
    port(arg).map_or_else(|| arg.to_owned(), |p| format!("tcp://localhost:{p}"))
}

fn port(arg: &str) -> Option<u16> {
    arg.parse().ok()
}
