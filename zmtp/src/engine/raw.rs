//! A STREAM socket's connections (libzmq's raw_engine.cpp): no greeting and no handshake; the
//! peer is attached at once, what it sends is delivered as read, and what the socket queues for it
//! is written as it is, frame after frame, with no framing.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::host::Host;
use super::inlet::Inlet;
use super::{ConnectionInfo, Told};
use crate::error::ConnectionError;
use crate::link::peer_id::PeerId;
use crate::link::pipe::{OutPipe, Outbound, message_bytes};
use crate::message::{Message, Properties};
use crate::monitor::MonitorEvent;
use crate::transport::Conn;
use crate::wire::{Metadata, PeerInfo};

/// The most one read takes (libzmq's raw decoder reads 8 KiB at a time too).
const READ_SIZE: usize = 8 * 1024;

/// What is known of a raw peer: nothing it said, only where it is.
fn raw_peer() -> PeerInfo {
    PeerInfo {
        socket_type: None,
        identity: Bytes::new(),
        metadata: Metadata::default(),
        user_id: None,
        zap_metadata: Metadata::default(),
    }
}

/// Runs one raw connection to its end.
pub(super) async fn drive<H: Host, C: Conn>(
    core: &Arc<H>,
    slot: Option<PeerId>,
    conn: C,
    kill: CancellationToken,
    info: &ConnectionInfo<'_>,
    told: &mut Told,
) -> Result<(), ConnectionError> {
    let (rd, wr) = conn.into_halves();
    let peer = raw_peer();
    let attached = core.attach(slot, &peer, 1, kill.clone())?;
    *told = Told { handshaken: true, routing_id: attached.routing_id.clone() };
    // A STREAM has no handshake: this event says the connection is the socket's now.
    core.monitors().emit(|| MonitorEvent::HandshakeSucceeded {
        endpoint: info.endpoint.to_owned(),
        peer: info.peer_addr.to_owned(),
        peer_type: None,
        routing_id: told.routing_id.clone(),
    });
    core.set_peer_properties(attached.peer, Properties::of_peer(&peer, info.peer_addr));
    let inlet = Inlet { core: core.clone(), peer: attached.peer };
    let result = tokio::select! {
        r = read_loop(rd, &inlet) => r,
        w = write_loop(wr, &attached.out) => w,
        _ = kill.cancelled() => Err(ConnectionError::SocketClosed),
    };
    // A connect-side STREAM peer reconnects, under a new routing id (its queue is kept).
    core.detach(attached.peer, true);
    result
}

async fn read_loop<H: Host, R: AsyncRead + Unpin>(mut rd: R, inlet: &Inlet<H>) -> Result<(), ConnectionError> {
    let mut buf = BytesMut::new();
    let mut batch = VecDeque::with_capacity(1);
    loop {
        buf.reserve(READ_SIZE);
        if rd.read_buf(&mut buf).await? == 0 {
            return Err(ConnectionError::PeerClosed);
        }
        batch.push_back(Message::single(buf.split().freeze()));
        inlet.flush(&mut batch).await;
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut wr: W, out: &OutPipe) -> Result<(), ConnectionError> {
    let mut items = VecDeque::new();
    loop {
        out.wait_for_work().await;
        let more = out.drain(&mut items);
        let taken = message_bytes(&items);
        for item in items.drain(..) {
            match item {
                // STREAM's close: everything queued before it is written, then the connection ends.
                Outbound::Message(msg) if msg.is_empty() => {
                    wr.flush().await?;
                    out.written(taken);
                    return Err(ConnectionError::SocketClosed);
                }
                Outbound::Message(msg) => {
                    for frame in msg.iter() {
                        wr.write_all(frame).await?;
                    }
                }
                _ => {}
            }
        }
        wr.flush().await?;
        out.written(taken);
        if !more {
            return Ok(());
        }
    }
}
