//! The outbound queue between a socket and one connection.
//!
//! The socket pushes whole messages; the connection's writer swaps the whole queue out under one lock
//! and encodes it in one go, so a burst of small messages costs one lock and one syscall, not one each.
//! HWM counts messages; the byte HWM (`sndhwm_bytes`) counts what they cost in memory ([`cost`]:
//! payload plus a fixed charge per frame; an encoded batch or run, its bytes; a part of a shared
//! [`Chunk`], the whole chunk), both those queued and those the writer has taken but not yet
//! written (a peer that stops reading holds at most the limit plus one message, one encoded batch
//! or one chunk). Commands (subscriptions, PONGs) ride along uncounted.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::direct::{self, DirectWrite};
use crate::encoded::EncodedBatch;
use crate::message::Message;

/// Something for the connection to write.
#[derive(Debug)]
pub(crate) enum Outbound {
    Message(Message),
    /// A message queued for several peers at once (PUB/XPUB fan-out): one allocation and one
    /// reference count per peer instead of a copy of the frame list and a count per frame each.
    Shared(Arc<Message>),
    /// Small messages published to several peers, the ones of a [`Chunk`] this peer was sent.
    Chunk(ChunkPart),
    /// A subscription change; the writer picks the encoding from the peer's ZMTP minor version.
    Subscribe(Bytes, bool),
    /// A DISH's JOIN (`true`) or LEAVE of a group.
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    Join(Bytes, bool),
    /// A PONG echoing this context.
    Pong(Bytes),
    /// Whole messages already in wire framing ([`EncodedBatch`]): written as
    /// they are.
    Encoded(Bytes),
    /// The rest of a message the sender wrote [directly](super::direct) in part: written first,
    /// as it is. Not a message (it was counted as sent) and stale after a reconnect.
    Tail(Bytes),
}

