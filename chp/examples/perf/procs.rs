//! The multi-process measurement: one server in this process, publishers and subscribers in
//! processes of their own (this same binary, started with `--role …`), so the server's share of
//! the machine can be read from its own CPU accounting.
//!
//! Two kinds of clients, run one after the other:
//!
//! - **replay**: what the server alone sustains. Each publisher pre-encodes its KVSETs (key, UUID,
//!   100 B value) before the clock starts and replays them on a bare PUB, keeping a window of
//!   unconfirmed writes; an update is confirmed when its KVPUB comes back on the publisher's own
//!   subtree subscription. Subscribers are bare SUBs on the whole replay tree that count KVPUBs.
//! - **clients**: the same through `chp::Client` (`submit` pipelined, confirmations awaited in
//!   order; whole-tree subscribers counting `Event::Set`).
//!
//! Children talk to the parent on stdio: `READY` once connected and proven live, then they wait
//! for a line on stdin (the start), then `DONE <seconds> <count>`.

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chp::kvmsg::KvMsg;
use chp::{Client, ClientOptions, Event, ServerAddress};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use zmtp::{Message, Socket, SocketType};

/// What a child process does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Replays pre-encoded KVSETs on a bare PUB, counting its own KVPUBs.
    ReplayPublisher,
    /// Counts the replayed KVPUBs on a bare SUB.
    ReplaySubscriber,
    /// Writes through `chp::Client::submit`.
    ClientPublisher,
    /// Counts `Event::Set` on a whole-tree `chp::Client`.
    ClientSubscriber,
}

/// Unconfirmed writes a publisher keeps in flight.
const WINDOW: usize = 4096;
/// Keys each publisher cycles through.
const KEYS_PER_PUBLISHER: usize = 10_000;
/// A child that hears nothing for this long reports what it has.
const IDLE: Duration = Duration::from_secs(10);

fn done(t0: Instant, count: usize) {
    println!("DONE {:.6} {count}", t0.elapsed().as_secs_f64());
}

async fn ready_then_wait() {
    println!("READY");
    let mut line = String::new();
    let _ = BufReader::new(tokio::io::stdin()).read_line(&mut line).await;
}

fn is_probe(key: &[u8]) -> bool {
    key.ends_with(b"/probe")
}

/// Runs one child role to its end.
pub async fn child(role: Role, server: ServerAddress, id: usize, count: usize, value: usize) {
    let value = Bytes::from(vec![b'v'; value]);
    match role {
        Role::ReplayPublisher => replay_publisher(server, id, count, value).await,
        Role::ReplaySubscriber => replay_subscriber(server, count).await,
        Role::ClientPublisher => client_publisher(server, id, count, value).await,
        Role::ClientSubscriber => client_subscriber(server, count).await,
    }
}

async fn replay_publisher(server: ServerAddress, id: usize, count: usize, value: Bytes) {
    let prefix = format!("/r/{id}/");
    let echoes = Socket::new(SocketType::Sub);
    echoes.set_rcvhwm(0);
    echoes.subscribe(prefix.as_bytes()).expect("SUB");
    echoes.connect(&server.publisher()).await.expect("connect publisher");
    let writes = Socket::new(SocketType::Pub);
    writes.set_sndhwm(0);
    writes.set_sndhwm_bytes(0);
    writes.connect(&server.collector()).await.expect("connect collector");

    // The capture: every KVSET encoded before the clock starts.
    let mut capture: VecDeque<Message> = (0..count)
        .map(|i| {
            let mut set = KvMsg::new(format!("{prefix}{}", i % KEYS_PER_PUBLISHER), value.clone());
            set.uuid = Some(chp::uuid::Uuid::new_v4());
            set.to_message()
        })
        .collect();

    // Live once a probe comes back through the server.
    let probe = KvMsg::new(format!("{prefix}probe"), "1").to_message();
    loop {
        writes.send(probe.clone()).await.expect("send probe");
        if tokio::time::timeout(Duration::from_millis(50), echoes.recv()).await.is_ok() {
            break;
        }
    }
    ready_then_wait().await;

    let t0 = Instant::now();
    let (mut sent, mut confirmed) = (0usize, 0usize);
    let mut batch = Vec::with_capacity(256);
    let mut received = Vec::with_capacity(1024);
    while confirmed < count {
        while sent < count && sent - confirmed < WINDOW {
            let n = (count - sent).min(WINDOW - (sent - confirmed)).min(256);
            batch.extend(capture.drain(..n));
            writes.send_many(&mut batch).await.expect("send");
            sent += n;
        }
        match tokio::time::timeout(IDLE, echoes.recv_many(&mut received, 1024)).await {
            Ok(Ok(_)) => {}
            _ => break,
        }
        confirmed += received.drain(..).filter(|m| !is_probe(&m.frames()[0])).count();
    }
    done(t0, confirmed);
    writes.close().await;
    echoes.close().await;
}

