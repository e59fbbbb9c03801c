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
/// Every message received on one side is sent on the other; with a capture socket, a copy of each
/// goes there first. Directions whose source cannot receive (PUSH, PUB) are simply not polled.
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
    pub async fn run(mut self) -> Result<()> {
        let (front_rx, back_rx) = (can_receive(&self.frontend), can_receive(&self.backend));
        loop {
            let command = *self.rx.borrow_and_update();
            let running = command == Command::Run;
            if command == Command::Terminate {
                return Ok(());
            }
            let (msg, to) = tokio::select! {
                r = self.frontend.recv(), if running && front_rx => (r?, self.backend.clone()),
                r = self.backend.recv(), if running && back_rx => (r?, self.frontend.clone()),
                _ = self.rx.changed() => continue,
            };
            // A receive may complete in the same instant as a pause: once `pause()` has returned, no
            // message crosses until `resume()` (the message waits here, unlost).
            loop {
                match *self.rx.borrow_and_update() {
                    Command::Run => break,
                    Command::Terminate => return Ok(()),
                    Command::Pause => {}
                }
                if self.rx.changed().await.is_err() {
                    break;
                }
            }
            self.forward(msg, &to).await?;
        }
    }

    async fn forward(&self, msg: Message, to: &Socket) -> Result<()> {
        // A blocked send (capture or destination) must not keep the proxy from hearing "terminate".
        let mut rx = self.rx.clone();
        let sends = async {
            if let Some(capture) = &self.capture {
                capture.send(msg.clone()).await?;
            }
            to.send(msg).await
        };
        tokio::select! {
            r = sends => r,
            _ = async { while rx.changed().await.is_ok() && *rx.borrow() != Command::Terminate {} } => Ok(()),
        }
    }
}

/// Runs a proxy until one of the sockets fails: libzmq's `zmq_proxy`.
pub async fn proxy(frontend: Socket, backend: Socket, capture: Option<Socket>) -> Result<()> {
    let mut p = Proxy::new(frontend, backend);
    if let Some(c) = capture {
        p = p.with_capture(c);
    }
    p.run().await
}
