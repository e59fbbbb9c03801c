//! `proxy`: forward messages between two sockets, optionally copying each one to a capture socket,
//! steerable (pause / resume / terminate) from another task.

use std::sync::Arc;

use tokio::sync::watch;

use crate::error::Result;
use crate::message::Message;
use crate::socket::Socket;
use crate::wire::SocketType;

/// What a [`ProxyControl`] asks of a running proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Command {
    Run,
    Pause,
    Terminate,
}

/// Steers a running [`Proxy`] from anywhere; cheap to clone.
#[derive(Clone, Debug)]
pub struct ProxyControl {
    tx: Arc<watch::Sender<Command>>,
}

impl ProxyControl {
    /// Stops forwarding (messages wait in the sockets' queues) until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.tx.send_replace(Command::Pause);
    }

    /// Resumes forwarding after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.tx.send_replace(Command::Run);
    }

    /// Makes [`Proxy::run`] return `Ok(())`.
    pub fn terminate(&self) {
        self.tx.send_replace(Command::Terminate);
    }
}

/// A forwarding device between two compatible sockets (ROUTER↔DEALER, XSUB↔XPUB, PULL→PUSH, …).
///
/// Every message received on one side is sent on the other, in batches of what was queued; with a
/// capture socket, a copy of each batch goes there first. Directions whose source cannot receive
/// (PUSH, PUB) are simply not polled.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> zmtp::Result<()> {
/// use zmtp::{Proxy, Socket, SocketType};
/// let frontend = Socket::new(SocketType::Pull);
/// let backend = Socket::new(SocketType::Push);
/// let input = frontend.bind("inproc://proxy-doc-in").await?;
/// let output = backend.bind("inproc://proxy-doc-out").await?;
/// let proxy = Proxy::new(frontend, backend);
/// let control = proxy.control();
/// let running = tokio::spawn(proxy.run());
///
/// let (producer, consumer) = (Socket::new(SocketType::Push), Socket::new(SocketType::Pull));
/// producer.connect(&input).await?;
/// consumer.connect(&output).await?;
/// producer.send("through the proxy").await?;
/// assert_eq!(consumer.recv().await?[0], "through the proxy");
/// control.terminate();
/// running.await.unwrap()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Proxy {
    frontend: Socket,
    backend: Socket,
    capture: Option<Socket>,
    tx: Arc<watch::Sender<Command>>,
    rx: watch::Receiver<Command>,
}

fn can_receive(s: &Socket) -> bool {
    !matches!(s.socket_type(), SocketType::Push | SocketType::Pub)
}

impl Proxy {
    /// A proxy between `frontend` and `backend`.
    pub fn new(frontend: Socket, backend: Socket) -> Proxy {
        let (tx, rx) = watch::channel(Command::Run);
        Proxy { frontend, backend, capture: None, tx: Arc::new(tx), rx }
    }

    /// Sends a copy of every forwarded message to `capture` (e.g. a PUB, PUSH or PAIR).
    pub fn with_capture(mut self, capture: Socket) -> Proxy {
        self.capture = Some(capture);
        self
    }

    /// A handle to pause, resume or terminate the proxy.
    pub fn control(&self) -> ProxyControl {
        ProxyControl { tx: self.tx.clone() }
    }

    /// Forwards until terminated (`Ok`) or a socket fails (`Err`, e.g. [`Error::Closed`](crate::Error::Closed)).
    ///
    /// Messages cross in batches: whatever a side has queued (up to 256 messages) is taken
    /// with one [`recv_many`](Socket::recv_many) and passed on with one
    /// [`send_many`](Socket::send_many), as libzmq's proxy forwards up to a burst per wake-up.
    pub async fn run(mut self) -> Result<()> {
        let (front_rx, back_rx) = (can_receive(&self.frontend), can_receive(&self.backend));
        let (mut from_front, mut from_back) = (Vec::new(), Vec::new());
        let mut copies = Vec::new();
        loop {
            let command = *self.rx.borrow_and_update();
            let running = command == Command::Run;
            if command == Command::Terminate {
                return Ok(());
            }
            // Both receives are cancel-safe: the one that loses the race has taken nothing.
            let (batch, to) = tokio::select! {
                r = self.frontend.recv_many(&mut from_front, BATCH), if running && front_rx => {
                    r?;
                    (&mut from_front, &self.backend)
                }
                r = self.backend.recv_many(&mut from_back, BATCH), if running && back_rx => {
                    r?;
                    (&mut from_back, &self.frontend)
                }
                _ = self.rx.changed() => continue,
            };
            if self.capture.is_some() {
                copies.extend(batch.iter().cloned());
            }
            if !forward(&mut self.rx, self.capture.as_ref(), &mut copies, batch, to).await? {
                return Ok(());
            }
        }
    }
}

/// Messages taken from one side at a time: a few hundred keep a proxy's batches cheap without
/// holding a large share of either side's HWM.
const BATCH: usize = 256;

/// Sends `copies` to `capture` (when there is one) and then `batch` to `to`; `Ok(false)` when
/// terminated. While paused nothing crosses: a receive may complete in the same instant as a
/// pause, and a send may be waiting for room when it comes, so once `pause()` has returned, what
/// is left of the batch waits here (unlost, in order) until `resume()`. A blocked send does not
/// keep the proxy from hearing "terminate" either.
async fn forward(
    rx: &mut watch::Receiver<Command>,
    capture: Option<&Socket>,
    copies: &mut Vec<Message>,
    batch: &mut Vec<Message>,
    to: &Socket,
) -> Result<bool> {
    loop {
        loop {
            match *rx.borrow_and_update() {
                Command::Run => break,
                Command::Terminate => return Ok(false),
                Command::Pause => {}
            }
            if rx.changed().await.is_err() {
                break;
            }
        }
        // `send_many` is cancel-safe: dropped when a command comes, it leaves exactly the
        // unsent messages in its batch.
        tokio::select! {
            r = capture_then(capture, copies, batch, to) => return r.map(|()| true),
            changed = rx.changed() => {
                if changed.is_err() {
                    // Not while the proxy holds its own sender; were it gone, nothing could steer
                    // the proxy any more: the batch goes on.
                    capture_then(capture, copies, batch, to).await?;
                    return Ok(true);
                }
            }
        }
    }
}

/// The sends of one batch: the copies to `capture` first, then the batch to `to`.
async fn capture_then(
    capture: Option<&Socket>,
    copies: &mut Vec<Message>,
    batch: &mut Vec<Message>,
    to: &Socket,
) -> Result<()> {
    if let Some(capture) = capture {
        capture.send_many(copies).await?;
    }
    to.send_many(batch).await
}

/// Runs a proxy until one of the sockets fails: libzmq's `zmq_proxy`.
pub async fn proxy(frontend: Socket, backend: Socket, capture: Option<Socket>) -> Result<()> {
    let mut p = Proxy::new(frontend, backend);
    if let Some(c) = capture {
        p = p.with_capture(c);
    }
    p.run().await
}
