//! A running server's counters in the Prometheus text format, and a tiny HTTP endpoint that
//! serves them (`chp server --metrics ADDR`): what an operator reads while the server runs.
//!
//! The endpoint answers `GET /metrics` and nothing else, one request per connection. It is opt-in
//! and meant for a trusted network (no authentication): bind it to loopback or a management
//! interface. A client gets [`REQUEST_TIMEOUT`] to send its request line and at most
//! [`MAX_REQUEST`] bytes are read, so a slow or hostile one costs a bounded wait and buffer.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use chp::server::{Server, ServerConfig, metrics};
//! let server = Server::bind(ServerConfig { bind: "127.0.0.1".into(), ..ServerConfig::default() }).await?;
//! let text = metrics::render(&server);
//! assert!(text.contains("chp_updates_total 0\n"));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! tokio::spawn(metrics::serve(listener, (*server).clone())); // GET http://…/metrics
//! # Ok(()) }
//! ```

use std::fmt::Write;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::ServerView;

/// How long a client may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The most bytes of a request read.
pub const MAX_REQUEST: usize = 4096;

/// The server's counters and gauges in the Prometheus text exposition format (version 0.0.4).
pub fn render(view: &ServerView) -> String {
    let stats = view.stats();
    let (sequence, keys, bytes) = view.with_state(|s| (s.sequence(), s.len(), s.payload_bytes()));
    let mut out = String::with_capacity(1024);
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n");
    };
    metric("chp_updates_total", "counter", "KVSETs applied and published.", stats.updates);
    metric("chp_expired_total", "counter", "Keys deleted by their ttl.", stats.expired);
    metric("chp_rejected_total", "counter", "Malformed messages dropped.", stats.rejected);
    metric("chp_snapshots_total", "counter", "Snapshots sent in full.", stats.snapshots);
    metric("chp_snapshots_aborted_total", "counter", "Snapshots abandoned.", stats.snapshots_aborted);
    metric("chp_hugz_total", "counter", "HUGZ sent.", stats.hugz);
    metric("chp_journal_syncs_total", "counter", "fsyncs of the journal.", stats.journal_syncs);
    metric("chp_journal_bytes", "gauge", "Bytes in the journal's log.", stats.journal_bytes);
    metric("chp_sequence", "gauge", "Sequence of the last update.", sequence);
    metric("chp_keys", "gauge", "Keys stored.", keys as u64);
    metric("chp_payload_bytes", "gauge", "Bytes of keys and values stored.", bytes as u64);
    out
}

/// Serves [`render`] at `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, view: ServerView) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        // One at a time: a scrape is rare and tiny, and a client that stalls is cut off at the
        // request timeout.
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &view)).await;
    }
}

async fn answer(mut stream: TcpStream, view: &ServerView) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < MAX_REQUEST {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n.min(MAX_REQUEST - request.len())]);
    }
    let line = request.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    let response = match line.strip_prefix(b"GET /metrics") {
        Some(rest) if rest.is_empty() || rest.starts_with(b" ") || rest.starts_with(b"?") => {
            let body = render(view);
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned(),
    };
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
