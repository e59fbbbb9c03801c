//! Rate-limited logging for what peers cause.
//!
//! A refused connection or a malformed message is worth a log line, but ten thousand junk
//! connections must not write ten thousand lines (2 MB of log, and the time to write it). Each
//! *cause* — a static string naming the kind of event — may log [`BURST`] lines per [`PERIOD`];
//! beyond that events are only counted, and the next line allowed for that cause says how many
//! were suppressed.
//!
//! What one peer keeps repeating — a client with the wrong CURVE key reconnects every 100 ms and
//! fails the same way each time — is one situation, not ten a second: [`allow_from`] logs a
//! cause at most once per [`PERIOD`] *per peer* (and still at most [`BURST`] lines per period over
//! all peers), so each misconfigured peer is named once and a crowd of them cannot flood either.
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

/// Peers remembered per period by [`Throttle::allow_from_at`]: beyond this many, further peers are
/// limited by their cause's window alone (the memory is bounded whatever peers do).
pub const MAX_PEERS: usize = 1024;

/// Per-cause windows (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct Throttle {
    causes: Mutex<HashMap<&'static str, Window>>,
    /// When each (cause, peer) was last logged, within the current period.
    peers: Mutex<Peers>,
}

/// The peers [`Throttle::allow_from_at`] remembers: per cause, when each was last named.
#[derive(Debug, Default)]
struct Peers {
    /// Keyed by cause, then by peer (looked up by `&str`: a repeat costs no allocation).
    named: HashMap<&'static str, HashMap<Box<str>, Instant>>,
    len: usize,
    /// When entries older than a period were last dropped: a full map is swept at most once per
    /// period, so a crowd of new peers cannot make every event walk the whole map.
    swept: Option<Instant>,
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

impl Throttle {
    /// Like [`allow_at`](Self::allow_at), for an event a given `peer` (its address, without the
    /// port: a reconnecting peer changes port) caused: at most one line per peer per [`PERIOD`].
    pub fn allow_from_at(&self, cause: &'static str, peer: &str, now: Instant) -> Option<u64> {
        {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            let Peers { named, len, swept } = &mut *peers;
            let recent = named.get(cause).and_then(|of_cause| of_cause.get(peer));
            if recent.is_some_and(|&logged| now.saturating_duration_since(logged) < PERIOD) {
                drop(peers);
                self.count_suppressed(cause, now);
                return None;
            }
            if *len >= MAX_PEERS && swept.is_none_or(|at| now.saturating_duration_since(at) >= PERIOD) {
                for of_cause in named.values_mut() {
                    of_cause.retain(|_, logged| now.saturating_duration_since(*logged) < PERIOD);
                }
                *len = named.values().map(HashMap::len).sum();
                *swept = Some(now);
            }
            let of_cause = named.entry(cause).or_default();
            if let Some(logged) = of_cause.get_mut(peer) {
                *logged = now;
            } else if *len < MAX_PEERS {
                of_cause.insert(peer.into(), now);
                *len += 1;
            }
        }
        self.allow_at(cause, now)
    }

    fn count_suppressed(&self, cause: &'static str, now: Instant) {
        let mut causes = self.causes.lock().unwrap_or_else(|e| e.into_inner());
        causes.entry(cause).or_insert(Window { started: now, logged: 0, suppressed: 0 }).suppressed += 1;
    }
}

fn global() -> &'static Throttle {
    static GLOBAL: OnceLock<Throttle> = OnceLock::new();
    GLOBAL.get_or_init(Throttle::default)
}

/// [`Throttle::allow_at`] now, on the process-wide throttle.
pub fn allow(cause: &'static str) -> Option<u64> {
    global().allow_at(cause, Instant::now())
}

/// [`Throttle::allow_from_at`] now, on the process-wide throttle.
pub fn allow_from(cause: &'static str, peer: &str) -> Option<u64> {
    global().allow_from_at(cause, peer, Instant::now())
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

    #[test]
    fn a_repeating_peer_is_named_once_per_period_and_counted_in_between() {
        let t = Throttle::default();
        let t0 = Instant::now();
        assert_eq!(t.allow_from_at("handshake", "10.0.0.1", t0), Some(0));
        for i in 1..=50 {
            assert_eq!(t.allow_from_at("handshake", "10.0.0.1", t0 + Duration::from_millis(100 * i)), None);
        }
        // Another peer with the same problem is named at once, and says what was held back.
        assert_eq!(t.allow_from_at("handshake", "10.0.0.2", t0 + Duration::from_secs(6)), Some(50));
        assert_eq!(t.allow_from_at("handshake", "10.0.0.1", t0 + PERIOD), Some(0));
    }

    #[test]
    fn many_peers_are_still_bounded_by_the_cause_and_in_memory() {
        let t = Throttle::default();
        let t0 = Instant::now();
        let logged = (0..5000).filter(|i| t.allow_from_at("junk", &format!("peer-{i}"), t0).is_some()).count();
        assert_eq!(logged, BURST as usize);
        assert!(t.peers.lock().unwrap().len <= MAX_PEERS);
        // A period later the old entries make room again.
        assert!(t.allow_from_at("junk", "peer-new", t0 + PERIOD).is_some());
        let peers = t.peers.lock().unwrap();
        assert_eq!(peers.len, 1);
        assert_eq!(peers.named.values().map(HashMap::len).sum::<usize>(), peers.len);
    }
}