async fn replay_subscriber(server: ServerAddress, count: usize) {
    let updates = Socket::new(SocketType::Sub);
    updates.set_rcvhwm(0);
    updates.subscribe("/r/").expect("SUB");
    // HUGZ prove the subscription live (the server sends a few just after a subscriber connects).
    updates.subscribe("HUGZ").expect("SUB");
    updates.connect(&server.publisher()).await.expect("connect publisher");
    while updates.recv().await.expect("recv").frames()[0].as_ref() != b"HUGZ" {}
    updates.unsubscribe("HUGZ").expect("SUB");
    ready_then_wait().await;

    let t0 = Instant::now();
    let mut n = 0;
    let mut received = Vec::with_capacity(1024);
    while n < count {
        match tokio::time::timeout(IDLE, updates.recv_many(&mut received, 1024)).await {
            Ok(Ok(_)) => {}
            _ => break,
        }
        n += received.drain(..).filter(|m| m.frames()[0].as_ref() != b"HUGZ" && !is_probe(&m.frames()[0])).count();
    }
    done(t0, n);
    updates.close().await;
}

fn client_options(server: &ServerAddress, subtree: &str) -> ClientOptions {
    ClientOptions::for_servers(vec![server.clone()])
        .subtree(subtree.parse().expect("subtree"))
        .server_ttl(Duration::from_secs(30))
        .set_timing(Duration::from_secs(10), Duration::from_secs(60))
}

async fn client_publisher(server: ServerAddress, id: usize, count: usize, value: Bytes) {
    let prefix = format!("/c/{id}/");
    let client = Client::start(client_options(&server, &prefix)).expect("client");
    client.synced().await.expect("synced");
    let keys: Vec<Bytes> = (0..KEYS_PER_PUBLISHER).map(|i| Bytes::from(format!("{prefix}{i}"))).collect();
    ready_then_wait().await;

    let t0 = Instant::now();
    let mut inflight = VecDeque::with_capacity(WINDOW);
    let mut confirmed = 0;
    for i in 0..count {
        if inflight.len() >= WINDOW {
            let confirmation: chp::Confirmation = inflight.pop_front().expect("in flight");
            confirmation.await.expect("set confirmed");
            confirmed += 1;
        }
        let key = keys[i % KEYS_PER_PUBLISHER].clone();
        inflight.push_back(client.submit(key, value.clone(), None).await.expect("submitted"));
    }
    for confirmation in inflight {
        confirmation.await.expect("set confirmed");
        confirmed += 1;
    }
    done(t0, confirmed);
    client.close().await;
}