impl Outbound {
    /// The messages this item carries (owned, shared or a run of shared ones), in order; none
    /// for a command, an encoded batch or a tail.
    #[cfg_attr(not(feature = "draft"), allow(dead_code, reason = "RADIO's udp sender and the tests read items so"))]
    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        let (one, part): (Option<&Message>, Option<&ChunkPart>) = match self {
            Outbound::Message(msg) => (Some(msg), None),
            Outbound::Shared(msg) => (Some(msg), None),
            Outbound::Chunk(part) => (None, Some(part)),
            _ => (None, None),
        };
        one.into_iter().chain(part.into_iter().flat_map(ChunkPart::messages))
    }

    /// Whether this carries messages (which count against the HWMs); commands do not.
    fn is_message(&self) -> bool {
        matches!(self, Outbound::Message(_) | Outbound::Shared(_) | Outbound::Chunk(_) | Outbound::Encoded(_))
    }

    /// What this counts against the byte HWM.
    fn cost(&self) -> usize {
        match self {
            Outbound::Message(msg) => cost(msg),
            Outbound::Shared(msg) => cost(msg),
            // What it keeps alive: the whole chunk (see `CHUNK_COST`).
            Outbound::Chunk(_) => CHUNK_COST,
            // One buffer: its bytes are what it holds.
            Outbound::Encoded(bytes) => bytes.len(),
            // Counted in bytes so that `flushed` waits for it (at most one per pipe, and small).
            Outbound::Tail(bytes) => bytes.len(),
            _ => 0,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Outbound>,
    messages: usize,
    /// Payload bytes of the queued messages.
    bytes: usize,
    /// Payload bytes the writer has drained and not yet reported written.
    in_flight: usize,
    /// The writer's waker while it waits for work. Kept here, under the lock every push takes
    /// anyway, rather than in a `Notify` with a lock of its own: the connection's task polls its
    /// writer's wait each time its reader is woken.
    writer: Option<Waker>,
    /// The socket is closing: flush what is queued, then stop.
    closing: bool,
    /// A PONG waits in `queue`: a peer that PINGs faster than it reads gets one PONG per round of
    /// the writer, not one per PING (libzmq too keeps a single pending PONG).
    pong_queued: bool,
    /// The connection's stream, while a connection that allows [direct writes](super::direct) is up.
    direct: Option<Arc<dyn DirectWrite>>,
    /// The writer has written everything it took and waits: the stream is free for a direct write
    /// (under this lock; the writer takes the lock to drain before it writes anything again).
    parked: bool,
    /// A direct write is allowed at once. Spent by one; given back when the writer parks after a
    /// drain of at most one item or when the peer sends messages, and in the meantime a send more
    /// than [`REARM_AFTER`] after the last direct write may write directly too. So a sender that
    /// waits between messages (request-reply, a trickle) writes each one directly, and a sender in
    /// a loop has its messages queued and batched by the writer as before (its drains take many
    /// at once).
    armed: bool,
    /// When the last direct write went out.
    last_direct: Option<Instant>,
    /// How many items the writer's last drain took.
    last_drained: usize,
}

/// A bounded outbound queue.
#[derive(Debug)]
pub(crate) struct OutPipe {
    state: Mutex<State>,
    hwm: usize,
    /// Byte HWM (0 = unlimited).
    hwm_bytes: usize,
    /// CONFLATE: a new message replaces the queued one.
    conflate: bool,
    /// The socket's "some pipe has room again" signal.
    space: Arc<super::waiters::Waiters>,
}

impl OutPipe {
    pub fn new(hwm: usize, hwm_bytes: usize, conflate: bool, space: Arc<super::waiters::Waiters>) -> Self {
        OutPipe { state: Mutex::default(), hwm, hwm_bytes, conflate, space }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// At either HWM. A message larger than the byte HWM still goes through when nothing else is
    /// queued or in flight (it could never be sent otherwise).
    fn full(&self, s: &State) -> bool {
        (self.hwm != 0 && s.messages >= self.hwm) || (self.hwm_bytes != 0 && s.bytes + s.in_flight >= self.hwm_bytes)
    }

    /// Whether any message is queued.
    pub fn has_messages(&self) -> bool {
        self.lock().messages > 0
    }

    /// Whether a message would be accepted now.
    pub fn has_room(&self) -> bool {
        self.conflate || !self.full(&self.lock())
    }

    /// Queues a message unless the pipe is at its HWM.
    pub fn try_push(&self, msg: Message) -> Result<(), Message> {
        let cost = cost(&msg);
        self.try_push_item(Outbound::Message(msg), cost).map_err(|item| match item {
            Outbound::Message(msg) => msg,
            _ => unreachable!("the item pushed"),
        })
    }

    /// Queues a message shared with other pipes unless this one is at its HWM (it counts in
    /// full against each pipe's HWMs, as a copy would, by its [`cost`], computed once for all of
    /// them); whether it was queued.
    pub fn try_push_shared(&self, msg: &Arc<Message>, cost: usize) -> bool {
        self.try_push_item(Outbound::Shared(msg.clone()), cost).is_ok()
    }

    /// Queues messages already encoded ([`EncodedBatch`]) unless the pipe is
    /// at its HWM: all of them at once, as one item (so a batch may take the queue past its HWMs by
    /// its own size, as one large message may).
    pub fn try_push_encoded(&self, bytes: Bytes, messages: usize) -> Result<(), Bytes> {
        let cost = bytes.len();
        self.try_push_counted(Outbound::Encoded(bytes), messages, cost).map_err(|item| match item {
            Outbound::Encoded(bytes) => bytes,
            _ => unreachable!("the item pushed"),
        })
    }

    fn try_push_item(&self, item: Outbound, cost: usize) -> Result<(), Outbound> {
        self.try_push_counted(item, 1, cost)
    }

    /// Queues an item of `messages` messages costing `cost` bytes, unless at the HWM.
    fn try_push_counted(&self, item: Outbound, messages: usize, cost: usize) -> Result<(), Outbound> {
        let mut s = self.lock();
        if !self.admit(&mut s) {
            return Err(item);
        }
        if let Outbound::Message(msg) = &item
            && let Some(to) = Self::direct_stream(&s, msg)
        {
            let written = direct::write(&*to, msg);
            if written != direct::Written::Nothing {
                s.armed = false;
                s.last_direct = Some(Instant::now());
            }
            match written {
                direct::Written::Whole => {
                    drop(s);
                    drop(item); // outside the lock
                    return Ok(());
                }
                direct::Written::Part(n) => {
                    let tail = direct::tail(msg, n);
                    s.bytes += tail.len();
                    // The queue is empty (a direct write needs it so): the tail is its first item.
                    s.queue.push_back(Outbound::Tail(tail));
                    self.wake_writer(s);
                    drop(item);
                    return Ok(());
                }
                direct::Written::Nothing => {}
            }
        }
        s.messages += messages;
        s.bytes += cost;
        s.queue.push_back(item);
        self.wake_writer(s);
        Ok(())
    }

    /// Whether a message may be queued now: under CONFLATE after dropping the queued ones,
    /// otherwise while under both HWMs.
    fn admit(&self, s: &mut State) -> bool {
        if self.conflate && s.messages > 0 {
            s.queue.retain(|item| !item.is_message());
            s.messages = 0;
            // What stays (commands, a direct write's tail) keeps its count.
            s.bytes = message_bytes(&s.queue);
        }
        !self.full(s)
    }

    /// Queues the message in `slot` of `chunk` unless the pipe is at its HWM; whether it was
    /// queued. Behind a part of the same chunk it joins that part (a bit in its mask: no
    /// reference count, no allocation); otherwise it starts a part, charged [`CHUNK_COST`]
    /// against the byte HWM. It counts one against the message HWM either way.
    pub fn try_push_chunk(&self, chunk: &Arc<Chunk>, slot: usize) -> bool {
        let mut s = self.lock();
        if !self.admit(&mut s) {
            return false;
        }
        s.messages += 1;
        let bit = 1 << slot;
        match s.queue.back_mut() {
            Some(Outbound::Chunk(part)) if Arc::ptr_eq(&part.chunk, chunk) => part.mask |= bit,
            _ => {
                s.bytes += CHUNK_COST;
                s.queue.push_back(Outbound::Chunk(ChunkPart { chunk: chunk.clone(), mask: bit }));
            }
        }
        self.wake_writer(s);
        true
    }

    /// The stream to write `msg` to directly, if allowed now: a direct stream, the writer parked
    /// with nothing queued after a drain of at most one item, direct writes armed (or the last
    /// one long enough ago), and a small message.
    fn direct_stream(s: &State, msg: &Message) -> Option<Arc<dyn DirectWrite>> {
        if !(s.parked && s.queue.is_empty() && s.last_drained <= 1) || s.direct.is_none() || !direct::fits(msg) {
            return None;
        }
        if !s.armed && s.last_direct.is_some_and(|at| at.elapsed() < REARM_AFTER) {
            return None;
        }
        s.direct.clone()
    }

    /// The peer sent messages: the next send is likely an answer (request-reply), not part of a
    /// loop, and may be written directly at once.
    pub fn peer_spoke(&self) {
        self.lock().armed = true;
    }

    /// Lets senders write small messages straight to this connection's stream while its writer
    /// is idle (`None`: the connection ended, or allows none).
    pub fn set_direct(&self, stream: Option<Arc<dyn DirectWrite>>) {
        let mut s = self.lock();
        s.direct = stream;
        s.parked = false;
        s.armed = true;
        s.last_drained = 0;
        // An ended connection's writer: its waker would keep that task's memory until the next
        // push (the new connection's writer registers its own).
        s.writer = None;
    }

    /// Queues messages from the front of `batch` until the HWM; how many. The caller drops the
    /// slots counted: each is left empty, or (a run of small messages, encoded here into one
    /// item: see [`try_push_encoded_run`](Self::try_push_encoded_run)) as it was.
    pub fn try_push_many(&self, batch: &mut [Message]) -> usize {
        if self.conflate {
            // Only the last one would stay queued anyway: keep to the one-by-one rule.
            for (i, slot) in batch.iter_mut().enumerate() {
                if let Err(back) = self.try_push(std::mem::take(slot)) {
                    *slot = back;
                    return i;
                }
            }
            return batch.len();
        }
        let mut queued = 0;
        while queued < batch.len() {
            let rest = &mut batch[queued..];
            let singles = match self.try_push_encoded_run(rest) {
                Run::Queued(n) => {
                    queued += n;
                    continue;
                }
                Run::Full => break,
                Run::Singles(k) => k,
            };
            let pushed = self.push_singles(&mut rest[..singles]);
            queued += pushed;
            if pushed < singles {
                break;
            }
        }
        queued
    }

    /// Queues the messages of `batch` one by one, under one lock, until the HWM; how many (each
    /// queued slot is left empty).
    fn push_singles(&self, batch: &mut [Message]) -> usize {
        let mut s = self.lock();
        let mut queued = 0;
        for slot in batch.iter_mut() {
            if self.full(&s) {
                break;
            }
            let msg = std::mem::take(slot);
            s.messages += 1;
            s.bytes += cost(&msg);
            s.queue.push_back(Outbound::Message(msg));
            queued += 1;
        }
        if queued > 0 {
            self.wake_writer(s);
        }
        queued
    }

    /// The front of `batch` that fits under the HWMs, if it is a run of at least
    /// [`ENCODE_RUN_MIN`] small messages, encoded into wire framing in the sender's task and
    /// queued as one [`Outbound::Encoded`] item. Otherwise how many messages to queue one by one
    /// first: up to and including a large one, or all (a short batch, or a run the HWM cuts
    /// short).
    ///
    /// A run of small messages is most of what a batch costs to send otherwise: each moved into
    /// the queue and out again, measured and encoded by the writer one at a time (256 messages of
    /// 16 B: one buffer of 4.6 KB instead). The run is measured against the HWMs as single pushes
    /// would be (the byte HWM by each message's [`cost`]: the last may take the queue past it), then
    /// encoded outside the lock; if a concurrent sender took the room meanwhile, the run goes one
    /// by one after all. Once queued, it counts its encoded bytes (the memory it holds), as an
    /// [`EncodedBatch`] does.
    fn try_push_encoded_run(&self, batch: &[Message]) -> Run {
        if batch.len() < ENCODE_RUN_MIN {
            return Run::Singles(batch.len());
        }
        let room = |s: &State| {
            let messages = if self.hwm == 0 { usize::MAX } else { self.hwm.saturating_sub(s.messages) };
            let bytes =
                if self.hwm_bytes == 0 { usize::MAX } else { self.hwm_bytes.saturating_sub(s.bytes + s.in_flight) };
            (messages, bytes)
        };
        let (room_messages, room_bytes) = {
            let s = self.lock();
            if self.full(&s) {
                return Run::Full;
            }
            room(&s)
        };
        // Measured and encoded in one pass over the messages (a run that a large message then
        // cuts below ENCODE_RUN_MIN wastes its encoding, and goes one by one). The buffer is sized
        // for the room at the first message's size (at most [`ENCODE_RESERVE_MAX`]: the first may
        // be a large one that ends the run at once), and grows if later ones are larger.
        let first = EncodedBatch::len_of(&batch[0]);
        let room_run = batch.len().min(room_messages).min(room_bytes / cost(&batch[0]).max(1) + 1);
        let mut encoder = EncodedBatch::with_capacity(first.saturating_mul(room_run).min(ENCODE_RESERVE_MAX));
        let (mut run, mut counted) = (0, 0);
        for msg in batch {
            if run == room_messages || counted >= room_bytes {
                break;
            }
            let mut payload = 0;
            for frame in msg.iter() {
                if frame.len() > ENCODE_FRAME_MAX {
                    payload = usize::MAX;
                    break;
                }
                payload += frame.len();
            }
            if msg.is_empty() || payload == usize::MAX {
                if run < ENCODE_RUN_MIN {
                    // Too short a run before it: those and the large one go one by one.
                    return Run::Singles(run + 1);
                }
                break;
            }
            counted += payload + FRAME_COST * msg.len();
            encoder.push_message(msg).expect("a run holds no empty message");
            run += 1;
        }
        if run < ENCODE_RUN_MIN {
            return Run::Singles(batch.len());
        }
        let (encoded, _) = encoder.take();
        let mut s = self.lock();
        let (messages_now, bytes_now) = room(&s);
        if self.full(&s) || messages_now < run || bytes_now < room_bytes {
            return Run::Singles(run);
        }
        s.messages += run;
        s.bytes += encoded.len();
        s.queue.push_back(Outbound::Encoded(encoded));
        self.wake_writer(s);
        Run::Queued(run)
    }

    /// Puts a message ahead of everything queued, HWM or not (HELLO_MSG: a peer hears it first,
    /// before what was queued while it was away).
    #[cfg_attr(not(feature = "draft"), allow(dead_code))]
    pub fn push_first(&self, msg: Message) {
        let mut s = self.lock();
        s.messages += 1;
        s.bytes += cost(&msg);
        s.queue.push_front(Outbound::Message(msg));
        self.wake_writer(s);
    }

    /// Queues a command; never refused (a PONG while another one waits is dropped: the peer hears
    /// one, and this queue cannot grow with PINGs).
    pub fn push_command(&self, item: Outbound) {
        let mut s = self.lock();
        if matches!(item, Outbound::Pong(_)) {
            if s.pong_queued {
                return;
            }
            s.pong_queued = true;
        }
        s.queue.push_back(item);
        self.wake_writer(s);
    }

    fn wake_writer(&self, mut s: std::sync::MutexGuard<'_, State>) {
        if let Some(writer) = s.writer.take() {
            drop(s);
            writer.wake();
        }
    }

    /// Gives back the queue's allocation if it is empty and holds more than `keep` items: the
    /// writer calls it once the pipe has been quiet for a while after a burst.
    pub fn release_idle_queue(&self, keep: usize) {
        let mut s = self.lock();
        if s.queue.is_empty() && s.queue.capacity() > keep {
            s.queue = VecDeque::new();
        }
    }

    /// Moves everything queued into `out` (which must be empty). Returns `false` when nothing was
    /// queued and the socket is closing, i.e. the writer is done.
    ///
    /// The drained messages' bytes stay counted against the byte HWM until the caller reports them
    /// gone with [`written`](Self::written).
    pub fn drain(&self, out: &mut VecDeque<Outbound>) -> bool {
        let mut s = self.lock();
        let was_full = self.full(&s);
        std::mem::swap(&mut s.queue, out);
        s.parked = false;
        s.last_drained = out.len();
        s.pong_queued = false;
        s.messages = 0;
        s.in_flight += std::mem::take(&mut s.bytes);
        let more = !out.is_empty() || !s.closing;
        let has_room = !self.full(&s);
        drop(s);
        if was_full && has_room {
            self.space.wake();
        }
        more
    }

    /// Reports `bytes` of drained message payload written (or handed over): they no longer count
    /// against the byte HWM.
    pub fn written(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut s = self.lock();
        let was_full = self.full(&s);
        s.in_flight = s.in_flight.saturating_sub(bytes);
        let has_room = !self.full(&s);
        let drained = s.in_flight == 0 && s.messages == 0 && s.bytes == 0;
        drop(s);
        // Drained wakes too: `Socket::flushed` waits for it.
        if (was_full && has_room) || drained {
            self.space.wake();
        }
    }

    /// Whether every message handed to this pipe has been written to the connection (none queued,
    /// none taken by the writer and not yet written).
    pub fn is_drained(&self) -> bool {
        let s = self.lock();
        s.messages == 0 && s.bytes == 0 && s.in_flight == 0
    }

    /// Waits until there is something to drain (or the socket is closing).
    pub fn wait_for_work(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            let mut s = self.lock();
            if !s.queue.is_empty() || s.closing {
                s.writer = None;
                return Poll::Ready(());
            }
            if !s.writer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                s.writer = Some(cx.waker().clone());
            }
            if !s.parked {
                // Everything taken has been written: a sender may write directly until the next
                // drain.
                s.parked = true;
                if s.last_drained <= 1 {
                    s.armed = true;
                }
            }
            Poll::Pending
        })
    }

    /// After a connection ended (the pipe kept for the next one): drops queued commands (stale
    /// after a reconnect), and with `messages_too` (IMMEDIATE) everything. What the old connection
    /// had taken and not written went with it, so it no longer counts against the byte HWM
    /// (otherwise each broken connection would shrink the budget for good, and `flushed` never
    /// end).
    pub fn purge(&self, messages_too: bool) {
        let mut s = self.lock();
        let was_full = self.full(&s);
        s.in_flight = 0;
        if messages_too {
            s.queue.clear();
            s.messages = 0;
            s.bytes = 0;
        } else {
            // A direct write's tail (counted in bytes) goes with the connection it belonged to.
            let stale: usize = s.queue.iter().filter(|item| !item.is_message()).map(Outbound::cost).sum();
            s.bytes -= stale;
            s.queue.retain(Outbound::is_message);
        }
        s.pong_queued = false;
        let wake = (was_full && !self.full(&s)) || s.messages == 0;
        drop(s);
        if wake {
            self.space.wake();
        }
    }

    /// Tells the writer to flush what is queued and stop.
    pub fn close(&self) {
        let mut s = self.lock();
        s.closing = true;
        self.wake_writer(s);
    }
}

