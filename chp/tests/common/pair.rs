//! Helpers for high-availability pair tests: free port triples, in-process pairs with short
//! timings, `chp server --primary|--backup` processes with parsed status lines, wire observers.
//! The pair's ipc state endpoints come from `zmtp_testkit::ipc_endpoint`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bstar::{Side, State};
use bytes::Bytes;
use chp::command::Update;
use chp::server::ha::{HaConfig, HaServer};
use chp::server::pending::PendingConfig;
use chp::{ClientOptions, KvMsg, ServerAddress};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use zmtp::{Socket, SocketType};
use zmtp_testkit::{STEP, ipc_endpoint, step};

/// Binary Star heartbeat of test pairs (peer expiry 200 ms).
pub const HEARTBEAT: Duration = Duration::from_millis(100);
/// Clients' server ttl in pair tests.
pub const SERVER_TTL: Duration = Duration::from_millis(400);
/// Pending window of test pairs.
pub const WINDOW: Duration = Duration::from_millis(1500);

/// Free loopback ports: `triples` runs of P, P+1, P+2, held until all are found, then released.
///
/// They are taken below the OS's ephemeral port range when there is room: between their release
/// and the server binding them, no outgoing connection (of any test) and no `port 0` bind can
/// take them, as happens with ports the OS hands out.
pub fn free_ports(triples: usize) -> Vec<u16> {
    let bind = |port: u16| TcpListener::bind(("127.0.0.1", port));
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    // 20000 and up: servers bound with port 0 pick their random triples from 10000..20000, so
    // tests that run in parallel never draw from the same pool.
    let (low, high) = (20_000u16, ephemeral_low.saturating_sub(3));
    // Triples start at `low` + a multiple of 3, and each is handed out once per test process: two
    // tests running in parallel can neither get the same triple nor overlapping ones (a test that
    // probed 30546 for its own triple while another's server had yet to bind 30544..30546 made
    // that server fail to start — its peer then waited for it forever).
    static HANDED_OUT: Mutex<std::collections::BTreeSet<u16>> = Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut candidates: Box<dyn Iterator<Item = u16>> = if high > low + 1000 {
        let start = low + rand::random::<u16>() % ((high - low) / 3) * 3;
        Box::new((start..high).step_by(3).chain((low..start).step_by(3)).chain(std::iter::repeat(0)))
    } else {
        Box::new(std::iter::repeat(0))
    };
    let mut held = Vec::new();
    let mut found = Vec::new();
    while found.len() < triples {
        let Ok(a) = bind(candidates.next().expect("endless")) else { continue };
        let p = a.local_addr().unwrap().port();
        if p > u16::MAX - 2 {
            continue;
        }
        if handed_out.contains(&p) {
            continue;
        }
        if let (Ok(b), Ok(c)) = (bind(p + 1), bind(p + 2)) {
            held.extend([a, b, c]);
            handed_out.insert(p);
            found.push(p);
        }
    }
    found
}

/// Where a pair lives: CHP addresses (tcp, free ports) and state endpoints (ipc, their socket
/// files removed when this drops).
pub struct PairPorts {
    pub primary: ServerAddress,
    pub backup: ServerAddress,
    pub primary_state: String,
    pub backup_state: String,
}

impl PairPorts {
    pub fn new() -> PairPorts {
        let p = free_ports(2);
        PairPorts {
            primary: ServerAddress::new("127.0.0.1", p[0]).unwrap(),
            backup: ServerAddress::new("127.0.0.1", p[1]).unwrap(),
            primary_state: ipc_endpoint("chp-ha-ps"),
            backup_state: ipc_endpoint("chp-ha-bs"),
        }
    }

    /// The address of `side`.
    pub fn address(&self, side: Side) -> &ServerAddress {
        match side {
            Side::Primary => &self.primary,
            Side::Backup => &self.backup,
        }
    }

