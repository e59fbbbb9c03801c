//! The write loop: drain everything queued for this peer, encode it into one buffer (small frames
//! copied, large ones referenced), and write it with vectored I/O. Also sends PINGs and watches for
//! the peer's silence after one.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

use super::Liveness;
use crate::error::ConnectionError;
use crate::link::direct::DirectWrite;
use crate::link::pipe::{OutPipe, Outbound};
use crate::message::Message;
use crate::options::Options;
use crate::wire::Command;
use crate::wire::curve::CurveEncoder;
use crate::wire::frame::{FLAG_MORE, encode_header};

/// Frames up to this size are copied into the write buffer; larger ones are written by reference.
const INLINE_MAX: usize = 16 * 1024;
/// IoSlices per writev call.
const MAX_IOV: usize = 64;
/// Bytes encoded per write round.
const WRITE_ROUND: usize = 256 * 1024;
/// Queue capacity (items) and buffer capacity (bytes) a connection keeps between batches.
const KEEP_QUEUED: usize = 256;
const KEEP_BUFFER: usize = 64 * 1024;
/// A larger queue (up to this many items, ~1.4 MB) is kept while the pipe stays busy, like a large
/// buffer: swapped back into the pipe at the next drain, it spares the sender growing a fresh
/// queue from nothing for every batch (a PUB ahead of 100 subscribers spent ~12% of its time
/// reallocating queues and faulting in their fresh pages).
const BUSY_QUEUED_MAX: usize = 16 * 1024;
/// A queue this small after a batch means the connection sends a message at a time: it keeps no
/// queue or buffer between batches.
const TRICKLE_QUEUED: usize = 8;
/// A write buffer above KEEP_BUFFER is given back once the pipe has stayed empty this long: a stream
/// keeps its buffer between batches, a connection that goes quiet after a burst does not.
const RELEASE_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

