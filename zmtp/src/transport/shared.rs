//! A socket stream driven through a shared reference, so that its two halves (and a sender's task
//! writing [directly](crate::link::direct)) can hold one `Arc` of it: reads and writes wait on the
//! stream's readiness, then try the call, as tokio's own `poll_read`/`poll_write` do.

use std::io::{self, IoSlice};
use std::task::{Context, Poll, ready};

use tokio::io::{Interest, ReadBuf};

use crate::link::direct::DirectWrite;

/// What a shared stream offers: readiness and non-waiting calls, all on `&self`.
pub(super) trait SocketStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn try_read_buf(&self, buf: &mut ReadBuf<'_>) -> io::Result<usize>;
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    fn try_write(&self, buf: &[u8]) -> io::Result<usize>;
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

/// Implements [`SocketStream`] and [`DirectWrite`] with the stream type's own methods.
macro_rules! socket_stream {
    ($stream:ty) => {
        impl SocketStream for $stream {
            fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$stream>::poll_read_ready(self, cx)
            }
            fn try_read_buf(&self, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
                <$stream>::try_read_buf(self, buf)
            }
            fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$stream>::poll_write_ready(self, cx)
            }
            fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                <$stream>::try_write_vectored(self, bufs)
            }
            fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
                <$stream>::try_write(self, buf)
            }
            fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
                <$stream>::try_io(self, interest, f)
            }
        }

        impl DirectWrite for $stream {
            fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                <$stream>::try_write_vectored(self, bufs)
            }
            fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
                <$stream>::try_write(self, buf)
            }
        }
    };
}

socket_stream!(tokio::net::TcpStream);
#[cfg(unix)]
socket_stream!(tokio::net::UnixStream);

/// Where a short read proves the socket buffer drained (epoll and kqueue: tokio's own rule).
const SHORT_READ_DRAINS: bool = cfg!(any(
    target_os = "linux",
    target_os = "android",
    target_os = "illumos",
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly",
));

/// One read through `try_io`: a short one (fewer bytes than offered) drained the socket buffer, so
/// tokio is told the readiness is gone, as its own `poll_read` does. Otherwise the next read would
/// try again and meet `EAGAIN`: one wasted system call per message on a request-reply connection.
fn try_read_once(s: &impl SocketStream, offered: usize, call: impl FnOnce() -> io::Result<usize>) -> io::Result<usize> {
    if !SHORT_READ_DRAINS {
        return call();
    }
    let mut done = None;
    let result = s.try_io(Interest::READABLE, || {
        let n = call()?;
        done = Some(n);
        match n > 0 && n < offered {
            // Not an error: the count is in `done`; this only makes `try_io` clear the readiness.
            true => Err(io::ErrorKind::WouldBlock.into()),
            false => Ok(n),
        }
    });
    match done {
        Some(n) => Ok(n),
        None => result,
    }
}

/// `AsyncRead::poll_read` on a shared stream. `WouldBlock` clears the readiness it found stale, so
/// the next `poll_read_ready` registers this task's waker.
pub(super) fn poll_read(s: &impl SocketStream, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
    loop {
        ready!(s.poll_read_ready(cx))?;
        let offered = buf.remaining();
        match try_read_once(s, offered, || s.try_read_buf(buf)) {
            Ok(_) => return Poll::Ready(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// `AsyncWrite::poll_write` on a shared stream: one buffer is a `send` (a `writev` takes a longer
/// way through the kernel: about 5% of a request-reply round trip's time on loopback).
pub(super) fn poll_write(s: &impl SocketStream, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    poll_writable(s, cx, || s.try_write(buf))
}

/// `AsyncWrite::poll_write_vectored` on a shared stream.
pub(super) fn poll_write_vectored(
    s: &impl SocketStream,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    poll_writable(s, cx, || s.try_write_vectored(bufs))
}

/// Waits until the stream is writable and `write` does not meet `WouldBlock` (which clears the
/// readiness it found stale, so the next wait registers this task's waker).
fn poll_writable(
    s: &impl SocketStream,
    cx: &mut Context<'_>,
    mut write: impl FnMut() -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        ready!(s.poll_write_ready(cx))?;
        match write() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            result => return Poll::Ready(result),
        }
    }
}

/// Shuts the stream's sending side (what dropping tokio's owned write half did).
pub(super) fn shutdown_write<'s, S>(s: &'s S) -> io::Result<()>
where
    socket2::SockRef<'s>: From<&'s S>,
{
    socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write)
}
