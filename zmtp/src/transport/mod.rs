//! Transports: endpoint parsing, listeners and connectors for `tcp://`, `ipc://` and `inproc://`.
//!
//! Each transport yields a byte stream split into a read half and a write half; the engine runs ZMTP
//! over those halves and never knows which transport it is on (inproc adds a rendezvous that lets two
//! handshaken sockets pass messages directly; see [`inproc`]).

mod endpoint;
pub(crate) mod inproc;
#[cfg(unix)]
mod ipc;
mod shared;
mod tcp;
#[cfg(feature = "draft")]
pub(crate) mod udp;

/// What udp:// is for (libzmq's rule).
pub(crate) const UDP_TYPES: &str = "udp:// carries RADIO and DISH only: a RADIO connects, a DISH binds";

pub(crate) use tcp::{set_keepalive, set_tos};

/// ZMQ_SNDBUF and ZMQ_RCVBUF: the kernel buffer sizes of each tcp or ipc connection (`None`
/// leaves the OS default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Buffers {
    pub sndbuf: Option<usize>,
    pub rcvbuf: Option<usize>,
}

impl Buffers {
    pub(crate) fn of(opts: &crate::options::Options) -> Self {
        Buffers { sndbuf: opts.sndbuf, rcvbuf: opts.rcvbuf }
    }

    /// Applies them to a socket, listening, connecting or connected.
    pub(crate) fn apply<'s, S>(self, socket: &'s S) -> std::io::Result<()>
    where
        socket2::SockRef<'s>: From<&'s S>,
    {
        let sock = socket2::SockRef::from(socket);
        // The kernel takes a C int: a larger size would wrap (to 0 at 4 GiB), not saturate.
        let int = |size: usize| size.min(i32::MAX as usize);
        if let Some(size) = self.sndbuf {
            sock.set_send_buffer_size(int(size))?;
        }
        if let Some(size) = self.rcvbuf {
            sock.set_recv_buffer_size(int(size))?;
        }
        Ok(())
    }
}

/// Applies ZMQ_SNDBUF and ZMQ_RCVBUF to a tcp or ipc stream (`None` leaves the OS default).
pub(crate) fn set_buffers<'s, S>(stream: &'s S, opts: &crate::options::Options) -> std::io::Result<()>
where
    socket2::SockRef<'s>: From<&'s S>,
{
    Buffers::of(opts).apply(stream)
}

pub use endpoint::Endpoint;

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::Result;
use crate::link::direct::DirectWrite;

/// A connected byte stream that can be split into independently driven halves.
pub(crate) trait Conn: Send + 'static {
    type Read: AsyncRead + ReadReady + Unpin + Send + 'static;
    type Write: AsyncWrite + Unpin + Send + 'static;
    fn into_halves(self) -> (Self::Read, Self::Write);
}

/// A connection of any transport. The engine (handshake, reader, writer: most of zmtp's code) is
/// generic over its stream; given this one type instead of one per transport, it is compiled once
/// rather than three times, which took about 80 KiB off a static binary. The price is a `match`
/// per read or write call, beside a system call (or, for inproc, a mutex).
pub(crate) enum AnyStream {
    Tcp(tokio::net::TcpStream),
    #[cfg(unix)]
    Ipc(tokio::net::UnixStream),
    Inproc(tokio::io::DuplexStream),
}

/// The read half of an [`AnyStream`]. A socket stream's halves share it (an `Arc`, as tokio's
/// own owned halves do): a sender's task may write to it too ([`AnyWrite::direct`]).
pub(crate) enum AnyRead {
    Tcp(Arc<tokio::net::TcpStream>),
    #[cfg(unix)]
    Ipc(Arc<tokio::net::UnixStream>),
    Inproc(tokio::io::ReadHalf<tokio::io::DuplexStream>),
}

/// The write half of an [`AnyStream`].
pub(crate) enum AnyWrite {
    Tcp(Arc<tokio::net::TcpStream>),
    #[cfg(unix)]
    Ipc(Arc<tokio::net::UnixStream>),
    Inproc(tokio::io::WriteHalf<tokio::io::DuplexStream>),
}

