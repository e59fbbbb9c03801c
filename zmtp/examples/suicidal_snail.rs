//! Suicidal Snail (ZeroMQ Guide, chapter 5): a subscriber that notices it is too slow and kills itself.
//!
//! A PUB socket cannot tell a slow subscriber from a fast one, and queuing, dropping or disconnecting
//! all hide the problem. Instead the publisher stamps every message with the time it was sent, and the
//! subscriber compares that stamp with its own clock: once a message is older than the allowed lag, the
//! subscriber cannot keep up, says so loudly and quits — so someone fixes it rather than living with
//! stale data.
//!
//! The publisher sends `[sequence, send time in µs since the Unix epoch]` every `--interval-ms`. The
//! subscriber "works" `--work-ms` on each message. With the defaults it is three times too slow, so its
//! backlog grows until a message is more than `--max-lag-ms` old and it croaks.
//!
//! Run: `cargo run --example suicidal_snail` — the slow subscriber croaks (exit status 3);
//!      `cargo run --example suicidal_snail -- --work-ms 0` — a fast one keeps up (exit status 0).
//!
//! The last stdout line is the verdict, for scripts:
//! `SNAIL too-slow received=<n> seq=<s> lag_ms=<l.l> limit_ms=<m>` or
//! `SNAIL kept-up received=<n> gaps=<g> max_lag_ms=<l> limit_ms=<m>`.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;
use tokio::time::{MissedTickBehavior, timeout};
use zmtp::{Message, Socket, SocketType};

/// Exit status of a subscriber that croaked (distinct from 1 = error and 101 = panic).
const EXIT_TOO_SLOW: u8 = 3;
/// A subscriber that hears nothing for this long gives up on the publisher.
const QUIET_LIMIT: Duration = Duration::from_secs(5);
/// The whole run is bounded, whatever the arguments.
const RUN_LIMIT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: suicidal_snail [--interval-ms N] [--work-ms N] [--max-lag-ms N] [--count N]
  --interval-ms N  the publisher sends one message every N ms (default 1)
  --work-ms N      the subscriber spends N ms on each message (default 3: too slow)
  --max-lag-ms N   the subscriber croaks when a message is older than N ms (default 300)
  --count N        the publisher sends N messages in all (default 1000)";

#[derive(Clone, Copy, Debug)]
struct Config {
    interval: Duration,
    work: Duration,
    max_lag: Duration,
    count: u64,
}

fn parse_args() -> Result<Config, String> {
    let mut cfg = Config {
        interval: Duration::from_millis(1),
        work: Duration::from_millis(3),
        max_lag: Duration::from_millis(300),
        count: 1000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value: u64 =
            args.next().ok_or_else(|| format!("{flag} needs a value"))?.parse().map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--interval-ms" => cfg.interval = Duration::from_millis(value.max(1)),
            "--work-ms" => cfg.work = Duration::from_millis(value),
            "--max-lag-ms" => cfg.max_lag = Duration::from_millis(value),
            "--count" => cfg.count = value.max(1),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(cfg)
}

/// Wall-clock time in µs: publisher and subscriber would normally be different processes (or hosts
/// with synchronised clocks), so the stamp is absolute time, not an `Instant`.
fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_micros() as u64
}

fn number(frame: &[u8]) -> u64 {
    std::str::from_utf8(frame).ok().and_then(|s| s.parse().ok()).expect("publisher sends decimal numbers")
}

/// How the subscriber's run ended.
#[derive(Debug)]
enum Verdict {
    /// A message arrived more than the allowed lag after it was sent: the subscriber gave up.
    TooSlow { received: u64, seq: u64, lag: Duration },
    /// Every message up to the last arrived in time.
    KeptUp { received: u64, gaps: u64, max_lag: Duration },
    /// The publisher went quiet before its last message.
    PublisherSilent { received: u64 },
}

