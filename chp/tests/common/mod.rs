//! Shared test helpers: servers and clients with short timings, a wire-level CHP client ("raw")
//! for exact assertions, and a scriptable fake server. Time limits (`bounded`, `step`,
//! `eventually`) come from `zmtp_testkit`.
#![allow(dead_code)]

pub mod pair;
pub mod process;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use chp::command::{IcanHaz, KthxBai, KvSync, SnapshotReply, Subtree, Update};
use chp::{Client, ClientOptions, Event, Events, KvMsg, Server, ServerAddress, ServerConfig};
use zmtp::{Message, Monitor, MonitorEvent, Socket, SocketType};
use zmtp_testkit::{STEP, step};

/// Waits, within a step, for a monitor event `wanted` accepts; a monitor that ends first fails.
pub async fn monitor_until(events: &mut Monitor, what: &str, wanted: impl Fn(&MonitorEvent) -> bool) {
    step(what, async {
        loop {
            match events.next_event().await {
                Some(event) if wanted(&event) => return,
                Some(_) => {}
                None => panic!("the monitor ended before {what}"),
            }
        }
    })
    .await
}

/// HUGZ interval of test servers.
pub const HUGZ: Duration = Duration::from_millis(50);

/// A server on 127.0.0.1 (free ports) with a 50 ms HUGZ interval.
pub async fn server() -> Server {
    server_with(|_| {}).await
}

/// A server as [`server`], with `tweak` applied to its configuration.
pub async fn server_with(tweak: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut config = ServerConfig { bind: "127.0.0.1".into(), hugz_interval: HUGZ, ..ServerConfig::default() };
    tweak(&mut config);
    Server::bind(config).await.expect("server binds")
}

/// Client options for tests: server ttl 1 s, retransmit after 3 s (so exact sequence counts are not
/// disturbed by retransmits on a loaded machine), sets time out after 10 s.
pub fn options(address: &ServerAddress, subtree: &str) -> ClientOptions {
    ClientOptions::for_servers(vec![address.clone()])
        .subtree(subtree.parse().expect("valid subtree"))
        .server_ttl(Duration::from_secs(1))
        .set_timing(Duration::from_secs(3), STEP)
}

/// A client, synced.
pub async fn client(address: &ServerAddress, subtree: &str) -> Client {
    synced(Client::start(options(address, subtree)).expect("client starts")).await
}

/// Waits until `client` is synced.
pub async fn synced(client: Client) -> Client {
    step("client sync", client.synced()).await.expect("client syncs");
    client
}

/// A map from string pairs.
pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<Bytes, Bytes> {
    pairs.iter().map(|(k, v)| (Bytes::copy_from_slice(k.as_bytes()), Bytes::copy_from_slice(v.as_bytes()))).collect()
}

/// Reads events until one satisfies `pred`; returns it and those skipped.
pub async fn wait_event(events: &mut Events, mut pred: impl FnMut(&Event) -> bool) -> (Event, Vec<Event>) {
    let mut skipped = Vec::new();
    step("event", async {
        loop {
            let e = events.next().await.expect("event stream open");
            if pred(&e) {
                return (e, skipped);
            }
            skipped.push(e);
        }
    })
    .await
}

/// A CHP client on bare sockets, for exact wire-level assertions.
pub struct Raw {
    pub sub: Socket,
    pub dealer: Socket,
    pub subtree: Subtree,
    /// Messages received on `sub` but not consumed yet.
    queued: VecDeque<Message>,
}

impl Raw {
    /// Subscribes to `subtree` (then HUGZ), and returns once a message has arrived, proving the
    /// subscription live. The message stays queued.
    pub async fn connect(address: &ServerAddress, subtree: &str) -> Raw {
        let subtree: Subtree = subtree.parse().expect("valid subtree");
        let sub = Socket::new(SocketType::Sub);
        let dealer = Socket::new(SocketType::Dealer);
        let mut events = sub.monitor();
        sub.subscribe(subtree.as_bytes()).unwrap();
        sub.connect(&address.publisher()).await.unwrap();
        dealer.connect(&address.snapshot()).await.unwrap();
        if !subtree.is_all() {
            monitor_until(&mut events, "subscriber handshake", |e| {
                matches!(e, MonitorEvent::HandshakeSucceeded { .. })
            })
            .await;
            sub.subscribe("HUGZ").unwrap();
        }
        let first = step("first message on the subscriber", sub.recv()).await.unwrap();
        Raw { sub, dealer, subtree, queued: VecDeque::from([first]) }
    }

    /// Sends ICANHAZ? for our subtree; returns the KVSYNCs and the KTHXBAI.
    pub async fn snapshot(&self) -> (Vec<KvSync>, KthxBai) {
        self.dealer.send(IcanHaz { subtree: self.subtree.clone() }.to_message()).await.unwrap();
        let mut syncs = Vec::new();
        step("snapshot", async {
            loop {
                let msg = self.dealer.recv().await.unwrap();
                assert_eq!(msg.len(), 5, "snapshot message of 5 frames");
                assert!(msg[2].is_empty() && msg[3].is_empty(), "KVSYNC/KTHXBAI frames 2-3 empty per spec");
                match SnapshotReply::parse(msg.frames()).unwrap() {
                    SnapshotReply::KvSync(kv) => syncs.push(kv),
                    SnapshotReply::KthxBai(end) => return (syncs, end),
                }
            }
        })
        .await
    }

    /// The next message on the subscriber.
    pub async fn next_update(&mut self) -> Update {
        let msg = match self.queued.pop_front() {
            Some(m) => m,
            None => step("update", self.sub.recv()).await.unwrap(),
        };
        Update::parse(msg.frames()).expect("well-formed update")
    }

