//! `chp server` as a process of its own, for the suites that test the command-line tool.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use zmtp_testkit::step;

/// The `chp` binary of this build.
pub const BIN: &str = env!("CARGO_BIN_EXE_chp");

/// A running `chp server` (killed when dropped) and the address it printed.
pub struct ServerProcess {
    pub child: Child,
    pub address: String,
}

/// `chp server --bind 127.0.0.1 ARGS` (give `--port`, `0` for any); waits for its first stdout
/// line, `listening on tcp://host:P (…)`, which names the address.
pub async fn spawn_server(args: &[&str]) -> ServerProcess {
    let mut child = Command::new(BIN)
        .args(["server", "--bind", "127.0.0.1"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn chp server");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let Some(line) = step("server starts", lines.next_line()).await.unwrap() else {
        // It exited before saying where it listens: say why it did.
        let mut why = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut why).await;
        panic!("chp server {args:?} exited before listening: {why}");
    };
    // Drained so that a server that logs much never blocks on a full pipe.
    let mut stderr = child.stderr.take().unwrap();
    tokio::spawn(async move { tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await });
    let address = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    ServerProcess { child, address }
}
