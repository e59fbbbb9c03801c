//! One task per connection: handshake, then a reader and a batching writer driven concurrently, with
//! heartbeats. The engine knows one connection; routing belongs to the socket core.

mod direct;
mod handshake;
mod host;
mod inlet;
#[cfg(feature = "draft")]
mod raw;
mod reader;
mod writer;

pub(crate) use host::{Attached, Host};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

use crate::error::ConnectionError;
use crate::link::live::LiveTask;
use crate::link::peer_id::PeerId;
use crate::monitor::MonitorEvent;
use crate::transport::inproc::Rendezvous;
use crate::transport::{AnyRead, AnyStream, AnyWrite, Conn};

/// Counts inbound frames so the heartbeat can tell whether the peer said anything since a PING.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    frames: AtomicU64,
}

impl Liveness {
    fn saw_frame(&self) {
        self.frames.fetch_add(1, Ordering::Relaxed);
    }
    fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }
}

/// How the connection came to be, for logs and reconnect decisions.
pub(crate) struct ConnectionInfo<'a> {
    pub endpoint: &'a str,
    pub peer_addr: &'a str,
}

/// What the monitor has been told of a connection so far: whether its handshake completed, and
/// the peer's routing id once the socket took it in.
#[derive(Default)]
pub(crate) struct Told {
    pub handshaken: bool,
    pub routing_id: Option<bytes::Bytes>,
}

/// How a connection ended: its error, if any, and whether its handshake had completed.
pub(crate) struct Ended {
    pub result: Result<(), Arc<ConnectionError>>,
    pub handshaken: bool,
}

/// Runs one connection to its end, reporting it to the socket's monitors; `live` is held until
/// then. `slot` is the connect-side peer to attach to (kept across reconnects); bind-side
/// connections create their peer on attach. `rendezvous`: an inproc connection's shortcut, taken
/// if the other end is a socket too.
///
/// Not an `async fn`, and one state machine for the whole connection: every layer of `async`
/// between the task and the connection's loops kept its own copy of the arguments it passed down
/// (the stream, the slot, the kill token: ~150 bytes a layer, in every connection's task).
pub(crate) fn run<'a, H: Host>(
    core: &'a Arc<H>,
    slot: Option<PeerId>,
    conn: AnyStream,
    rendezvous: Option<Box<Rendezvous>>,
    kill: CancellationToken,
    info: ConnectionInfo<'a>,
    live: LiveTask,
) -> impl std::future::Future<Output = Ended> + 'a {
    #[cfg(feature = "draft")]
    if core.socket_type() == crate::wire::SocketType::Stream {
        // Boxed: a STREAM connection's state is larger than a ZMTP one's, and inline it would size
        // every connection's task.
        return futures::future::Either::Left(Box::pin(async move {
            let _live = live;
            let mut told = Told::default();
            let result = raw::drive(core, slot, conn, kill, &info, &mut told).await.map_err(Arc::new);
            report_end(&**core, &info, told, result)
        }));
    }
    let (rd, wr) = conn.into_halves();
    let zmtp = drive(core, slot, rd, wr, rendezvous, kill, info, live);
    #[cfg(feature = "draft")]
    let zmtp = futures::future::Either::Right(zmtp);
    zmtp
}

/// Tells the monitor how a connection ended (a failed handshake, or a disconnect).
fn report_end<H: Host>(
    core: &H,
    info: &ConnectionInfo<'_>,
    told: Told,
    result: Result<(), Arc<ConnectionError>>,
) -> Ended {
    if let Err(error) = &result {
        let (endpoint, peer, error) = (info.endpoint.to_owned(), info.peer_addr.to_owned(), error.clone());
        let routing_id = told.routing_id;
        core.monitors().emit(|| match told.handshaken {
            false => MonitorEvent::HandshakeFailed { endpoint, peer, error },
            true => MonitorEvent::Disconnected { endpoint, peer, error, routing_id },
        });
    }
    Ended { result, handshaken: told.handshaken }
}

/// A handshake in progress gives up when the socket closes, unless it is a connect-side peer that
/// still has messages to deliver (LINGER then bounds it).
async fn abandoned_on_close<H: Host>(core: &H, slot: Option<PeerId>) {
    core.closing().cancelled().await;
    if slot.is_some_and(|s| core.slot_has_pending(s)) {
        std::future::pending::<()>().await;
    }
}

