//! RECONNECT_IVL and RECONNECT_IVL_MAX, as libzmq applies them: the first wait is the interval;
//! with a maximum set, each failed attempt doubles the wait up to it; a connection that worked
//! starts over. No interval: no reconnect.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Host;
use crate::error::ConnectionError;
use crate::monitor::MonitorEvent;

#[derive(Debug, Default)]
pub(super) struct Backoff {
    last: Option<Duration>,
}

impl Backoff {
    /// The wait before the next attempt, or `None` when reconnecting is off.
    pub fn next(&mut self, ivl: Option<Duration>, max: Duration) -> Option<Duration> {
        let ivl = ivl?;
        let wait = match self.last {
            Some(prev) if !max.is_zero() => (prev * 2).min(max),
            _ => ivl,
        };
        self.last = Some(wait);
        Some(wait)
    }

    /// The wait before the next attempt at `endpoint`, as the socket's options make it, announced
    /// to the monitor with why the last attempt did not last; `None` when reconnecting is off.
    pub fn retry<H: Host>(&mut self, host: &H, endpoint: &str, reason: Arc<ConnectionError>) -> Option<Duration> {
        let options = host.options_snapshot();
        let wait = self.next(options.reconnect_ivl, options.reconnect_ivl_max)?;
        host.monitors().emit(|| MonitorEvent::ConnectRetried { endpoint: endpoint.to_owned(), retry_in: wait, reason });
        Some(wait)
    }

    /// A connection was made: the next wait is the interval again.
    pub fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_up_to_the_maximum_and_starts_over_after_a_connection() {
        let mut b = Backoff::default();
        let waits: Vec<_> = (0..5).map(|_| b.next(Some(100 * MS), 500 * MS).unwrap()).collect();
        assert_eq!(waits, [100 * MS, 200 * MS, 400 * MS, 500 * MS, 500 * MS]);
        b.reset();
        assert_eq!(b.next(Some(100 * MS), 500 * MS), Some(100 * MS));
    }

    #[test]
    fn without_a_maximum_the_interval_stays_and_without_an_interval_nothing_retries() {
        let mut b = Backoff::default();
        assert_eq!(
            [b.next(Some(100 * MS), Duration::ZERO), b.next(Some(100 * MS), Duration::ZERO)],
            [Some(100 * MS); 2]
        );
        assert_eq!(b.next(None, 500 * MS), None);
    }
}