/// After a direct write, how long until a send may write directly again without the writer having
/// parked in between: a sender that waits this long between messages gains nothing from batching,
/// one in a loop (its next message comes sooner) has it queued for the writer.
const REARM_AFTER: Duration = Duration::from_micros(10);

/// What a queued frame costs beyond its payload: its `Bytes` handle in the message and, usually,
/// the header of a buffer of its own. Counting payload alone let many small messages (a snapshot
/// of 60-byte values) hold five times the budget.
pub(crate) const FRAME_COST: usize = 64;

/// What [`OutPipe::try_push_encoded_run`] did.
enum Run {
    /// Queued this many messages as one encoded item.
    Queued(usize),
    /// Queued nothing: queue this many one by one first.
    Singles(usize),
    /// Queued nothing: the pipe is at its HWM.
    Full,
}

/// The largest message (by [`cost`]) that goes into a [`Chunk`]: a larger one is shared alone
/// ([`Outbound::Shared`]), its own allocation small beside it.
pub(crate) const CHUNK_MESSAGE_COST_MAX: usize = 1024;
/// The most messages a [`Chunk`] holds (one bit each in a [`ChunkPart`]'s mask).
pub(crate) const CHUNK_SLOTS: usize = 32;
/// The most a [`Chunk`]'s messages cost together (by [`cost`]). A pipe holding any part of a
/// chunk keeps all of it alive, so each part counts this much against the pipe's byte HWM,
/// however few of the chunk's messages are its own: memory stays within what is counted even
/// for a subscriber that takes one message in 32.
pub(crate) const CHUNK_COST: usize = 4096;

