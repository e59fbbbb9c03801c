//! Shared helpers for the bstar integration tests: in-process servers with a notice recorder that
//! echoes accepted requests, voting clients, bounded waits. Time limits and unique endpoints come
//! from `zmtp_testkit`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bstar::fsm::Vote;
use bstar::{BinaryStar, Config, Handle, Notice, Status};
use futures::StreamExt;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::eventually;

/// A fresh ipc endpoint under the temp dir.
pub use zmtp_testkit::ipc_endpoint as ep;

/// The bound on any single wait inside a test.
pub const WAIT: Duration = zmtp_testkit::STEP;

/// The endpoints of one pair.
#[derive(Clone, Debug)]
pub struct PairEndpoints {
    pub primary_state: String,
    pub backup_state: String,
    pub primary_voter: String,
    pub backup_voter: String,
}

impl PairEndpoints {
    pub fn new() -> PairEndpoints {
        PairEndpoints {
            primary_state: ep("ps"),
            backup_state: ep("bs"),
            primary_voter: ep("pv"),
            backup_voter: ep("bv"),
        }
    }

    pub fn primary(&self, heartbeat: Duration) -> Config {
        Config::primary(&self.primary_state, &self.backup_state)
            .voter(&self.primary_voter, SocketType::Router)
            .heartbeat(heartbeat)
    }

    pub fn backup(&self, heartbeat: Duration) -> Config {
        Config::backup(&self.backup_state, &self.primary_state)
            .voter(&self.backup_voter, SocketType::Router)
            .heartbeat(heartbeat)
    }
}

/// An in-process server: the runner task, and a recorder task that logs every notice (with the
/// time it was read) and echoes accepted requests.
pub struct Node {
    pub handle: Handle,
    pub run: JoinHandle<Result<(), bstar::Error>>,
    recorder: JoinHandle<()>,
    pub log: Arc<Mutex<Vec<(Instant, Notice)>>>,
    /// Taken just before the runner was spawned (so the runner's start is later).
    pub started: Instant,
}

impl Node {
    /// Binds (retrying while a just-closed listener still holds an ipc path) and starts a server.
    pub async fn start(config: Config) -> Node {
        let (star, notices) = bind_retrying(config).await;
        Node::spawn(star, notices)
    }

    pub fn spawn(star: BinaryStar, mut notices: bstar::Notices) -> Node {
        let handle = star.handle();
        let log = Arc::new(Mutex::new(Vec::new()));
        let started = Instant::now();
        let run = tokio::spawn(star.run());
        let recorder = {
            let (log, handle) = (log.clone(), handle.clone());
            tokio::spawn(async move {
                while let Some(notice) = notices.next().await {
                    if let Notice::Request(request) = &notice {
                        let _ = handle.voter().send(request.clone()).await;
                    }
                    log.lock().unwrap().push((Instant::now(), notice));
                }
            })
        };
        Node { handle, run, recorder, log, started }
    }

    pub fn status(&self) -> Status {
        self.handle.status()
    }

    /// The role-change notices so far, in order.
    pub fn roles(&self) -> Vec<Notice> {
        self.notices().into_iter().filter(|n| matches!(n, Notice::BecameActive | Notice::BecamePassive)).collect()
    }

    /// Every notice so far.
    pub fn notices(&self) -> Vec<Notice> {
        self.log.lock().unwrap().iter().map(|(_, n)| n.clone()).collect()
    }

    /// Waits (bounded) until the recorder has logged a notice equal to `notice`.
    pub async fn wait_notice(&self, notice: Notice) {
        eventually(&format!("{notice:?}"), || self.notices().contains(&notice)).await;
    }

    /// Waits (bounded) for the status to satisfy `pred`.
    pub async fn wait(&self, what: &str, pred: impl FnMut(&Status) -> bool) -> Status {
        match timeout(WAIT, self.handle.wait_for(pred)).await {
            Ok(Some(status)) => status,
            Ok(None) => panic!("runner stopped while waiting for {what}: {:?}", self.status()),
            Err(_) => panic!("timed out waiting for {what}: {:?}", self.status()),
        }
    }

    /// Simulates a crash: the runner and its sockets are dropped at once (no goodbye message).
    pub async fn kill(self) {
        self.run.abort();
        let _ = self.run.await;
        self.recorder.abort();
        let _ = self.recorder.await;
    }

    /// Waits (bounded) for the runner to end and returns its result.
    pub async fn finished(self) -> Result<(), bstar::Error> {
        let result = timeout(WAIT, self.run).await.expect("runner did not stop").expect("runner panicked");
        let _ = timeout(WAIT, self.recorder).await;
        result
    }
}

