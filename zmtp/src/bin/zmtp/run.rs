//! Driving a socket by its role: send the messages, print what arrives, REQ/REP lock-step, both at
//! once for the others; `--count` and `--timeout` decide when it is over and whether that is success.

use std::cell::Cell;
use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use zmtp::{Message, Monitor, Socket, SocketType};

use crate::cli::{Role, SocketArgs, role};
use crate::error::{CliError, failed, usage};
use crate::frames::{Format, Framing, format_message};
use crate::input::{Pace, Source};
use crate::setup;

/// Prints received messages, one line each.
struct Printer {
    format: Format,
    delimiter: String,
    xpub: bool,
    /// The draft types: single frames, so the delimiter is not special in them.
    single: bool,
}

impl Printer {
    /// False once stdout is gone (e.g. `| head -1`): time to stop. A DISH's message is printed as
    /// GROUP|BODY.
    fn print(&self, msg: &Message) -> bool {
        let grouped;
        let msg = match msg.group() {
            Some(group) => {
                grouped = Message::from_frames(std::iter::once(group.clone()).chain(msg.iter().cloned()));
                &grouped
            }
            None => msg,
        };
        let delimiter = if self.single && msg.len() == 1 { "" } else { &self.delimiter };
        let line = format_message(msg, self.format, delimiter, self.xpub);
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
    }
}

/// What happened so far, for judging a `--timeout`.
#[derive(Default)]
struct Progress {
    sent: Cell<usize>,
    received: Cell<usize>,
    flushing: Cell<bool>,
}

impl Progress {
    fn sent_one(&self) {
        self.sent.set(self.sent.get() + 1);
    }
    fn received_one(&self) {
        self.received.set(self.received.get() + 1);
    }
}

/// Everything a role needs.
struct Job<'a> {
    socket: Socket,
    role: Role,
    total: Option<usize>,
    pace: Pace,
    printer: Printer,
    count: Option<usize>,
    echo: bool,
    verbose: bool,
    progress: &'a Progress,
    address: Address,
}

/// Where a draft type's messages go, beyond the socket's own routing.
enum Address {
    None,
    /// RADIO: the --group.
    Group(Bytes),
    /// PEER: the routing id of the first --connect.
    Peer(u32),
}

impl Address {
    fn apply(&self, msg: Message) -> Message {
        match self {
            Address::None => msg,
            Address::Group(group) => msg.with_group(group.clone()),
            Address::Peer(id) => msg.with_routing_id(*id),
        }
    }
}

/// Runs `zmtp <type> …` to the end.
pub async fn run(t: SocketType, args: SocketArgs) -> Result<(), CliError> {
    let role = role(t);
    let framing = Framing {
        delimiter: args.delimiter.clone(),
        hex: args.hex,
        router: matches!(t, SocketType::Router | SocketType::Stream),
        single: t.is_draft(),
    };
    if args.echo && !args.messages.is_empty() {
        return Err(usage("--echo answers each request with itself; leave out the MESSAGE arguments"));
    }
    if args.count == Some(0) && role != Role::Duplex {
        return Err(usage(format!("--count 0 would do nothing with a {t} socket; give at least 1")));
    }
    let source = match role {
        Role::RecvOnly => None,
        Role::Reply if args.echo => None,
        _ => Some(Source::new(&args.messages, args.repeat, framing)?),
    };
    let (socket, mut connects) = setup::open(t, &args).await?;
    let address = match t {
        SocketType::Radio => Address::Group(Bytes::from(args.group.clone())),
        // Without a --connect a PEER has nobody to address: a send then fails as unroutable.
        SocketType::Peer => connects.first_peer().map_or(Address::None, Address::Peer),
        _ => Address::None,
    };
    let handshake_failure = connects.failure();
    let progress = Progress::default();
    let job = Job {
        socket: socket.clone(),
        role,
        total: source.as_ref().and_then(Source::total),
        pace: Pace { delay: args.delay.map(Duration::from_millis), interval: args.interval.map(Duration::from_millis) },
        printer: Printer {
            format: args.format,
            delimiter: args.delimiter.clone(),
            xpub: t == SocketType::XPub,
            single: t.is_draft(),
        },
        count: args.count,
        echo: args.echo,
        verbose: args.verbose,
        progress: &progress,
        address,
    };
    let (total, count) = (job.total, job.count);
    let linger = args.linger.map(Duration::from_millis);
    let work = async {
        job.drive(source).await?;
        progress.flushing.set(true);
        if progress.sent.get() > 0
            && matches!(
                t,
                SocketType::Push
                    | SocketType::Dealer
                    | SocketType::Pair
                    | SocketType::Scatter
                    | SocketType::Channel
                    | SocketType::Peer
            )
        {
            // Messages may wait in the queue of a --connect whose connection is not up yet, and
            // Socket::close drops those (zmtp issue, unlike libzmq's LINGER): let every connection
            // come up first, within --linger.
            let all = connects.all_connected();
            match linger {
                Some(limit) => drop(tokio::time::timeout(limit, all).await),
                None => all.await,
            }
        }
        socket.close().await;
        Ok(())
    };
    match args.timeout {
        None => work.await,
        Some(limit) => match tokio::time::timeout(limit, work).await {
            Ok(result) => result,
            Err(_) => judge(role, &progress, total, count, limit).map_err(|e| match e {
                CliError::TimedOut(why) => match handshake_failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    Some(failure) => CliError::TimedOut(format!("{why}; {failure}")),
                    None => CliError::TimedOut(why),
                },
                other => other,
            }),
        },
    }
}