    /// An in-process server configuration with short timings.
    pub fn config(&self, side: Side) -> HaConfig {
        let (port, own, peer_state, peer) = match side {
            Side::Primary => (self.primary.port(), &self.primary_state, &self.backup_state, &self.backup),
            Side::Backup => (self.backup.port(), &self.backup_state, &self.primary_state, &self.primary),
        };
        let mut c = HaConfig::new(side, port, own, peer_state, peer.clone())
            .bind("127.0.0.1")
            .heartbeat(HEARTBEAT)
            .hugz(super::HUGZ);
        c.pending = PendingConfig { window: WINDOW, ..PendingConfig::default() };
        c.peer_sync_timeout = Duration::from_millis(500);
        c
    }

    /// Client options for both servers (primary first).
    pub fn options(&self) -> ClientOptions {
        ClientOptions::for_servers(vec![self.primary.clone(), self.backup.clone()])
            .server_ttl(SERVER_TTL)
            .set_timing(Duration::from_millis(300), STEP)
    }

    /// `chp server` arguments for `side`.
    pub fn args(&self, side: Side, extra: &[&str]) -> Vec<String> {
        let (flag, port, own, peer_state, peer) = match side {
            Side::Primary => ("--primary", self.primary.port(), &self.primary_state, &self.backup_state, &self.backup),
            Side::Backup => ("--backup", self.backup.port(), &self.backup_state, &self.primary_state, &self.primary),
        };
        let mut args: Vec<String> = [
            "server",
            flag,
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--state",
            own,
            "--peer-state",
            peer_state,
            "--peer",
            &peer.to_string(),
            "--heartbeat-ms",
            &HEARTBEAT.as_millis().to_string(),
            "--hugz-ms",
            &super::HUGZ.as_millis().to_string(),
            "--status-ms",
            "25",
            "--pending-window-ms",
            &WINDOW.as_millis().to_string(),
            "--peer-sync-timeout-ms",
            "500",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }
}

impl Drop for PairPorts {
    fn drop(&mut self) {
        for endpoint in [&self.primary_state, &self.backup_state] {
            if let Some(path) = endpoint.strip_prefix("ipc://") {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// Starts an in-process pair and waits until the primary is ACTIVE and the backup PASSIVE with a
/// complete copy.
pub async fn in_process_pair(ports: &PairPorts) -> (HaServer, HaServer) {
    let primary = HaServer::bind(ports.config(Side::Primary)).await.expect("primary binds");
    let backup = HaServer::bind(ports.config(Side::Backup)).await.expect("backup binds");
    step("pair formed", async {
        primary.wait_for(|s| s.state == State::Active).await.expect("primary running");
        backup.wait_for(|s| s.state == State::Passive && s.peer_synced).await.expect("backup running");
    })
    .await;
    (primary, backup)
}

/// A `status:` line of `chp server`, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStatus {
    pub state: String,
    pub sequence: u64,
    pub keys: usize,
    pub pending: usize,
    pub peer: String,
    pub synced: bool,
    pub matched: u64,
    pub late: u64,
    pub pruned: u64,
    pub replayed: u64,
    pub duplicates: u64,
}

impl ProcStatus {
    fn parse(line: &str) -> Option<ProcStatus> {
        let rest = line.strip_prefix("status: ")?;
        let fields: BTreeMap<&str, &str> = rest.split_whitespace().filter_map(|f| f.split_once('=')).collect();
        let num = |k: &str| fields.get(k).and_then(|v| v.parse::<u64>().ok());
        Some(ProcStatus {
            state: fields.get("state")?.to_string(),
            sequence: num("sequence")?,
            keys: num("keys")? as usize,
            pending: num("pending")? as usize,
            peer: fields.get("peer")?.to_string(),
            synced: *fields.get("synced")? == "true",
            matched: num("matched")?,
            late: num("late")?,
            pruned: num("pruned")?,
            replayed: num("replayed")?,
            duplicates: num("duplicates")?,
        })
    }
}

/// `chp server --primary|--backup` as a child process; stdout lines arrive on a channel, status
/// lines on a watch.
pub struct ServerProc {
    pub name: &'static str,
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    status: watch::Receiver<Option<ProcStatus>>,
    pub seen: Vec<String>,
    /// Its log (stderr) lines at warn and above, when started with [`ServerProc::spawn_logging`].
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ServerProc {
    pub fn spawn(name: &'static str, side: Side, ports: &PairPorts, extra: &[&str]) -> ServerProc {
        Self::start(name, side, ports, extra, false)
    }

    /// As [`spawn`](Self::spawn), keeping its warnings in [`ServerProc::log`].
    pub fn spawn_logging(name: &'static str, side: Side, ports: &PairPorts, extra: &[&str]) -> ServerProc {
        Self::start(name, side, ports, extra, true)
    }

    fn start(name: &'static str, side: Side, ports: &PairPorts, extra: &[&str], logging: bool) -> ServerProc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_chp"))
            .args(ports.args(side, extra))
            .env("RUST_LOG", if logging { "warn" } else { "error" })
            .stdout(Stdio::piped())
            .stderr(if logging { Stdio::piped() } else { Stdio::inherit() })
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let log = log.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    log.lock().unwrap().push(line);
                }
            });
        }
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(None);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                match ProcStatus::parse(&line) {
                    Some(s) => {
                        status_tx.send_replace(Some(s));
                    }
                    None => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        ServerProc { name, child, lines, status, seen: Vec::new(), log }
    }

    /// A primary and a backup started as processes, returned once the pair is formed (primary active,
    /// backup synced with it).
    pub async fn formed_pair(ports: &PairPorts) -> (ServerProc, ServerProc) {
        let mut primary = ServerProc::spawn("primary", Side::Primary, ports, &[]);
        let mut backup = ServerProc::spawn("backup", Side::Backup, ports, &[]);
        // On failure, say what *both* servers printed and whether either has exited: the primary
        // waits for the backup, so its own lines alone cannot tell why the pair did not form.
        let formed = tokio::time::timeout(STEP, async {
            primary.wait_line("role: ACTIVE").await?;
            backup.wait_line("peer: synced").await
        })
        .await;
        if !matches!(formed, Ok(Some(_))) {
            panic!("the pair did not form within {STEP:?}:\n{}\n{}", primary.report(), backup.report());
        }
        (primary, backup)
    }

    /// Reads lines until one starts with `prefix` (`None` if stdout closes first).
    async fn wait_line(&mut self, prefix: &str) -> Option<String> {
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                return Some(line);
            }
        }
        None
    }