pub async fn bind_retrying(config: Config) -> (BinaryStar, bstar::Notices) {
    let deadline = Instant::now() + WAIT;
    loop {
        match BinaryStar::bind(config.clone()).await {
            Ok(bound) => return bound,
            // Retry until bound: a closed listener releases its ipc path asynchronously.
            Err(bstar::Error::Socket(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("bind failed: {e}"),
        }
    }
}

/// A client that votes on one server's voter (ROUTER) with a DEALER.
pub struct Voter {
    socket: Socket,
    sent: u64,
}

/// One vote: when it was sent, the verdict, when the verdict was observed.
#[derive(Clone, Copy, Debug)]
pub struct Ballot {
    pub sent: Instant,
    pub vote: Vote,
    pub observed: Instant,
}

impl Voter {
    pub async fn new(node: &Node) -> Voter {
        Voter::to(node.handle.voter_endpoint()).await
    }

    pub async fn to(endpoint: &str) -> Voter {
        Voter::with(endpoint, |_| {}).await
    }

    /// A voter whose socket is set up by `setup` (security options, say) before it connects.
    pub async fn with(endpoint: &str, setup: impl FnOnce(&Socket)) -> Voter {
        let socket = Socket::new(SocketType::Dealer);
        socket.set_linger(Some(Duration::ZERO));
        setup(&socket);
        socket.connect(endpoint).await.unwrap();
        Voter { socket, sent: 0 }
    }

    /// The voter's socket.
    pub fn socket(&self) -> &Socket {
        &self.socket
    }

    /// Sends one request and waits (bounded) for the server's verdict; an accepted request must
    /// also come back echoed.
    pub async fn vote(&mut self, node: &Node) -> Ballot {
        let before = node.status();
        let counted = before.accepted + before.rejected;
        self.sent += 1;
        let body = format!("vote-{}", self.sent);
        let sent = Instant::now();
        self.socket.send(body.clone()).await.unwrap();
        let status = node.wait("a verdict", |s| s.accepted + s.rejected > counted).await;
        let observed = Instant::now();
        assert_eq!(status.accepted + status.rejected, counted + 1, "one verdict per vote");
        let vote = if status.accepted > before.accepted { Vote::Accept } else { Vote::Reject };
        if vote == Vote::Accept {
            let echo = timeout(WAIT, self.socket.recv()).await.expect("echo timed out").unwrap();
            assert_eq!(echo, Message::single(body), "the accepted request is echoed");
        }
        Ballot { sent, vote, observed }
    }
}

impl Voter {
    /// Votes every `pace` until a vote is accepted; every ballot, the accepted one last.
    pub async fn vote_until_accepted(&mut self, node: &Node, pace: Duration) -> Vec<Ballot> {
        let mut ballots = Vec::new();
        loop {
            let ballot = self.vote(node).await;
            ballots.push(ballot);
            if ballot.vote == Vote::Accept {
                return ballots;
            }
            tokio::time::sleep(pace).await;
        }
    }
}

/// A stand-in peer: a PUB bound where a server's SUB connects, publishing whatever the test says.
pub struct FakePeer {
    pub socket: Socket,
}

impl FakePeer {
    pub async fn bind(endpoint: &str) -> FakePeer {
        let socket = Socket::new(SocketType::Pub);
        socket.set_linger(Some(Duration::ZERO));
        socket.bind(endpoint).await.unwrap();
        FakePeer { socket }
    }

    pub fn say(&self, msg: impl Into<Message>) {
        self.socket.try_send(msg).unwrap();
    }

    /// Publishes `state` every `every` until `done` holds for the node's status (bounded).
    pub async fn say_until(&self, state: &'static str, every: Duration, node: &Node, done: impl Fn(&Status) -> bool) {
        let deadline = Instant::now() + WAIT;
        let mut watch = node.handle.watch();
        loop {
            if done(&watch.borrow_and_update()) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out publishing {state:?}: {:?}", node.status());
            self.say(state);
            let _ = timeout(every, watch.changed()).await;
        }
    }
}

/// A relay that forwards one server's state messages to the other, and can drop them (a network
/// partition) or forward them again (the partition heals).
pub struct Link {
    pub open: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Link {
    /// Subscribes to `from` and republishes on a PUB bound at `to`.
    pub async fn new(from: &str, to: &str) -> Link {
        let sub = Socket::new(SocketType::Sub);
        sub.set_linger(Some(Duration::ZERO));
        sub.set_reconnect_ivl(Some(Duration::from_millis(20)));
        sub.subscribe("").unwrap();
        sub.connect(from).await.unwrap();
        let publisher = Socket::new(SocketType::Pub);
        publisher.set_linger(Some(Duration::ZERO));
        publisher.bind(to).await.unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let flag = open.clone();
        let task = tokio::spawn(async move {
            while let Ok(msg) = sub.recv().await {
                if flag.load(Ordering::SeqCst) {
                    let _ = publisher.try_send(msg);
                }
            }
        });
        Link { open, task }
    }

    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
    }

    pub fn heal(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}
