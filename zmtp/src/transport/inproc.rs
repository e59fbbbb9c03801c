//! `inproc://`: in-process connections over in-memory duplex streams.
//!
//! Bind and connect work in either order: a connect to a name nobody has bound yet waits until it is.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use tokio::io::DuplexStream;
use tokio::sync::{Notify, mpsc};

use crate::error::{Error, Result};

/// In-memory buffer per direction.
const BUFFER: usize = 256 * 1024;

static REGISTRY: LazyLock<Mutex<HashMap<String, mpsc::UnboundedSender<DuplexStream>>>> =
    LazyLock::new(Default::default);
static BOUND: LazyLock<Notify> = LazyLock::new(Notify::new);

fn registry() -> std::sync::MutexGuard<'static, HashMap<String, mpsc::UnboundedSender<DuplexStream>>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct InprocListener {
    name: String,
    incoming: mpsc::UnboundedReceiver<DuplexStream>,
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
    pub async fn accept(&mut self) -> std::io::Result<DuplexStream> {
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

pub(super) async fn connect(name: &str) -> DuplexStream {
    loop {
        let notified = BOUND.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let mut reg = registry();
            if let Some(tx) = reg.get(name) {
                let (ours, theirs) = tokio::io::duplex(BUFFER);
                if tx.send(theirs).is_ok() {
                    return ours;
                }
                reg.remove(name);
            }
        }
        notified.await;
    }
}
