//! The outbound queue between a socket and one connection.
//!
//! The socket pushes whole messages; the connection's writer swaps the whole queue out under one lock
//! and encodes it in one go, so a burst of small messages costs one lock and one syscall, not one each.
//! HWM counts messages only; commands (subscriptions, PONGs) ride along uncounted.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::message::Message;

/// Something for the connection to write.
#[derive(Debug)]
pub(crate) enum Outbound {
    Message(Message),
    /// A subscription change; the writer picks the encoding from the peer's ZMTP minor version.
    Subscribe(Bytes, bool),
    /// A PONG echoing this context.
    Pong(Bytes),
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Outbound>,
    messages: usize,
    /// The writer is parked waiting for work.
    writer_waiting: bool,
    /// The socket is closing: flush what is queued, then stop.
    closing: bool,
}

/// A bounded outbound queue.
#[derive(Debug)]
pub(crate) struct OutPipe {
    state: Mutex<State>,
    hwm: usize,
    writer_wake: Notify,
    /// CONFLATE: a new message replaces the queued one.
    conflate: bool,
    /// The socket's "some pipe has room again" signal.
    space: Arc<super::core::Waiters>,
}

impl OutPipe {
    pub fn new(hwm: usize, conflate: bool, space: Arc<super::core::Waiters>) -> Self {
        OutPipe { state: Mutex::default(), hwm, writer_wake: Notify::new(), conflate, space }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn full(&self, s: &State) -> bool {
        self.hwm != 0 && s.messages >= self.hwm
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
        let mut s = self.lock();
        if self.conflate && s.messages > 0 {
            s.queue.retain(|item| !matches!(item, Outbound::Message(_)));
            s.messages = 0;
        }
        if self.full(&s) {
            return Err(msg);
        }
        s.messages += 1;
        s.queue.push_back(Outbound::Message(msg));
        self.wake_writer(s);
        Ok(())
    }

    /// Queues a command; never refused.
    pub fn push_command(&self, item: Outbound) {
        let mut s = self.lock();
        s.queue.push_back(item);
        self.wake_writer(s);
    }

    fn wake_writer(&self, mut s: std::sync::MutexGuard<'_, State>) {
        if s.writer_waiting {
            s.writer_waiting = false;
            drop(s);
            self.writer_wake.notify_one();
        }
    }

    /// Moves everything queued into `out` (which must be empty). Returns `false` when nothing was
    /// queued and the socket is closing, i.e. the writer is done.
    pub fn drain(&self, out: &mut VecDeque<Outbound>) -> bool {
        let mut s = self.lock();
        let was_full = self.full(&s);
        std::mem::swap(&mut s.queue, out);
        s.messages = 0;
        let more = !out.is_empty() || !s.closing;
        drop(s);
        if was_full {
            self.space.wake();
        }
        more
    }

    /// Waits until there is something to drain (or the socket is closing).
    pub async fn wait_for_work(&self) {
        loop {
            let notified = self.writer_wake.notified();
            {
                let mut s = self.lock();
                if !s.queue.is_empty() || s.closing {
                    return;
                }
                s.writer_waiting = true;
            }
            notified.await;
        }
    }

    /// Drops queued commands (stale after a reconnect); with `messages_too` (IMMEDIATE) drops everything.
    pub fn purge(&self, messages_too: bool) {
        let mut s = self.lock();
        if messages_too {
            s.queue.clear();
            s.messages = 0;
        } else {
            s.queue.retain(|item| matches!(item, Outbound::Message(_)));
        }
    }

    /// Tells the writer to flush what is queued and stop.
    pub fn close(&self) {
        let mut s = self.lock();
        s.closing = true;
        s.writer_waiting = false;
        drop(s);
        self.writer_wake.notify_one();
    }
}