/// The publisher: an XPUB socket (a PUB that also hears subscriptions), so it can wait for its first
/// subscriber before starting the clock instead of losing the first messages to nobody. Then one
/// timestamped message per tick until `count` are sent or `stop` fires.
async fn publisher(xpub: Socket, cfg: Config, mut stop: oneshot::Receiver<()>) -> zmtp::Result<u64> {
    loop {
        let event = xpub.recv().await?;
        if event[0].first() == Some(&1) {
            break; // "\x01<prefix>": somebody subscribed
        }
    }
    println!("publisher: subscriber arrived, sending one timestamped message every {:?}", cfg.interval);
    let mut ticker = tokio::time::interval(cfg.interval);
    // A late tick is sent at once (catching up), as a market feed would keep its rate.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
    for seq in 0..cfg.count {
        tokio::select! {
            _ = &mut stop => return Ok(seq),
            _ = ticker.tick() => {}
        }
        xpub.send(Message::from(vec![seq.to_string(), now_us().to_string()])).await?;
    }
    let _ = stop.await; // keep the socket open until the subscriber is done
    Ok(cfg.count)
}

/// The subscriber: checks every message's age, then "works" on it. The suicide logic is the `if lag >
/// cfg.max_lag` test; everything else is bookkeeping for the report.
async fn subscriber(endpoint: String, cfg: Config) -> zmtp::Result<Verdict> {
    let sub = Socket::new(SocketType::Sub);
    sub.subscribe("")?;
    sub.connect(&endpoint).await?;
    let (mut received, mut gaps, mut expected, mut max_lag) = (0u64, 0u64, 0u64, Duration::ZERO);
    loop {
        let Ok(msg) = timeout(QUIET_LIMIT, sub.recv()).await else {
            return Ok(Verdict::PublisherSilent { received });
        };
        let msg = msg?;
        let (seq, sent_us) = (number(&msg[0]), number(&msg[1]));
        let lag = Duration::from_micros(now_us().saturating_sub(sent_us));
        received += 1;
        // Sequence numbers catch messages the publisher dropped at its high-water mark.
        gaps += seq - expected.min(seq);
        expected = seq + 1;
        max_lag = max_lag.max(lag);
        if lag > cfg.max_lag {
            // Croak: in a real system this would also page an operator.
            sub.close().await;
            return Ok(Verdict::TooSlow { received, seq, lag });
        }
        if received % 50 == 0 {
            println!("subscriber: message {seq} is {} ms old", lag.as_millis());
        }
        if seq + 1 == cfg.count {
            return Ok(Verdict::KeptUp { received, gaps, max_lag });
        }
        if !cfg.work.is_zero() {
            tokio::time::sleep(cfg.work).await; // simulated processing
        }
    }
}

async fn run(cfg: Config) -> zmtp::Result<ExitCode> {
    println!(
        "snail: publisher sends {} messages, one every {:?}; subscriber works {:?} on each and tolerates {:?} of lag",
        cfg.count, cfg.interval, cfg.work, cfg.max_lag
    );
    let xpub = Socket::new(SocketType::XPub);
    let endpoint = xpub.bind("tcp://127.0.0.1:*").await?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let publishing = tokio::spawn(publisher(xpub, cfg, stop_rx));
    let verdict = tokio::spawn(subscriber(endpoint, cfg)).await.expect("subscriber task")?;
    let _ = stop_tx.send(()); // like the Guide's pipe: tell the publisher to halt
    let sent = publishing.await.expect("publisher task")?;
    println!("publisher: stopped after {sent} messages");
    let limit_ms = cfg.max_lag.as_millis();
    Ok(match verdict {
        Verdict::TooSlow { received, seq, lag } => {
            let lag_ms = lag.as_secs_f64() * 1000.0;
            eprintln!(
                "E: subscriber cannot keep up, aborting: message {seq} arrived {lag_ms:.1} ms late (limit {limit_ms} ms)"
            );
            println!("SNAIL too-slow received={received} seq={seq} lag_ms={lag_ms:.1} limit_ms={limit_ms}");
            ExitCode::from(EXIT_TOO_SLOW)
        }
        Verdict::KeptUp { received, gaps, max_lag } => {
            println!(
                "SNAIL kept-up received={received} gaps={gaps} max_lag_ms={} limit_ms={limit_ms}",
                max_lag.as_millis()
            );
            ExitCode::SUCCESS
        }
        Verdict::PublisherSilent { received } => {
            eprintln!("E: publisher went quiet after {received} messages");
            ExitCode::FAILURE
        }
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cfg = match parse_args() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    match timeout(RUN_LIMIT, run(cfg)).await {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            eprintln!("E: {e}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("E: no verdict within {RUN_LIMIT:?}");
            ExitCode::FAILURE
        }
    }
}