    /// What this server printed, its last status line and whether it has exited.
    pub fn report(&mut self) -> String {
        let seen = self.drain();
        let exited = self.child.try_wait().ok().flatten();
        let status = self.status.borrow().clone();
        format!("{}: exited {exited:?}, last status {status:?}, lines {seen:#?}", self.name)
    }

    /// Reads lines (other than status lines) until one starts with `prefix`; returns it.
    pub async fn expect(&mut self, prefix: &str) -> String {
        let name = self.name;
        let found = tokio::time::timeout(STEP, async {
            loop {
                match self.lines.recv().await {
                    Some(line) => {
                        self.seen.push(line.clone());
                        if line.starts_with(prefix) {
                            return Some(line);
                        }
                    }
                    None => return None,
                }
            }
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            Ok(None) => panic!("{name}: stdout closed before {prefix:?}; seen {:#?}", self.seen),
            Err(_) => panic!("{name}: no {prefix:?} within {STEP:?}; seen {:#?}", self.seen),
        }
    }

    /// Lines (other than status lines) received so far, without waiting.
    pub fn drain(&mut self) -> Vec<String> {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.clone()
    }

    /// Waits until a status line satisfies `pred`; returns it.
    pub async fn status_until(&mut self, what: &str, mut pred: impl FnMut(&ProcStatus) -> bool) -> ProcStatus {
        let name = self.name;
        let mut last = None;
        let found = tokio::time::timeout(STEP, async {
            loop {
                if let Some(s) = self.status.borrow_and_update().clone() {
                    if pred(&s) {
                        return Some(s);
                    }
                    last = Some(s);
                }
                if self.status.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        match found {
            Ok(Some(s)) => s,
            _ => panic!("{name}: status never {what}; last {last:?}"),
        }
    }

    /// The next status line printed from now on.
    pub async fn next_status(&mut self) -> ProcStatus {
        let name = self.name;
        self.status.borrow_and_update();
        step("a status line", self.status.changed()).await.unwrap_or_else(|_| panic!("{name}: stdout closed"));
        self.status.borrow_and_update().clone().expect("a status line")
    }

    /// The latest status line.
    pub fn status(&self) -> Option<ProcStatus> {
        self.status.borrow().clone()
    }

    /// SIGKILL, and wait until the process is gone.
    pub async fn kill9(&mut self) -> Instant {
        self.child.start_kill().unwrap();
        let at = Instant::now();
        step("process gone after SIGKILL", self.child.wait()).await.unwrap();
        at
    }

    /// Waits for the process to exit by itself; returns its exit code.
    /// Sends a signal (`"STOP"`, `"CONT"`, …) with kill(1).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("process running").to_string();
        let status = std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// True while the process has not exited.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub async fn exit_code(&mut self) -> Option<i32> {
        step("process exits", self.child.wait()).await.unwrap().code()
    }
}

/// A KVPUB seen by an [`Observer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub sequence: u64,
    pub key: Bytes,
    pub body: Bytes,
    pub uuid: Option<chp::Uuid>,
    pub at: Instant,
}

/// A bare SUB on a server's publisher recording every KVPUB.
pub struct Observer {
    pub seen: Arc<Mutex<Vec<Seen>>>,
    sub: Socket,
}

impl Observer {
    /// Subscribes to everything at `address`'s P+1 and returns once a first message proved it live.
    pub async fn start(address: &ServerAddress) -> Observer {
        let sub = Socket::new(SocketType::Sub);
        sub.set_rcvhwm(0);
        sub.subscribe("").unwrap();
        sub.connect(&address.publisher()).await.unwrap();
        step("observer live", sub.recv()).await.unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (rx, log) = (sub.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok(msg) = rx.recv().await {
                if let Ok(Update::KvPub(m)) = Update::parse(msg.frames()) {
                    let at = Instant::now();
                    log.lock().unwrap().push(Seen { sequence: m.sequence, key: m.key, body: m.body, uuid: m.uuid, at });
                }
            }
        });
        Observer { seen, sub }
    }

    /// Everything seen so far.
    pub fn all(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until an update of `key` (with `uuid`, if given) has been seen; returns it.
    pub async fn wait_for(&self, key: &str, uuid: Option<chp::Uuid>) -> Seen {
        step("observer sees the update", async {
            loop {
                if let Some(s) = self
                    .seen
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|s| uuid.is_none_or(|u| s.uuid == Some(u)) && s.key == key.as_bytes())
                    .cloned()
                {
                    return s;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let sub = self.sub.clone();
        tokio::spawn(sub.close());
    }
}

/// An XPUB connected to `address`'s collector, returned once the collector's subscription arrived
/// (so nothing sent afterwards is dropped for want of a subscriber).
pub async fn collector_publisher(address: &ServerAddress) -> Socket {
    let xpub = Socket::new(SocketType::XPub);
    xpub.set_sndhwm(0);
    xpub.connect(&address.collector()).await.unwrap();
    let notice = step("collector subscription", xpub.recv()).await.unwrap();
    assert_eq!(notice[0].first(), Some(&1u8), "a subscribe notice");
    xpub
}

/// A KVSET with a fresh UUID (or none).
pub fn kvset(key: &str, value: &str, with_uuid: bool) -> KvMsg {
    let mut m = KvMsg::new(key.to_owned(), value.to_owned());
    if with_uuid {
        m.uuid = Some(chp::Uuid::new_v4());
    }
    m
}

/// Waits until `passive` holds everything `active` published (same sequence, nothing pending, a
/// complete copy), comparing fresh status lines of both; returns that sequence. Writers must be
/// paused.
pub async fn caught_up(active: &mut ServerProc, passive: &mut ServerProc) -> ProcStatus {
    step("the passive catches up with the active", async {
        loop {
            let a = active.next_status().await;
            let p = passive.next_status().await;
            if p.sequence == a.sequence && p.keys == a.keys && p.pending == 0 && p.synced {
                return a;
            }
        }
    })
    .await
}
