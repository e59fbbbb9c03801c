//! Socket options from issue 3, asserted over real sockets: CONFLATE, IMMEDIATE, REQ_CORRELATE with
//! REQ_RELAXED, CONNECT_ROUTING_ID, TCP keepalive, SNDBUF/RCVBUF/TOS, HWM defaults, and that every
//! getter returns what its setter stored (libzmq names and defaults).
//!
//! No sleeps are used for synchronisation: tests wait for monitor events or messages (bounded by
//! [`WAIT`]); the only fixed windows are negative checks ("nothing arrives within [`QUIET`]") and the
//! bounded polling of `/proc/net/tcp` in the keepalive test.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::timeout;
use zmtp::{Error, Message, Monitor, MonitorEvent, Socket, SocketType};

#[macro_use]
mod common;
use common::*;
use zmtp_testkit::bounded;

/// Binds a concrete endpoint, retrying while a throwaway TCP port is briefly unavailable.
async fn bind_exact(s: &Socket, ep: &str) -> String {
    let bound = timeout(WAIT, async {
        loop {
            match s.bind(ep).await {
                Ok(bound) => return bound,
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::AddrInUse => {}
                Err(e) => panic!("binding {ep} failed: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    bound.unwrap_or_else(|_| panic!("{ep} still in use after {WAIT:?}"))
}

fn msg(frames: &[&str]) -> Message {
    frames.iter().map(|f| Bytes::copy_from_slice(f.as_bytes())).collect()
}

fn strs(m: &Message) -> Vec<String> {
    m.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect()
}

async fn send(s: &Socket, m: impl Into<Message>) {
    match timeout(WAIT, s.send(m)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{:?} send failed: {e}", s.socket_type()),
        Err(_) => panic!("{:?} send did not complete within {WAIT:?}", s.socket_type()),
    }
}

async fn recv_within(s: &Socket, limit: Duration) -> Option<Message> {
    match timeout(limit, s.recv()).await {
        Ok(Ok(m)) => Some(m),
        Ok(Err(e)) => panic!("{:?} recv failed: {e}", s.socket_type()),
        Err(_) => None,
    }
}

async fn recv(s: &Socket) -> Message {
    recv_within(s, WAIT).await.unwrap_or_else(|| panic!("{:?}: no message within {WAIT:?}", s.socket_type()))
}

async fn recv_strs(s: &Socket) -> Vec<String> {
    strs(&recv(s).await)
}

async fn assert_silent(s: &Socket, who: &str) {
    if let Some(m) = recv_within(s, QUIET).await {
        panic!("{who} received {:?}, expected nothing", strs(&m));
    }
}

async fn handshake(mon: &mut Monitor) {
    wait_event(mon, "HandshakeSucceeded", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. })).await;
}

async fn disconnected(mon: &mut Monitor) {
    wait_event(mon, "Disconnected", |e| matches!(e, MonitorEvent::Disconnected { .. })).await;
}

/// Connects and waits until the handshake completed.
async fn connect_live(s: &Socket, ep: &str) {
    let mut mon = s.monitor();
    connect(s, ep).await;
    handshake(&mut mon).await;
}

// ---------------------------------------------------------------------------------------------
// Defaults and getters
// ---------------------------------------------------------------------------------------------

#[test]
fn defaults_are_libzmq_defaults() {
    let s = Socket::new(SocketType::Dealer);
    assert_eq!(s.sndhwm(), 1000);
    assert_eq!(s.rcvhwm(), 1000);
    assert_eq!(s.linger(), None, "libzmq LINGER -1");
    assert_eq!(s.reconnect_ivl(), Some(Duration::from_millis(100)));
    assert_eq!(s.reconnect_ivl_max(), Duration::ZERO);
    assert_eq!(s.handshake_ivl(), Some(Duration::from_secs(30)));
    assert_eq!(s.heartbeat_ivl(), Duration::ZERO);
    assert_eq!(s.maxmsgsize(), None);
    assert!(!s.router_mandatory() && !s.router_handover() && !s.probe_router());
    assert!(!s.req_relaxed() && !s.req_correlate());
    assert!(!s.conflate());
    assert!(!s.immediate());
    assert!(!s.ipv6());
    assert_eq!(s.backlog(), zmtp::DEFAULT_BACKLOG, "1024, above libzmq's 100 (see DEFAULT_BACKLOG)");
    assert!(!s.xpub_verbose() && !s.xpub_verboser() && !s.xpub_nodrop());
    assert_eq!(s.xpub_welcome_msg(), None);
    assert_eq!(s.connect_routing_id(), None);
    assert_eq!(s.tcp_keepalive(), None, "libzmq TCP_KEEPALIVE -1: OS default");
    assert_eq!(s.tcp_keepalive_idle(), None);
    assert_eq!(s.tcp_keepalive_intvl(), None);
    assert_eq!(s.tcp_keepalive_cnt(), None);
    assert_eq!((s.sndbuf(), s.rcvbuf()), (None, None), "libzmq SNDBUF/RCVBUF -1: OS default");
    assert_eq!(s.tos(), 0);
    assert_eq!(s.routing_id(), Bytes::new());
}

#[test]
fn getters_return_what_was_set() {
    let s = Socket::new(SocketType::Router);
    s.set_sndhwm(7);
    s.set_rcvhwm(0);
    s.set_linger(Some(Duration::from_millis(250)));
    s.set_reconnect_ivl(None);
    s.set_reconnect_ivl_max(Duration::from_secs(3));
    s.set_handshake_ivl(None);
    s.set_maxmsgsize(Some(4096));
    s.set_router_mandatory(true);
    s.set_router_handover(true);
    s.set_probe_router(true);
    s.set_req_relaxed(true);
    s.set_req_correlate(true);
    s.set_conflate(true);
    s.set_immediate(true);
    s.set_ipv6(true);
    s.set_backlog(4096);
    s.set_xpub_verbose(true);
    s.set_xpub_verboser(true);
    s.set_xpub_nodrop(true);
    s.set_xpub_welcome_msg(Some(Bytes::from_static(b"hi")));
    s.set_connect_routing_id(Some(Bytes::from_static(b"peer-x")));
    s.set_tcp_keepalive(Some(false));
    s.set_tcp_keepalive_idle(Some(Duration::from_secs(30)));
    s.set_tcp_keepalive_intvl(Some(Duration::from_secs(5)));
    s.set_tcp_keepalive_cnt(Some(4));
    s.set_sndbuf(Some(65_536));
    s.set_rcvbuf(Some(0));
    s.set_tos(0x28);
    s.set_routing_id("me").expect("routing id");

    assert_eq!(s.sndhwm(), 7);
    assert_eq!(s.rcvhwm(), 0);
    assert_eq!(s.linger(), Some(Duration::from_millis(250)));
    assert_eq!(s.reconnect_ivl(), None);
    assert_eq!(s.reconnect_ivl_max(), Duration::from_secs(3));
    assert_eq!(s.handshake_ivl(), None);
    assert_eq!(s.maxmsgsize(), Some(4096));
    assert!(s.router_mandatory() && s.router_handover() && s.probe_router());
    assert!(s.req_relaxed() && s.req_correlate());
    assert!(s.conflate());
    assert!(s.immediate());
    assert!(s.ipv6());
    assert_eq!(s.backlog(), 4096);
    assert!(s.xpub_verbose() && s.xpub_verboser() && s.xpub_nodrop());
    assert_eq!(s.xpub_welcome_msg(), Some(Bytes::from_static(b"hi")));
    assert_eq!(s.connect_routing_id(), Some(Bytes::from_static(b"peer-x")));
    assert_eq!(s.tcp_keepalive(), Some(false));
    assert_eq!(s.tcp_keepalive_idle(), Some(Duration::from_secs(30)));
    assert_eq!(s.tcp_keepalive_intvl(), Some(Duration::from_secs(5)));
    assert_eq!(s.tcp_keepalive_cnt(), Some(4));
    assert_eq!((s.sndbuf(), s.rcvbuf(), s.tos()), (Some(65_536), Some(0), 0x28));
    assert_eq!(s.routing_id(), Bytes::from_static(b"me"));

    s.set_immediate(false);
    s.set_conflate(false);
    s.set_xpub_welcome_msg(None);
    assert!(!s.immediate() && !s.conflate());
    assert_eq!(s.xpub_welcome_msg(), None);
    assert!(s.set_routing_id(vec![0u8; 256]).is_err(), "routing ids are at most 255 bytes");
}

/// The default SNDHWM (1000) is what a queue for a pending connect holds before sending blocks.
async fn default_sndhwm_is_1000(transport: &'static str) {
    for kind in [SocketType::Push, SocketType::Dealer] {
        let s = Socket::new(kind);
        connect(&s, &unbound_endpoint(transport, "hwm")).await;
        for i in 0..1000 {
            s.try_send(msg(&[&i.to_string()])).unwrap_or_else(|e| panic!("{kind:?}: message {i} refused: {e}"));
        }
        assert!(matches!(s.try_send(msg(&["1000"])), Err(Error::WouldBlock)), "{kind:?}: the 1001st must block");
        assert!(timeout(QUIET, s.send(msg(&["1000"]))).await.is_err(), "{kind:?}: send waits at the HWM");
    }
}

over_transports!(default_sndhwm_is_1000);

// ---------------------------------------------------------------------------------------------
// CONFLATE
// ---------------------------------------------------------------------------------------------

/// PULL with CONFLATE: of a burst, only the newest message is left to receive.
async fn conflate_pull_keeps_only_the_newest(transport: &'static str) {
    let pull = Socket::new(SocketType::Pull);
    pull.set_conflate(true);
    let mut mon = pull.monitor();
    let ep = bind(&pull, transport, "conflate-pull").await;
    let push = Socket::new(SocketType::Push);
    connect_live(&push, &ep).await;
    for i in 0..100 {
        send(&push, i.to_string()).await;
    }
    // Closing flushes (LINGER infinite); once the PULL saw the connection end, the whole burst
    // went through its queue.
    push.close().await;
    disconnected(&mut mon).await;
    assert_eq!(recv_strs(&pull).await, ["99"]);
    assert_silent(&pull, "conflating PULL").await;
}

/// PUSH with CONFLATE: messages queued for a peer not connected yet replace each other.
async fn conflate_push_keeps_only_the_newest_queued(transport: &'static str) {
    let push = Socket::new(SocketType::Push);
    push.set_conflate(true);
    let ep = unbound_endpoint(transport, "conflate-push");
    connect(&push, &ep).await;
    for i in 1..=10 {
        push.try_send(msg(&[&i.to_string()])).unwrap_or_else(|e| panic!("conflate never blocks: {e}"));
    }
    let pull = Socket::new(SocketType::Pull);
    bind_exact(&pull, &ep).await;
    assert_eq!(recv_strs(&pull).await, ["10"]);
    assert_silent(&pull, "PULL").await;
}

/// SUB with CONFLATE keeps only the newest publication.
async fn conflate_sub_keeps_only_the_newest(transport: &'static str) {
    let publisher = Socket::new(SocketType::Pub);
    let ep = bind(&publisher, transport, "conflate-sub").await;
    let sub = Socket::new(SocketType::Sub);
    sub.set_conflate(true);
    sub.subscribe("").expect("subscribe");
    let mut mon = sub.monitor();
    connect(&sub, &ep).await;
    // Publish until the subscription has arrived.
    let synced = timeout(WAIT, async {
        loop {
            send(&publisher, "sync").await;
            if recv_within(&sub, Duration::from_millis(20)).await.is_some() {
                return;
            }
        }
    })
    .await;
    synced.expect("subscription never reached the publisher");
    for i in 0..100 {
        send(&publisher, i.to_string()).await;
    }
    publisher.close().await;
    disconnected(&mut mon).await;
    assert_eq!(recv_strs(&sub).await, ["99"]);
    assert_silent(&sub, "conflating SUB").await;
}

over_transports!(
    conflate_pull_keeps_only_the_newest,
    conflate_push_keeps_only_the_newest_queued,
    conflate_sub_keeps_only_the_newest
);

// ---------------------------------------------------------------------------------------------
// IMMEDIATE
// ---------------------------------------------------------------------------------------------

/// Indices of the messages `s` receives until nothing arrives within QUIET.
async fn drain_indices(s: &Socket) -> Vec<usize> {
    let mut got = Vec::new();
    while let Some(m) = recv_within(s, QUIET).await {
        got.push(m.last().and_then(|f| std::str::from_utf8(f).ok()?.parse().ok()).expect("indexed"));
    }
    got
}

/// A DEALER connected to a dead endpoint and to a live ROUTER; returns (dealer, live, dead endpoint).
async fn dealer_with_dead_and_live_peer(transport: &str, immediate: bool) -> (Socket, Socket, String) {
    let live = Socket::new(SocketType::Router);
    let live_ep = bind(&live, transport, "live").await;
    let dead_ep = unbound_endpoint(transport, "dead");
    let dealer = Socket::new(SocketType::Dealer);
    dealer.set_immediate(immediate);
    assert_eq!(dealer.immediate(), immediate);
    let mut mon = dealer.monitor();
    connect(&dealer, &dead_ep).await;
    connect(&dealer, &live_ep).await;
    handshake(&mut mon).await;
    (dealer, live, dead_ep)
}

/// IMMEDIATE: nothing is queued for the pending connect; every message goes to the live peer.
async fn immediate_sends_only_to_connected_peers(transport: &'static str) {
    let (dealer, live, dead_ep) = dealer_with_dead_and_live_peer(transport, true).await;
    for i in 0..10 {
        send(&dealer, i.to_string()).await;
    }
    assert_eq!(drain_indices(&live).await, (0..10).collect::<Vec<_>>());
    // The dead endpoint comes alive: nothing was queued for it.
    let late = Socket::new(SocketType::Router);
    let mut late_mon = late.monitor();
    bind_exact(&late, &dead_ep).await;
    handshake(&mut late_mon).await;
    assert_silent(&late, "late peer").await;

    // With only a pending connect, IMMEDIATE has nowhere to queue: sending blocks.
    let lonely = Socket::new(SocketType::Dealer);
    lonely.set_immediate(true);
    connect(&lonely, &unbound_endpoint(transport, "nobody")).await;
    assert!(matches!(lonely.try_send(msg(&["x"])), Err(Error::WouldBlock)));
}

/// Without IMMEDIATE, round-robin queues every other message for the pending connect, and they are
/// delivered when it comes alive.
async fn without_immediate_pending_connects_get_queued_messages(transport: &'static str) {
    let (dealer, live, dead_ep) = dealer_with_dead_and_live_peer(transport, false).await;
    for i in 0..10 {
        send(&dealer, i.to_string()).await;
    }
    let to_live = drain_indices(&live).await;
    assert_eq!(to_live.len(), 5, "round-robin over two peers: {to_live:?}");
    let late = Socket::new(SocketType::Router);
    bind_exact(&late, &dead_ep).await;
    let mut to_late = Vec::new();
    for _ in 0..5 {
        let m = recv(&late).await;
        to_late.push(std::str::from_utf8(m.last().expect("frame")).expect("utf8").parse::<usize>().expect("index"));
    }
    let mut all: Vec<usize> = to_live.iter().chain(&to_late).copied().collect();
    all.sort();
    assert_eq!(all, (0..10).collect::<Vec<_>>(), "live got {to_live:?}, the late peer {to_late:?}");
    assert!(to_late.windows(2).all(|w| w[0] < w[1]), "queued in order: {to_late:?}");

    let lonely = Socket::new(SocketType::Dealer);
    connect(&lonely, &unbound_endpoint(transport, "nobody")).await;
    lonely.try_send(msg(&["x"])).expect("queued for the pending connect");
}

over_transports!(immediate_sends_only_to_connected_peers, without_immediate_pending_connects_get_queued_messages);

// ---------------------------------------------------------------------------------------------
// REQ_CORRELATE + REQ_RELAXED
// ---------------------------------------------------------------------------------------------

/// A REQ with CORRELATE (+ RELAXED) connected to a ROUTER test double that crafts replies.
async fn req_and_router_double(transport: &str, relaxed: bool, correlate: bool) -> (Socket, Socket) {
    let router = Socket::new(SocketType::Router);
    let ep = bind(&router, transport, "correlate").await;
    let req = Socket::new(SocketType::Req);
    req.set_routing_id("client").expect("routing id");
    req.set_req_relaxed(relaxed);
    req.set_req_correlate(correlate);
    connect_live(&req, &ep).await;
    (req, router)
}

/// Receives a request at the ROUTER double: returns its request-id frame.
async fn request_id(router: &Socket, body: &str) -> Bytes {
    let m = recv(router).await;
    assert_eq!(m.len(), 4, "[routing id, request id, \"\", body], got {:?}", strs(&m));
    assert_eq!(&m[0][..], b"client");
    assert_eq!(m[1].len(), 4, "libzmq's request id is 4 bytes");
    assert!(m[2].is_empty(), "delimiter after the request id");
    assert_eq!(&m[3][..], body.as_bytes());
    m[1].clone()
}

fn reply(id: &Bytes, body: &str) -> Message {
    Message::from(vec![
        Bytes::from_static(b"client"),
        id.clone(),
        Bytes::new(),
        Bytes::copy_from_slice(body.as_bytes()),
    ])
}

/// RELAXED + CORRELATE: after a resend, the reply to the earlier request (same peer) is dropped;
/// replies with a missing or unknown id too.
async fn correlate_drops_stale_replies(transport: &'static str) {
    let (req, router) = req_and_router_double(transport, true, true).await;
    send(&req, "q1").await;
    let id1 = request_id(&router, "q1").await;
    send(&req, "q2").await;
    let id2 = request_id(&router, "q2").await;
    assert_ne!(id1, id2, "each request gets a new id");
    send(&router, reply(&id1, "r1 (stale)")).await;
    send(&router, reply(&id2, "r2")).await;
    assert_eq!(recv_strs(&req).await, ["r2"]);

    send(&req, "q3").await;
    let id3 = request_id(&router, "q3").await;
    send(&router, msg(&["client", "", "no id"])).await;
    send(&router, reply(&Bytes::from_static(b"\xde\xad\xbe\xef"), "bogus id")).await;
    send(&router, reply(&id2, "old id")).await;
    send(&router, reply(&id3, "r3")).await;
    assert_eq!(recv_strs(&req).await, ["r3"]);
    assert!(matches!(req.try_recv(), Err(Error::InvalidState)), "answered: REQ must send next");
}

/// RELAXED without CORRELATE takes the first reply from the peer, stale or not (why CORRELATE
/// exists); the request carries no id frame.
async fn relaxed_without_correlate_takes_a_stale_reply(transport: &'static str) {
    let (req, router) = req_and_router_double(transport, true, false).await;
    send(&req, "q1").await;
    assert_eq!(strs(&recv(&router).await), ["client", "", "q1"]);
    send(&req, "q2").await;
    assert_eq!(strs(&recv(&router).await), ["client", "", "q2"]);
    send(&router, msg(&["client", "", "r1"])).await;
    assert_eq!(recv_strs(&req).await, ["r1"]);
}

/// CORRELATE + RELAXED against a real REP: the REP answers both requests in turn and the REQ gets
/// the answer to the latest one only.
async fn correlate_with_real_rep(transport: &'static str) {
    let rep = Socket::new(SocketType::Rep);
    let ep = bind(&rep, transport, "correlate-rep").await;
    let req = Socket::new(SocketType::Req);
    req.set_req_relaxed(true);
    req.set_req_correlate(true);
    connect_live(&req, &ep).await;
    send(&req, "q1").await;
    send(&req, "q2").await;
    for q in ["q1", "q2"] {
        assert_eq!(recv_strs(&rep).await, [q]);
        send(&rep, format!("answer to {q}")).await;
    }
    assert_eq!(recv_strs(&req).await, ["answer to q2"]);
    send(&req, "q3").await;
    assert_eq!(recv_strs(&rep).await, ["q3"]);
    send(&rep, "answer to q3").await;
    assert_eq!(recv_strs(&req).await, ["answer to q3"]);
}

over_transports!(correlate_drops_stale_replies, relaxed_without_correlate_takes_a_stale_reply, correlate_with_real_rep);

// ---------------------------------------------------------------------------------------------
// CONNECT_ROUTING_ID
// ---------------------------------------------------------------------------------------------

/// A ROUTER names the peer of its next connect; it can route to that name right after the
/// handshake (ROUTER_MANDATORY would report an unknown name). The option is used up by the connect.
/// (REP cannot be a ROUTER's peer in ZMTP, so the other peers are DEALERs.)
async fn connect_routing_id_names_the_next_connect(transport: &'static str) {
    let b = Socket::new(SocketType::Router);
    b.set_routing_id("B-announced").expect("routing id");
    let b_ep = bind(&b, transport, "crid-router").await;
    let d1 = Socket::new(SocketType::Dealer);
    d1.set_routing_id("d1-announced").expect("routing id");
    let d1_ep = bind(&d1, transport, "crid-dealer1").await;
    let d2 = Socket::new(SocketType::Dealer);
    d2.set_routing_id("d2-announced").expect("routing id");
    let d2_ep = bind(&d2, transport, "crid-dealer2").await;

    let a = Socket::new(SocketType::Router);
    a.set_routing_id("A").expect("routing id");
    a.set_router_mandatory(true);
    let mut mon = a.monitor();
    a.set_connect_routing_id(Some(Bytes::from_static(b"peer-x")));
    assert_eq!(a.connect_routing_id(), Some(Bytes::from_static(b"peer-x")));
    connect(&a, &b_ep).await;
    handshake(&mut mon).await;
    a.try_send(msg(&["peer-x", "hello"])).expect("peer-x is routable right after the handshake");
    assert_eq!(recv_strs(&b).await, ["A", "hello"]);
    send(&b, msg(&["A", "back"])).await;
    assert_eq!(recv_strs(&a).await, ["peer-x", "back"]);
    assert!(matches!(a.try_send(msg(&["B-announced", "x"])), Err(Error::HostUnreachable(_))));

    a.set_connect_routing_id(Some(Bytes::from_static(b"d-1")));
    connect(&a, &d1_ep).await;
    handshake(&mut mon).await;
    a.try_send(msg(&["d-1", "request"])).expect("d-1 is routable");
    assert_eq!(recv_strs(&d1).await, ["request"]);
    send(&d1, "response").await;
    assert_eq!(recv_strs(&a).await, ["d-1", "response"]);

    // Not set again: the next connect's peer goes by its announced routing id.
    connect(&a, &d2_ep).await;
    handshake(&mut mon).await;
    a.try_send(msg(&["d2-announced", "q"])).expect("named by its own routing id");
    assert_eq!(recv_strs(&d2).await, ["q"]);
    let mut ids: Vec<Bytes> = a.peer_routing_ids();
    ids.sort();
    assert_eq!(ids, [Bytes::from_static(b"d-1"), Bytes::from_static(b"d2-announced"), Bytes::from_static(b"peer-x")]);
}

over_transports!(connect_routing_id_names_the_next_connect);

// ---------------------------------------------------------------------------------------------
// TCP keepalive
// ---------------------------------------------------------------------------------------------

/// (timer kind, remaining time) of the IPv4 TCP socket with this local and remote port, from
/// `/proc/net/tcp`: kind 2 with an established socket is the keepalive timer; the remaining time is
/// in clock ticks (USER_HZ, 100 per second).
#[cfg(target_os = "linux")]
fn tcp_timer(local_port: u16, remote_port: u16) -> Option<(u8, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let port_of = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if port_of(f[1])? != local_port || port_of(f[2])? != remote_port || f[3] != "01" {
            return None; // not this connection, or not ESTABLISHED
        }
        let (kind, when) = f[5].split_once(':')?;
        Some((kind.parse().ok()?, u64::from_str_radix(when, 16).ok()?))
    })
}

#[cfg(target_os = "linux")]
fn port(ep: &str) -> u16 {
    ep.rsplit(':').next().and_then(|p| p.parse().ok()).expect("tcp endpoint with port")
}

/// Polls `/proc/net/tcp` until the connection shows a keepalive timer (bounded by the testkit's STEP).
#[cfg(target_os = "linux")]
async fn keepalive_timer(local: u16, remote: u16) -> u64 {
    let mut when = None;
    zmtp_testkit::eventually(&format!("a keepalive timer on connection {local}->{remote}"), || {
        when = tcp_timer(local, remote).and_then(|(kind, when)| (kind == 2).then_some(when));
        when.is_some()
    })
    .await;
    when.expect("the timer just seen")
}

/// The TCP peer ports of our connections to `bound_port`, as the accepting side sees them.
#[cfg(target_os = "linux")]
fn client_ports(bound_port: u16) -> Vec<u16> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok()?;
            let remote = u16::from_str_radix(f[2].rsplit(':').next()?, 16).ok()?;
            (local == bound_port && f[3] == "01").then_some(remote)
        })
        .collect()
}

