//! Sending and receiving many messages per call: [`Socket::send_many`], [`Socket::recv_many`] and
//! the coalescing [`MessageSink`]. A batch takes the socket's locks once instead of once per
//! message, and a connection's writer then finds the whole batch queued and writes it in one go.
//! Nothing changes on the wire: a batch is the same messages, in the same order, that one `send`
//! each would have made.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Sink;

use super::{Socket, coop};
use crate::encoded::EncodedBatch;
use crate::error::{Error, Result};
use crate::message::Message;

/// How many messages a [`MessageSink`] holds before `poll_ready` flushes them itself.
pub const SINK_BATCH: usize = 256;

impl Socket {
    /// Sends every message in `batch`, in order, waiting for room as [`send`](Self::send) does.
    /// On success `batch` is empty and keeps its capacity, so one `Vec` can carry batch after
    /// batch without allocating.
    ///
    /// A batch takes the socket's state lock once per wake-up rather than once per message, which
    /// is most of what a small message costs to send. Messages go where single sends would have
    /// sent them (round-robin for PUSH/DEALER, every matching subscriber for PUB, …). A PUSH or
    /// DEALER with one peer goes further with a run of at least 16 small messages (frames up to
    /// 1 KiB): it encodes them into wire framing itself, as one buffer its connection writes as
    /// it is (measured: 1.1–1.5× the messages per second at 16 and 64 B over tcp and ipc).
    ///
    /// **Cancel safety:** every message sent is removed from `batch` before this awaits anything,
    /// so if the future is dropped, `batch` holds exactly the messages not sent, in order.
    ///
    /// **Errors:** on an error the messages before the failing one were sent; the failing one is
    /// removed and dropped (as a failed [`send`](Self::send) consumes its message); the rest stay
    /// in `batch`. An error of the socket's rather than a message's ([`Error::Closed`]) removes
    /// nothing more.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::{Message, Socket, SocketType};
    /// let pull = Socket::new(SocketType::Pull);
    /// let endpoint = pull.bind("tcp://127.0.0.1:0").await?;
    /// let push = Socket::new(SocketType::Push);
    /// push.connect(&endpoint).await?;
    ///
    /// let mut batch: Vec<Message> = (0..100).map(|i| Message::from(format!("#{i}"))).collect();
    /// push.send_many(&mut batch).await?;
    /// assert!(batch.is_empty());
    ///
    /// let mut received = Vec::new();
    /// while received.len() < 100 {
    ///     pull.recv_many(&mut received, 64).await?;
    /// }
    /// assert_eq!(received[99][0], "#99");
    /// # Ok(()) }
    /// ```
    pub async fn send_many(&self, batch: &mut Vec<Message>) -> Result<()> {
        // One budget unit per batch: a batch is many sends' worth of work, but one call.
        tokio::task::coop::consume_budget().await;
        let core = &self.inner.core;
        if send_what_fits(core, batch)? {
            return Ok(());
        }
        core.space
            .wait_until(|| match send_what_fits(core, batch) {
                Ok(true) => Some(Ok(())),
                Ok(false) => None,
                Err(e) => Some(Err(e)),
            })
            .await
    }

