//! Transport behaviour: tcp wildcards and IPv6, ipc socket files, inproc ordering, endpoint errors.

use zmtp::{Error, Socket, SocketType};
use zmtp_testkit::{bounded, eventually, unique};

async fn round_trip(bind: &str) -> String {
    let pull = Socket::new(SocketType::Pull);
    let bound = pull.bind(bind).await.expect("bind");
    let push = Socket::new(SocketType::Push);
    push.connect(&bound).await.unwrap();
    push.send("over the wire").await.unwrap();
    assert_eq!(pull.recv().await.unwrap()[0], "over the wire");
    bound
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_ipv4_os_assigned_port_is_reported() {
    bounded(async {
        let bound = round_trip("tcp://127.0.0.1:*").await;
        let port: u16 = bound.rsplit(':').next().unwrap().parse().unwrap();
        assert_ne!(port, 0);
        assert!(bound.starts_with("tcp://127.0.0.1:"));
    })
    .await;
}

/// Bind to a network interface by name, as libzmq does (`tcp://lo:*`, `tcp://eth0:5555`): the
/// endpoint reported is the interface's address.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_bind_to_an_interface_name() {
    bounded(async {
        let bound = round_trip("tcp://lo:*").await;
        assert!(bound.starts_with("tcp://127.0.0.1:"), "{bound}");
        let pull = Socket::new(SocketType::Pull);
        let err = pull.bind("tcp://no-such-interface.invalid:*").await.unwrap_err();
        assert!(err.to_string().contains("network interface"), "{err}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_ipv6_loopback() {
    bounded(async {
        let bound = round_trip("tcp://[::1]:0").await;
        assert!(bound.starts_with("tcp://[::1]:"), "{bound}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_wildcard_bind_accepts_loopback() {
    bounded(async {
        let pull = Socket::new(SocketType::Pull);
        let bound = pull.bind("tcp://*:*").await.unwrap();
        assert!(bound.starts_with("tcp://0.0.0.0:"), "{bound}");
        assert_eq!(pull.last_endpoint().as_deref(), Some(bound.as_str()));
        let port = bound.rsplit(':').next().unwrap();
        let push = Socket::new(SocketType::Push);
        push.connect(&format!("tcp://localhost:{port}")).await.unwrap();
        push.send("via localhost").await.unwrap();
        assert_eq!(pull.recv().await.unwrap()[0], "via localhost");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_port_in_use_is_an_error() {
    let first = Socket::new(SocketType::Pull);
    let bound = first.bind("tcp://127.0.0.1:*").await.unwrap();
    let second = Socket::new(SocketType::Pull);
    assert!(matches!(second.bind(&bound).await, Err(Error::Io(_))));
}

fn ipc_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{}.ipc", unique(name)))
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipc_stale_socket_file_is_replaced() {
    bounded(async {
        let path = ipc_path("stale");
        let _ = std::fs::remove_file(&path);
        // A socket file nobody listens on, as left behind by a crashed process.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        round_trip(&format!("ipc://{}", path.display())).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipc_live_socket_file_is_in_use_and_removed_on_unbind() {
    bounded(async {
        let path = ipc_path("live");
        let _ = std::fs::remove_file(&path);
        let ep = format!("ipc://{}", path.display());
        let first = Socket::new(SocketType::Pull);
        first.bind(&ep).await.unwrap();
        let second = Socket::new(SocketType::Pull);
        assert!(matches!(second.bind(&ep).await, Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::AddrInUse));
        first.unbind(&ep).await.unwrap();
        // The listener task drops the file when it stops; wait for that without sleeping blindly.
        eventually("the socket file removed", || !path.exists()).await;
        second.bind(&ep).await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipc_wildcard_makes_a_fresh_path() {
    bounded(async {
        let bound = round_trip("ipc://*").await;
        assert!(bound.starts_with("ipc://") && bound.len() > "ipc://".len() + 2, "{bound}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inproc_connect_before_bind_and_name_in_use() {
    bounded(async {
        let name = format!("inproc://{}", unique("order"));
        let push = Socket::new(SocketType::Push);
        push.connect(&name).await.unwrap();
        push.send("queued before bind").await.unwrap();
        let pull = Socket::new(SocketType::Pull);
        pull.bind(&name).await.unwrap();
        assert_eq!(pull.recv().await.unwrap()[0], "queued before bind");
        let other = Socket::new(SocketType::Pull);
        assert!(matches!(other.bind(&name).await, Err(Error::AddressInUse(_))));
    })
    .await;
}

/// Two sockets in one process exchange frames as they are: what arrives is the sender's own buffer,
/// in both directions, with the peer's properties still attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inproc_passes_frames_without_copying() {
    bounded(async {
        let name = format!("inproc://{}", unique("zero-copy"));
        let server = Socket::new(SocketType::Router);
        server.bind(&name).await.unwrap();
        let client = Socket::new(SocketType::Dealer);
        client.set_routing_id("client").unwrap();
        client.connect(&name).await.unwrap();
        let big = bytes::Bytes::from(vec![7u8; 1 << 20]);
        client.send(zmtp::Message::from(vec![big.clone(), bytes::Bytes::from_static(b"tail")])).await.unwrap();
        let got = server.recv().await.unwrap();
        assert_eq!(&got[0][..], b"client", "ROUTER sees the routing id from the handshake");
        assert_eq!(got[1].as_ptr(), big.as_ptr(), "the 1 MiB frame is the sender's buffer, not a copy");
        assert_eq!(&got[2][..], b"tail");
        assert_eq!(got.property("Socket-Type"), Some("DEALER"), "the handshake's properties come along");
        let reply = bytes::Bytes::from(vec![9u8; 4096]);
        server.send(zmtp::Message::from(vec![got[0].clone(), reply.clone()])).await.unwrap();
        let back = client.recv().await.unwrap();
        assert_eq!(back[0].as_ptr(), reply.as_ptr(), "and back the same way");
        assert_eq!(back.property("Socket-Type"), Some("ROUTER"));
    })
    .await;
}

/// With MSG_PROPERTIES off, received messages carry no connection properties, by `recv` and
/// `recv_many` alike, and a ROUTER still gets each peer's routing id; a socket left at the
/// default gets them from the same kind of peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_carry_properties_unless_turned_off() {
    bounded(async {
        for properties in [true, false] {
            let pull = Socket::new(SocketType::Pull);
            pull.set_msg_properties(properties);
            let endpoint = pull.bind("tcp://127.0.0.1:*").await.unwrap();
            let push = Socket::new(SocketType::Push);
            push.connect(&endpoint).await.unwrap();
            push.send_many(&mut vec![zmtp::Message::from("one"), zmtp::Message::from("two")]).await.unwrap();
            let first = pull.recv().await.unwrap();
            let mut rest = Vec::new();
            pull.recv_many(&mut rest, 1).await.unwrap();
            for msg in [&first, &rest[0]] {
                let expected = properties.then_some("PUSH");
                assert_eq!(msg.property("Socket-Type"), expected, "properties {properties}");
                assert_eq!(msg.properties().is_some(), properties);
            }

            let router = Socket::new(SocketType::Router);
            router.set_msg_properties(properties);
            let endpoint = router.bind("tcp://127.0.0.1:*").await.unwrap();
            let dealer = Socket::new(SocketType::Dealer);
            dealer.set_routing_id("d").unwrap();
            dealer.connect(&endpoint).await.unwrap();
            dealer.send("hi").await.unwrap();
            let got = router.recv().await.unwrap();
            assert_eq!(&got[0][..], b"d", "the routing id is not a property");
            assert_eq!(got.property("Socket-Type"), properties.then_some("DEALER"));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_endpoints_are_typed_errors() {
    let s = Socket::new(SocketType::Dealer);
    assert!(matches!(s.bind("tcp://127.0.0.1").await, Err(Error::InvalidEndpoint(..))));
    assert!(matches!(s.connect("pgm://127.0.0.1:5").await, Err(Error::UnsupportedTransport(_))));
    assert!(
        matches!(s.connect("udp://127.0.0.1:5").await, Err(Error::IncompatibleTransport(..))),
        "udp is RADIO/DISH only"
    );
    assert!(matches!(s.bind("tcp://no-such-host.invalid:5").await, Err(Error::Io(_))));
    assert!(matches!(s.unbind("tcp://127.0.0.1:1").await, Err(Error::EndpointNotFound(_))));
    assert!(matches!(s.disconnect("tcp://127.0.0.1:1").await, Err(Error::EndpointNotFound(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_is_free_again_when_close_and_unbind_return() {
    bounded(async {
        let ipc = format!("ipc://{}", ipc_path("rebind").display());
        let probe = Socket::new(SocketType::Pull);
        let tcp = probe.bind("tcp://127.0.0.1:*").await.unwrap();
        probe.close().await;
        for endpoint in [tcp, ipc] {
            for round in 0..50 {
                let first = Socket::new(SocketType::Pull);
                let bound = first.bind(&endpoint).await.unwrap_or_else(|e| panic!("round {round}: {e}"));
                if round % 2 == 0 {
                    first.close().await;
                } else {
                    first.unbind(&bound).await.unwrap();
                }
            }
            // And the last binding still works end to end.
            round_trip(&endpoint).await;
        }
    })
    .await;
}