/// Small messages published to several pipes (PUB and XPUB fan-out), stored once for all of
/// them. Each pipe queues one [`ChunkPart`] per chunk and marks in it which messages are its own,
/// so a message sent to a subscriber costs a bit in a mask, where a reference-counted copy per
/// message cost an atomic increment by the publisher and a decrement by the writer: ahead of 100
/// subscribers, 20% of the publisher's time.
#[derive(Debug)]
pub(crate) struct Chunk {
    slots: [std::sync::OnceLock<Message>; CHUNK_SLOTS],
}

impl Chunk {
    fn get(&self, slot: usize) -> &Message {
        self.slots[slot].get().expect("a chunk's slot is filled before any pipe is told of it")
    }
}

/// The messages of one [`Chunk`] queued for one pipe, in slot order.
#[derive(Debug)]
pub(crate) struct ChunkPart {
    chunk: Arc<Chunk>,
    /// Bit `i`: the message in slot `i` is this pipe's.
    mask: u32,
}

impl ChunkPart {
    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        let mut rest = self.mask;
        std::iter::from_fn(move || {
            let slot = rest.trailing_zeros() as usize;
            rest &= rest.checked_sub(1)?;
            Some(self.chunk.get(slot))
        })
    }
}

/// The chunk a publisher is filling: each message for several pipes goes into its next slot
/// until it holds [`CHUNK_SLOTS`] messages or [`CHUNK_COST`] bytes, then a new one begins. The
/// filler keeps the chunk it fills (at most `CHUNK_COST` of messages) until the next begins.
#[derive(Debug, Default)]
pub(crate) struct ChunkFiller {
    chunk: Option<Arc<Chunk>>,
    used: usize,
    cost: usize,
}

