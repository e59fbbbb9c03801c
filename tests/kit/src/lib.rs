//! What the workspace's test suites share, written once: time limits that only stop a hung test
//! (never a synchronisation sleep), ports and endpoints nobody else uses, and the pyzmq witness.
//!
//! The limits are generous on purpose: a test must pass on a machine under full load, so a limit
//! is there to turn a hang into a failure, not to measure speed.
#![forbid(unsafe_code)]

use std::future::Future;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The most one test may take before it is called hung.
pub const TEST_LIMIT: Duration = Duration::from_secs(30);
/// The most one expected step (a message, an event, a line from a peer) may take.
pub const STEP: Duration = Duration::from_secs(10);
/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(5);

/// Runs a test body under [`TEST_LIMIT`].
pub async fn bounded<T>(body: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_LIMIT, body).await.expect("test exceeded its time limit")
}

/// Awaits `fut` under [`STEP`], panicking with `what` if it does not finish.
pub async fn step<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, fut).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Polls `cond` until it holds (under [`STEP`]): for state that raises no event to wait on.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    step(what, async {
        while !cond() {
            tokio::time::sleep(POLL).await;
        }
    })
    .await
}

/// A name unique to this process and call (for ipc paths, inproc names, temp files).
pub fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("zmtp-test-{}-{name}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `ipc://<temp dir>/<unique name>.ipc`.
pub fn ipc_endpoint(name: &str) -> String {
    format!("ipc://{}", std::env::temp_dir().join(format!("{}.ipc", unique(name))).display())
}

/// A TCP port on 127.0.0.1 that the OS just handed out and nobody holds now (for a peer that must
/// be told its port before it binds: another process, or connect-before-bind).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a throwaway listener");
    listener.local_addr().expect("its address").port()
}

/// A UDP port nothing holds at the moment (from a throwaway UDP socket: a free TCP port may be a
/// UDP socket's, and a udp:// bind on it fails with EADDRINUSE).
pub fn free_udp_port() -> u16 {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a throwaway udp socket");
    socket.local_addr().expect("its address").port()
}

/// `python3`, after checking that it can import pyzmq (libzmq 4.3.5, the outside witness of the
/// interop suites); panics with what to install otherwise.
pub fn python_with_pyzmq() -> Command {
    static CHECKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *CHECKED.get_or_init(|| {
        Command::new("python3")
            .args(["-c", "import zmq"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    assert!(ok, "these tests need python3 with pyzmq: run `python3 -m pip install pyzmq` (or `bash .ci/test`)");
    Command::new("python3")
}

/// A python whose pyzmq runs a libzmq 4.3.5 built with its draft API (SERVER, CLIENT, RADIO, DISH,
/// …), which no wheel or distribution package has: `.ci/draft-pyzmq` builds it once into a cache
/// (`bash .ci/test` runs it first) and prints the interpreter's path.
pub fn python_with_draft_pyzmq() -> Command {
    static PYTHON: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    let python = PYTHON.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/draft-pyzmq");
        let out = Command::new("bash").arg(script).stderr(Stdio::inherit()).output().map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match (out.status.success(), stdout.lines().last()) {
            (true, Some(path)) if !path.trim().is_empty() => Ok(path.trim().to_owned()),
            _ => Err(format!("{script} failed ({}): {stdout}", out.status)),
        }
    });
    match python {
        Ok(path) => Command::new(path),
        Err(why) => panic!("these tests need libzmq with its draft API: run `bash .ci/draft-pyzmq` ({why})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn eventually_returns_once_the_condition_holds() {
        let mut polls = 0;
        eventually("three polls", || {
            polls += 1;
            polls == 3
        })
        .await;
        assert_eq!(polls, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out: never")]
    async fn step_names_what_timed_out() {
        step("never", std::future::pending::<()>()).await;
    }

    #[test]
    fn names_are_unique() {
        assert_ne!(unique("a"), unique("a"));
        assert!(ipc_endpoint("x").starts_with("ipc://"));
        assert_ne!(free_port(), 0);
    }
}
