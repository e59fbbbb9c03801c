//! `bind`: a listener and the task that accepts on it, running each accepted connection in a
//! task of its own.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::run::{log_end, run_connection};
use crate::engine::Host;
use crate::error::Result;
use crate::monitor::MonitorEvent;
use crate::transport::{BindOptions, Endpoint, Listener};

/// Binds `ep` and accepts until `accepting` is cancelled; each connection stops when
/// `connections` is. Returns the address as bound and the accept task, which owns the listener:
/// once it has ended, the address is free again.
pub(crate) async fn listen<H: Host>(
    host: &Arc<H>,
    ep: &Endpoint,
    how: BindOptions,
    accepting: CancellationToken,
    connections: CancellationToken,
) -> Result<(String, JoinHandle<()>)> {
    #[cfg(feature = "draft")]
    if matches!(ep, Endpoint::Udp { .. }) {
        return super::udp::listen(host, ep, connections).await;
    }
    let (listener, bound) = Listener::bind(ep, how).await?;
    host.monitors().emit(|| MonitorEvent::Listening { endpoint: bound.clone() });
    let task = tokio::spawn(accept_loop(host.clone(), listener, bound.clone(), accepting, connections));
    Ok((bound, task))
}

async fn accept_loop<H: Host>(
    host: Arc<H>,
    mut listener: Listener,
    endpoint: String,
    accepting: CancellationToken,
    connections: CancellationToken,
) {
    // Each connection's task names its endpoint through this one shared copy (16 bytes in the task,
    // no allocation per connection).
    let shared_endpoint: Arc<str> = Arc::from(endpoint.as_str());
    loop {
        let accepted = tokio::select! {
            biased;
            _ = accepting.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((conn, peer)) => {
                host.monitors().emit(|| MonitorEvent::Accepted { endpoint: endpoint.clone(), peer: peer.clone() });
                let host = host.clone();
                let kill = connections.child_token();
                let endpoint = shared_endpoint.clone();
                // 8 bytes less in the task than a `String`, which with the rest kept it a 128-byte step
                // larger (with feature `draft`).
                let peer = peer.into_boxed_str();
                tokio::spawn(async move {
                    let ended = run_connection(&host, None, conn, kill, &endpoint, &peer).await;
                    log_end(&endpoint, &peer, &ended.result);
                });
            }
            Err(e) => {
                // Typically EMFILE: back off briefly instead of spinning, and say so once per
                // throttle period, not on every retry (ten a second while the files stay used up).
                if let Some(suppressed) = crate::throttle::allow("accept failed") {
                    tracing::warn!(%endpoint, error = %e, suppressed, "accept failed");
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = accepting.cancelled() => return,
                }
            }
        }
    }
}
