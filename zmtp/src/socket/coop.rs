//! Taking part in tokio's cooperative scheduling. A send that finds room, or a receive that finds
//! a message, completes without awaiting anything — so a loop over `send` on a PUB (which never
//! waits: it drops at the HWM) would never give the runtime back, and on a current-thread runtime
//! zmtp's own accept, connect and handshake tasks would never run.
//!
//! Spending a unit of the task's budget on every call cost 11% at 64 B. Instead every
//! [`EVERY`]th call on a thread spends one: a task that only ever completes at once then yields
//! after 128 × [`EVERY`] calls (tokio's budget is 128 units per poll), and the counter is a
//! thread-local, so the fast path takes no atomic. The budget is spent *before* the call does
//! anything, so a future dropped while it yields has sent or taken nothing (cancel safety).

use std::cell::Cell;

/// One budget unit per this many calls.
pub(crate) const EVERY: u32 = 16;

thread_local! {
    static CALLS: Cell<u32> = const { Cell::new(0) };
}

/// Whether this call should spend a unit of the task's cooperative budget (every [`EVERY`]th
/// call on this thread). The caller then awaits `tokio::task::coop::consume_budget()` before it
/// does anything, which yields to the runtime only if the task's budget is exhausted. (A check
/// rather than an async function: the send future stays as small as it was.)
#[inline]
pub(crate) fn due() -> bool {
    CALLS.with(|calls| {
        let n = calls.get().wrapping_add(1);
        calls.set(n);
        n % EVERY == 0
    })
}