/// The ZMTP connection of [`run`]: handshake, then the reader and the writer (or the inproc
/// shortcut) until one ends.
#[allow(clippy::too_many_arguments, reason = "the parts of one connection, taken apart by `run`")]
#[allow(clippy::manual_async_fn, reason = "an async fn keeps a copy of its arguments in every connection's task")]
fn drive<'a, H: Host>(
    core: &'a Arc<H>,
    slot: Option<PeerId>,
    mut rd: AnyRead,
    mut wr: AnyWrite,
    rendezvous: Option<Box<Rendezvous>>,
    kill: CancellationToken,
    info: ConnectionInfo<'a>,
    live: LiveTask,
) -> impl std::future::Future<Output = Ended> + 'a {
    async move {
        let mut told = Told::default();
        let result: Result<(), ConnectionError> = 'connection: {
            let opts = core.options_snapshot();
            let handshake = handshake::handshake(&mut rd, &mut wr, core.socket_type(), &opts, info.peer_addr);
            // Boxed: the handshake's state (about 2 KiB) is freed when it completes instead of staying in every
            // connection's task for its lifetime.
            let handshake = Box::pin(async {
                match opts.handshake_ivl {
                    Some(limit) => {
                        tokio::time::timeout(limit, handshake).await.map_err(|_| ConnectionError::HandshakeTimeout)?
                    }
                    None => handshake.await,
                }
            });
            let done = tokio::select! {
                r = handshake => match r {
                    Ok(done) => done,
                    Err(e) => break 'connection Err(e),
                },
                _ = kill.cancelled() => break 'connection Err(ConnectionError::SocketClosed),
                _ = abandoned_on_close(&**core, slot) => break 'connection Err(ConnectionError::SocketClosed),
            };
            let handshake::Handshaken { info: peer_info, minor, read_buf, cipher } = done;
            // In a block of its own, so the peer's metadata is freed now rather than kept for the connection's
            // lifetime in its task.
            let (peer, out, inlet) = {
                let peer_info = peer_info;
                tracing::debug!(endpoint = info.endpoint, peer = info.peer_addr, peer_type = ?peer_info.socket_type, minor, "handshake complete");
                // The ZMTP handshake has succeeded, whatever the socket then makes of the peer: as in libzmq,
                // a peer the socket's own policy turns away (a second PAIR peer, a duplicate ROUTER id
                // without ROUTER_HANDOVER) shows as HandshakeSucceeded, then Disconnected with the reason.
                // Emitted after the attach, so a peer is routable by the time its handshake is reported.
                let mut attached = core.attach(slot, &peer_info, minor, kill.clone());
                told.handshaken = true;
                told.routing_id = attached.as_mut().ok().and_then(|a| a.routing_id.take());
                core.monitors().emit(|| MonitorEvent::HandshakeSucceeded {
                    endpoint: info.endpoint.to_owned(),
                    peer: info.peer_addr.to_owned(),
                    peer_type: peer_info.socket_type,
                    routing_id: told.routing_id.clone(),
                });
                // Taken apart: its routing id (32 bytes) is the monitor's, in `told`, and kept once.
                let Attached { peer, out, .. } = match attached {
                    Ok(attached) => attached,
                    Err(e) => break 'connection Err(e),
                };
                core.set_peer_properties(peer, crate::message::Properties::of_peer(&peer_info, info.peer_addr));
                let inlet = inlet::Inlet { core: core.clone(), peer };
                (peer, out, inlet)
            };
            let result = match rendezvous {
                // Boxed: the shortcut's state (about 1.1 KiB) is larger than the reader's and the writer's
                // together, and inline it would size every TCP and IPC connection's task too.
                Some(rendezvous) => {
                    // Not needed here, and dropped before the wait: alive across it, they took room in
                    // the task that its TCP state could not share (128 bytes in every connection).
                    drop((read_buf, cipher));
                    // None: only to clear the pipe's hold on this connection when it ends.
                    let _direct = writer::DirectWrites::allow(&out, None);
                    tokio::select! {
                        r = Box::pin(direct::run(rd, &out, inlet, *rendezvous)) => r,
                        _ = kill.cancelled() => Err(ConnectionError::SocketClosed),
                    }
                }
                None => {
                    let liveness = Liveness::default();
                    // Boxed: CURVE's state (48 bytes each way) would otherwise sit in every connection's task.
                    let (encoder, decoder) = cipher.map(|c| c.split()).map(|(e, d)| (Box::new(e), Box::new(d))).unzip();
                    // Senders write small messages straight to the stream while the writer is idle
                    // (not under CURVE: the writer's encoder numbers every box). Taken back when the
                    // connection ends, before the stream is dropped.
                    let _direct = writer::DirectWrites::allow(&out, encoder.is_none().then(|| wr.direct()).flatten());
                    let link = reader::Link { inlet, out: &out, liveness: &liveness };
                    tokio::select! {
                        r = reader::read_loop(&mut rd, read_buf, link, reader::Decoding::new(&opts, decoder)) => r,
                        w = writer::write_loop(&mut wr, &out, minor, &opts, &liveness, encoder) => w,
                        _ = kill.cancelled() => Err(ConnectionError::SocketClosed),
                    }
                }
            };
            let keep = !matches!(&result, Err(e) if e.is_protocol());
            core.detach(peer, keep);
            result
        };
        let ended = report_end(&**core, &info, told, result.map_err(Arc::new));
        // Held to the end and dropped here rather than moved into a local: that would be a second
        // copy in every state of the task.
        drop(live);
        ended
    }
}