#[allow(clippy::manual_async_fn, reason = "an async fn keeps a copy of its arguments in every connection's task")]
pub(super) fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    out: &OutPipe,
    minor: u8,
    opts: &Options,
    liveness: &Liveness,
    mut encoder: Option<Box<CurveEncoder>>,
) -> impl std::future::Future<Output = Result<(), ConnectionError>> {
    async move {
        let mut items = VecDeque::new();
        // Allocated by the first batch (sized to it), so an idle connection holds no write buffer.
        let mut buf = BytesMut::new();
        let mut chunks: Vec<Bytes> = Vec::new();
        // Read from `opts` where used rather than kept in locals: a connection's task holds every local
        // in each of its states.
        let heartbeat = || (!opts.heartbeat_ivl.is_zero()).then_some(opts.heartbeat_ivl);
        let ttl_deciseconds = (opts.heartbeat_ttl.as_millis() / 100).min(u16::MAX as u128) as u16;
        let mut next_ping = heartbeat().map_or_else(Instant::now, |ivl| Instant::now() + ivl);
        // After a PING: (deadline, frames seen when it was sent).
        let mut awaiting: Option<(Instant, u64)> = None;
        // One timer for the next PING and the deadline of the last one, on the heap and only with a
        // heartbeat: inline, two timers were a quarter of every idle connection's task.
        let mut timer: Option<Pin<Box<Sleep>>> = heartbeat().map(|_| Box::pin(tokio::time::sleep_until(next_ping)));
        // The largest round `buf`'s allocation has held since it was last given back. Its `capacity()`
        // cannot tell: after `split()` it counts only what is left beyond the written part, while the
        // allocation (shared with the written chunk, then ours alone again) keeps the round's size.
        let mut held = 0;
        // Set while `buf` holds more than KEEP_BUFFER: when it is given back unless work comes first.
        let mut release: Option<Pin<Box<Sleep>>> = None;
        loop {
            let fired = tokio::select! {
                _ = out.wait_for_work() => false,
                _ = async {
                    match timer.as_mut() {
                        Some(t) => t.as_mut().await,
                        None => std::future::pending().await,
                    }
                } => true,
                _ = async {
                    match release.as_mut() {
                        Some(t) => t.as_mut().await,
                        None => std::future::pending().await,
                    }
                } => {
                    // Quiet since the burst: back to an idle connection's few KiB (the pipe's
                    // queue too: it is the one this writer kept until the last drain).
                    (buf, chunks, held, release) = (BytesMut::new(), Vec::new(), 0, None);
                    items = VecDeque::new();
                    out.release_idle_queue(KEEP_QUEUED);
                    false
                }
            };
            // Encoded after the drain: see below.
            let mut ping_due = false;
            if let (true, Some(ivl), Some(t)) = (fired, heartbeat(), timer.as_mut()) {
                let now = Instant::now();
                if let Some((at, seen)) = awaiting
                    && now >= at
                {
                    if liveness.frames() == seen {
                        return Err(ConnectionError::HeartbeatTimeout);
                    }
                    awaiting = None;
                }
                if now >= next_ping {
                    ping_due = true;
                    next_ping = now + ivl;
                    if awaiting.is_none() {
                        awaiting = Some((now + opts.heartbeat_timeout.unwrap_or(ivl), liveness.frames()));
                    }
                }
                t.as_mut().reset(awaiting.map_or(next_ping, |(at, _)| at.min(next_ping)));
            }
            if let Some((_, seen)) = awaiting
                && liveness.frames() != seen
            {
                awaiting = None; // any inbound frame since the PING counts as an answer
            }
            // The (empty) queue the pipe gets in exchange: if large, the release timer must give
            // it back should the pipe go quiet, whatever this batch's own queue is.
            let lent = items.capacity();
            let more = out.drain(&mut items);
            // What was written ahead of the rounds below, towards the first round's count of what
            // the byte HWM gets back.
            let mut taken_ahead = 0;
            if ping_due {
                // The rest of a message a sender began to write directly comes first: a PING
                // ahead of it would land inside that message.
                if matches!(items.front(), Some(Outbound::Tail(_))) {
                    let tail = items.pop_front().expect("a tail in front");
                    taken_ahead = crate::link::pipe::message_bytes([&tail]);
                    encode_item(tail, minor, encoder.as_deref_mut(), &mut buf, &mut chunks)?;
                }
                let ping = Command::Ping { ttl_deciseconds, context: Bytes::new() };
                encode_command(&ping, encoder.as_deref_mut(), &mut buf)?;
            }
            // Written in rounds of about WRITE_ROUND bytes (a ping alone makes one round too). Each round's
            // buffer is reserved once (growing it frame by frame re-copied it several times per batch) and
            // reclaimed by the next round once written: a deep queue reuses one buffer instead of filling
            // fresh pages (a publisher with 100,000 queued messages per subscriber spent ~15% in page faults).
            loop {
                // One pass for the round's size, count and what it frees of the byte HWM.
                let (mut count, mut bytes, mut payload) = (0, 0, std::mem::take(&mut taken_ahead));
                // Encoded batches written by reference count towards the round too: a queue of
                // them is then freed of the byte HWM a round at a time, so their sender refills
                // it while the rest is written, instead of after all of it.
                let mut referenced = 0;
                for item in items.iter() {
                    if bytes + referenced >= WRITE_ROUND {
                        break;
                    }
                    bytes += encoded_len(item, encoder.is_some());
                    referenced += referenced_len(item, encoder.is_some());
                    payload += crate::link::pipe::message_bytes([item]);
                    count += 1;
                }
                buf.reserve(bytes);
                held = held.max(bytes);
                for item in items.drain(..count) {
                    encode_item(item, minor, encoder.as_deref_mut(), &mut buf, &mut chunks)?;
                }
                if !buf.is_empty() {
                    chunks.push(buf.split().freeze());
                }
                write_chunks(&mut wr, &mut chunks).await?;
                out.written(payload);
                if items.is_empty() {
                    break;
                }
            }
            // A burst leaves this queue (swapped with the pipe's on every drain) at the burst's length
            // and the buffer at a round's size. The queue goes back at once (the pipe's next one is
            // swapped in anyway); the buffer once the pipe has stayed empty for RELEASE_AFTER, so a
            // stream keeps reusing it while a connection that goes quiet after a burst (a CHP snapshot
            // of a thousand keys) returns to an idle connection's few KiB: kept, it was 150 KB per
            // snapshot client on a crowd's server.
            // A connection that only sends a message now and then (request-reply, an idle one after
            // its greeting) gives back its small queue and buffer at once, so that it holds none while
            // it waits; that costs an allocation per message there, and nothing where batches are larger.
            let (keep_queue, keep_buffer) = retention(items.capacity(), held);
            if keep_queue == Keep::No {
                items = VecDeque::new();
            }
            if keep_buffer == Keep::No {
                (buf, chunks, held) = (BytesMut::new(), Vec::new(), 0);
            }
            if keep_queue == Keep::WhileBusy || keep_buffer == Keep::WhileBusy || lent > KEEP_QUEUED {
                let at = Instant::now() + RELEASE_AFTER;
                match release.as_mut() {
                    Some(t) => t.as_mut().reset(at),
                    None => release = Some(Box::pin(tokio::time::sleep_until(at))),
                }
            } else {
                release = None;
            }
            if !more {
                wr.flush().await?;
                return Ok(());
            }
        }
    }
}