/// TCP_KEEPALIVE(+IDLE/INTVL/CNT) is applied to accepted and to connected sockets (the kernel shows
/// a keepalive timer set to the idle time), and a socket without it keeps the OS default (no timer).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_keepalive_is_applied_to_connections() {
    bounded(async {
        // Accepting side with keepalive (idle 30 s), connecting side without.
        let server = Socket::new(SocketType::Router);
        server.set_tcp_keepalive(Some(true));
        server.set_tcp_keepalive_idle(Some(Duration::from_secs(30)));
        server.set_tcp_keepalive_intvl(Some(Duration::from_secs(5)));
        server.set_tcp_keepalive_cnt(Some(3));
        let ep = server.bind("tcp://127.0.0.1:*").await.expect("bind");
        let client = Socket::new(SocketType::Dealer);
        client.set_routing_id("c").expect("id");
        connect_live(&client, &ep).await;
        send(&client, "ping").await;
        assert_eq!(recv_strs(&server).await, ["c", "ping"], "keepalive options do not break the connection");
        send(&server, msg(&["c", "pong"])).await;
        assert_eq!(recv_strs(&client).await, ["pong"]);

        let bound = port(&ep);
        let clients = client_ports(bound);
        assert_eq!(clients.len(), 1, "one connection to {bound}: {clients:?}");
        let when = keepalive_timer(bound, clients[0]).await;
        assert!((2000..=3000).contains(&when), "accepted side: keepalive due in {when} ticks, expected ≤ 30 s");
        let client_side = tcp_timer(clients[0], bound);
        assert!(client_side.is_some_and(|(kind, _)| kind != 2), "connecting side has no keepalive: {client_side:?}");

        // Connecting side with keepalive (idle 40 s), accepting side explicitly off.
        let server = Socket::new(SocketType::Router);
        server.set_tcp_keepalive(Some(false));
        let ep = server.bind("tcp://127.0.0.1:*").await.expect("bind");
        let client = Socket::new(SocketType::Dealer);
        client.set_tcp_keepalive(Some(true));
        client.set_tcp_keepalive_idle(Some(Duration::from_secs(40)));
        client.set_routing_id("c").expect("id");
        connect_live(&client, &ep).await;
        send(&client, "ping").await;
        assert_eq!(recv_strs(&server).await, ["c", "ping"]);
        let bound = port(&ep);
        let clients = client_ports(bound);
        assert_eq!(clients.len(), 1, "one connection to {bound}: {clients:?}");
        let when = keepalive_timer(clients[0], bound).await;
        assert!((3000..=4000).contains(&when), "connecting side: keepalive due in {when} ticks, expected ≤ 40 s");
        let server_side = tcp_timer(bound, clients[0]);
        assert!(server_side.is_some_and(|(kind, _)| kind != 2), "accepting side has no keepalive: {server_side:?}");
    })
    .await
}