/// At `--timeout`: success only for open-ended runs that got something done.
fn judge(
    role: Role,
    p: &Progress,
    total: Option<usize>,
    count: Option<usize>,
    limit: Duration,
) -> Result<(), CliError> {
    let (sent, received) = (p.sent.get(), p.received.get());
    let after = format!("timed out after {}s", limit.as_secs_f64());
    let fail = |why: String| Err(CliError::TimedOut(format!("{after}: {why}")));
    if p.flushing.get() {
        return fail("messages were still waiting to go out (is a peer connected?)".into());
    }
    if role == Role::SendOnly {
        return match (count.or(total), sent) {
            (Some(goal), _) => fail(format!("sent {sent} of {goal} messages (is a peer connected?)")),
            (None, 0) => fail("no message could be sent (is a peer connected?)".into()),
            (None, _) => Ok(()),
        };
    }
    if let Some(goal) = count {
        return fail(format!("received {received} of {goal} messages"));
    }
    if role == Role::Request && sent > received {
        return fail(format!("no reply to request {sent}"));
    }
    if let Some(goal) = total.filter(|&goal| sent < goal) {
        return fail(format!("sent {sent} of {goal} messages (is a peer connected?)"));
    }
    if received == 0 {
        return fail("no message arrived".into());
    }
    Ok(())
}

fn send_error(e: zmtp::Error) -> CliError {
    failed(format!("cannot send: {e}"))
}

fn recv_error(e: zmtp::Error) -> CliError {
    failed(format!("cannot receive: {e}"))
}

