//! Busy polling (in the spirit of libzmq's `ZMQ_BUSY_POLL`): a receive that finds nothing spins
//! for a bounded time before it parks. Parking costs a wake-up through the kernel (a futex or an
//! `epoll_wait` that sleeps); spinning trades a core's time for not paying it when the answer comes
//! soon, as it does in a request-reply loop.
//!
//! The spin is `yield_now` in a loop: each yield lets the runtime poll its I/O driver without
//! sleeping (tokio parks with a zero timeout while a yielded task waits), so the connection's
//! reader gets the bytes as soon as they arrive, and other tasks still run. The budget is measured
//! with `std::time::Instant`, not tokio's clock: under paused time tokio's clock would not move
//! and the spin would never end.

use std::time::{Duration, Instant};

/// Spins up to `budget`, trying `attempt` after each yield; its first answer, or `None` once the
/// budget is spent. Cancel-safe as long as `attempt` is all-or-nothing.
pub(crate) async fn spin<T>(budget: Duration, mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + budget;
    loop {
        tokio::task::yield_now().await;
        if let Some(value) = attempt() {
            return Some(value);
        }
        if Instant::now() >= until {
            return None;
        }
    }
}