impl AnyWrite {
    /// The stream, for [direct writes](crate::link::direct) from a sender's task: tcp and ipc.
    pub fn direct(&self) -> Option<Arc<dyn DirectWrite>> {
        match self {
            AnyWrite::Tcp(s) => Some(s.clone()),
            #[cfg(unix)]
            AnyWrite::Ipc(s) => Some(s.clone()),
            AnyWrite::Inproc(_) => None,
        }
    }
}

impl Conn for AnyStream {
    type Read = AnyRead;
    type Write = AnyWrite;
    fn into_halves(self) -> (AnyRead, AnyWrite) {
        match self {
            AnyStream::Tcp(s) => {
                let s = Arc::new(s);
                (AnyRead::Tcp(s.clone()), AnyWrite::Tcp(s))
            }
            #[cfg(unix)]
            AnyStream::Ipc(s) => {
                let s = Arc::new(s);
                (AnyRead::Ipc(s.clone()), AnyWrite::Ipc(s))
            }
            AnyStream::Inproc(s) => {
                let (r, w) = tokio::io::split(s);
                (AnyRead::Inproc(r), AnyWrite::Inproc(w))
            }
        }
    }
}

/// Waiting for bytes without a buffer to put them in, so that an idle connection holds none.
pub(crate) trait ReadReady {
    /// Resolves once a read would not wait (bytes, the end, or an error are there). May resolve
    /// early (inproc's in-memory stream has no readiness and resolves at once): a read after it
    /// can still wait.
    fn read_ready(&self) -> impl std::future::Future<Output = std::io::Result<()>> + Send;
}

impl<R: ReadReady + Sync> ReadReady for &mut R {
    fn read_ready(&self) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        (**self).read_ready()
    }
}

impl ReadReady for AnyRead {
    /// Polls the stream's readiness itself (one reference in the waiting reader's state) rather
    /// than through `readable()`, whose future (168 bytes, a waiter node among them) sat in every
    /// idle connection's task. The stream's own read waker is the one it uses: only the reader
    /// waits on this half.
    fn read_ready(&self) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        std::future::poll_fn(move |cx| match self {
            Self::Tcp(stream) => stream.poll_read_ready(cx),
            #[cfg(unix)]
            Self::Ipc(stream) => stream.poll_read_ready(cx),
            Self::Inproc(_) => std::task::Poll::Ready(Ok(())),
        })
    }
}

impl AsyncRead for AnyRead {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(stream) => shared::poll_read(&**stream, cx, buf),
            #[cfg(unix)]
            Self::Ipc(stream) => shared::poll_read(&**stream, cx, buf),
            Self::Inproc(half) => std::pin::Pin::new(half).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for AnyWrite {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(stream) => shared::poll_write(&**stream, cx, buf),
            #[cfg(unix)]
            Self::Ipc(stream) => shared::poll_write(&**stream, cx, buf),
            Self::Inproc(half) => std::pin::Pin::new(half).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(stream) => shared::poll_write_vectored(&**stream, cx, bufs),
            #[cfg(unix)]
            Self::Ipc(stream) => shared::poll_write_vectored(&**stream, cx, bufs),
            Self::Inproc(half) => std::pin::Pin::new(half).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            AnyWrite::Tcp(_) => true,
            #[cfg(unix)]
            AnyWrite::Ipc(_) => true,
            AnyWrite::Inproc(half) => half.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Inproc(half) => std::pin::Pin::new(half).poll_flush(cx),
            // A socket stream has nothing of its own to flush.
            _ => std::task::Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(stream) => std::task::Poll::Ready(shared::shutdown_write(&**stream)),
            #[cfg(unix)]
            Self::Ipc(stream) => std::task::Poll::Ready(shared::shutdown_write(&**stream)),
            Self::Inproc(half) => std::pin::Pin::new(half).poll_shutdown(cx),
        }
    }
}

