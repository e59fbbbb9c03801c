//! The read loop: decode every complete frame in the buffer, assemble messages, hand them to the socket
//! in one batch, answer PINGs, and enforce the peer's heartbeat TTL.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::Liveness;
use super::host::Host;
use super::inlet::Inlet;
use crate::error::{ConnectionError, LimitError};
use crate::link::pipe::{OutPipe, Outbound};
use crate::message::Message;
use crate::options::Options;
use crate::transport::ReadReady;
use crate::wire::curve::CurveDecoder;
use crate::wire::{Command, FrameCodec};

/// Read buffer growth bounds: small while idle (cheap idle connections), larger under load.
const MIN_READ: usize = 2 * 1024;
/// The largest read while frames are small. Received frames are slices of the read buffer, so a
/// buffer lives until its last message is consumed and a busy connection keeps allocating new ones:
/// at 64 KiB they come from the allocator's free lists, at 256 KiB from fresh pages (a fan-out to 100
/// subscribers spent a third of its time in page faults and munmap).
const MAX_READ_SMALL_FRAMES: usize = 64 * 1024;
/// The largest read while frames are large: a 64 KiB message per read syscall was 2.8× slower.
const MAX_READ: usize = 256 * 1024;
/// Frames at least this big count as large.
const LARGE_FRAME: usize = 8 * 1024;

/// Where the reader delivers, where it queues PONGs, and where it counts frames.
pub(super) struct Link<'a, H> {
    pub inlet: Inlet<H>,
    pub out: &'a OutPipe,
    pub liveness: &'a Liveness,
}