/// This machine's sockets as `ss -H` (iproute2, no header) lists them, one entry per socket
/// (continuation lines joined).
#[cfg(target_os = "linux")]
fn ss(args: &[&str]) -> Vec<String> {
    let out = std::process::Command::new("ss").args(args).output().expect("run ss (iproute2; .ci/test installs it)");
    assert!(out.status.success(), "ss {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut entries: Vec<String> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        match entries.last_mut() {
            Some(last) if line.starts_with(char::is_whitespace) => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => entries.push(line.to_owned()),
        }
    }
    entries
}

/// (send buffer, receive buffer) of an `ss -m` entry: its `skmem:(…,rb<N>,…,tb<N>,…)`.
#[cfg(target_os = "linux")]
fn skmem(entry: &str) -> (u64, u64) {
    let field = |name: &str| {
        entry
            .split(['(', ',', ')'])
            .find_map(|f| f.strip_prefix(name)?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {entry:?}"))
    };
    (field("tb"), field("rb"))
}

/// The one entry whose column `column` (0-based) is `address`.
#[cfg(target_os = "linux")]
fn ss_entry<'e>(entries: &'e [String], column: usize, address: &str) -> &'e String {
    let found: Vec<&String> = entries.iter().filter(|e| e.split_whitespace().nth(column) == Some(address)).collect();
    assert_eq!(found.len(), 1, "one socket with {address} in column {column}: {entries:#?}");
    found[0]
}

