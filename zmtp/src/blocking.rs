//! A blocking API for programs that do not run tokio: the same sockets, options and messages, with
//! calls that block the calling thread (pyzmq's and libzmq's model).
//!
//! The sockets' connections run on a runtime the library owns: one background thread
//! (`zmtp-runtime`) with a current-thread tokio runtime, started by the first socket. A call that
//! can complete at once (a message already queued, room below the HWM) completes on the calling
//! thread without touching that runtime; one that has to wait hands the wait to it.
//!
//! ```
//! use std::time::Duration;
//! use zmtp::blocking::Socket;
//! use zmtp::SocketType;
//!
//! let rep = Socket::new(SocketType::Rep);
//! let endpoint = rep.bind("tcp://127.0.0.1:*")?;
//! let server = std::thread::spawn(move || -> zmtp::Result<()> {
//!     let request = rep.recv()?;
//!     rep.send(request)
//! });
//!
//! let req = Socket::new(SocketType::Req);
//! req.set_linger(Some(Duration::ZERO)); // options: the async socket's, through Deref
//! req.connect(&endpoint)?;
//! req.send("ping")?;
//! assert_eq!(req.recv_timeout(Duration::from_secs(10))?[0], "ping");
//! server.join().unwrap()?;
//! # Ok::<(), zmtp::Error>(())
//! ```
//!
//! Not for use inside async code: a blocking call made on a tokio runtime's thread would block that
//! thread (and panics, as tokio's own blocking calls do). Use [`crate::Socket`] there.

use std::future::Future;
use std::ops::Deref;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::{Error, Message, Result, SocketType};

/// The library's runtime: started once, on a thread of its own, for the life of the process.
fn runtime() -> &'static Handle {
    static HANDLE: OnceLock<Handle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("zmtp-runtime")
            .build()
            .expect("zmtp::blocking: cannot start the runtime (out of file descriptors?)");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("zmtp-runtime".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("zmtp::blocking: cannot start the runtime thread");
        handle
    })
}

/// Runs `work` on the library's runtime and blocks this thread until it completes.
fn run<T: Send + 'static>(work: impl Future<Output = T> + Send + 'static) -> T {
    let (done, result) = tokio::sync::oneshot::channel();
    runtime().spawn(async move {
        let _ = done.send(work.await);
    });
    result.blocking_recv().expect("zmtp::blocking: the runtime thread has stopped")
}

/// A socket whose calls block the calling thread. `Send + Sync`; clones share the socket, like
/// [`crate::Socket`]'s. Options, subscriptions, `try_send`/`try_recv` and `monitor()` are the async
/// socket's, reached through `Deref`.
#[derive(Clone, Debug)]
pub struct Socket {
    /// Always `Some` until dropped: taken in `Drop` so the socket closes inside the runtime (which
    /// is what lets it linger).
    socket: Option<crate::Socket>,
}

impl Deref for Socket {
    type Target = crate::Socket;
    fn deref(&self) -> &crate::Socket {
        self.socket.as_ref().expect("present until dropped")
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // The last clone closes the socket; inside the runtime, queued messages get LINGER to go out.
        let _runtime = runtime().enter();
        drop(self.socket.take());
    }
}

impl Socket {
    /// A new socket of the given type, with libzmq's default options.
    pub fn new(socket_type: SocketType) -> Socket {
        let _runtime = runtime().enter();
        Socket { socket: Some(crate::Socket::new(socket_type)) }
    }

    /// The asynchronous socket underneath (the same socket: usable from async code too).
    pub fn as_async(&self) -> &crate::Socket {
        self
    }

    fn shared(&self) -> crate::Socket {
        crate::Socket::clone(self)
    }

    /// Binds; returns the endpoint as bound (wildcards resolved). See [`crate::Socket::bind`].
    pub fn bind(&self, endpoint: &str) -> Result<String> {
        let (socket, endpoint) = (self.shared(), endpoint.to_owned());
        run(async move { socket.bind(&endpoint).await })
    }

    /// Connects (and reconnects by itself). See [`crate::Socket::connect`].
    pub fn connect(&self, endpoint: &str) -> Result<()> {
        let (socket, endpoint) = (self.shared(), endpoint.to_owned());
        run(async move { socket.connect(&endpoint).await })
    }

    /// Stops accepting on a bound endpoint.
    pub fn unbind(&self, endpoint: &str) -> Result<()> {
        let (socket, endpoint) = (self.shared(), endpoint.to_owned());
        run(async move { socket.unbind(&endpoint).await })
    }

    /// Drops a connection made with [`connect`](Self::connect).
    pub fn disconnect(&self, endpoint: &str) -> Result<()> {
        let (socket, endpoint) = (self.shared(), endpoint.to_owned());
        run(async move { socket.disconnect(&endpoint).await })
    }

    /// Sends a whole message, blocking while the socket's rule says to wait (see
    /// [`crate::Socket::send`]).
    pub fn send(&self, msg: impl Into<Message>) -> Result<()> {
        let Some(msg) = self.try_send_or_keep(msg.into())? else { return Ok(()) };
        let socket = self.shared();
        run(async move { socket.send(msg).await })
    }

    /// Like [`send`](Self::send), giving up after `timeout` with [`Error::WouldBlock`] (libzmq's
    /// `ZMQ_SNDTIMEO` and `EAGAIN`); the message was then not sent.
    pub fn send_timeout(&self, msg: impl Into<Message>, timeout: Duration) -> Result<()> {
        let Some(msg) = self.try_send_or_keep(msg.into())? else { return Ok(()) };
        let socket = self.shared();
        run(async move { tokio::time::timeout(timeout, socket.send(msg)).await.unwrap_or(Err(Error::WouldBlock)) })
    }

    /// Receives the next whole message, blocking until one arrives.
    pub fn recv(&self) -> Result<Message> {
        match self.try_recv() {
            Err(Error::WouldBlock) => {}
            done => return done,
        }
        let socket = self.shared();
        run(async move { socket.recv().await })
    }

    /// Like [`recv`](Self::recv), giving up after `timeout` with [`Error::WouldBlock`] (libzmq's
    /// `ZMQ_RCVTIMEO` and `EAGAIN`). Nothing is lost when it gives up.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Message> {
        match self.try_recv() {
            Err(Error::WouldBlock) => {}
            done => return done,
        }
        let socket = self.shared();
        run(async move { tokio::time::timeout(timeout, socket.recv()).await.unwrap_or(Err(Error::WouldBlock)) })
    }

    /// Closes the socket, waiting up to LINGER for queued messages to go out (see
    /// [`crate::Socket::close`]).
    pub fn close(mut self) {
        let socket = self.socket.take().expect("present until dropped");
        run(async move { socket.close().await });
    }
}