    /// ROUTER: queues every message of `batch` for the peer whose routing id is `routing_id`, as
    /// one item its connection writes as it is; on success `batch` is empty, ready for the next
    /// (which starts in a buffer as large as this one's).
    /// The peer receives the same messages, in the same order, as a [`send`](Self::send) of each
    /// (with `routing_id` as its first frame) would have given it, over tcp, ipc, inproc and
    /// CURVE alike; encoding them ahead of time skips every per-message cost of a send (see
    /// [`EncodedBatch`]).
    ///
    /// As a ROUTER's `send` does, a batch for an unknown peer, or for a peer whose queue is at
    /// its HWM, is dropped (and counts as sent) unless ROUTER_MANDATORY is set; with it, an
    /// unknown peer is [`Error::HostUnreachable`] and a full queue
    /// is waited for. The batch is queued whole once the queue is below its HWMs (it may take
    /// the queue past them by its own size, as one large message may; its bytes count against
    /// `sndhwm_bytes` as they are, with no charge per frame). Any other socket type:
    /// [`Error::NotSupported`]; a ROUTER with CONFLATE set:
    /// [`Error::InvalidArgument`] (a batch is many messages).
    ///
    /// **Cancel safety:** the batch is taken only when it is queued; dropping the future leaves
    /// it whole.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use zmtp::{EncodedBatch, Socket, SocketType};
    /// let router = Socket::new(SocketType::Router);
    /// router.set_router_mandatory(true);
    /// let mut batch = EncodedBatch::new();
    /// batch.push(&[b"hello"])?;
    /// let refused = router.send_encoded(b"nobody", &mut batch).await;
    /// assert!(matches!(refused, Err(zmtp::Error::HostUnreachable(_))));
    /// assert_eq!(batch.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn send_encoded(&self, routing_id: &[u8], batch: &mut EncodedBatch) -> Result<()> {
        // One budget unit per batch, as for `send_many`.
        tokio::task::coop::consume_budget().await;
        let core = &self.inner.core;
        if core.try_send_encoded(routing_id, batch)? {
            return Ok(());
        }
        core.space
            .wait_until(|| match core.try_send_encoded(routing_id, batch) {
                Ok(true) => Some(Ok(())),
                Ok(false) => None,
                Err(e) => Some(Err(e)),
            })
            .await
    }

    /// Waits for at least one message, then appends to `out` every message queued at that moment,
    /// up to `max`; returns how many. `out` is not cleared first: reuse one `Vec` and clear it
    /// between calls. Messages come in the order [`recv`](Self::recv) would return them
    /// (fair-queued across peers, message by message), with one lock of the socket's inbox for
    /// the lot. REQ and REP take one message per call (each receive moves their state on).
    /// `max == 0` returns `Ok(0)` at once.
    ///
    /// **Cancel safety:** messages are taken only when this returns; dropping the future loses
    /// nothing.
    pub async fn recv_many(&self, out: &mut Vec<Message>, max: usize) -> Result<usize> {
        if coop::due() {
            tokio::task::coop::consume_budget().await;
        }
        let core = &self.inner.core;
        let taken = core.try_recv_many(out, max)?;
        if taken > 0 || max == 0 {
            return Ok(taken);
        }
        let attempt = |out: &mut Vec<Message>| match core.try_recv_many(out, max) {
            Ok(0) => None,
            done => Some(done),
        };
        if let Some(budget) = self.spin_budget()
            && let Some(done) = super::busy_poll::spin(budget, || attempt(out)).await
        {
            return done;
        }
        core.inbox.readable().wait_until(|| attempt(out)).await
    }

    /// A `Sink` of messages that coalesces: `feed` (`start_send`) only queues a message in the
    /// sink; they are sent as one batch ([`send_many`](Self::send_many)) on `flush`, on `close`,
    /// or once [`SINK_BATCH`] are held. `SinkExt::send` flushes after each message, so it costs
    /// what [`Socket::send`] does; `feed` then `flush`, or `send_all`, is the batched form.
    ///
    /// **Cancel safety:** a message fed to the sink belongs to it: it is sent by a later flush,
    /// or dropped with the sink. Messages are not lost when a flush's future is dropped (they wait
    /// for the next flush).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> zmtp::Result<()> {
    /// use futures::SinkExt;
    /// use zmtp::{Message, Socket, SocketType};
    /// let pull = Socket::new(SocketType::Pull);
    /// let endpoint = pull.bind("tcp://127.0.0.1:0").await?;
    /// let push = Socket::new(SocketType::Push);
    /// push.connect(&endpoint).await?;
    ///
    /// let mut sink = push.sink();
    /// for i in 0..10 {
    ///     sink.feed(Message::from(format!("#{i}"))).await?; // queued in the sink
    /// }
    /// sink.flush().await?; // all ten go as one batch
    /// assert_eq!(pull.recv().await?[0], "#0");
    /// # Ok(()) }
    /// ```
    pub fn sink(&self) -> MessageSink {
        MessageSink { socket: self.clone(), held: Vec::new(), flushing: None }
    }
}

/// Sends from the front of `batch` what goes without waiting and removes it; whether all went.
fn send_what_fits(core: &super::core::Core, batch: &mut Vec<Message>) -> Result<bool> {
    let (consumed, result) = core.try_send_many(batch);
    batch.drain(..consumed);
    result.map(|()| batch.is_empty())
}

/// A flush that had to wait for room: it owns the held messages until it is done.
type Flushing = Pin<Box<dyn Future<Output = (Vec<Message>, Result<()>)> + Send>>;

/// The coalescing `Sink` of [`Socket::sink`].
pub struct MessageSink {
    socket: Socket,
    /// Fed and not yet sent.
    held: Vec<Message>,
    /// A flush waiting for room (rare: only when a peer's queue is at its HWM).
    flushing: Option<Flushing>,
}

impl std::fmt::Debug for MessageSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageSink")
            .field("held", &self.held.len())
            .field("flushing", &self.flushing.is_some())
            .finish()
    }
}

impl MessageSink {
    /// Sends what is held: at once when it all fits, else through a future that waits for room.
    fn poll_send_held(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        loop {
            if let Some(flushing) = self.flushing.as_mut() {
                let (held, result) = std::task::ready!(flushing.as_mut().poll(cx));
                self.flushing = None;
                self.held = held;
                return Poll::Ready(result);
            }
            if self.held.is_empty() {
                return Poll::Ready(Ok(()));
            }
            // A flush that never waits still takes part in tokio's budget, as `send` does.
            if coop::due() {
                std::task::ready!(tokio::task::coop::poll_proceed(cx)).made_progress();
            }
            // Fast path: no future, no allocation.
            if send_what_fits(&self.socket.inner.core, &mut self.held)? {
                return Poll::Ready(Ok(()));
            }
            let socket = self.socket.clone();
            let mut held = std::mem::take(&mut self.held);
            self.flushing = Some(Box::pin(async move {
                let result = socket.send_many(&mut held).await;
                (held, result)
            }));
        }
    }
}

impl Sink<Message> for MessageSink {
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if this.held.len() >= SINK_BATCH || this.flushing.is_some() {
            return this.poll_send_held(cx);
        }
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, msg: Message) -> Result<()> {
        self.get_mut().held.push(msg);
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_send_held(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.get_mut().poll_send_held(cx)
    }
}
