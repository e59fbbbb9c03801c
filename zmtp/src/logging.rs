//! Logging set-up for command-line tools (feature `cli`): one place for what zmtp's, chp's, ppp's
//! and bstar's binaries each did by hand.
//!
//! `RUST_LOG` picks what is shown, as a list of `level` and `target=level` directives
//! (`RUST_LOG=debug`, `RUST_LOG=info,zmtp=error`); span and field filters are not supported — they
//! need a regular-expression engine that would be a fifth of a static binary's size.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Sends tracing to stderr as plain text (no colour: its code was 8 KiB of a size-limited static
/// binary), filtered by `RUST_LOG`, else by `default`
/// (same syntax). A `RUST_LOG` that does not parse is reported on stderr and the default used.
/// `with_target`: prefix each line with the module that wrote it.
pub fn init(default: &str, with_target: bool) {
    let default: Targets = default.parse().unwrap_or_default();
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) => spec.parse().unwrap_or_else(|e| {
            eprintln!("RUST_LOG={spec:?} ignored: {e}");
            default
        }),
        Err(_) => default,
    };
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false).with_target(with_target))
        .with(filter)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directives_the_tools_use_parse() {
        for spec in ["off", "warn", "info", "warn,zmtp=error", "ppp=debug,info", "debug"] {
            assert!(spec.parse::<Targets>().is_ok(), "{spec}");
        }
    }
}
