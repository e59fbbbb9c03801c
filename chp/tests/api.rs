//! The client API a new user meets first (issue 19): `connect` is async and returns in sync, waiting
//! for a server is bounded, events are an `Unpin` `Stream` whose `next()` is cancel-safe, and a set
//! outside the client's subtree is an error instead of a silent `Ok(None)`.

use std::time::Duration;

use chp::{Client, ClientError, ClientOptions, Event, Server, ServerConfig, Subtree};
use futures::StreamExt;
use zmtp_testkit::{bounded, free_port};

async fn server() -> Server {
    Server::bind(ServerConfig { bind: "127.0.0.1".into(), port: 0, ..ServerConfig::default() }).await.unwrap()
}

#[tokio::test]
async fn connect_returns_in_sync_and_events_are_an_unpin_stream() {
    bounded(async {
        let server = server().await;
        let address = server.address().to_string();
        let client = Client::connect(&address).await.unwrap();
        assert!(matches!(client.status(), chp::Status::Active(_)));
        let mut events = client.events();
        fn assert_unpin<T: Unpin + Send>(_: &T) {}
        assert_unpin(&events);

        // A cancelled next() loses nothing: the receive in progress keeps its place.
        assert!(tokio::time::timeout(Duration::from_millis(20), events.next()).await.is_err());
        client.set("/a", "1", None).await.unwrap();
        client.set("/b", "2", None).await.unwrap();
        let got: Vec<Event> = (&mut events).take(2).collect().await;
        let keys: Vec<_> = got
            .iter()
            .map(|e| match e {
                Event::Set { key, .. } => key.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(keys, ["/a", "/b"]);
        assert_eq!(events.try_next(), None);
        client.close().await;
        assert_eq!(events.next().await, None, "the stream ends when the client closes");
        server.close().await;
    })
    .await;
}

#[tokio::test]
async fn waiting_for_a_server_is_bounded() {
    bounded(async {
        let nobody = format!("tcp://127.0.0.1:{}", free_port());
        let client = Client::start(ClientOptions::new(&nobody).unwrap()).unwrap();
        let wait = Duration::from_millis(200);
        assert_eq!(client.synced_within(wait).await, Err(ClientError::NotSynced(wait)));
        client.close().await;
    })
    .await;
}

#[tokio::test]
async fn a_set_outside_the_subtree_is_refused() {
    bounded(async {
        let server = server().await;
        let address = server.address().to_string();
        let options = ClientOptions::new(&address).unwrap().subtree("/hosts/".parse::<Subtree>().unwrap());
        let hosts = Client::start(options).unwrap();
        hosts.synced_within(Duration::from_secs(10)).await.unwrap();
        assert!(hosts.set("/hosts/web1", "10.0.0.1", None).await.unwrap().is_some());
        match hosts.set("/users/ann", "admin", None).await {
            Err(ClientError::OutsideSubtree { key, subtree }) => {
                assert_eq!((key.as_str(), subtree.as_str()), ("/users/ann", "/hosts/"))
            }
            other => panic!("expected OutsideSubtree, got {other:?}"),
        }
        hosts.close().await;
        server.close().await;
    })
    .await;
}

/// A zero interval would make a server spin (HUGZ, or a pair's copy asked for again without
/// pause): refused at bind, as a typed error, before any socket is opened.
#[tokio::test]
async fn zero_intervals_are_refused_at_bind() {
    let config = ServerConfig { bind: "127.0.0.1".into(), hugz_interval: Duration::ZERO, ..ServerConfig::default() };
    assert!(matches!(Server::bind(config).await, Err(chp::server::ServerError::Config(_))));

    let peer = chp::ServerAddress::new("127.0.0.1", free_port()).unwrap();
    let mut pair =
        chp::server::ha::HaConfig::new(bstar::Side::Primary, 0, "tcp://127.0.0.1:0", "tcp://127.0.0.1:1", peer);
    pair.peer_sync_timeout = Duration::ZERO;
    assert!(matches!(chp::server::ha::HaServer::bind(pair).await, Err(chp::server::ha::HaError::Config(_))));
}
