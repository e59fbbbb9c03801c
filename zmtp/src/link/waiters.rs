//! A wake-up signal shared by a socket and its connections ("a message is readable", "a queue has
//! room"), cheap when nobody waits.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// A wake-up signal that costs one atomic load when nobody waits.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    notify: Notify,
    waiting: AtomicUsize,
}

struct WaitingGuard<'a>(&'a AtomicUsize);
impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Waiters {
    pub fn wake(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// Runs `check` until it yields a value, sleeping between tries until `wake` is called.
    /// Cancel-safe as long as `check` is all-or-nothing.
    pub async fn wait_until<T>(&self, mut check: impl FnMut() -> Option<T>) -> T {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let _guard = WaitingGuard(&self.waiting);
            if let Some(value) = check() {
                return value;
            }
            notified.await;
            // Woken: most likely for what we wait for. Checked before registering again, which
            // would take the notifier's lock for nothing.
            if let Some(value) = check() {
                return value;
            }
        }
    }
}