impl Job<'_> {
    fn count_reached(&self, n: usize) -> bool {
        self.count.is_some_and(|goal| n >= goal)
    }

    async fn drive(&self, mut source: Option<Source>) -> Result<(), CliError> {
        match self.role {
            Role::SendOnly => self.send_all(source.as_mut().expect("senders have a source"), self.count).await,
            Role::RecvOnly => self.receive().await,
            Role::Request => self.request(source.as_mut().expect("REQ has a source")).await,
            Role::Reply => self.reply(source.as_mut()).await,
            Role::Duplex => self.duplex(source).await,
        }
    }

    /// Sends the source's messages, at most `limit` of them.
    async fn send_all(&self, source: &mut Source, limit: Option<usize>) -> Result<(), CliError> {
        let mut router_peers = (self.socket.socket_type() == SocketType::Router).then(|| self.socket.monitor());
        for i in 0.. {
            if limit.is_some_and(|n| self.progress.sent.get() >= n) {
                break;
            }
            self.pace.before(i).await;
            let Some(msg) = source.next().await? else { break };
            match router_peers.as_mut() {
                Some(monitor) => self.send_routed(monitor, msg).await?,
                None => self.socket.send(self.address.apply(msg)).await.map_err(send_error)?,
            }
            self.progress.sent_one();
        }
        Ok(())
    }

    /// ROUTER: waits until the addressed peer is connected, so that nothing is dropped.
    async fn send_routed(&self, monitor: &mut Monitor, msg: Message) -> Result<(), CliError> {
        let id = msg[0].clone();
        loop {
            self.wait_for_peer(monitor, &id).await;
            match self.socket.send(msg.clone()).await {
                Err(zmtp::Error::HostUnreachable(_)) => continue,
                other => return other.map_err(send_error),
            }
        }
    }

    async fn wait_for_peer(&self, monitor: &mut Monitor, id: &Bytes) {
        let mut told = false;
        while !self.socket.peer_routing_ids().contains(id) {
            if self.verbose && !told {
                eprintln!(
                    "zmtp: ROUTER waiting for peer {} to connect",
                    format_message(&Message::single(id.clone()), Format::Auto, "|", false)
                );
                told = true;
            }
            // A peer's route appears with its handshake; the tick covers a route that trails the event.
            tokio::select! {
                _ = monitor.next_event() => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    async fn receive(&self) -> Result<(), CliError> {
        while !self.count_reached(self.progress.received.get()) {
            let msg = self.socket.recv().await.map_err(recv_error)?;
            self.progress.received_one();
            if !self.printer.print(&msg) {
                break;
            }
        }
        Ok(())
    }

    async fn request(&self, source: &mut Source) -> Result<(), CliError> {
        for i in 0.. {
            if self.count_reached(self.progress.received.get()) {
                break;
            }
            self.pace.before(i).await;
            let Some(request) = source.next().await? else { break };
            self.socket.send(request).await.map_err(send_error)?;
            self.progress.sent_one();
            let reply = self.socket.recv().await.map_err(recv_error)?;
            self.progress.received_one();
            if !self.printer.print(&reply) {
                break;
            }
        }
        Ok(())
    }

    async fn reply(&self, mut source: Option<&mut Source>) -> Result<(), CliError> {
        for i in 0.. {
            if self.count_reached(self.progress.received.get()) || source.as_ref().is_some_and(|s| s.exhausted()) {
                break;
            }
            let request = self.socket.recv().await.map_err(recv_error)?;
            self.progress.received_one();
            if !self.printer.print(&request) {
                break;
            }
            // SERVER: the answer goes back to the requester's routing id.
            let to = request.routing_id().unwrap_or(0);
            let answer = match source.as_mut() {
                _ if self.echo => Message::from_frames(request.into_frames()),
                Some(source) => match source.next().await? {
                    Some(answer) => answer,
                    // A REP that takes a request must answer it, or its REQ hangs: say so.
                    None => {
                        return Err(failed(format!(
                            "request {} received but there is no reply to send: the replies ran out (stdin \
                             ended); give replies as MESSAGE arguments or lines on stdin, or use --echo",
                            self.progress.received.get()
                        )));
                    }
                },
                None => unreachable!("REP without --echo has a source"),
            };
            self.pace.before(i).await;
            self.socket.send(answer.with_routing_id(to)).await.map_err(send_error)?;
            self.progress.sent_one();
        }
        Ok(())
    }

    /// Sends and receives at once. Done when --count messages arrived and a finite list of messages
    /// is all sent (an endless source, --repeat or stdin, stops at the count).
    async fn duplex(&self, source: Option<Source>) -> Result<(), CliError> {
        let finite = self.total.is_some();
        let sender = async {
            if let Some(mut source) = source {
                self.send_all(&mut source, None).await?;
            }
            Ok::<(), CliError>(())
        };
        let receiver = self.receive();
        tokio::pin!(sender, receiver);
        let (mut sent_all, mut received_all) = (false, false);
        while !(received_all && (sent_all || !finite)) {
            tokio::select! {
                r = &mut sender, if !sent_all => { r?; sent_all = true; }
                r = &mut receiver, if !received_all => { r?; received_all = true; }
            }
        }
        Ok(())
    }
}
