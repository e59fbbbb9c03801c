//! Listener and connector tasks behind `bind` and `connect`, and their teardown.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::core::{Core, LiveConnection};
use crate::engine::{self, ConnectionInfo};
use crate::error::{ConnectionError, Result};
use crate::link::peer_id::PeerId;
use crate::monitor::MonitorEvent;
use crate::transport::{self, Connection, Endpoint, Listener};

/// A bound or connected endpoint.
#[derive(Debug)]
pub(super) struct EndpointHandle {
    /// Stops accepting / reconnecting (cancelled on close and on unbind/disconnect).
    accepting: CancellationToken,
    /// Kills the endpoint's connections (cancelled on unbind/disconnect and after LINGER).
    connections: CancellationToken,
    /// The connect-side peer, if this is a `connect`.
    slot: Option<PeerId>,
    endpoint: String,
    /// A bind's accept task: it owns the listener, so awaiting it means the address is free again.
    listener_task: Option<tokio::task::JoinHandle<()>>,
}

impl EndpointHandle {
    /// Stops accepting/reconnecting; returns the accept task, which releases the address when it ends.
    pub fn stop_accepting(mut self, core: &Core) -> Option<tokio::task::JoinHandle<()>> {
        self.accepting.cancel();
        core.monitors.emit(|| MonitorEvent::Closed { endpoint: self.endpoint.clone() });
        self.listener_task.take()
    }

    /// `unbind`/`disconnect`: stops the endpoint, closes its connections, and waits until a bound
    /// address is released (so it can be bound again at once).
    pub async fn terminate(self, core: &Core) {
        let (connections, slot) = (self.connections.clone(), self.slot);
        let task = self.stop_accepting(core);
        connections.cancel();
        if let Some(slot) = slot {
            core.remove_slot(slot);
        }
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

pub(super) async fn bind(core: &Arc<Core>, ep: &Endpoint, ipv6: bool) -> Result<(EndpointHandle, String)> {
    let (listener, bound) = Listener::bind(ep, ipv6).await?;
    core.monitors.emit(|| MonitorEvent::Listening { endpoint: bound.clone() });
    let accepting = CancellationToken::new();
    let connections = core.shutdown.child_token();
    let task = tokio::spawn(accept_loop(core.clone(), listener, bound.clone(), accepting.clone(), connections.clone()));
    let handle =
        EndpointHandle { accepting, connections, slot: None, endpoint: bound.clone(), listener_task: Some(task) };
    Ok((handle, bound))
}

async fn accept_loop(
    core: Arc<Core>,
    mut listener: Listener,
    endpoint: String,
    accepting: CancellationToken,
    connections: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = accepting.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((conn, peer)) => {
                core.monitors.emit(|| MonitorEvent::Accepted { endpoint: endpoint.clone(), peer: peer.clone() });
                let core = core.clone();
                let kill = connections.child_token();
                let endpoint = endpoint.clone();
                tokio::spawn(async move {
                    let result = run_connection(&core, None, conn, kill, &endpoint, &peer).await;
                    log_end(&endpoint, &peer, &result);
                });
            }
            Err(e) => {
                // Typically EMFILE: back off briefly instead of spinning.
                tracing::warn!(%endpoint, error = %e, "accept failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = accepting.cancelled() => return,
                }
            }
        }
    }
}

async fn run_connection(
    core: &Arc<Core>,
    slot: Option<PeerId>,
    conn: Connection,
    kill: tokio_util::sync::CancellationToken,
    endpoint: &str,
    peer: &str,
) -> Result<(), Arc<ConnectionError>> {
    let _live = core.connection_started();
    let info = ConnectionInfo { endpoint, peer_addr: peer };
    match conn {
        Connection::Tcp(s) => {
            let opts = core.options_snapshot();
            if let Err(e) = transport::set_keepalive(&s, &opts) {
                tracing::warn!(endpoint, error = %e, "cannot set TCP keepalive options");
            }
            engine::run(core, slot, s, kill, info).await
        }
        Connection::Ipc(s) => engine::run(core, slot, s, kill, info).await,
        Connection::Inproc(c) => engine::run_inproc(core, slot, c, kill, info).await,
    }
}

