//! The `ttl` property of 12/CHP: a key's time to live in seconds, integer or decimal, `0` for none.
//! One codec for the client that writes it, the server that reads it and the snapshot that
//! forwards what is left of it.

use std::time::Duration;

/// The longest ttl accepted (10 years): beyond it a deadline could overflow the clock.
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Parses a `ttl` property: `Some(None)` for `0` (no ttl), `None` if it is not a number of
/// seconds in `0..=MAX_TTL`.
///
/// ```
/// use std::time::Duration;
/// use chp::ttl;
/// assert_eq!(ttl::parse("1.5"), Some(Some(Duration::from_millis(1500))));
/// assert_eq!(ttl::parse("0"), Some(None));
/// assert_eq!(ttl::parse("-1"), None);
/// assert_eq!(ttl::parse("soon"), None);
/// ```
pub fn parse(text: &str) -> Option<Option<Duration>> {
    let secs: f64 = text.trim().parse().ok()?;
    if !secs.is_finite() || secs < 0.0 || secs > MAX_TTL.as_secs_f64() {
        return None;
    }
    Some((secs > 0.0).then(|| Duration::from_secs_f64(secs)))
}

/// A ttl as the property: whole seconds as an integer, else seconds with millisecond precision,
/// rounded up (`1.5`, `0.001`).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(chp::ttl::format(Duration::from_millis(1500)), "1.5");
/// ```
pub fn format(ttl: Duration) -> String {
    if ttl.subsec_nanos() == 0 {
        ttl.as_secs().to_string()
    } else {
        let ms = ttl.as_nanos().div_ceil(1_000_000);
        let s = format!("{}.{:03}", ms / 1000, ms % 1000);
        s.trim_end_matches('0').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_the_reference_reads_it_and_parses_back() {
        assert_eq!(format(Duration::from_secs(30)), "30");
        assert_eq!(format(Duration::from_millis(1500)), "1.5");
        assert_eq!(format(Duration::from_millis(250)), "0.25");
        assert_eq!(format(Duration::from_micros(1)), "0.001");
        for ttl in [Duration::from_secs(30), Duration::from_millis(1500), Duration::from_millis(250)] {
            assert_eq!(parse(&format(ttl)), Some(Some(ttl)));
        }
        assert_eq!(parse(&format(MAX_TTL)), Some(Some(MAX_TTL)));
        assert_eq!(parse("315360001"), None);
    }
}
