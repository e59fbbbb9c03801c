//! `connect`: a task that connects to an endpoint for a connect-side slot, runs the connection,
//! and reconnects after it ends — with [`Backoff`] — until `disconnect`, the socket's close (once
//! nothing is left to deliver), LINGER, a protocol error (after which libzmq gives up too), or what
//! ZMQ_RECONNECT_STOP names: a refused connect, a handshake cut short, a refusal after `disconnect`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::run::{log_end, run_connection};
use crate::engine::Host;
use crate::error::ConnectionError;
use crate::link::peer_id::PeerId;
use crate::monitor::MonitorEvent;
use crate::options::{RECONNECT_STOP_AFTER_DISCONNECT, RECONNECT_STOP_CONN_REFUSED, RECONNECT_STOP_HANDSHAKE_FAILED};
use crate::transport::{self, Endpoint};

/// Starts connecting `slot` to `ep` in the background. `accepting` stops reconnecting (close,
/// `disconnect`); `connections` ends the current connection too (`disconnect`, LINGER).
pub(crate) fn connect<H: Host>(
    host: &Arc<H>,
    ep: Endpoint,
    endpoint: String,
    slot: PeerId,
    accepting: CancellationToken,
    connections: CancellationToken,
) {
    #[cfg(feature = "draft")]
    if matches!(ep, Endpoint::Udp { .. }) {
        return super::udp::connect(host, ep, endpoint, slot, accepting, connections);
    }
    // Counted as live from now on, so that closing waits (up to LINGER) while it has messages to deliver.
    let live = host.live().started();
    let host = host.clone();
    tokio::spawn(async move {
        let mut backoff = Backoff::default();
        'connecting: loop {
            host.monitors().emit(|| MonitorEvent::ConnectDelayed { endpoint: endpoint.clone() });
            // Why this attempt did not last, for ConnectRetried.
            let reason: Arc<ConnectionError> = 'attempt: {
                // In a block of its own: the attempt's `Result` (64 bytes) is gone before the
                // connection runs instead of staying in this task for as long as it does.
                let (conn, peer) = {
                    let connected = tokio::select! {
                        c = transport::connect(&ep, transport::Buffers::of(&host.options_snapshot())) => c,
                        _ = stop_connecting(&*host, slot, &accepting, &connections) => break 'connecting,
                    };
                    match connected {
                        Ok(pair) => pair,
                        Err(e) => {
                            tracing::debug!(%endpoint, error = %e, "connect failed");
                            let refused = e.kind() == std::io::ErrorKind::ConnectionRefused;
                            // RECONNECT_STOP_CONN_REFUSED: checked by libzmq's tcp connecter only
                            // (its ipc connecter retries a refused connect whatever the option says).
                            if refused
                                && matches!(ep, Endpoint::Tcp { .. })
                                && stops(&*host, RECONNECT_STOP_CONN_REFUSED)
                            {
                                give_up(&*host, slot, &endpoint, &accepting);
                                return;
                            }
                            // RECONNECT_STOP_AFTER_DISCONNECT: libzmq checks it in its ipc connecter
                            // only (ipc_connecter.cpp, 4.3.5 and master), and there it stops trying
                            // but keeps the endpoint: `disconnect` still finds it.
                            if refused
                                && matches!(ep, Endpoint::Ipc(_))
                                && stops(&*host, RECONNECT_STOP_AFTER_DISCONNECT)
                                && host.has_disconnected()
                            {
                                stop_trying(&*host, slot);
                                host.monitors().emit(|| MonitorEvent::Closed { endpoint: endpoint.clone() });
                                return;
                            }
                            break 'attempt Arc::new(ConnectionError::Io(e));
                        }
                    }
                };
                host.monitors().emit(|| MonitorEvent::Connected { endpoint: endpoint.clone(), peer: peer.clone() });
                let kill = connections.child_token();
                let ended = run_connection(&host, Some(slot), conn, kill, &endpoint, &peer).await;
                log_end(&endpoint, &peer, &ended.result);
                let reason = ended.result.clone().err().unwrap_or_else(|| Arc::new(ConnectionError::PeerClosed));
                match ended.result {
                    Err(e) if e.is_protocol() => {
                        // libzmq does not reconnect after a protocol error.
                        stop_trying(&*host, slot);
                        return;
                    }
                    // RECONNECT_STOP_HANDSHAKE_FAILED: a handshake the peer cut short or that
                    // timed out ends the connect as a protocol error does (stream_engine_base.cpp).
                    Err(_) if !ended.handshaken && stops(&*host, RECONNECT_STOP_HANDSHAKE_FAILED) => {
                        stop_trying(&*host, slot);
                        return;
                    }
                    _ if accepting.is_cancelled() && !host.slot_has_pending(slot) => break 'connecting,
                    // The socket dropped the slot (a STREAM closed the connection itself).
                    _ if !host.slot_alive(slot) => {
                        accepting.cancel();
                        return;
                    }
                    _ => backoff.reset(),
                }
                reason
            };
            let Some(wait) = backoff.retry(&*host, &endpoint, reason) else { break };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop_connecting(&*host, slot, &accepting, &connections) => break,
            }
        }
        // Held until here (or an early return) and not moved into a local: that would be a second
        // copy in every state of this task, which holds the connection's whole state machine.
        drop(live);
    });
}

/// Whether ZMQ_RECONNECT_STOP has `bit` (feature `draft`; without it, never).
fn stops<H: Host>(_host: &H, _bit: u8) -> bool {
    #[cfg(feature = "draft")]
    return _host.options_snapshot().reconnect_stop & _bit != 0;
    #[cfg(not(feature = "draft"))]
    false
}

/// RECONNECT_STOP_CONN_REFUSED: the connect ends for good, with what was queued for it, and is no
/// longer an endpoint of the socket (libzmq's path is `zmq_disconnect`'s: a later `disconnect` says
/// ENOENT); the monitor hears `Closed` rather than `ConnectRetried`.
fn give_up<H: Host>(host: &H, slot: PeerId, endpoint: &str, accepting: &CancellationToken) {
    host.remove_slot(slot);
    // A cancelled `accepting` with the handle still registered tells `disconnect` the endpoint is gone.
    accepting.cancel();
    host.monitors().emit(|| MonitorEvent::Closed { endpoint: endpoint.to_owned() });
}

/// A connect that stops trying (a protocol error, a failed handshake under
/// RECONNECT_STOP_HANDSHAKE_FAILED, a refusal after `disconnect` under _AFTER_DISCONNECT) but stays
/// an endpoint of the socket, as in libzmq: `disconnect` succeeds. libzmq also keeps the dead
/// connection's queue, which then takes sends up to SNDHWM that never leave; zmtp drops the peer
/// with its queue instead, so sends go to live peers (or wait for one).
fn stop_trying<H: Host>(host: &H, slot: PeerId) {
    host.remove_slot(slot);
}

/// Resolves when a connect loop should stop: `disconnect`, LINGER expiry, or the socket closing with
/// nothing queued for this peer. With messages queued, a closing socket keeps trying to deliver them
/// until LINGER runs out, as libzmq does.
async fn stop_connecting<H: Host>(
    host: &H,
    slot: PeerId,
    accepting: &CancellationToken,
    connections: &CancellationToken,
) {
    tokio::select! {
        _ = connections.cancelled() => {}
        _ = accepting.cancelled() => {
            if host.slot_has_pending(slot) {
                connections.cancelled().await;
            }
        }
    }
}