    /// The next KVPUB (skipping HUGZ).
    pub async fn next_kvpub(&mut self) -> KvMsg {
        loop {
            if let Update::KvPub(m) = self.next_update().await {
                return m;
            }
        }
    }

    /// Drops whatever is queued (messages from before a point of interest).
    pub fn clear(&mut self) {
        self.queued.clear();
        while self.sub.try_recv().is_ok() {}
    }
}

/// A bare PUB connected to the collector of `address`, proven live by a probe KVSET (key
/// `/probe`, resent until `observer` sees it republished). Each probe that got through took a
/// sequence. Its queue is unlimited (no drops at a HWM).
pub async fn raw_publisher(address: &ServerAddress, observer: &mut Raw) -> Socket {
    let publisher = Socket::new(SocketType::Pub);
    publisher.set_sndhwm(0);
    publisher.connect(&address.collector()).await.unwrap();
    let mut probe = KvMsg::new("/probe", "1");
    probe.uuid = Some(chp::Uuid::new_v4());
    step("publisher proven live", async {
        loop {
            publisher.send(probe.to_message()).await.unwrap();
            let seen = tokio::time::timeout(Duration::from_millis(200), async {
                loop {
                    if observer.next_kvpub().await.uuid == probe.uuid {
                        return;
                    }
                }
            })
            .await;
            if seen.is_ok() {
                return;
            }
        }
    })
    .await;
    publisher
}

/// A scriptable fake server on bare sockets (P, P+1, P+2 on 127.0.0.1). Its publisher is an XPUB
/// (verbose), so it knows when a client's subscription has arrived.
pub struct Fake {
    pub router: Socket,
    pub publisher: Socket,
    pub collector: Socket,
    pub address: ServerAddress,
    /// Routing ids whose ICANHAZ? was taken (a client repeats its request until answered).
    answered: std::sync::Mutex<std::collections::HashSet<Bytes>>,
}

impl Fake {
    /// Binds a free port triple.
    pub async fn bind() -> Fake {
        loop {
            let (router, publisher, collector) =
                (Socket::new(SocketType::Router), Socket::new(SocketType::XPub), Socket::new(SocketType::Sub));
            publisher.set_xpub_verbose(true);
            collector.subscribe("").unwrap();
            let ep = router.bind("tcp://127.0.0.1:0").await.unwrap();
            let port: u16 = ep.rsplit_once(':').unwrap().1.parse().unwrap();
            if port > 65533 {
                continue;
            }
            if publisher.bind(&format!("tcp://127.0.0.1:{}", port + 1)).await.is_err()
                || collector.bind(&format!("tcp://127.0.0.1:{}", port + 2)).await.is_err()
            {
                continue;
            }
            let address = ServerAddress::new("127.0.0.1", port).unwrap();
            return Fake { router, publisher, collector, address, answered: Default::default() };
        }
    }

    /// Waits for a snapshot request from a client not answered before (repeats of an answered
    /// request are dropped) *and* for that client's subscription to its subtree, so whatever is
    /// published next reaches it; returns the request's routing id and subtree. (Our client asks
    /// for the snapshot at once, before its subscription is live.)
    pub async fn await_icanhaz(&self) -> (Bytes, Subtree) {
        step("ICANHAZ? and subscription", async {
            let mut request: Option<(Bytes, Subtree)> = None;
            let mut subscribed: Vec<Bytes> = Vec::new();
            loop {
                if let Some((_, subtree)) = &request
                    && let Some(at) = subscribed.iter().position(|s| s.as_ref() == subtree.as_bytes())
                {
                    subscribed.remove(at);
                    return request.take().unwrap();
                }
                tokio::select! {
                    msg = self.router.recv(), if request.is_none() => {
                        let mut msg = msg.unwrap();
                        let id = msg.pop_front().unwrap();
                        if self.answered.lock().unwrap().insert(id.clone()) {
                            request = Some((id, IcanHaz::parse(msg.frames()).unwrap().subtree));
                        }
                    }
                    notice = self.publisher.recv() => {
                        let notice = notice.unwrap();
                        if notice[0].first() == Some(&1) {
                            subscribed.push(notice[0].slice(1..));
                        }
                    }
                }
            }
        })
        .await
    }

    /// The next snapshot request from a client not answered before, without waiting for any
    /// subscription (for a client whose subscription is already known to be live).
    pub async fn next_icanhaz(&self) -> (Bytes, Subtree) {
        step("ICANHAZ?", async {
            loop {
                let mut msg = self.router.recv().await.unwrap();
                let id = msg.pop_front().unwrap();
                if self.answered.lock().unwrap().insert(id.clone()) {
                    return (id, IcanHaz::parse(msg.frames()).unwrap().subtree);
                }
            }
        })
        .await
    }

    /// Publishes a KVPUB.
    pub async fn publish(&self, key: &str, value: &str, sequence: u64) {
        let mut kv = KvMsg::new(key.to_owned(), value.to_owned());
        kv.sequence = sequence;
        self.publisher.send(kv.to_message()).await.unwrap();
    }

    /// Sends a snapshot to `id`: KVSYNCs, then KTHXBAI at `sequence`.
    pub async fn reply(&self, id: &Bytes, pairs: &[(&str, &str)], sequence: u64) {
        for (k, v) in pairs {
            let kv = KvSync {
                key: Bytes::copy_from_slice(k.as_bytes()),
                sequence,
                value: Bytes::copy_from_slice(v.as_bytes()),
            };
            let mut m = SnapshotReply::KvSync(kv).to_message();
            m.push_front(id.clone());
            self.router.send(m).await.unwrap();
        }
        let mut m = SnapshotReply::KthxBai(KthxBai { sequence, subtree: Bytes::new() }).to_message();
        m.push_front(id.clone());
        self.router.send(m).await.unwrap();
    }
}