/// While alive, the pipe lets senders write to the connection's stream
/// [directly](crate::link::direct) whenever this writer is idle.
pub(super) struct DirectWrites<'a>(&'a OutPipe);

impl<'a> DirectWrites<'a> {
    pub fn allow(out: &'a OutPipe, stream: Option<std::sync::Arc<dyn DirectWrite>>) -> Self {
        out.set_direct(stream);
        DirectWrites(out)
    }
}

impl Drop for DirectWrites<'_> {
    fn drop(&mut self) {
        self.0.set_direct(None);
    }
}

/// Whether a connection keeps an allocation between batches.
#[derive(Debug, PartialEq, Eq)]
enum Keep {
    Yes,
    No,
    /// Until the pipe has stayed empty for RELEASE_AFTER.
    WhileBusy,
}

/// What a connection keeps after a batch, from its queue's capacity and the largest round its write
/// buffer has held: (the queue, the buffer).
fn retention(queue_capacity: usize, held: usize) -> (Keep, Keep) {
    if queue_capacity <= TRICKLE_QUEUED {
        return (Keep::No, Keep::No);
    }
    let queue = if queue_capacity <= KEEP_QUEUED {
        Keep::Yes
    } else if queue_capacity <= BUSY_QUEUED_MAX {
        Keep::WhileBusy
    } else {
        Keep::No
    };
    let buffer = if held > KEEP_BUFFER { Keep::WhileBusy } else { Keep::Yes };
    (queue, buffer)
}

/// Encodes one queued item into `buf` (large frames go to `chunks` by reference).
fn encode_item(
    item: Outbound,
    minor: u8,
    encoder: Option<&mut CurveEncoder>,
    buf: &mut BytesMut,
    chunks: &mut Vec<Bytes>,
) -> Result<(), ConnectionError> {
    match (item, encoder) {
        (Outbound::Message(msg), None) => encode_message(&msg, buf, chunks),
        (Outbound::Shared(msg), None) => encode_message(&msg, buf, chunks),
        (Outbound::Message(msg), Some(enc)) => encode_curve_message(&msg, enc, buf)?,
        (Outbound::Shared(msg), Some(enc)) => encode_curve_message(&msg, enc, buf)?,
        (Outbound::Chunk(part), None) => part.messages().for_each(|msg| encode_message(msg, buf, chunks)),
        (Outbound::Chunk(part), Some(enc)) => {
            for msg in part.messages() {
                encode_curve_message(msg, enc, buf)?;
            }
        }
        (Outbound::Subscribe(topic, on), enc) if minor >= 1 => {
            let cmd = if on { Command::Subscribe(topic) } else { Command::Cancel(topic) };
            encode_command(&cmd, enc, buf)?;
        }
        (Outbound::Subscribe(topic, on), enc) => {
            // ZMTP 3.0 peers get the message form: \x01topic / \x00topic.
            let mut body = Vec::with_capacity(topic.len() + 1);
            body.push(on as u8);
            body.extend_from_slice(&topic);
            match enc {
                Some(enc) => enc.encode_frame(false, false, &body, buf).map_err(ConnectionError::Curve)?,
                None => {
                    encode_header(0, body.len(), buf);
                    buf.extend_from_slice(&body);
                }
            }
        }
        (Outbound::Join(group, on), enc) => {
            let cmd = if on { Command::Join(group) } else { Command::Leave(group) };
            encode_command(&cmd, enc, buf)?;
        }
        (Outbound::Pong(context), enc) => encode_command(&Command::Pong(context), enc, buf)?,
        // The rest of a message the sender began to write itself (never under CURVE).
        (Outbound::Tail(bytes), _) => buf.extend_from_slice(&bytes),
        // Already in wire framing: written as it is, by reference when large.
        (Outbound::Encoded(bytes), None) if bytes.len() <= INLINE_MAX => buf.extend_from_slice(&bytes),
        (Outbound::Encoded(bytes), None) => {
            if !buf.is_empty() {
                chunks.push(buf.split().freeze());
            }
            chunks.push(bytes);
        }
        // CURVE boxes each frame: taken apart again.
        (Outbound::Encoded(bytes), Some(enc)) => {
            for (more, body) in crate::encoded::frames(&bytes) {
                enc.encode_frame(more, false, &bytes[body], buf).map_err(ConnectionError::Curve)?;
            }
        }
    }
    Ok(())
}

