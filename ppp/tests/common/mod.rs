//! Shared test helpers: raw PPP peers built from zmtp sockets, child processes whose output lines
//! can be awaited (our `ppp` binary, pyzmq scripts). Time limits and ipc endpoints come from
//! `zmtp_testkit`.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use ppp::{QueueEvent, QueueHandle, WorkerEvent, WorkerHandle};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::{STEP, python_with_pyzmq, step};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `recv` that must succeed within [`STEP`].
pub async fn recv(socket: &Socket) -> Message {
    step("a message", socket.recv()).await.expect("recv failed")
}

/// `recv` with a limit: `None` when nothing arrives in time.
pub async fn recv_within(socket: &Socket, limit: Duration) -> Option<Message> {
    timeout(limit, socket.recv()).await.ok().map(|r| r.expect("recv failed"))
}

pub fn ready() -> Message {
    Message::single(Bytes::from_static(&[0x01]))
}

pub fn heartbeat() -> Message {
    Message::single(Bytes::from_static(&[0x02]))
}

pub fn is_heartbeat(msg: &Message) -> bool {
    msg.len() == 1 && msg[0].as_ref() == [0x02]
}

pub fn is_ready(msg: &Message) -> bool {
    msg.len() == 1 && msg[0].as_ref() == [0x01]
}

/// A hand-driven worker: a DEALER with a fixed identity, connected to a queue's backend.
pub async fn raw_worker(endpoint: &str, identity: &'static str) -> Socket {
    let s = Socket::new(SocketType::Dealer);
    s.set_linger(Some(Duration::ZERO));
    s.set_routing_id(identity).unwrap();
    s.connect(endpoint).await.unwrap();
    s
}

/// Receives on a raw worker until a non-heartbeat message arrives, answering each HEARTBEAT with
/// one (so the worker stays alive meanwhile); returns it and the heartbeats seen on the way.
pub async fn next_request(worker: &Socket) -> (Message, usize) {
    let mut beats = 0;
    loop {
        let msg = recv(worker).await;
        if is_heartbeat(&msg) {
            beats += 1;
            worker.send(heartbeat()).await.expect("send heartbeat");
        } else {
            return (msg, beats);
        }
    }
}

/// Removes the socket file of an ipc endpoint (left behind by a killed process).
pub fn remove_ipc(endpoint: &str) {
    if let Some(path) = endpoint.strip_prefix("ipc://") {
        let _ = std::fs::remove_file(path);
    }
}

/// A line of output from a child process, with the time it was read.
#[derive(Clone, Debug)]
pub struct Line {
    pub stderr: bool,
    pub text: String,
    pub at: Instant,
}

/// A child process whose stdout and stderr lines arrive on a channel (and are kept for reports).
pub struct Proc {
    pub name: String,
    pub child: Child,
    lines: mpsc::UnboundedReceiver<Line>,
    pub seen: Vec<Line>,
}

impl Proc {
    pub fn spawn(name: &str, program: &str, args: &[&str]) -> Proc {
        Proc::spawn_command(name, Command::new(program), args)
    }

    /// Runs `cmd` with `args` added, stdin closed and stdout/stderr read line by line.
    pub fn spawn_command(name: &str, mut cmd: Command, args: &[&str]) -> Proc {
        let program = cmd.as_std().get_program().to_string_lossy().into_owned();
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        cmd.env_remove("RUST_LOG");
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let (tx, lines) = mpsc::unbounded_channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        for (stderr, stream) in
            [(false, Box::new(out) as Box<dyn tokio::io::AsyncRead + Unpin + Send>), (true, Box::new(err))]
        {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(text)) = reader.next_line().await {
                    if tx.send(Line { stderr, text, at: Instant::now() }).is_err() {
                        break;
                    }
                }
            });
        }
        Proc { name: name.to_owned(), child, lines, seen: Vec::new() }
    }

    /// Our `ppp` binary.
    pub fn ppp(name: &str, args: &[&str]) -> Proc {
        Proc::spawn(name, env!("CARGO_BIN_EXE_ppp"), args)
    }

    /// The pyzmq script `tests/py/<script>` (unbuffered), after checking that python3 has pyzmq.
    pub fn python(script: &str, args: &[&str]) -> Proc {
        let path = format!("{}/tests/py/{script}", env!("CARGO_MANIFEST_DIR"));
        Proc::spawn_command(script, Command::from(python_with_pyzmq()), &[&["-u", path.as_str()], args].concat())
    }

    /// The next line satisfying `pred` (within [`STEP`]); panics with the output so far otherwise.
    pub async fn wait_for(&mut self, what: &str, pred: impl Fn(&Line) -> bool) -> Line {
        self.wait_for_within(STEP, what, pred).await.unwrap_or_else(|| panic!("{}", self.report(what)))
    }

    /// Like [`wait_for`](Self::wait_for) but `None` on timeout or end of output.
    pub async fn wait_for_within(
        &mut self,
        limit: Duration,
        _what: &str,
        pred: impl Fn(&Line) -> bool,
    ) -> Option<Line> {
        let deadline = Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return Some(line);
                    }
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Reads the remaining output until the process closes it.
    pub async fn drain(&mut self) {
        while let Ok(Some(line)) = timeout(STEP, self.lines.recv()).await {
            self.seen.push(line);
        }
    }

    pub fn report(&self, what: &str) -> String {
        let mut s = format!("{}: no line matching {what}; output so far:\n", self.name);
        for l in &self.seen {
            s.push_str(if l.stderr { "  [err] " } else { "  [out] " });
            s.push_str(&l.text);
            s.push('\n');
        }
        s
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill");
    }

    /// Waits for the process to exit by itself.
    pub async fn wait_exit(&mut self) -> std::process::ExitStatus {
        timeout(STEP, self.child.wait()).await.unwrap_or_else(|_| panic!("{} did not exit", self.name)).unwrap()
    }
}

/// The value of `key=NUMBER` in a log line.
pub fn field(text: &str, key: &str) -> Option<u64> {
    let pat = format!("{key}=");
    let start = text.find(&pat)? + pat.len();
    let digits: String = text[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The value after `prefix` on a line starting with it.
pub fn after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.strip_prefix(prefix).map(str::trim)
}

/// The next queue event matching `pred`, skipping others (bounded by STEP).
pub async fn queue_event(q: &mut QueueHandle, what: &str, pred: impl Fn(&QueueEvent) -> bool) -> QueueEvent {
    let deadline = Instant::now() + STEP;
    loop {
        match tokio::time::timeout_at(deadline, q.next_event()).await {
            Ok(Some(ev)) if pred(&ev) => return ev,
            Ok(Some(_)) => {}
            Ok(None) => panic!("queue stopped while waiting for {what}"),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}

/// The next worker event matching `pred`, skipping others (bounded by STEP).
pub async fn worker_event(w: &mut WorkerHandle, what: &str, pred: impl Fn(&WorkerEvent) -> bool) -> WorkerEvent {
    let deadline = Instant::now() + STEP;
    loop {
        match tokio::time::timeout_at(deadline, w.next_event()).await {
            Ok(Some(ev)) if pred(&ev) => return ev,
            Ok(Some(_)) => {}
            Ok(None) => panic!("worker stopped while waiting for {what}"),
            Err(_) => panic!("timed out waiting for {what}"),
        }
    }
}