/// Not an `async fn`: one copies its arguments into its state beside the originals, and this state
/// sits in every connection's task (an `async move` block uses what it captured in place). For the
/// same reason it takes its [`Decoding`] ready-made and uses `link` in place: a local built from an
/// argument is a second copy in every state of the task.
#[allow(clippy::manual_async_fn, reason = "an async fn keeps a copy of its arguments in every connection's task")]
pub(super) fn read_loop<H: Host, R: AsyncRead + ReadReady + Unpin>(
    mut rd: R,
    mut buf: BytesMut,
    link: Link<'_, H>,
    mut decoding: Decoding,
) -> impl std::future::Future<Output = Result<(), ConnectionError>> {
    async move {
        let mut batch: VecDeque<Message> = VecDeque::new();
        let mut ttl_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        let mut read_size = MIN_READ;
        // Whether the last read filled what it offered: the peer is likely ahead of us.
        let mut busy_read = false;
        let current_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|rt| rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        loop {
            // Whatever decoded cleanly before a protocol error is still delivered (libzmq flushes too).
            let mut saw_frames = false;
            // The error boxed while the batch is flushed: inline, its 56 bytes sat in every task.
            let decoded: Result<(), Box<ConnectionError>> = loop {
                match decoding.decode(&mut buf, &link.inlet, link.out, &mut batch, &mut saw_frames) {
                    Ok(None) => break Ok(()),
                    // Boxed, as every rare path that waits: inline, its state would sit in every task.
                    Ok(Some(pause)) => {
                        if let Err(e) = Box::pin(resume(&link.inlet, pause, &mut batch)).await {
                            break Err(Box::new(e));
                        }
                    }
                    Err(e) => break Err(Box::new(e)),
                }
            };
            // Once per read, not per frame: the heartbeat only asks whether anything came since a PING.
            if saw_frames {
                link.liveness.saw_frame();
            }
            let delivered = !batch.is_empty();
            link.inlet.flush(&mut batch).await;
            if delivered {
                // Likely a request or a reply: the answer to it may be written directly.
                link.out.peer_spoke();
            }
            decoded.map_err(|e| *e)?;
            if delivered && (busy_read || !current_thread || decoding.large_frames) {
                // Let the application take what was just delivered before reading on. Otherwise, on a
                // current-thread runtime, the reader runs through its whole budget first (128 reads: 32 MiB
                // of 64 KiB messages held at once), and the allocator hands back and refaults that much
                // memory every round (6 to 12 page faults per 64 KiB message).
                // On a current-thread runtime, only after a read that took all it was offered: after a
                // short one the socket is drained (tokio clears its readiness) and the next read parks
                // at no cost, while a yield costs a zero-timeout `epoll_wait` (one per request-reply
                // round trip in a spawned task, half its poll syscalls). On the multi-thread runtime
                // the yield keeps the worker from parking: CHP's set -> watcher p50 rose from 87 to
                // 99 µs idle and 77 to 85 µs loaded without it (medians of 10 alternating runs).
                // And always while frames are large: a short read there does not mean the peer is
                // behind (over ipc the socket's buffer, about 208 KiB, makes every read short), and
                // a reader that read on while the sender refilled the socket held the application off
                // for its whole budget. ipc at 64 KiB with both processes on one core: 38-39 k/s ->
                // 123-128 k/s (its allocator gave the heap back and took it again every other read).
                tokio::task::yield_now().await;
            }
            if buf.is_empty() && buf.capacity() > 0 && read_size == MIN_READ {
                // Drained after a burst and no longer busy: give the memory back so that idle connections
                // stay cheap (the frames already handed out keep their own slices alive).
                buf = BytesMut::new();
                batch = VecDeque::new();
            }
            // An idle connection (its buffer given back above) waits for bytes before it takes a
            // buffer again: 2 KiB less per idle connection, on each end.
            let idle = buf.capacity() == 0;
            let read = async {
                if idle {
                    rd.read_ready().await?;
                }
                if buf.capacity() - buf.len() < read_size / 4 {
                    buf.reserve(read_size);
                }
                rd.read_buf(&mut buf).await
            };
            let n = match decoding.ttl {
                Some(limit) => {
                    // One timer per connection, on the heap: inline it would sit in every idle task.
                    let deadline = tokio::time::Instant::now() + limit;
                    let timer = ttl_timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                    timer.as_mut().reset(deadline);
                    tokio::select! {
                        n = read => n?,
                        _ = timer.as_mut() => return Err(ConnectionError::HeartbeatTimeout),
                    }
                }
                None => read.await?,
            };
            if n == 0 {
                return Err(ConnectionError::PeerClosed);
            }
            // Filled what it offered: the offer (the buffer's spare room) may be under `read_size`.
            busy_read = n >= read_size || buf.len() == buf.capacity();
            // A read that filled what we offered suggests a busy peer: offer more next time; a short one
            // lets the offer shrink back.
            let max_read = if decoding.large_frames { MAX_READ } else { MAX_READ_SMALL_FRAMES };
            if n >= read_size && read_size < max_read {
                read_size *= 2;
            } else if read_size > max_read {
                read_size = max_read;
            } else if n < read_size / 4 && read_size > MIN_READ {
                read_size /= 2;
            }
        }
    }
}

/// A step the decoder leaves to the reader because it may wait: a subscription or group change,
/// applied in order with the messages decoded before it.
enum Pause {
    Subscription(Bytes, bool),
    #[cfg(feature = "draft")]
    Group(Bytes, bool),
    SubscriptionMessage(Message),
}

/// What the reader keeps between reads to turn bytes into messages. Decoding is synchronous: only
/// a [`Pause`] waits, so the frame in hand and the parsed command never sit in the connection's
/// task while it waits for bytes (they made its future 400 bytes larger).
pub(super) struct Decoding {
    codec: FrameCodec,
    /// Boxed, as the encoder: 48 bytes that every connection without CURVE would carry.
    decoder: Option<Box<CurveDecoder>>,
    partial: Message,
    /// The peer's heartbeat TTL, from its last PING.
    ttl: Option<Duration>,
    /// Whether the last frame was large (the next read may be larger).
    large_frames: bool,
    max_frames: Option<usize>,
    /// Frames of the last message (at most [`FRAMES_HINT_MAX`]): the next one's frame list is
    /// allocated at that size when it starts. A connection's messages tend to have one shape, and
    /// growing the list frame by frame (inline 2, then 4, then 8) cost an allocation and a
    /// reallocation per 5-frame CHP snapshot message (a 1M-key snapshot took ~10% longer). A peer
    /// that varies the shape makes a message's list at most as long as its previous message's,
    /// which the byte HWM counted per frame: memory stays within twice what is counted.
    frames_hint: u8,
}