/// A message's frames as CURVE MESSAGE boxes.
fn encode_curve_message(msg: &Message, enc: &mut CurveEncoder, buf: &mut BytesMut) -> Result<(), ConnectionError> {
    let last = msg.len() - 1;
    for (i, frame) in msg.iter().enumerate() {
        enc.encode_frame(i < last, false, frame, buf).map_err(ConnectionError::Curve)?;
    }
    Ok(())
}

/// What an item adds to the write buffer (an upper bound; large frames are referenced, not copied).
fn encoded_len(item: &Outbound, curve: bool) -> usize {
    const CURVE_OVERHEAD: usize = 9 + 8 + 8 + 16 + 1;
    let frame_len = |f: &Bytes| {
        if curve {
            CURVE_OVERHEAD + f.len()
        } else if f.len() <= INLINE_MAX {
            9 + f.len()
        } else {
            9
        }
    };
    match item {
        Outbound::Message(msg) => msg.iter().map(frame_len).sum(),
        Outbound::Shared(msg) => msg.iter().map(frame_len).sum(),
        Outbound::Chunk(part) => part.messages().flat_map(|msg| msg.iter()).map(frame_len).sum(),
        Outbound::Subscribe(topic, _) | Outbound::Join(topic, _) => CURVE_OVERHEAD + 16 + topic.len(),
        Outbound::Pong(context) => CURVE_OVERHEAD + 16 + context.len(),
        Outbound::Encoded(bytes) if curve => bytes.len() + CURVE_OVERHEAD * crate::encoded::frames(bytes).count(),
        Outbound::Encoded(bytes) if bytes.len() <= INLINE_MAX => bytes.len(),
        Outbound::Encoded(_) => 0,
        Outbound::Tail(bytes) => bytes.len(),
    }
}

/// What an item has written by reference rather than copied into the write buffer: an encoded
/// batch's bytes when large (other items' large frames are left out of a round's size, as before).
fn referenced_len(item: &Outbound, curve: bool) -> usize {
    match item {
        Outbound::Encoded(bytes) if !curve && bytes.len() > INLINE_MAX => bytes.len(),
        _ => 0,
    }
}

/// A command frame, or under CURVE a MESSAGE whose inner COMMAND flag is set.
fn encode_command(
    cmd: &Command,
    encoder: Option<&mut CurveEncoder>,
    buf: &mut BytesMut,
) -> Result<(), ConnectionError> {
    match encoder {
        None => cmd.encode_frame(buf),
        Some(enc) => enc.encode_frame(false, true, &cmd.body(), buf).map_err(ConnectionError::Curve)?,
    }
    Ok(())
}

fn encode_message(msg: &Message, buf: &mut BytesMut, chunks: &mut Vec<Bytes>) {
    let last = msg.len() - 1;
    for (i, frame) in msg.iter().enumerate() {
        let flags = if i < last { FLAG_MORE } else { 0 };
        if frame.len() <= INLINE_MAX {
            encode_header(flags, frame.len(), buf);
            buf.extend_from_slice(frame);
        } else {
            encode_header(flags, frame.len(), buf);
            chunks.push(buf.split().freeze());
            chunks.push(frame.clone());
        }
    }
}

