//! Helpers shared by the socket-level suites (sockets, options, monitor, limits, proxy, xpubsub):
//! endpoints per transport, the monitor wait, and a macro that runs one scenario over tcp, ipc and
//! inproc. Time limits, unique names and ports come from `zmtp_testkit`.
#![allow(dead_code)]

use std::time::Duration;

use tokio::time::timeout;
use zmtp::{Monitor, MonitorEvent, Socket};
use zmtp_testkit::{free_port, ipc_endpoint, unique};

/// Generous limit for something that must happen (only there to avoid hanging).
pub const WAIT: Duration = zmtp_testkit::STEP;
/// Window for something that must *not* happen.
pub const QUIET: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// An endpoint to bind: `tcp://127.0.0.1:*`, `ipc://<tmp>/<unique>.ipc` or `inproc://<unique>`.
/// `bind` returns the real endpoint to connect to.
pub fn endpoint(transport: &str, name: &str) -> String {
    match transport {
        "tcp" => "tcp://127.0.0.1:*".to_owned(),
        "ipc" => ipc_endpoint(name),
        "inproc" => format!("inproc://{}", unique(name)),
        other => panic!("unknown transport {other}"),
    }
}

/// A concrete endpoint nobody has bound yet (connect-before-bind). TCP: a port the OS just handed
/// out to a throwaway listener.
pub fn unbound_endpoint(transport: &str, name: &str) -> String {
    match transport {
        "tcp" => format!("tcp://127.0.0.1:{}", free_port()),
        _ => endpoint(transport, name),
    }
}

/// Binds `s` to a fresh [`endpoint`] over `transport`; returns the endpoint to connect to.
pub async fn bind(s: &Socket, transport: &str, name: &str) -> String {
    s.bind(&endpoint(transport, name)).await.unwrap_or_else(|e| panic!("bind over {transport} failed: {e}"))
}

/// Connects `s` to `ep`.
pub async fn connect(s: &Socket, ep: &str) {
    s.connect(ep).await.unwrap_or_else(|e| panic!("connect {ep} failed: {e}"));
}

/// Consumes monitor events until one matches (bounded by [`WAIT`]).
pub async fn wait_event(mon: &mut Monitor, what: &str, mut pred: impl FnMut(&MonitorEvent) -> bool) -> MonitorEvent {
    let found = timeout(WAIT, async {
        loop {
            match mon.next_event().await {
                Some(e) if pred(&e) => return e,
                Some(_) => {}
                None => panic!("monitor ended while waiting for {what}"),
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no {what} event within {WAIT:?}"))
}

/// One test per transport for each scenario `async fn scenario(transport: &'static str)`.
macro_rules! over_transports {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tcp() {
                zmtp_testkit::bounded(super::$scenario("tcp")).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ipc() {
                zmtp_testkit::bounded(super::$scenario("ipc")).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn inproc() {
                zmtp_testkit::bounded(super::$scenario("inproc")).await
            }
        }
    )*};
}