impl ChunkFiller {
    /// Stores `msg` (which costs `cost`, at most [`CHUNK_MESSAGE_COST_MAX`]); the chunk and
    /// slot it is in, for [`OutPipe::try_push_chunk`].
    pub fn put(&mut self, msg: Message, cost: usize) -> (&Arc<Chunk>, usize) {
        debug_assert!(cost <= CHUNK_MESSAGE_COST_MAX);
        if self.chunk.is_none() || self.used == CHUNK_SLOTS || self.cost + cost > CHUNK_COST {
            let slots = [const { std::sync::OnceLock::new() }; CHUNK_SLOTS];
            self.chunk = Some(Arc::new(Chunk { slots }));
            (self.used, self.cost) = (0, 0);
        }
        let slot = self.used;
        let chunk = self.chunk.as_ref().expect("a chunk to fill");
        let stored = chunk.slots[slot].set(msg);
        debug_assert!(stored.is_ok(), "each slot is filled once");
        (self.used, self.cost) = (slot + 1, self.cost + cost);
        (chunk, slot)
    }
}

/// A batch of at least this many messages is encoded by its sender ([`OutPipe::try_push_many`]).
const ENCODE_RUN_MIN: usize = 16;
/// ... as long as every frame is at most this long: larger ones are written by reference, and a
/// copy would cost more than the queueing it saves.
const ENCODE_FRAME_MAX: usize = 1024;
/// The most an encoded run reserves ahead (256 messages of 1 KiB frames); a larger run grows.
const ENCODE_RESERVE_MAX: usize = 256 * 1024;

/// What a message counts against the byte HWM.
pub(crate) fn cost(msg: &Message) -> usize {
    msg.byte_len() + FRAME_COST * msg.len()
}