fn log_end(endpoint: &str, peer: &str, result: &Result<(), Arc<ConnectionError>>) {
    match result.as_ref().map_err(|e| &**e) {
        Ok(()) | Err(ConnectionError::SocketClosed) => {
            tracing::debug!(endpoint, peer, "connection closed")
        }
        Err(ConnectionError::PeerClosed) => tracing::debug!(endpoint, peer, "peer disconnected"),
        Err(e) if e.is_protocol() => {
            if let Some(suppressed) = crate::throttle::allow("protocol error") {
                tracing::warn!(endpoint, peer, error = %e, suppressed, "protocol error, connection dropped")
            }
        }
        Err(e) => tracing::info!(endpoint, peer, error = %e, "connection ended"),
    }
}

pub(super) fn connect(core: &Arc<Core>, ep: Endpoint, endpoint: String) -> EndpointHandle {
    let accepting = CancellationToken::new();
    let connections = core.shutdown.child_token();
    let slot = core.add_connect_slot(connections.clone());
    let handle = EndpointHandle {
        accepting: accepting.clone(),
        connections: connections.clone(),
        slot: Some(slot),
        endpoint: endpoint.clone(),
        listener_task: None,
    };
    // Counted as live from now on, so that closing waits (up to LINGER) while it has messages to deliver.
    let live = core.connection_started();
    tokio::spawn(connect_loop(live, core.clone(), ep, endpoint, slot, accepting, connections));
    handle
}

async fn connect_loop(
    _live: LiveConnection,
    core: Arc<Core>,
    ep: Endpoint,
    endpoint: String,
    slot: PeerId,
    accepting: CancellationToken,
    connections: CancellationToken,
) {
    let mut attempt_wait: Option<Duration> = None;
    loop {
        core.monitors.emit(|| MonitorEvent::ConnectDelayed { endpoint: endpoint.clone() });
        let connected = tokio::select! {
            c = transport::connect(&ep) => c,
            _ = stop_connecting(&core, slot, &accepting, &connections) => break,
        };
        match connected {
            Ok((conn, peer)) => {
                core.monitors.emit(|| MonitorEvent::Connected { endpoint: endpoint.clone(), peer: peer.clone() });
                let kill = connections.child_token();
                let result = run_connection(&core, Some(slot), conn, kill, &endpoint, &peer).await;
                log_end(&endpoint, &peer, &result);
                match result {
                    Err(e) if e.is_protocol() => {
                        // libzmq does not reconnect after a protocol error; the slot is gone.
                        core.remove_slot(slot);
                        return;
                    }
                    _ if accepting.is_cancelled() && !core.slot_has_pending(slot) => break,
                    _ => attempt_wait = None,
                }
            }
            Err(e) => tracing::debug!(%endpoint, error = %e, "connect failed"),
        }
        let (ivl, max) = {
            let o = core.options();
            (o.reconnect_ivl, o.reconnect_ivl_max)
        };
        let Some(ivl) = ivl else { break };
        let wait = match attempt_wait {
            Some(prev) if !max.is_zero() => (prev * 2).min(max),
            _ => ivl,
        };
        attempt_wait = Some(wait);
        core.monitors.emit(|| MonitorEvent::ConnectRetried { endpoint: endpoint.clone(), retry_in: wait });
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop_connecting(&core, slot, &accepting, &connections) => break,
        }
    }
}

/// Resolves when a connect loop should stop: `disconnect`, LINGER expiry, or the socket closing with
/// nothing queued for this peer. With messages queued, a closing socket keeps trying to deliver them
/// until LINGER runs out, as libzmq does.
async fn stop_connecting(core: &Core, slot: PeerId, accepting: &CancellationToken, connections: &CancellationToken) {
    tokio::select! {
        _ = connections.cancelled() => {}
        _ = accepting.cancelled() => {
            if core.slot_has_pending(slot) {
                connections.cancelled().await;
            }
        }
    }
}