/// A bound endpoint accepting connections.
pub(crate) enum Listener {
    Tcp(tokio::net::TcpListener),
    #[cfg(unix)]
    Ipc(ipc::IpcListener),
    Inproc(inproc::InprocListener),
}

/// An accepted or established connection of any transport.
pub(crate) enum Connection {
    Tcp(tokio::net::TcpStream),
    #[cfg(unix)]
    Ipc(tokio::net::UnixStream),
    Inproc(inproc::InprocConn),
}

/// What a bind takes from the socket's options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BindOptions {
    /// ZMQ_IPV6.
    pub ipv6: bool,
    /// ZMQ_BACKLOG (tcp).
    pub backlog: u32,
    /// ZMQ_SNDBUF / ZMQ_RCVBUF, set on a tcp listener before it listens (see [`tcp::bind`]).
    pub buffers: Buffers,
}

impl Listener {
    /// Binds; returns the listener and the endpoint as actually bound (wildcards and ports resolved).
    pub async fn bind(endpoint: &Endpoint, how: BindOptions) -> Result<(Listener, String)> {
        match endpoint {
            Endpoint::Tcp { source: Some(_), .. } => Err(crate::error::Error::InvalidEndpoint(
                endpoint.to_string(),
                "a source address (before ';') only applies to connect",
            )),
            Endpoint::Tcp { host, port, source: None } => {
                let (l, name) = tcp::bind(host, *port, how).await?;
                Ok((Listener::Tcp(l), name))
            }
            #[cfg(unix)]
            Endpoint::Ipc(path) => {
                let (l, name) = ipc::IpcListener::bind(path)?;
                Ok((Listener::Ipc(l), name))
            }
            #[cfg(not(unix))]
            Endpoint::Ipc(_) => Err(crate::error::Error::UnsupportedTransport(endpoint.to_string())),
            Endpoint::Inproc(name) => Ok((Listener::Inproc(inproc::bind(name)?), format!("inproc://{name}"))),
            // Datagrams have no listener: the supervisor runs a DISH's udp bind itself.
            Endpoint::Udp { .. } => Err(crate::error::Error::InvalidEndpoint(endpoint.to_string(), UDP_TYPES)),
        }
    }

    /// Waits for the next connection; returns it with the peer's address as text.
    pub async fn accept(&mut self) -> std::io::Result<(Connection, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, addr) = l.accept().await?;
                tcp::configure(&s);
                Ok((Connection::Tcp(s), addr.to_string()))
            }
            #[cfg(unix)]
            Listener::Ipc(l) => Ok((Connection::Ipc(l.accept().await?), String::new())),
            Listener::Inproc(l) => Ok((Connection::Inproc(l.accept().await?), String::new())),
        }
    }
}

/// A raw in-memory byte stream to a socket bound on `inproc://name`, bypassing ZMTP on our side: for
/// fuzzing and hostile-peer tests that must speak bytes to a real socket. Waits until the name is bound.
#[doc(hidden)]
pub async fn inproc_raw_connect(name: &str) -> tokio::io::DuplexStream {
    inproc::connect(name, true).await.stream
}

/// Connects once (inproc: waits until the name is bound). A tcp socket gets its `buffers` before
/// it connects (see [`tcp::connect`]).
pub(crate) async fn connect(endpoint: &Endpoint, buffers: Buffers) -> std::io::Result<(Connection, String)> {
    match endpoint {
        Endpoint::Tcp { host, port, source } => {
            let s = tcp::connect(host, *port, source.as_deref(), buffers).await?;
            let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
            Ok((Connection::Tcp(s), peer))
        }
        #[cfg(unix)]
        Endpoint::Ipc(path) => Ok((Connection::Ipc(tokio::net::UnixStream::connect(path).await?), String::new())),
        #[cfg(not(unix))]
        Endpoint::Ipc(_) => {
            Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "ipc:// needs Unix domain sockets"))
        }
        Endpoint::Inproc(name) => Ok((Connection::Inproc(inproc::connect(name, false).await), String::new())),
        Endpoint::Udp { .. } => Err(std::io::Error::new(std::io::ErrorKind::Unsupported, UDP_TYPES)),
    }
}
