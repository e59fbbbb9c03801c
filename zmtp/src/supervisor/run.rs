//! One connection, run to its end, and the line it leaves in the log.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::engine::{self, ConnectionInfo, Ended, Host};
use crate::error::ConnectionError;
use crate::link::peer_id::PeerId;
use crate::transport::{self, AnyStream, Connection};

/// Runs one connection (accepted, or made by a connect) to its end. Not an `async fn`: the
/// connection's state machine is [`engine::run`]'s alone (see there).
pub(super) fn run_connection<'a, H: Host>(
    host: &'a Arc<H>,
    slot: Option<PeerId>,
    conn: Connection,
    kill: CancellationToken,
    endpoint: &'a str,
    peer: &'a str,
) -> impl std::future::Future<Output = Ended> + 'a {
    let live = host.live().started();
    let info = ConnectionInfo { endpoint, peer_addr: peer };
    let (stream, rendezvous) = match conn {
        Connection::Tcp(s) => {
            let opts = host.options_snapshot();
            if let Err(e) = transport::set_keepalive(&s, &opts) {
                tracing::warn!(endpoint, error = %e, "cannot set TCP keepalive options");
            }
            if let Err(e) = transport::set_tos(&s, opts.tos) {
                tracing::warn!(endpoint, error = %e, "cannot set ZMQ_TOS");
            }
            if let Err(e) = transport::set_buffers(&s, &opts) {
                tracing::warn!(endpoint, error = %e, "cannot set ZMQ_SNDBUF / ZMQ_RCVBUF");
            }
            (AnyStream::Tcp(s), None)
        }
        #[cfg(unix)]
        Connection::Ipc(s) => {
            if let Err(e) = transport::set_buffers(&s, &host.options_snapshot()) {
                tracing::warn!(endpoint, error = %e, "cannot set ZMQ_SNDBUF / ZMQ_RCVBUF");
            }
            (AnyStream::Ipc(s), None)
        }
        // Boxed: only inproc has one, and inline it would sit in every TCP and IPC connection's task.
        Connection::Inproc(c) => (AnyStream::Inproc(c.stream), c.rendezvous.map(Box::new)),
    };
    engine::run(host, slot, stream, rendezvous, kill, info, live)
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