/// What queued items count against the byte HWM.
pub(crate) fn message_bytes<'a>(items: impl IntoIterator<Item = &'a Outbound>) -> usize {
    items.into_iter().map(Outbound::cost).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::direct::Capped;

    fn pipe(hwm: usize, hwm_bytes: usize) -> OutPipe {
        OutPipe::new(hwm, hwm_bytes, false, Arc::new(crate::link::waiters::Waiters::default()))
    }

    /// A one-frame message costing `cost` bytes (at least one frame's charge).
    fn msg(cost: usize) -> Message {
        Message::single(vec![0u8; cost.saturating_sub(FRAME_COST)])
    }

    #[test]
    fn a_purge_after_a_broken_connection_frees_what_it_had_taken() {
        let p = pipe(0, 1000);
        p.try_push(msg(600)).unwrap();
        p.try_push(msg(600)).unwrap();
        // The writer took both and the connection broke before writing them.
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        assert!(!p.has_room() && !p.is_drained());
        drop(taken);
        p.purge(false);
        assert!(p.has_room() && p.is_drained(), "the budget is whole again");
    }

    #[test]
    fn a_quiet_pipe_gives_back_a_large_empty_queue_only() {
        let p = pipe(0, 0);
        let mut kept = VecDeque::with_capacity(4096);
        p.drain(&mut kept); // the writer's kept queue is now the pipe's
        p.try_push(msg(10)).unwrap();
        p.release_idle_queue(256);
        assert!(p.lock().queue.capacity() >= 4096, "not empty: kept");
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        p.release_idle_queue(256);
        assert_eq!(p.lock().queue.capacity(), 0);
        let mut small = VecDeque::with_capacity(16);
        std::mem::swap(&mut p.lock().queue, &mut small);
        p.release_idle_queue(256);
        assert!(p.lock().queue.capacity() >= 16, "small: kept");
    }

    /// The writer waits (as its task does between batches).
    fn park(p: &OutPipe) {
        use futures::FutureExt;
        assert!(p.wait_for_work().now_or_never().is_none(), "nothing to do");
    }

    #[test]
    fn a_parked_writer_lets_one_message_through_directly_and_a_loop_is_queued() {
        let p = pipe(0, 0);
        let stream = Arc::new(Capped::new(1_000));
        p.set_direct(Some(stream.clone()));
        p.try_push(msg(100)).unwrap();
        assert_eq!(p.lock().messages, 1, "not parked yet: queued");
        p.drain(&mut VecDeque::new());
        park(&p);
        p.try_push(msg(100)).unwrap();
        assert!(p.lock().queue.is_empty() && !stream.took().is_empty(), "written directly");
        // Spent: a send right after it waits for the writer (the clock is held still here: the
        // last direct write is "now" for as long as the test runs), which drains it with a third.
        p.lock().last_direct = Some(Instant::now() + Duration::from_secs(3600));
        p.try_push(msg(100)).unwrap();
        p.try_push(msg(100)).unwrap();
        assert_eq!(p.lock().messages, 2);
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        park(&p);
        p.try_push(msg(100)).unwrap();
        assert_eq!(p.lock().messages, 1, "the writer took two at once: still a loop, still queued");
        p.drain(&mut VecDeque::new());
        park(&p);
        p.try_push(msg(100)).unwrap();
        assert_eq!(p.lock().messages, 0, "it took one: armed again, written directly");
        // Spent again; a send long after it writes directly without waiting for the writer.
        p.lock().last_direct = Instant::now().checked_sub(REARM_AFTER * 2);
        p.try_push(msg(100)).unwrap();
        assert_eq!(p.lock().messages, 0, "long enough after the last one: written directly");
        // Spent, the clock held still: an answer to the peer's message is written directly.
        p.lock().last_direct = Some(Instant::now() + Duration::from_secs(3600));
        p.peer_spoke();
        p.try_push(msg(100)).unwrap();
        assert_eq!(p.lock().messages, 0, "the peer spoke: written directly");
        p.set_direct(None);
        park(&p);
        p.try_push(msg(100)).unwrap();
        assert_eq!(p.lock().messages, 1, "no stream: queued");
    }

    #[test]
    fn the_rest_of_a_partial_direct_write_goes_first_counts_until_written_and_not_past_a_reconnect() {
        let p = pipe(0, 0);
        p.set_direct(Some(Arc::new(Capped::new(10))));
        park(&p);
        p.try_push(msg(200)).unwrap();
        p.try_push(msg(100)).unwrap();
        {
            let s = p.lock();
            assert!(matches!(s.queue.front(), Some(Outbound::Tail(t)) if t.len() == 200 - FRAME_COST + 2 - 10));
            assert_eq!(s.messages, 1, "the tail is no message");
        }
        assert!(!p.is_drained(), "flushed waits for the tail");
        p.purge(false);
        assert_eq!(p.lock().queue.len(), 1, "the tail went with its connection; the message stays");
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        p.written(message_bytes(&taken));
        assert!(p.is_drained());
    }

    #[test]
    fn conflate_keeps_a_direct_writes_tail_counted_and_a_purge_frees_it_exactly() {
        let p = OutPipe::new(0, 0, true, Arc::new(crate::link::waiters::Waiters::default()));
        p.set_direct(Some(Arc::new(Capped::new(10))));
        park(&p);
        p.try_push(msg(200)).unwrap(); // written in part
        p.try_push(msg(100)).unwrap();
        p.try_push(msg(150)).unwrap(); // replaces the one before, not the tail
        let tail_len = 200 - FRAME_COST + 2 - 10;
        {
            let s = p.lock();
            assert_eq!(s.queue.len(), 2);
            assert_eq!(s.bytes, tail_len + 150, "the tail and the last message");
        }
        p.purge(false);
        assert_eq!(p.lock().bytes, 150);
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        p.written(message_bytes(&taken));
        assert!(p.is_drained());
    }

    #[test]
    fn the_byte_hwm_counts_queued_and_in_flight_bytes() {
        let p = pipe(0, 1000);
        assert_eq!(super::cost(&msg(300)), 300);
        for _ in 0..3 {
            p.try_push(msg(300)).unwrap();
        }
        p.try_push(msg(300)).unwrap(); // 900 < 1000: room for one more, whatever its size
        assert!(p.try_push(msg(1)).is_err(), "1200 queued");
        let mut taken = VecDeque::new();
        assert!(p.drain(&mut taken));
        assert_eq!(message_bytes(&taken), 1200);
        // Drained but not yet written: still counted.
        assert!(!p.has_room() && p.try_push(msg(1)).is_err());
        p.written(700);
        assert!(p.has_room());
        p.try_push(msg(10)).unwrap();
        p.written(500);
        p.try_push(msg(990)).unwrap();
        assert!(p.try_push(msg(1)).is_err(), "10 + 990 queued, nothing in flight: at the limit");
    }

    #[test]
    fn pings_faster_than_the_writer_leave_one_pong_queued() {
        let p = pipe(0, 0);
        for i in 0..10_000u32 {
            p.push_command(Outbound::Pong(Bytes::from(i.to_be_bytes().to_vec())));
        }
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        assert_eq!(taken.len(), 1, "one PONG however many PINGs");
        // After the writer took it, the next PING is answered again.
        p.push_command(Outbound::Pong(Bytes::new()));
        let mut more = VecDeque::new();
        p.drain(&mut more);
        assert_eq!(more.len(), 1);
    }

    #[test]
    fn a_batch_is_queued_up_to_either_hwm_and_the_rest_is_left() {
        let p = pipe(3, 0);
        let mut batch: Vec<Message> = (0..5).map(|_| msg(100)).collect();
        assert_eq!(p.try_push_many(&mut batch), 3);
        assert!(batch[..3].iter().all(Message::is_empty) && batch[3..].iter().all(|m| !m.is_empty()));
        assert_eq!(p.try_push_many(&mut batch[3..]), 0, "full");
        let p = pipe(0, 250);
        let mut batch: Vec<Message> = (0..5).map(|_| msg(100)).collect();
        assert_eq!(p.try_push_many(&mut batch), 3, "200 < 250 lets a third in, as single pushes do");
        // CONFLATE keeps the newest only.
        let p = OutPipe::new(1, 0, true, Arc::new(crate::link::waiters::Waiters::default()));
        let mut batch = vec![Message::single("a"), Message::single("b")];
        assert_eq!(p.try_push_many(&mut batch), 2);
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        assert!(matches!(&taken.iter().collect::<Vec<_>>()[..], [Outbound::Message(m)] if m[0] == "b"));
    }

    /// What the writer would find queued: each item's messages, frame by frame.
    fn queued_frames(p: &OutPipe) -> Vec<Vec<Vec<u8>>> {
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        let mut all = Vec::new();
        for item in &taken {
            match item {
                Outbound::Message(m) => all.push(m.iter().map(|f| f.to_vec()).collect()),
                Outbound::Encoded(bytes) => {
                    all.extend(crate::encoded::messages(bytes).map(|m| m.iter().map(|f| f.to_vec()).collect()))
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        all
    }

    /// Small messages for several pipes go into chunks (32 messages, or 4 KiB of them), and a pipe
    /// queues one part per chunk; a large message is shared alone; a command or another item
    /// between them starts a new part. Each message counts one against the message HWM, each part
    /// `CHUNK_COST` against the byte HWM (what it keeps alive); the writer gets them all in order.
    #[test]
    fn small_messages_for_several_pipes_are_queued_as_parts_of_chunks() {
        let frames = |m: &Message| -> Vec<Vec<u8>> { m.iter().map(|f| f.to_vec()).collect() };
        let numbered = |i: usize, len: usize| {
            let mut body = format!("{i}:").into_bytes();
            body.resize(len, b'x');
            Message::single(Bytes::from(body))
        };
        let push = |p: &OutPipe, filler: &mut ChunkFiller, m: Message| {
            let c = cost(&m);
            if c <= CHUNK_MESSAGE_COST_MAX {
                let (chunk, slot) = filler.put(m, c);
                p.try_push_chunk(chunk, slot)
            } else {
                p.try_push_shared(&Arc::new(m), c)
            }
        };
        let shape = |p: &OutPipe| -> Vec<usize> {
            p.lock()
                .queue
                .iter()
                .map(|item| match item {
                    Outbound::Chunk(part) => part.messages().count(),
                    Outbound::Shared(_) => 1,
                    _ => 0,
                })
                .collect()
        };

        let (p, mut filler) = (pipe(100, 0), ChunkFiller::default());
        let mut sent: Vec<Message> = (0..40).map(|i| numbered(i, 10)).collect();
        sent.push(numbered(40, 2000)); // large: an item of its own
        sent.push(numbered(41, 10));
        for m in &sent {
            assert!(push(&p, &mut filler, m.clone()));
        }
        p.push_command(Outbound::Pong(Bytes::new()));
        for i in [42, 43] {
            sent.push(numbered(i, 10));
            assert!(push(&p, &mut filler, sent.last().unwrap().clone()));
        }
        assert_eq!(shape(&p), [32, 8, 1, 1, 0, 2], "parts of 32 and 8, the large one, one, the PONG, two");
        let counted = 4 * CHUNK_COST + cost(&sent[40]);
        let (messages, bytes) = {
            let s = p.lock();
            (s.messages, s.bytes)
        };
        assert_eq!((messages, bytes), (44, counted), "messages one each, parts a chunk each");
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        assert_eq!(message_bytes(&taken), counted, "what is reported written is what was counted");
        let got: Vec<_> = taken.iter().flat_map(|item| item.messages().map(frames)).collect();
        assert_eq!(got, sent.iter().map(frames).collect::<Vec<_>>());

        // A chunk also ends at 4 KiB of messages: 11 of 364 bytes' cost each.
        let (p, mut filler) = (pipe(0, 0), ChunkFiller::default());
        for i in 0..12 {
            assert!(push(&p, &mut filler, numbered(i, 300)));
        }
        assert_eq!(shape(&p), [11, 1]);

        // A pipe that misses some messages of a chunk (at its byte HWM for a while, its part
        // still queued) holds the others as one part, in order.
        let (a, b, mut filler) = (pipe(0, 0), pipe(0, 2 * CHUNK_COST), ChunkFiller::default());
        for i in 0..5 {
            let m = numbered(i, 10);
            let c = cost(&m);
            let (chunk, slot) = filler.put(m, c);
            assert!(a.try_push_chunk(chunk, slot));
            assert_eq!(b.try_push_chunk(chunk, slot), i != 2, "b is at its byte HWM for the third");
            match i {
                0 => assert!(b.drain(&mut VecDeque::new())), // the writer took it: in flight
                2 => b.written(CHUNK_COST),                  // and wrote it
                _ => {}
            }
        }
        assert_eq!((shape(&a), shape(&b)), (vec![5], vec![3]));
        let expected: Vec<Vec<Vec<u8>>> = [1, 3, 4].map(|i| frames(&numbered(i, 10))).to_vec();
        assert_eq!(queued_frames_of_parts(&b), expected);

        // At the HWM the next one is refused; under CONFLATE the newest is kept alone.
        let (p, mut filler) = (pipe(3, 0), ChunkFiller::default());
        for i in 0..3 {
            assert!(push(&p, &mut filler, numbered(i, 10)));
        }
        assert!(!push(&p, &mut filler, numbered(3, 10)));
        let (p, mut filler) =
            (OutPipe::new(1, 0, true, Arc::new(crate::link::waiters::Waiters::default())), ChunkFiller::default());
        for i in 0..3 {
            assert!(push(&p, &mut filler, numbered(i, 10)));
        }
        assert_eq!(queued_frames_of_parts(&p), [[b"2:xxxxxxxx".to_vec()]]);
        // The byte HWM admits a new part while under it, and joins to a part cost nothing more.
        let (p, mut filler) = (pipe(0, CHUNK_COST + 1), ChunkFiller::default());
        for i in 0..32 {
            assert!(push(&p, &mut filler, numbered(i, 10)), "one part");
        }
        assert!(push(&p, &mut filler, numbered(32, 10)), "under the byte HWM: a second part");
        assert!(!push(&p, &mut filler, numbered(33, 10)), "at it");
    }

    /// The messages queued in `p`, frame by frame (drained).
    fn queued_frames_of_parts(p: &OutPipe) -> Vec<Vec<Vec<u8>>> {
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        taken.iter().flat_map(|item| item.messages().map(|m| m.iter().map(|f| f.to_vec()).collect())).collect()
    }

    /// Prints what queueing a run of 16 B messages costs per message, encoding included (not an
    /// assertion): `cargo test --release -p zmtp-tokio --lib run_timing -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_run_timing() {
        let p = pipe(0, 0);
        let payload = Bytes::from_static(&[7u8; 16]);
        let (rounds, per_round) = (20_000, 256);
        let mut taken = VecDeque::new();
        let mut batch: Vec<Message> = Vec::with_capacity(per_round);
        let t = Instant::now();
        for _ in 0..rounds {
            batch.extend((0..per_round).map(|_| Message::single(payload.clone())));
            assert_eq!(p.try_push_many(&mut batch), per_round);
            batch.clear();
            p.drain(&mut taken);
            taken.clear();
        }
        println!("a run of 16 B messages: {:?} per message", t.elapsed() / (rounds * per_round) as u32);
    }

    fn frames_of(batch: &[Message]) -> Vec<Vec<Vec<u8>>> {
        batch.iter().map(|m| m.iter().map(|f| f.to_vec()).collect()).collect()
    }

    #[test]
    fn a_run_of_small_messages_is_queued_encoded_as_one_item() {
        let p = pipe(1000, 0);
        // Single and multipart, short and long headers (256 B and more), empty frames.
        let mut batch: Vec<Message> = (0..40)
            .map(|i| match i % 3 {
                0 => Message::single(vec![i as u8; i]),
                1 => Message::from(vec![Bytes::from(vec![1u8; 300 + i]), Bytes::new(), Bytes::from("x")]),
                _ => Message::single(Bytes::new()),
            })
            .collect();
        let expected = frames_of(&batch);
        assert_eq!(p.try_push_many(&mut batch), 40);
        {
            let s = p.lock();
            assert_eq!((s.queue.len(), s.messages), (1, 40), "one item counting 40 messages");
            assert!(matches!(s.queue[0], Outbound::Encoded(_)));
        }
        assert_eq!(queued_frames(&p), expected);
    }

    #[test]
    fn an_encoded_run_stops_at_either_hwm_and_before_a_large_frame() {
        // The message HWM: 20 of 40 go, encoded; the rest waits.
        let p = pipe(20, 0);
        let mut batch: Vec<Message> = (0..40).map(|i| Message::single(format!("{i}"))).collect();
        let expected = frames_of(&batch[..20]);
        assert_eq!(p.try_push_many(&mut batch), 20);
        assert_eq!(p.try_push_many(&mut batch[20..]), 0, "full");
        assert_eq!(queued_frames(&p), expected);
        // The byte HWM: the run is measured by each message's cost, as single pushes count it
        // (17 of 100 B), and once queued counts the memory it takes: 17 messages of 36 B and
        // their 2-byte headers. What is left of the budget takes 11 more (one by one: a run of
        // 11 is too short to encode), the last one past the limit as a single push may go.
        let p = pipe(0, 100 * 17);
        let mut batch: Vec<Message> = (0..40).map(|_| msg(100)).collect();
        assert_eq!(p.try_push_many(&mut batch), 28);
        {
            let s = p.lock();
            assert_eq!((s.queue.len(), s.messages, s.bytes), (12, 28, 17 * 38 + 11 * 100));
        }
        assert_eq!(p.try_push_many(&mut batch[28..]), 0, "full");
        // A large frame ends the run: what is before it goes encoded, it and the rest one by one.
        let p = pipe(1000, 0);
        let mut batch: Vec<Message> = (0..40).map(|i| Message::single(format!("{i}"))).collect();
        batch[20] = Message::single(vec![7u8; ENCODE_FRAME_MAX + 1]);
        batch[23] = Message::single(vec![8u8; ENCODE_FRAME_MAX + 1]);
        let expected = frames_of(&batch);
        assert_eq!(p.try_push_many(&mut batch), 40);
        {
            // 20 encoded; the large one and the two before the next large one, one by one; then
            // the 16 after it, encoded.
            let s = p.lock();
            let shape: Vec<_> = s.queue.iter().map(|item| matches!(item, Outbound::Encoded(_))).collect();
            assert_eq!(shape, [true, false, false, false, false, true]);
        }
        assert_eq!(queued_frames(&p), expected);
    }

    #[test]
    fn an_encoded_run_counts_its_bytes_until_written() {
        let p = pipe(0, 1 << 20);
        let mut batch: Vec<Message> = (0..32).map(|_| Message::single(vec![0u8; 100])).collect();
        assert_eq!(p.try_push_many(&mut batch), 32);
        let encoded = 32 * 102;
        assert_eq!(p.lock().bytes, encoded);
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        assert!(!p.is_drained(), "taken, not yet written");
        p.written(message_bytes(&taken));
        assert!(p.is_drained());
    }

    #[test]
    fn a_message_larger_than_the_byte_hwm_goes_alone() {
        let p = pipe(0, 100);
        p.try_push(msg(5000)).unwrap();
        assert!(p.try_push(msg(1)).is_err());
        let mut taken = VecDeque::new();
        p.drain(&mut taken);
        assert!(p.try_push(msg(1)).is_err(), "still being written");
        p.written(5000);
        p.try_push(msg(1)).unwrap();
    }

    #[test]
    fn message_and_byte_limits_both_apply_and_zero_means_none() {
        let p = pipe(2, 0);
        p.try_push(msg(1 << 20)).unwrap();
        p.try_push(msg(1 << 20)).unwrap();
        assert!(p.try_push(msg(1)).is_err(), "two messages");
        let p = pipe(0, 0);
        for _ in 0..10_000 {
            p.try_push(msg(1)).unwrap();
        }
    }
}