async fn write_chunks<W: AsyncWrite + Unpin>(wr: &mut W, chunks: &mut Vec<Bytes>) -> std::io::Result<()> {
    let mut first = 0;
    while first < chunks.len() {
        // The IoSlice array is built inside the poll, on the stack: held across an await it would sit
        // in every connection's task state (1 KiB per idle connection).
        let pending = &chunks[first..];
        let mut n = std::future::poll_fn(|cx| {
            // One buffer (the usual case: small messages all copied into it) is a plain write, a
            // shorter way through the kernel than a writev.
            if let [one] = pending {
                return std::pin::Pin::new(&mut *wr).poll_write(cx, one);
            }
            let slices: smallvec::SmallVec<[IoSlice<'_>; MAX_IOV]> =
                pending.iter().take(MAX_IOV).map(|c| IoSlice::new(c)).collect();
            std::pin::Pin::new(&mut *wr).poll_write_vectored(cx, &slices)
        })
        .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let len = chunks[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                chunks[first].advance(n);
                n = 0;
            }
        }
    }
    chunks.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::direct::Capped;
    use std::sync::{Arc, Mutex};

    /// A stream that keeps everything written to it.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<u8>>>);

    impl AsyncWrite for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.lock().unwrap().extend_from_slice(buf);
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A PING falls due while a direct write has gone out in part: the writer, woken by both its
    /// timer and the tail, must write the tail before the PING (tokio's `select!` picks either
    /// branch first, so this is tried many times).
    #[tokio::test(start_paused = true)]
    async fn a_ping_never_lands_inside_the_rest_of_a_direct_write() {
        let opts = Options { heartbeat_ivl: std::time::Duration::from_millis(10), ..Options::default() };
        for _ in 0..32 {
            let out = OutPipe::new(0, 0, false, Arc::new(crate::link::waiters::Waiters::default()));
            let direct = Arc::new(Capped::new(10));
            out.set_direct(Some(direct.clone()));
            let liveness = Liveness::default();
            let recorder = Recorder::default();
            let writer = write_loop(recorder.clone(), &out, 1, &opts, &liveness, None);
            tokio::pin!(writer);
            assert!(futures::FutureExt::now_or_never(writer.as_mut()).is_none(), "parked");
            tokio::time::advance(opts.heartbeat_ivl).await;
            out.try_push(Message::single(vec![7u8; 100])).unwrap();
            for _ in 0..4 {
                assert!(futures::FutureExt::now_or_never(writer.as_mut()).is_none());
            }
            let mut wire = BytesMut::from(&direct.took()[..]);
            wire.extend_from_slice(&recorder.0.lock().unwrap());
            let mut codec = crate::wire::frame::FrameCodec::default();
            let first = codec.decode(&mut wire).unwrap().expect("the message");
            assert!(!first.is_command() && first.body[..] == [7u8; 100][..], "the message whole: {first:?}");
            let second = codec.decode(&mut wire).unwrap().expect("the PING");
            assert!(second.is_command() && second.body.starts_with(b"\x04PING"), "then the PING: {second:?}");
        }
    }

    #[test]
    fn a_trickle_keeps_nothing_a_stream_keeps_its_buffer_a_burst_gives_it_back_when_quiet() {
        assert_eq!(retention(4, 100), (Keep::No, Keep::No));
        assert_eq!(retention(4, 200 * 1024), (Keep::No, Keep::No));
        assert_eq!(retention(64, 8 * 1024), (Keep::Yes, Keep::Yes));
        assert_eq!(retention(64, 200 * 1024), (Keep::Yes, Keep::WhileBusy));
        assert_eq!(retention(4096, 8 * 1024), (Keep::WhileBusy, Keep::Yes));
        assert_eq!(retention(4096, 200 * 1024), (Keep::WhileBusy, Keep::WhileBusy));
        assert_eq!(retention(BUSY_QUEUED_MAX * 2, 8 * 1024), (Keep::No, Keep::Yes));
    }

    /// Why the writer counts `held` itself: once a round's bytes are split off and written, the
    /// buffer's `capacity()` no longer shows the allocation it keeps.
    #[test]
    fn a_split_buffer_hides_the_allocation_it_keeps() {
        let mut buf = BytesMut::new();
        buf.reserve(200 * 1024);
        buf.extend_from_slice(&[7; 200 * 1024]);
        drop(buf.split().freeze());
        assert!(buf.capacity() <= KEEP_BUFFER, "capacity {}", buf.capacity());
        let before = buf.capacity();
        buf.reserve(200 * 1024);
        assert!(buf.capacity() >= 200 * 1024 && before < 200 * 1024);
    }
}