/// SNDBUF and RCVBUF reach the kernel on both ends of a connection, tcp and ipc (`ss -m`; Linux
/// keeps twice what is set), TOS on tcp (`ss --tos`), and a socket without them keeps the OS's.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sndbuf_rcvbuf_and_tos_are_applied_to_connections() {
    bounded(async {
        for transport in ["tcp://127.0.0.1:*", "ipc://*"] {
            let server = Socket::new(SocketType::Pull);
            server.set_sndbuf(Some(40_000));
            server.set_rcvbuf(Some(70_000));
            server.set_tos(0x28);
            let ep = server.bind(transport).await.expect("bind");
            let client = Socket::new(SocketType::Push);
            client.set_sndbuf(Some(90_000));
            client.set_rcvbuf(Some(30_000));
            connect_live(&client, &ep).await;
            let plain = Socket::new(SocketType::Push);
            connect_live(&plain, &ep).await;
            send(&client, "ping").await;
            assert_eq!(recv_strs(&server).await, ["ping"]);

            // Both connections' two ends: (accepting end, connecting end).
            let ends: Vec<(String, String)> = match ep.strip_prefix("tcp://") {
                Some(address) => {
                    // `<recv-q> <send-q> <local> <peer> …`
                    let entries = ss(&["-tnmH", "--tos", "state", "established"]);
                    let accepted: Vec<&String> =
                        entries.iter().filter(|e| e.split_whitespace().nth(2) == Some(address)).collect();
                    let peer = |e: &String| e.split_whitespace().nth(3).unwrap().to_owned();
                    accepted.iter().map(|a| ((*a).clone(), ss_entry(&entries, 2, &peer(a)).clone())).collect()
                }
                None => {
                    // `u_str <recv-q> <send-q> <path> <inode> * <peer inode> …`
                    let path = ep.strip_prefix("ipc://").unwrap();
                    let entries = ss(&["-xmnH", "state", "established"]);
                    let accepted: Vec<&String> =
                        entries.iter().filter(|e| e.split_whitespace().nth(3) == Some(path)).collect();
                    let peer = |e: &String| e.split_whitespace().nth(6).unwrap().to_owned();
                    accepted.iter().map(|a| ((*a).clone(), ss_entry(&entries, 4, &peer(a)).clone())).collect()
                }
            };
            assert_eq!(ends.len(), 2, "{transport}: two connections accepted at {ep}: {ends:#?}");
            // The connection whose connecting end has the client's buffers is the client's; the
            // other is `plain`'s.
            let mine = usize::from(skmem(&ends[0].1) != (180_000, 60_000));
            let ((accepted, connected), (_, other)) = (&ends[mine], &ends[1 - mine]);
            if transport.starts_with("tcp") {
                for (accepting, _) in &ends {
                    assert!(accepting.contains("tos:0x28"), "accepting end with TOS 0x28: {accepting}");
                }
                assert!(!connected.contains("tos:0x28"), "the client set no TOS: {connected}");
            }
            assert_eq!(skmem(accepted), (80_000, 140_000), "{transport}, accepting end: {accepted}");
            assert_eq!(skmem(connected), (180_000, 60_000), "{transport}, connecting end: {connected}");
            let (tb, rb) = skmem(other);
            assert!(tb != 180_000 && rb != 60_000, "{transport}, a socket without the options: {other}");
        }
    })
    .await
}

