//! What the draft types offer beyond what libzmq 4.3.5 can witness (draft.rs compares the rest with
//! it): `disconnect_peer` (libzmq master's `zmq_disconnect_peer`, absent from 4.3.5), the 32-bit
//! routing ids a SERVER's and a PEER's monitor reports, a DISH's LEAVE as the RADIO's monitor sees
//! it, and JOIN/LEAVE between sockets in one process (inproc).

use std::time::Duration;

use tokio::time::timeout;
use zmtp::{Error, Message, Monitor, MonitorEvent, Socket, SocketType};
use zmtp_testkit::{bounded, unique};

const STEP: Duration = Duration::from_secs(10);

async fn recv(socket: &Socket) -> Message {
    timeout(STEP, socket.recv()).await.expect("recv timed out").expect("recv failed")
}

/// The next event `pick` accepts, skipping others.
async fn event<T>(monitor: &mut Monitor, what: &str, mut pick: impl FnMut(MonitorEvent) -> Option<T>) -> T {
    timeout(STEP, async {
        loop {
            if let Some(found) = pick(monitor.next_event().await.expect("monitor ended")) {
                return found;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {what}"))
}

fn routing_id_of(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes.try_into().expect("a 4-byte routing id"))
}

/// A SERVER drops one CLIENT: the CLIENT (which connected) comes back under a new id and the old
/// id is unroutable; the monitor names each client by the id its messages carry, on the handshake
/// and when it disconnects. Unknown ids, and sockets of other types, answer false.
#[tokio::test]
async fn server_disconnect_peer_drops_one_client() {
    bounded(async {
        let server = Socket::new(SocketType::Server);
        let mut monitor = server.monitor();
        let endpoint = server.bind("tcp://127.0.0.1:*").await.unwrap();
        let client = Socket::new(SocketType::Client);
        client.set_reconnect_ivl(Some(Duration::from_millis(10)));
        client.connect(&endpoint).await.unwrap();
        let other = Socket::new(SocketType::Client);
        other.connect(&endpoint).await.unwrap();

        client.send("one").await.unwrap();
        let first = recv(&server).await;
        let old_id = first.routing_id().expect("a SERVER's message carries its routing id");
        other.send("two").await.unwrap();
        let other_id = recv(&server).await.routing_id().unwrap();
        assert_ne!(old_id, other_id);
        let mut shaken = Vec::new();
        while shaken.len() < 2 {
            shaken.push(
                event(&mut monitor, "HandshakeSucceeded", |e| match e {
                    MonitorEvent::HandshakeSucceeded { routing_id, .. } => Some(routing_id_of(&routing_id.unwrap())),
                    _ => None,
                })
                .await,
            );
        }
        shaken.sort();
        let mut expected = vec![old_id, other_id];
        expected.sort();
        assert_eq!(shaken, expected, "the monitor names each client by the id its messages carry");

        assert!(!server.disconnect_peer(old_id.wrapping_add(1000)), "nobody has that id");
        assert!(server.disconnect_peer(old_id));
        assert!(matches!(
            server.try_send(Message::from("late").with_routing_id(old_id)),
            Err(Error::HostUnreachable(_))
        ));

        // The client reconnects by itself; its next message comes under a new id.
        let new_id = loop {
            client.send("again").await.unwrap();
            if let Ok(Ok(msg)) = timeout(Duration::from_millis(50), server.recv()).await
                && &msg[0][..] == b"again"
            {
                break msg.routing_id().unwrap();
            }
        };
        assert_ne!(new_id, old_id);
        let reshaken = event(&mut monitor, "the client's new handshake", |e| match e {
            MonitorEvent::HandshakeSucceeded { routing_id, .. } => Some(routing_id_of(&routing_id.unwrap())),
            _ => None,
        })
        .await;
        assert_eq!(reshaken, new_id);
        server.send(Message::from("welcome back").with_routing_id(new_id)).await.unwrap();
        assert_eq!(&recv(&client).await[0][..], b"welcome back");
        // The other client was not touched; when it goes, the monitor names it.
        server.send(Message::from("still here").with_routing_id(other_id)).await.unwrap();
        assert_eq!(&recv(&other).await[0][..], b"still here");
        other.close().await;
        let gone = event(&mut monitor, "Disconnected", |e| match e {
            MonitorEvent::Disconnected { routing_id, .. } => Some(routing_id_of(&routing_id.unwrap())),
            _ => None,
        })
        .await;
        assert_eq!(gone, other_id);

        let dealer = Socket::new(SocketType::Dealer);
        assert!(!dealer.disconnect_peer(1), "only SERVER and PEER have disconnect_peer");
    })
    .await;
}

/// A PEER that connected with `connect_peer` and drops that peer reconnects under the same routing
/// id, so what it sends to that id afterwards still arrives.
#[tokio::test]
async fn peer_disconnect_peer_reconnects_under_the_same_id() {
    bounded(async {
        let a = Socket::new(SocketType::Peer);
        let endpoint = a.bind("tcp://127.0.0.1:*").await.unwrap();
        let b = Socket::new(SocketType::Peer);
        b.set_reconnect_ivl(Some(Duration::from_millis(10)));
        let mut monitor = b.monitor();
        let to_a = b.connect_peer(&endpoint).await.unwrap();
        let reported = event(&mut monitor, "HandshakeSucceeded", |e| match e {
            MonitorEvent::HandshakeSucceeded { routing_id, .. } => routing_id,
            _ => None,
        })
        .await;
        assert_eq!(routing_id_of(&reported), to_a, "the monitor names the peer by connect_peer's id");
        b.send(Message::from("first").with_routing_id(to_a)).await.unwrap();
        let first = recv(&a).await;
        let to_b = first.routing_id().unwrap();

        // A connection this socket closes itself is not reported as Disconnected (nor is it by
        // libzmq); the reconnection is.
        assert!(b.disconnect_peer(to_a));
        event(&mut monitor, "the reconnection", |e| matches!(e, MonitorEvent::HandshakeSucceeded { .. }).then_some(()))
            .await;
        b.send(Message::from("second").with_routing_id(to_a)).await.unwrap();
        let second = recv(&a).await;
        assert_eq!(&second[0][..], b"second");
        assert_ne!(second.routing_id().unwrap(), to_b, "the bound side sees a new connection, with a new id");
        // And the bound side may drop it too: b reconnects once more.
        assert!(a.disconnect_peer(second.routing_id().unwrap()));
        let third = loop {
            b.send(Message::from("third").with_routing_id(to_a)).await.unwrap();
            if let Ok(Ok(msg)) = timeout(Duration::from_millis(50), a.recv()).await {
                break msg;
            }
        };
        assert_eq!(&third[0][..], b"third");
    })
    .await;
}

/// JOIN and LEAVE between sockets of one process (inproc), with the RADIO's monitor reporting each
/// group change and which DISH made it.
#[tokio::test]
async fn join_and_leave_over_inproc() {
    bounded(async {
        let endpoint = format!("inproc://{}", unique("radio"));
        let radio = Socket::new(SocketType::Radio);
        let mut monitor = radio.monitor();
        radio.bind(&endpoint).await.unwrap();
        let dish = Socket::new(SocketType::Dish);
        dish.join("weather").unwrap();
        dish.connect(&endpoint).await.unwrap();
        let joined = event(&mut monitor, "Subscribed", |e| match e {
            MonitorEvent::Subscribed { topic, .. } => Some(topic),
            _ => None,
        })
        .await;
        assert_eq!(&joined[..], b"weather");

        radio.send(Message::from("sun").with_group("weather")).await.unwrap();
        radio.send(Message::from("news").with_group("tv")).await.unwrap();
        radio.send(Message::from("rain").with_group("weather")).await.unwrap();
        for body in [&b"sun"[..], b"rain"] {
            let msg = recv(&dish).await;
            assert_eq!((&msg[0][..], msg.group().map(|g| &g[..])), (body, Some(&b"weather"[..])));
        }

        dish.join("tv").unwrap();
        event(&mut monitor, "Subscribed tv", |e| match e {
            MonitorEvent::Subscribed { topic, .. } if &topic[..] == b"tv" => Some(()),
            _ => None,
        })
        .await;
        dish.leave("weather").unwrap();
        let left = event(&mut monitor, "Unsubscribed", |e| match e {
            MonitorEvent::Unsubscribed { topic, .. } => Some(topic),
            _ => None,
        })
        .await;
        assert_eq!(&left[..], b"weather");
        radio.send(Message::from("cloud").with_group("weather")).await.unwrap();
        radio.send(Message::from("film").with_group("tv")).await.unwrap();
        let msg = recv(&dish).await;
        assert_eq!((&msg[0][..], msg.group().map(|g| &g[..])), (&b"film"[..], Some(&b"tv"[..])));
        assert!(matches!(dish.try_recv(), Err(Error::WouldBlock)), "a group left is not delivered");
        assert!(matches!(dish.leave("weather"), Err(Error::InvalidArgument(_))), "leaving twice, as libzmq: EINVAL");
    })
    .await;
}
