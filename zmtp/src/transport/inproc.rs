//! `inproc://`: in-process connections.
//!
//! Each connection is an in-memory duplex stream, over which the two sockets run the ZMTP handshake
//! (socket types, routing ids, security all checked as on any transport), plus a rendezvous: once
//! handshaken, each end hands the other the place its messages go, and from then on messages move
//! between the sockets' queues as they are, without framing or copying (libzmq's inproc pipes). The
//! stream stays open only to tell each end when the other is gone. A raw byte peer
//! ([`super::inproc_raw_connect`], for tests and fuzzing) gets no rendezvous and is spoken ZMTP to.
//!
//! Bind and connect work in either order: a connect to a name nobody has bound yet waits until it is.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use tokio::io::DuplexStream;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::error::{Error, Result};

/// In-memory buffer per direction.
const BUFFER: usize = 256 * 1024;

/// One end of an inproc connection.
pub(crate) struct InprocConn {
    pub stream: DuplexStream,
    /// How the two ends swap what they hand over after the handshake; `None` when the other end is a raw stream.
    pub rendezvous: Option<Rendezvous>,
}

/// What the two ends of a connection hand each other after the handshake. Opaque here: the layer
/// above puts its own type in it (the engine: where its socket takes messages), so the transport
/// does not know the layers above it.
pub(crate) type Handoff = Box<dyn Any + Send>;

/// Each end sends its own [`Handoff`] and receives the other's.
pub(crate) struct Rendezvous {
    pub ours: oneshot::Sender<Handoff>,
    pub theirs: oneshot::Receiver<Handoff>,
}

type Registry = HashMap<String, mpsc::UnboundedSender<InprocConn>>;

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);
static BOUND: LazyLock<Notify> = LazyLock::new(Notify::new);

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct InprocListener {
    name: String,
    incoming: mpsc::UnboundedReceiver<InprocConn>,
}

pub(super) fn bind(name: &str) -> Result<InprocListener> {
    let mut reg = registry();
    if reg.get(name).is_some_and(|tx| !tx.is_closed()) {
        return Err(Error::AddressInUse(name.to_owned()));
    }
    let (tx, incoming) = mpsc::unbounded_channel();
    reg.insert(name.to_owned(), tx);
    drop(reg);
    BOUND.notify_waiters();
    Ok(InprocListener { name: name.to_owned(), incoming })
}

impl InprocListener {
    pub async fn accept(&mut self) -> std::io::Result<InprocConn> {
        self.incoming.recv().await.ok_or_else(|| std::io::ErrorKind::NotConnected.into())
    }
}

impl Drop for InprocListener {
    fn drop(&mut self) {
        self.incoming.close();
        let mut reg = registry();
        // Only remove our own registration: a rebind may have replaced it with a live one.
        if reg.get(&self.name).is_some_and(|tx| tx.is_closed()) {
            reg.remove(&self.name);
        }
    }
}

/// Connects to `name`, waiting until it is bound. With `raw`, the other end gets no rendezvous and
/// speaks ZMTP over the stream throughout.
pub(super) async fn connect(name: &str, raw: bool) -> InprocConn {
    loop {
        let notified = BOUND.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let mut reg = registry();
            if let Some(tx) = reg.get(name) {
                let (ours, theirs) = tokio::io::duplex(BUFFER);
                let (ours_rendezvous, theirs_rendezvous) = if raw {
                    (None, None)
                } else {
                    let (a_tx, a_rx) = oneshot::channel();
                    let (b_tx, b_rx) = oneshot::channel();
                    (Some(Rendezvous { ours: a_tx, theirs: b_rx }), Some(Rendezvous { ours: b_tx, theirs: a_rx }))
                };
                if tx.send(InprocConn { stream: theirs, rendezvous: theirs_rendezvous }).is_ok() {
                    return InprocConn { stream: ours, rendezvous: ours_rendezvous };
                }
                reg.remove(name);
            }
        }
        notified.await;
    }
}
