//! Handles for components that run in the background: a spawned task that stops when told to or
//! when its handle is dropped, and the stream of events it reports.
//!
//! The protocol crates built on zmtp (chp's servers, ppp's queue and worker) each run as one
//! tokio task beside the application. They share this one shape, so every component stops,
//! reports and is awaited the same way:
//!
//! - [`Background::close`] asks the task to stop and waits for it to finish;
//! - dropping the [`Background`] asks it to stop without waiting (the task notices at its next
//!   `select!`, exactly as after `close`);
//! - [`Events::next`] reads what the task reports, skipping what it missed when it fell behind
//!   rather than failing.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use zmtp::task::{Background, Events};
//!
//! let (tx, mut events) = Events::channel(16);
//! let ticker = Background::spawn(move |mut stop| async move {
//!     let mut ticks = 0u32;
//!     loop {
//!         tokio::select! {
//!             _ = &mut stop => return ticks,
//!             _ = tokio::task::yield_now() => {
//!                 ticks += 1;
//!                 let _ = tx.send(ticks);
//!             }
//!         }
//!     }
//! });
//! assert_eq!(events.next().await, Some(1));
//! let ticks = ticker.close().await.expect("the task did not panic");
//! assert!(ticks >= 1);
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

/// A spawned task with a stop signal. Dropping it asks the task to stop (and does not wait).
#[derive(Debug)]
pub struct Background<T> {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Background<T> {
    /// Spawns `run(stop)` on the current tokio runtime. The task should finish soon after `stop`
    /// resolves (it resolves once, when [`close`](Self::close) is called or the handle is dropped).
    pub fn spawn<F>(run: impl FnOnce(StopSignal) -> F) -> Background<T>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(StopSignal { stopped: Some(stopped), fired: false }));
        Background { stop: Some(stop), task: Some(task) }
    }
}

impl<T> Background<T> {
    /// Asks the task to stop, and waits until it has: its result, or `None` if it panicked.
    pub async fn close(mut self) -> Option<T> {
        self.request_stop();
        self.join().await
    }

    /// Waits until the task finishes on its own (or is stopped by another means), without asking
    /// it to stop: its result, or `None` if it panicked.
    pub async fn wait(mut self) -> Option<T> {
        self.join().await
    }

    /// Asks the task to stop without waiting for it.
    pub fn request_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// True once the task has finished.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }

    async fn join(&mut self) -> Option<T> {
        let task = self.task.take()?;
        task.await.ok()
    }
}

impl<T> Drop for Background<T> {
    fn drop(&mut self) {
        self.request_stop();
    }
}

/// Resolves when the task's [`Background`] asks it to stop or is dropped. It stays resolved, so it
/// can be polled by `&mut` in every `select!` of a loop, including after it fired.
#[derive(Debug)]
pub struct StopSignal {
    stopped: Option<oneshot::Receiver<()>>,
    /// A completed oneshot receiver panics when polled again, so the signal remembers it fired.
    fired: bool,
}

impl StopSignal {
    /// A signal that never fires (for running a component's loop outside a [`Background`]).
    pub fn never() -> StopSignal {
        StopSignal { stopped: None, fired: false }
    }

    /// True when a stop has been asked for, without waiting.
    pub fn is_stopped(&mut self) -> bool {
        if !self.fired {
            self.fired = self
                .stopped
                .as_mut()
                .is_some_and(|rx| !matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
        }
        self.fired
    }
}

impl Future for StopSignal {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired {
            return Poll::Ready(());
        }
        let Some(rx) = &mut self.stopped else { return Poll::Pending };
        // A sent stop and a dropped handle both mean stop.
        let fired = Pin::new(rx).poll(cx).is_ready();
        self.fired = fired;
        if fired { Poll::Ready(()) } else { Poll::Pending }
    }
}

/// The receiving end of a component's events. It reads every event sent after it was created;
/// one that falls more than the channel's capacity behind skips the oldest (it does not fail).
#[derive(Debug)]
pub struct Events<E> {
    rx: broadcast::Receiver<E>,
}

impl<E: Clone> Events<E> {
    /// A sender for the task and the first receiver, keeping the last `capacity` events for
    /// receivers that fall behind.
    pub fn channel(capacity: usize) -> (broadcast::Sender<E>, Events<E>) {
        let (tx, rx) = broadcast::channel(capacity);
        (tx, Events { rx })
    }

    /// A receiver of the events sent from now on.
    pub fn subscribe(tx: &broadcast::Sender<E>) -> Events<E> {
        Events { rx: tx.subscribe() }
    }

    /// The next event; `None` once the sender is gone and every event was read. Cancel-safe: an
    /// event is taken only when this returns it.
    pub async fn next(&mut self) -> Option<E> {
        loop {
            match self.rx.recv().await {
                Ok(event) => return Some(event),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next event if one is waiting now.
    pub fn try_next(&mut self) -> Option<E> {
        loop {
            match self.rx.try_recv() {
                Ok(event) => return Some(event),
                Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                Err(_) => return None,
            }
        }
    }
}

impl<E: Clone> From<broadcast::Receiver<E>> for Events<E> {
    fn from(rx: broadcast::Receiver<E>) -> Events<E> {
        Events { rx }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs until stopped.
    fn looping() -> Background<&'static str> {
        Background::spawn(|mut stop| async move {
            loop {
                tokio::select! {
                    _ = &mut stop => return "stopped",
                    _ = tokio::time::sleep(std::time::Duration::from_secs(3600)) => {}
                }
            }
        })
    }

    #[tokio::test]
    async fn close_stops_the_task_and_returns_its_result() {
        let task = looping();
        assert!(!task.is_finished());
        assert_eq!(task.close().await, Some("stopped"));
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_the_task() {
        let (done_tx, done_rx) = oneshot::channel();
        let task = Background::spawn(|stop| async move {
            stop.await;
            let _ = done_tx.send(());
        });
        drop(task);
        done_rx.await.expect("the task saw the stop");
    }

    #[tokio::test]
    async fn wait_returns_when_the_task_ends_by_itself() {
        let task = Background::spawn(|_stop| async { 7 });
        assert_eq!(task.wait().await, Some(7));
    }

    #[tokio::test]
    async fn a_fired_signal_stays_ready_and_reports_stopped() {
        let (tx, rx) = oneshot::channel();
        let mut stop = StopSignal { stopped: Some(rx), fired: false };
        assert!(!stop.is_stopped());
        tx.send(()).unwrap();
        (&mut stop).await;
        (&mut stop).await;
        assert!(stop.is_stopped());
        assert!(!StopSignal::never().is_stopped());
    }

    #[tokio::test]
    async fn a_panicking_task_closes_to_none() {
        let task: Background<()> = Background::spawn(|_stop| async { panic!("on purpose") });
        assert_eq!(task.close().await, None);
    }

    #[tokio::test]
    async fn a_lagging_receiver_skips_to_what_is_kept() {
        let (tx, mut events) = Events::channel(2);
        for n in 0..5 {
            tx.send(n).unwrap();
        }
        assert_eq!(events.next().await, Some(3));
        assert_eq!(events.try_next(), Some(4));
        assert_eq!(events.try_next(), None);
        drop(tx);
        assert_eq!(events.next().await, None);
    }
}
