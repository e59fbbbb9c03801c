//! `udp://` for RADIO and DISH: no connection and no handshake, so one task per endpoint stands in
//! for a peer of the socket. A RADIO's connect is a peer that takes every group and sends each
//! message as one datagram; a DISH's bind is a peer that delivers every datagram, which the DISH
//! filters by its groups on receive (JOIN and LEAVE do not travel over UDP), as libzmq does.
//!
//! A datagram that does not decode is dropped with a rate-limited line; a message too large for
//! one datagram is dropped on send the same way (libzmq would overrun its buffer). The receive
//! buffer is one allocation per endpoint; each datagram is copied out at its own size, so what a
//! sender makes us hold is bounded by RCVHWM datagrams of at most 64 KiB.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use crate::engine::{Attached, Host};
use crate::error::Result;
use crate::link::peer_id::PeerId;
use crate::link::pipe::message_bytes;
use crate::message::Message;
use crate::monitor::MonitorEvent;
use crate::transport::{Endpoint, udp};
use crate::wire::udp as datagram;
use crate::wire::{Metadata, PeerInfo, SocketType};

/// The largest UDP payload.
const MAX_UDP: usize = 65_507;
/// Datagrams taken per wake-up before they are handed to the socket.
const BATCH: usize = 256;

/// The peer a udp endpoint stands in for: a DISH for a RADIO, a RADIO for a DISH.
fn stand_in(kind: SocketType) -> PeerInfo {
    PeerInfo {
        socket_type: Some(kind),
        identity: Bytes::new(),
        metadata: Metadata::default(),
        user_id: None,
        zap_metadata: Metadata::default(),
    }
}

/// A DISH's bind: receives until `connections` is cancelled or the socket closes.
pub(crate) async fn listen<H: Host>(
    host: &Arc<H>,
    ep: &Endpoint,
    connections: CancellationToken,
) -> Result<(String, JoinHandle<()>)> {
    let Endpoint::Udp { host: addr, port, interface } = ep else { unreachable!("udp endpoint") };
    let (socket, bound) = udp::bind(addr, *port, interface.as_deref()).await?;
    let kill = connections.child_token();
    let attached = host
        .attach(None, &stand_in(SocketType::Radio), 1, kill.clone())
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    host.monitors().emit(|| MonitorEvent::Listening { endpoint: bound.clone() });
    let live = host.live().started();
    let (host, endpoint) = (host.clone(), bound.clone());
    let task = tokio::spawn(async move {
        let _live = live;
        receive(&*host, &socket, &attached, &kill, &endpoint).await;
        host.detach(attached.peer, false);
    });
    Ok((bound, task))
}

async fn receive<H: Host>(host: &H, socket: &UdpSocket, attached: &Attached, kill: &CancellationToken, endpoint: &str) {
    let mut buf = vec![0u8; MAX_UDP];
    let mut batch = VecDeque::new();
    let mut commands = VecDeque::new();
    loop {
        tokio::select! {
            biased;
            _ = kill.cancelled() => return,
            _ = attached.out.wait_for_work() => {
                // The DISH's JOINs and LEAVEs: nothing travels over UDP.
                if !attached.out.drain(&mut commands) {
                    return;
                }
                commands.clear();
            }
            ready = socket.readable() => {
                if ready.is_err() {
                    return;
                }
                while batch.len() < BATCH {
                    match socket.try_recv(&mut buf) {
                        Ok(n) => match datagram::decode(&Bytes::copy_from_slice(&buf[..n])) {
                            Ok((group, body)) => batch.push_back(Message::from_frames([group, body])),
                            Err(e) => {
                                if let Some(suppressed) = crate::throttle::allow("bad udp datagram") {
                                    tracing::warn!(endpoint, error = %e, suppressed, "udp datagram dropped");
                                }
                            }
                        },
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            tracing::debug!(endpoint, error = %e, "udp receive failed");
                            break;
                        }
                    }
                }
                host.deliver(attached.peer, &mut batch).await;
            }
        }
    }
}

/// A RADIO's connect: sends every message, whatever its group, to `ep` until the socket closes or
/// `disconnect`. Setting the socket up fails only on a name or an interface; that is retried as
/// a tcp connect is.
pub(crate) fn connect<H: Host>(
    host: &Arc<H>,
    ep: Endpoint,
    endpoint: String,
    slot: PeerId,
    accepting: CancellationToken,
    connections: CancellationToken,
) {
    let live = host.live().started();
    let host = host.clone();
    tokio::spawn(async move {
        let _live = live;
        let Endpoint::Udp { host: addr, port, interface } = ep else { unreachable!("udp endpoint") };
        let mut backoff = Backoff::default();
        let socket = loop {
            let options = host.options_snapshot();
            let made = udp::connect(&addr, port, interface.as_deref(), options.multicast_hops, options.multicast_loop);
            let reason = match made.await {
                Ok(socket) => break socket,
                Err(e) => {
                    tracing::debug!(%endpoint, error = %e, "udp connect failed");
                    Arc::new(crate::error::ConnectionError::Io(e))
                }
            };
            let Some(wait) = backoff.retry(&*host, &endpoint, reason) else { return };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = accepting.cancelled() => return,
                _ = connections.cancelled() => return,
            }
        };
        let kill = connections.child_token();
        let Ok(attached) = host.attach(Some(slot), &stand_in(SocketType::Dish), 1, kill.clone()) else { return };
        host.takes_every_group(attached.peer);
        host.monitors().emit(|| MonitorEvent::Connected { endpoint: endpoint.clone(), peer: String::new() });
        send(&socket, &attached, &kill, &endpoint).await;
        host.detach(attached.peer, false);
    });
}

async fn send(socket: &UdpSocket, attached: &Attached, kill: &CancellationToken, endpoint: &str) {
    let mut items = VecDeque::new();
    let mut buf = BytesMut::with_capacity(datagram::MAX_DATAGRAM);
    loop {
        tokio::select! {
            biased;
            _ = kill.cancelled() => return,
            _ = attached.out.wait_for_work() => {}
        }
        let more = attached.out.drain(&mut items);
        let taken = message_bytes(&items);
        for item in items.drain(..) {
            // A RADIO queues its wire form here, group then body (one message, shared, or a run
            // of shared ones); nothing else comes.
            for msg in item.messages() {
                let (Some(group), body) = (msg.first(), msg.frames().get(1)) else { continue };
                buf.clear();
                match datagram::encode(group, body.map_or(&[][..], |b| &b[..]), &mut buf) {
                    // A unicast destination with nobody listening answers with ICMP, which shows
                    // as an error on a later send: datagrams are fire-and-forget, so it is only
                    // traced.
                    Ok(()) => {
                        if let Err(e) = socket.send(&buf).await {
                            tracing::debug!(endpoint, error = %e, "udp send failed");
                        }
                    }
                    Err(e) => {
                        if let Some(suppressed) = crate::throttle::allow("udp message too large") {
                            tracing::warn!(endpoint, error = %e, suppressed, "message dropped: it does not fit in a datagram");
                        }
                    }
                }
            }
        }
        attached.out.written(taken);
        if !more {
            return;
        }
    }
}
