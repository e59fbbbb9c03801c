//! Helpers shared by the socket-level suites (sockets, options, monitor): endpoints per transport,
//! time limits, and a macro that runs one scenario over tcp, ipc and inproc.
#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::timeout;

/// Hard limit for one test.
pub const TEST_LIMIT: Duration = Duration::from_secs(20);
/// Generous limit for something that must happen (only there to avoid hanging).
pub const WAIT: Duration = Duration::from_secs(10);
/// Window for something that must *not* happen.
pub const QUIET: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A name unique to this process and call.
pub fn unique(name: &str) -> String {
    format!("zmtp-test-{}-{}-{}", std::process::id(), name, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// An endpoint to bind: `tcp://127.0.0.1:*`, `ipc://<tmp>/<unique>.ipc` or `inproc://<unique>`.
/// `bind` returns the real endpoint to connect to.
pub fn endpoint(transport: &str, name: &str) -> String {
    match transport {
        "tcp" => "tcp://127.0.0.1:*".to_owned(),
        "ipc" => format!("ipc://{}", std::env::temp_dir().join(format!("{}.ipc", unique(name))).display()),
        "inproc" => format!("inproc://{}", unique(name)),
        other => panic!("unknown transport {other}"),
    }
}

/// A concrete endpoint nobody has bound yet (connect-before-bind). TCP: a port the OS just handed
/// out to a throwaway listener.
pub fn unbound_endpoint(transport: &str, name: &str) -> String {
    match transport {
        "tcp" => {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("throwaway listener");
            let port = l.local_addr().expect("local addr").port();
            drop(l);
            format!("tcp://127.0.0.1:{port}")
        }
        _ => endpoint(transport, name),
    }
}

/// Runs a test body under the per-test time limit.
pub async fn run(body: impl Future<Output = ()>) {
    timeout(TEST_LIMIT, body).await.expect("test exceeded its time limit");
}

/// One test per transport for each scenario `async fn scenario(transport: &'static str)`.
macro_rules! over_transports {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tcp() {
                super::run(super::$scenario("tcp")).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ipc() {
                super::run(super::$scenario("ipc")).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn inproc() {
                super::run(super::$scenario("inproc")).await
            }
        }
    )*};
}
