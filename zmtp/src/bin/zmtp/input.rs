//! Where messages to send come from: the MESSAGE arguments (once, or cycled with --repeat) or the
//! lines of stdin, read on a plain thread so that a blocked read never holds up the runtime.

use std::io::BufRead;
use std::time::Duration;

use tokio::sync::mpsc;
use zmtp::Message;

use crate::error::{CliError, failed, usage};
use crate::frames::{Framing, parse_message};

/// A sequence of messages to send.
pub enum Source {
    /// The MESSAGE arguments, parsed up front.
    Args { messages: Vec<Message>, next: usize, repeat: bool },
    /// Lines of stdin.
    Stdin { lines: mpsc::Receiver<std::io::Result<Vec<u8>>>, framing: Framing, line: usize },
}

/// Pacing between messages.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pace {
    /// Before the first message.
    pub delay: Option<Duration>,
    /// Between messages.
    pub interval: Option<Duration>,
}

impl Source {
    /// The MESSAGE arguments (all checked now, so a typo fails before anything is sent), or stdin.
    pub fn new(args: &[String], repeat: bool, framing: Framing) -> Result<Source, CliError> {
        if args.is_empty() {
            return Ok(Source::Stdin { lines: spawn_stdin_reader(), framing, line: 0 });
        }
        let messages = args
            .iter()
            .map(|a| parse_message(a.as_bytes(), &framing).map_err(|e| usage(format!("message {a:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Source::Args { messages, next: 0, repeat })
    }

    /// The next message, `None` when there are no more.
    pub async fn next(&mut self) -> Result<Option<Message>, CliError> {
        match self {
            Source::Args { messages, next, repeat } => {
                if *next >= messages.len() {
                    if !*repeat {
                        return Ok(None);
                    }
                    *next = 0;
                }
                *next += 1;
                Ok(Some(messages[*next - 1].clone()))
            }
            Source::Stdin { lines, framing, line } => match lines.recv().await {
                None => Ok(None),
                Some(Err(e)) => Err(failed(format!("cannot read stdin: {e}"))),
                Some(Ok(raw)) => {
                    *line += 1;
                    parse_message(&raw, framing).map(Some).map_err(|e| failed(format!("stdin line {line}: {e}")))
                }
            },
        }
    }

    /// True once a finite list of MESSAGE arguments has been used up.
    pub fn exhausted(&self) -> bool {
        matches!(self, Source::Args { messages, next, repeat: false } if *next >= messages.len())
    }

    /// How many messages a finite list holds (`None`: stdin or --repeat).
    pub fn total(&self) -> Option<usize> {
        match self {
            Source::Args { messages, repeat: false, .. } => Some(messages.len()),
            _ => None,
        }
    }
}

impl Pace {
    /// Waits before message number `index` (0-based).
    pub async fn before(&self, index: usize) {
        let wait = if index == 0 { self.delay } else { self.interval };
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            tokio::time::sleep(wait).await;
        }
    }
}

fn spawn_stdin_reader() -> mpsc::Receiver<std::io::Result<Vec<u8>>> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut line = Vec::new();
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) => return,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                    }
                    if tx.blocking_send(Ok(line)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    rx
}
