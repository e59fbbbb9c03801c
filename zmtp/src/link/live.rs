//! A socket's running connection tasks, counted so that closing can wait (up to LINGER) for them
//! to flush. A task holds a [`LiveTask`] while it runs; dropping the last wakes the waiter.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub(crate) struct LiveTasks {
    count: AtomicUsize,
    done: Notify,
}

impl LiveTasks {
    /// Registers a running task; the guard unregisters it. Taken before the task is spawned, so
    /// that a `close` right after `connect` already waits for it.
    pub fn started(self: &Arc<Self>) -> LiveTask {
        self.count.fetch_add(1, Ordering::SeqCst);
        LiveTask(self.clone())
    }

    /// Resolves once no task is running.
    pub async fn all_done(&self) {
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// A running connection (or connect) task (see [`LiveTasks::started`]).
#[derive(Debug)]
pub(crate) struct LiveTask(Arc<LiveTasks>);

impl Drop for LiveTask {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.done.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_the_last_task() {
        let live = Arc::new(LiveTasks::default());
        live.all_done().await; // none: at once
        let (a, b) = (live.started(), live.started());
        let waiter = tokio::spawn({
            let live = live.clone();
            async move { live.all_done().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one task still runs");
        drop(b);
        waiter.await.unwrap();
    }
}