/// TOS marks an IPv4 client's connection to a dual-stack (IPV6 `*`) listener: its accepted socket
/// is an IPv6 one carrying IPv4 traffic, which goes by IP_TOS, not the IPv6 traffic class.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tos_marks_ipv4_clients_of_a_dual_stack_listener() {
    bounded(async {
        let server = Socket::new(SocketType::Pull);
        server.set_ipv6(true);
        server.set_tos(0x28);
        let ep = server.bind("tcp://*:*").await.expect("bind the IPv6 wildcard");
        let port = ep.rsplit(':').next().unwrap();
        let client = Socket::new(SocketType::Push);
        connect_live(&client, &format!("tcp://127.0.0.1:{port}")).await;
        let entries = ss(&["-tnmH", "--tos", "state", "established"]);
        let accepted = ss_entry(&entries, 2, &format!("[::ffff:127.0.0.1]:{port}"));
        assert!(accepted.contains("tos:0x28"), "the IPv4 traffic is marked: {accepted}");
    })
    .await
}

/// Sockets start on one shared copy of the default options (a socket that changes none holds
/// none of its own): an option set on one socket is that socket's alone, before and after others
/// are made, and a CONNECT_ROUTING_ID is still taken by the next connect only.
#[test]
fn an_option_set_on_one_socket_is_its_own() {
    let (a, b) = (Socket::new(SocketType::Dealer), Socket::new(SocketType::Dealer));
    a.set_sndhwm(7);
    a.set_routing_id("a").unwrap();
    let c = Socket::new(SocketType::Dealer);
    assert_eq!((a.sndhwm(), b.sndhwm(), c.sndhwm()), (7, 1000, 1000));
    assert_eq!(a.routing_id(), Bytes::from("a"));
    assert!(b.routing_id().is_empty() && c.routing_id().is_empty());
    b.set_sndhwm(9);
    assert_eq!((a.sndhwm(), b.sndhwm(), c.sndhwm()), (7, 9, 1000));
}

