//! Rate-limited logging for what peers cause.
//!
//! A refused connection or a malformed message is worth a log line, but ten thousand junk
//! connections must not write ten thousand lines (2 MB of log, and the time to write it). Each
//! *cause* — a static string naming the kind of event — may log [`BURST`] lines per [`PERIOD`];
//! beyond that events are only counted, and the next line allowed for that cause says how many
//! were suppressed.
//!
//! ```
//! if let Some(suppressed) = zmtp::throttle::allow("bad KVSET") {
//!     // log it, with `suppressed` similar events not logged since the last line
//!     let _ = suppressed;
//! }
//! ```

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Lines logged per cause per period.
pub const BURST: u32 = 10;
/// The period over which [`BURST`] lines are allowed.
pub const PERIOD: Duration = Duration::from_secs(10);

/// Per-cause windows (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct Throttle {
    causes: Mutex<HashMap<&'static str, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

impl Throttle {
    /// Whether an event of `cause` at `now` may be logged: `Some(n)` with `n` events of that cause
    /// suppressed since the last logged one, or `None` (counted as suppressed).
    pub fn allow_at(&self, cause: &'static str, now: Instant) -> Option<u64> {
        let mut causes = self.causes.lock().unwrap_or_else(|e| e.into_inner());
        let window = causes.entry(cause).or_insert(Window { started: now, logged: 0, suppressed: 0 });
        if now.saturating_duration_since(window.started) >= PERIOD {
            window.started = now;
            window.logged = 0;
        }
        if window.logged < BURST {
            window.logged += 1;
            Some(std::mem::take(&mut window.suppressed))
        } else {
            window.suppressed += 1;
            None
        }
    }
}

/// [`Throttle::allow_at`] now, on the process-wide throttle.
pub fn allow(cause: &'static str) -> Option<u64> {
    static GLOBAL: OnceLock<Throttle> = OnceLock::new();
    GLOBAL.get_or_init(Throttle::default).allow_at(cause, Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_per_period_per_cause_then_a_count_of_what_was_suppressed() {
        let t = Throttle::default();
        let t0 = Instant::now();
        for _ in 0..BURST {
            assert_eq!(t.allow_at("junk", t0), Some(0));
        }
        for _ in 0..5000 {
            assert_eq!(t.allow_at("junk", t0 + Duration::from_secs(1)), None);
        }
        // Another cause has its own window.
        assert_eq!(t.allow_at("other", t0), Some(0));
        // The next period: logged again, saying how many were not.
        assert_eq!(t.allow_at("junk", t0 + PERIOD), Some(5000));
        assert_eq!(t.allow_at("junk", t0 + PERIOD), Some(0));
    }
}
