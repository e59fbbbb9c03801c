//! A socket's bound and connected endpoints: starting the supervisor's tasks behind `bind` and
//! `connect` (see [`crate::supervisor`]), and stopping them on `unbind`, `disconnect` and close.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::core::Core;
use crate::error::Result;
use crate::link::peer_id::PeerId;
use crate::monitor::MonitorEvent;
use crate::supervisor;
use crate::transport::{BindOptions, Endpoint};

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

/// A socket's endpoints, by the name `bind` returned or `connect` was given. A list rather than a
/// map: a socket has one or a few, and a map's smallest table (room for 3 names and handles) was
/// 372 bytes in every socket; the handle carries its name, so the list holds each name once.
#[derive(Debug, Default)]
pub(super) struct Endpoints(Vec<EndpointHandle>);

impl Endpoints {
    /// Registers an endpoint; one already registered under its name is replaced (and returned).
    pub fn insert(&mut self, handle: EndpointHandle) -> Option<EndpointHandle> {
        if let Some(old) = self.0.iter_mut().find(|h| h.endpoint == handle.endpoint) {
            return Some(std::mem::replace(old, handle));
        }
        if self.0.is_empty() {
            // Room for exactly one: most sockets never have a second.
            self.0.reserve_exact(1);
        }
        self.0.push(handle);
        None
    }

    pub fn get(&self, endpoint: &str) -> Option<&EndpointHandle> {
        self.0.iter().find(|h| h.endpoint == endpoint)
    }

    pub fn remove(&mut self, endpoint: &str) -> Option<EndpointHandle> {
        let at = self.0.iter().position(|h| h.endpoint == endpoint)?;
        Some(self.0.swap_remove(at))
    }

    pub fn drain(&mut self) -> impl Iterator<Item = EndpointHandle> + '_ {
        self.0.drain(..)
    }
}

impl EndpointHandle {
    /// The connect-side peer of a `connect`.
    pub fn slot(&self) -> Option<PeerId> {
        self.slot
    }

    /// Whether the connect ended itself for good while still registered (RECONNECT_STOP_CONN_REFUSED,
    /// or a STREAM that closed the connection): its loop cancelled `accepting`, which otherwise only
    /// close, `unbind` and `disconnect` do, after taking the handle out of the socket.
    pub fn gave_up(&self) -> bool {
        self.slot.is_some() && self.accepting.is_cancelled()
    }

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

pub(super) async fn bind(core: &Arc<Core>, ep: &Endpoint, how: BindOptions) -> Result<(EndpointHandle, String)> {
    supervisor::check_transport(core.socket_type, ep, true)?;
    let accepting = CancellationToken::new();
    let connections = core.shutdown.child_token();
    let (bound, task) = supervisor::listen(core, ep, how, accepting.clone(), connections.clone()).await?;
    let handle =
        EndpointHandle { accepting, connections, slot: None, endpoint: bound.clone(), listener_task: Some(task) };
    Ok((handle, bound))
}

pub(super) fn connect(core: &Arc<Core>, ep: Endpoint, endpoint: String) -> Result<EndpointHandle> {
    supervisor::check_transport(core.socket_type, &ep, false)?;
    let accepting = CancellationToken::new();
    let connections = core.shutdown.child_token();
    let slot = core.add_connect_slot(connections.clone());
    supervisor::connect(core, ep, endpoint.clone(), slot, accepting.clone(), connections.clone());
    Ok(EndpointHandle { accepting, connections, slot: Some(slot), endpoint, listener_task: None })
}