/// The `name:<N>` field of an `ss -i` entry.
#[cfg(target_os = "linux")]
fn ss_field(entry: &str, name: &str) -> u64 {
    entry
        .split_whitespace()
        .find_map(|f| f.strip_prefix(name)?.strip_prefix(':')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {entry:?}"))
}

/// A small RCVBUF is in place before the TCP handshake, on a listener (accepted connections
/// inherit it) and on a connecting socket, as libzmq sets it. Set only once connected, the window
/// first offered is the default 64 KiB, and Linux bounds the sender's segment size by half the
/// largest window ever offered: 32 KiB, more than the receiver's small buffer can offer again.
/// Every segment then waited for a zero-window probe (200 ms): 3,000 messages of 1 KiB took
/// 8–9 s instead of 6 ms. The witness is that bound: the sender's segment size fits in half the
/// receiver's buffer.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_rcvbuf_is_in_place_before_the_handshake() {
    bounded(async {
        for receiver_binds in [true, false] {
            let pull = Socket::new(SocketType::Pull);
            pull.set_rcvbuf(Some(16 * 1024));
            let push = Socket::new(SocketType::Push);
            let ep = if receiver_binds {
                let ep = pull.bind("tcp://127.0.0.1:*").await.expect("bind");
                connect_live(&push, &ep).await;
                ep
            } else {
                let ep = push.bind("tcp://127.0.0.1:*").await.expect("bind");
                connect_live(&pull, &ep).await;
                ep
            };
            let padding = Bytes::from(vec![0u8; 1024]);
            let sender = tokio::spawn(async move {
                for i in 0..300 {
                    send(&push, vec![Bytes::from(format!("{i}")), padding.clone()]).await;
                }
                push
            });
            for i in 0..300 {
                assert_eq!(recv(&pull).await[0], format!("{i}"));
            }
            let _push = sender.await.unwrap();
            let address = ep.strip_prefix("tcp://").unwrap();
            let entries = ss(&["-tnmiH", "state", "established"]);
            // `<recv-q> <send-q> <local> <peer> …`: the bound end, then its peer.
            let bound = ss_entry(&entries, 2, address);
            let other = ss_entry(&entries, 2, bound.split_whitespace().nth(3).unwrap());
            let (sending, receiving) = if receiver_binds { (other, bound) } else { (bound, other) };
            let (_, rb) = skmem(receiving);
            let mss = ss_field(sending, "mss");
            assert!(
                mss <= rb / 2,
                "receiver binds: {receiver_binds}: segment size {mss} over half the receive buffer {rb}: {sending}"
            );
        }
    })
    .await
}