async fn client_subscriber(server: ServerAddress, count: usize) {
    let client = Client::start(client_options(&server, "/c/")).expect("client");
    client.synced().await.expect("synced");
    let mut events = client.events();
    ready_then_wait().await;

    let t0 = Instant::now();
    let mut n = 0;
    while n < count {
        match tokio::time::timeout(IDLE, events.next()).await {
            Ok(Some(Event::Set { .. })) => n += 1,
            Ok(Some(Event::Lagged { missed })) => n += missed as usize,
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    done(t0, n);
    client.close().await;
}

/// What one multi-process run measured.
pub struct Measured {
    /// Updates confirmed to all publishers.
    pub confirmed: usize,
    /// Updates the slowest subscriber received.
    pub delivered: usize,
    /// Until the last publisher had all its confirmations.
    pub confirmed_in: Duration,
    /// Until the last subscriber had all updates.
    pub delivered_in: Duration,
    /// User+system CPU of this (the server's) process over the run.
    pub server_cpu: Duration,
}

struct Spawned {
    child: Child,
    stdin: ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

async fn spawn(role: Role, server: &ServerAddress, id: usize, count: usize, value: usize) -> Spawned {
    let exe = std::env::current_exe().expect("own path");
    let mut child = Command::new(exe)
        .args(["--role", role_name(role), "--server", &server.to_string()])
        .args(["--id", &id.to_string(), "--count", &count.to_string(), "--value", &value.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn a child");
    let stdin = child.stdin.take().expect("piped");
    let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    Spawned { child, stdin, lines }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::ReplayPublisher => "replay-publisher",
        Role::ReplaySubscriber => "replay-subscriber",
        Role::ClientPublisher => "client-publisher",
        Role::ClientSubscriber => "client-subscriber",
    }
}

async fn expect_line(s: &mut Spawned, prefix: &str) -> String {
    loop {
        match s.lines.next_line().await {
            Ok(Some(line)) if line.starts_with(prefix) => return line,
            Ok(Some(_)) => {}
            _ => panic!("a child ended before {prefix}"),
        }
    }
}

/// The count a `DONE` line reports.
fn done_count(line: &str) -> usize {
    line.split_whitespace().nth(2).and_then(|n| n.parse().ok()).unwrap_or(0)
}

fn cpu_time() -> Duration {
    // utime and stime, fields 14 and 15 of /proc/self/stat, in clock ticks (100 Hz on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after_name.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect();
    let ticks = fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// Runs `publishers` publisher processes (`per` updates each) and `subscribers` subscriber
/// processes against the server at `server`, started together once all are live.
pub async fn measure(
    replay: bool,
    server: &ServerAddress,
    publishers: usize,
    subscribers: usize,
    per: usize,
    value: usize,
) -> Measured {
    let (pub_role, sub_role) = if replay {
        (Role::ReplayPublisher, Role::ReplaySubscriber)
    } else {
        (Role::ClientPublisher, Role::ClientSubscriber)
    };
    let total = per * publishers;
    let mut subs = Vec::new();
    for id in 0..subscribers {
        subs.push(spawn(sub_role, server, id, total, value).await);
    }
    let mut pubs = Vec::new();
    for id in 0..publishers {
        pubs.push(spawn(pub_role, server, id, per, value).await);
    }
    for s in subs.iter_mut().chain(pubs.iter_mut()) {
        expect_line(s, "READY").await;
    }
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    for s in subs.iter_mut().chain(pubs.iter_mut()) {
        let _ = s.stdin.write_all(b"go\n").await;
    }
    let mut confirmed = 0;
    for p in &mut pubs {
        confirmed += done_count(&expect_line(p, "DONE").await);
    }
    let confirmed_in = t0.elapsed();
    let mut delivered = usize::MAX;
    for s in &mut subs {
        delivered = delivered.min(done_count(&expect_line(s, "DONE").await));
    }
    let delivered_in = t0.elapsed();
    let server_cpu = cpu_time().saturating_sub(cpu0);
    for mut s in subs.into_iter().chain(pubs) {
        let _ = s.child.wait().await;
    }
    Measured {
        confirmed,
        delivered: if subscribers == 0 { confirmed } else { delivered },
        confirmed_in,
        delivered_in,
        server_cpu,
    }
}
