//! One connection, run to its end, and the line it leaves in the log.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::engine::{self, ConnectionInfo, Ended, Host};
use crate::error::ConnectionError;
use crate::link::peer_id::PeerId;
use crate::transport::{self, AnyStream, Connection};

/// Runs one connection (accepted, or made by a connect) to its end.
#[allow(clippy::manual_async_fn, reason = "an async fn keeps a copy of its arguments in every connection's task")]
pub(super) fn run_connection<H: Host>(
    host: &Arc<H>,
    slot: Option<PeerId>,
    conn: Connection,
    kill: CancellationToken,
    endpoint: &str,
    peer: &str,
) -> impl std::future::Future<Output = Ended> {
    async move {
        let _live = host.live().started();
        let info = ConnectionInfo { endpoint, peer_addr: peer };
        match conn {
            Connection::Tcp(s) => {
                let opts = host.options_snapshot();
                if let Err(e) = transport::set_keepalive(&s, &opts) {
                    tracing::warn!(endpoint, error = %e, "cannot set TCP keepalive options");
                }
                engine::run(host, slot, AnyStream::Tcp(s), kill, info).await
            }
            #[cfg(unix)]
            Connection::Ipc(s) => engine::run(host, slot, AnyStream::Ipc(s), kill, info).await,
            Connection::Inproc(c) => engine::run_inproc(host, slot, c, kill, info).await,
        }
    }
}

/// One line per ended connection: debug for the ordinary ends, a rate-limited warning for a
/// peer that broke the protocol.
pub(super) fn log_end(endpoint: &str, peer: &str, result: &Result<(), Arc<ConnectionError>>) {
    match result.as_ref().map_err(|e| &**e) {
        Ok(()) | Err(ConnectionError::SocketClosed) => {
            tracing::debug!(endpoint, peer, "connection closed")
        }
        Err(ConnectionError::PeerClosed) => tracing::debug!(endpoint, peer, "peer disconnected"),
        Err(e) if e.is_protocol() => {
            // A peer that keeps failing the same way (a wrong CURVE key, reconnecting every 100 ms)
            // is named once per period, not on every attempt.
            let ip = peer.rsplit_once(':').map_or(peer, |(ip, _port)| ip);
            if let Some(suppressed) = crate::throttle::allow_from("protocol error", ip) {
                tracing::warn!(endpoint, peer, error = %e, suppressed, "protocol error, connection dropped")
            }
        }
        Err(e) => tracing::info!(endpoint, peer, error = %e, "connection ended"),
    }
}
