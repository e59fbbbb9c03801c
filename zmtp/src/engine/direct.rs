//! The inproc shortcut: after the handshake, two sockets in one process pass whole messages between
//! their queues. Each end runs this in place of its reader and writer: it drains its own outbound
//! pipe straight into the other socket's inbound queue (HWMs of both ends apply, as libzmq's inproc
//! pipes add them), and watches the stream only to learn that the other end is gone.

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::host::Host;
use super::inlet::Inlet;
use crate::error::ConnectionError;
use crate::link::pipe::{OutPipe, Outbound};
use crate::transport::inproc::Rendezvous;

/// Messages of an encoded batch handed to the other socket at a time.
const ENCODED_HANDOVER: usize = 256;

/// Swaps inlets with the other end, then forwards until either end stops.
pub(super) async fn run<H: Host, R: AsyncRead + Unpin>(
    mut rd: R,
    out: &OutPipe,
    ours: Inlet<H>,
    rendezvous: Rendezvous,
) -> Result<(), ConnectionError> {
    // If the other end is already gone, its receiver is dropped and the stream ends below.
    let _ = rendezvous.ours.send(Box::new(ours));
    let theirs = tokio::select! {
        theirs = rendezvous.theirs => theirs.map_err(|_| ConnectionError::PeerClosed)?,
        end = other_end_gone(&mut rd) => return Err(end),
    };
    // Both ends are engines, so the other end handed over an inlet too.
    let theirs = theirs
        .downcast::<Inlet<H>>()
        .map_err(|_| ConnectionError::PeerViolation("inproc peer handed over no inlet"))?;
    tokio::select! {
        done = forward(out, &theirs) => done,
        end = other_end_gone(&mut rd) => Err(end),
    }
}

/// Moves everything queued for the other end into its socket, batch by batch, until this socket
/// closes and its queue is empty.
async fn forward<H: Host>(out: &OutPipe, to: &Inlet<H>) -> Result<(), ConnectionError> {
    let mut items = VecDeque::new();
    let mut batch = VecDeque::new();
    loop {
        out.wait_for_work().await;
        let more = out.drain(&mut items);
        let handed_over = crate::link::pipe::message_bytes(&items);
        for item in items.drain(..) {
            match item {
                Outbound::Message(_) | Outbound::Shared(_) => {
                    let msg = match item {
                        Outbound::Shared(shared) => std::sync::Arc::unwrap_or_clone(shared),
                        Outbound::Message(msg) => msg,
                        _ => unreachable!("matched a message"),
                    };
                    if let Some(subscription) = to.message(msg, &mut batch) {
                        to.subscription_message(subscription, &mut batch).await?;
                    }
                }
                Outbound::Chunk(part) => {
                    for msg in part.messages() {
                        if let Some(subscription) = to.message(msg.clone(), &mut batch) {
                            to.subscription_message(subscription, &mut batch).await?;
                        }
                    }
                }
                // Taken apart into the messages it holds (each frame a slice of it), handed over
                // a few hundred at a time: the other socket's HWM applies within a batch too.
                Outbound::Encoded(bytes) => {
                    for (i, msg) in crate::encoded::messages(&bytes).enumerate() {
                        if let Some(subscription) = to.message(msg, &mut batch) {
                            to.subscription_message(subscription, &mut batch).await?;
                        }
                        if i % ENCODED_HANDOVER == ENCODED_HANDOVER - 1 {
                            to.flush(&mut batch).await;
                        }
                    }
                }
                Outbound::Subscribe(topic, subscribe) => to.subscription(&topic, subscribe, &mut batch).await?,
                #[cfg(feature = "draft")]
                Outbound::Join(group, join) => to.group(&group, join, &mut batch).await?,
                #[cfg(not(feature = "draft"))]
                Outbound::Join(..) => {}
                // No heartbeats on inproc, so no PINGs to answer; and no stream to write to directly.
                Outbound::Pong(_) | Outbound::Tail(_) => {}
            }
        }
        to.flush(&mut batch).await;
        out.written(handed_over);
        if !more {
            return Ok(());
        }
    }
}

/// Resolves when the other end has dropped its stream. It never writes once it has handshaken, so
/// any byte is a broken peer.
async fn other_end_gone<R: AsyncRead + Unpin>(rd: &mut R) -> ConnectionError {
    let mut byte = [0u8; 1];
    match rd.read(&mut byte).await {
        Ok(0) => ConnectionError::PeerClosed,
        Ok(_) => ConnectionError::PeerViolation("inproc peer wrote after the handshake"),
        Err(e) => e.into(),
    }
}
