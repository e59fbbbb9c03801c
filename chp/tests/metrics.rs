//! The Prometheus endpoint (`chp::server::metrics`, `chp server --metrics ADDR`): it serves the
//! counters a scraper reads, refuses other paths, and a client that says nothing cannot hold it.

use std::net::SocketAddr;

use chp::server::metrics;
use chp::{Client, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zmtp_testkit::{bounded, step};

/// One HTTP GET; the whole response.
async fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes()).await.unwrap();
    let mut response = String::new();
    step("the response", stream.read_to_string(&mut response)).await.unwrap();
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_serves_the_counters_and_nothing_else() {
    bounded(async {
        let server = Server::bind(ServerConfig { bind: "127.0.0.1".into(), ..ServerConfig::default() }).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(metrics::serve(listener, (*server).clone()));

        let client = Client::connect(&server.address().to_string()).await.unwrap();
        client.set("/a", "1", None).await.unwrap();
        client.set("/b", "22", None).await.unwrap();
        let response = get(addr, "/metrics").await;
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        for line in ["chp_updates_total 2\n", "chp_keys 2\n", "chp_sequence 2\n", "chp_payload_bytes 7\n"] {
            assert!(response.contains(line), "no {line:?} in {response}");
        }
        assert!(response.contains("# TYPE chp_updates_total counter\n"), "{response}");

        assert!(get(addr, "/").await.starts_with("HTTP/1.1 404"));
        // A client that connects and says nothing is cut off at the request timeout; the next
        // scrape is answered.
        let _silent = TcpStream::connect(addr).await.unwrap();
        assert!(get(addr, "/metrics?x=1").await.starts_with("HTTP/1.1 200 OK\r\n"));
        client.close().await;
        server.close().await;
    })
    .await
}