/// The largest frame list allocated ahead of a message's frames (a hint, never a bound).
const FRAMES_HINT_MAX: usize = 16;

impl Decoding {
    pub(super) fn new(opts: &Options, decoder: Option<Box<CurveDecoder>>) -> Decoding {
        Decoding {
            codec: FrameCodec::new(opts.maxmsgsize),
            decoder,
            partial: Message::new(),
            ttl: None,
            large_frames: false,
            max_frames: opts.max_frames,
            frames_hint: 0,
        }
    }

    /// Decodes the frames in `buf` into messages in `batch` (answering PINGs on `out`) until the
    /// buffer holds no whole frame (`None`) or a step that may wait comes up.
    fn decode<H: Host>(
        &mut self,
        buf: &mut BytesMut,
        inlet: &Inlet<H>,
        out: &OutPipe,
        batch: &mut VecDeque<Message>,
        saw_frames: &mut bool,
    ) -> Result<Option<Pause>, ConnectionError> {
        while let Some(mut frame) = self.codec.decode(buf)? {
            *saw_frames = true;
            self.large_frames = frame.body.len() >= LARGE_FRAME;
            if let Some(decoder) = self.decoder.as_mut() {
                frame = decoder.decode_frame(&frame.body).map_err(ConnectionError::Curve)?;
            }
            if frame.is_command() {
                match Command::parse(frame.body)? {
                    Command::Ping { ttl_deciseconds, context } => {
                        self.ttl = (ttl_deciseconds > 0).then(|| Duration::from_millis(ttl_deciseconds as u64 * 100));
                        out.push_command(Outbound::Pong(context));
                    }
                    Command::Subscribe(topic) => return Ok(Some(Pause::Subscription(topic, true))),
                    Command::Cancel(topic) => return Ok(Some(Pause::Subscription(topic, false))),
                    #[cfg(feature = "draft")]
                    Command::Join(group) => return Ok(Some(Pause::Group(group, true))),
                    #[cfg(feature = "draft")]
                    Command::Leave(group) => return Ok(Some(Pause::Group(group, false))),
                    // Anything else after the handshake is ignored (libzmq).
                    _ => {}
                }
                continue;
            }
            let more = frame.more();
            if !more && self.partial.is_empty() && self.max_frames.is_none_or(|limit| limit >= 1) {
                // A message of one frame, built in place: through `partial` it was written
                // there and read back at once, a stall on every small message.
                self.frames_hint = 1;
                if let Some(subscription) = inlet.message(Message::single(frame.body), batch) {
                    return Ok(Some(Pause::SubscriptionMessage(subscription)));
                }
                continue;
            }
            if self.partial.is_empty() {
                self.partial.reserve(usize::from(self.frames_hint));
            }
            self.partial.push(frame.body);
            if let Some(limit) = self.max_frames
                && self.partial.len() > limit
            {
                return Err(LimitError::Frames { limit }.into());
            }
            if !more {
                self.frames_hint = self.partial.len().min(FRAMES_HINT_MAX) as u8;
            }
            if !more && let Some(subscription) = inlet.message(std::mem::take(&mut self.partial), batch) {
                return Ok(Some(Pause::SubscriptionMessage(subscription)));
            }
        }
        Ok(None)
    }
}

/// Takes the step [`Decoding::decode`] paused at.
async fn resume<H: Host>(inlet: &Inlet<H>, pause: Pause, batch: &mut VecDeque<Message>) -> Result<(), ConnectionError> {
    match pause {
        Pause::Subscription(topic, subscribe) => inlet.subscription(&topic, subscribe, batch).await?,
        #[cfg(feature = "draft")]
        Pause::Group(group, join) => inlet.group(&group, join, batch).await?,
        Pause::SubscriptionMessage(msg) => inlet.subscription_message(msg, batch).await?,
    }
    Ok(())
}
