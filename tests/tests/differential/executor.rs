//! The two executors of scenario command lines: libzmq through tests/py/diff_peer.py, and zmtp
//! in this process. Both answer in the same words ("ok", "ok ENDPOINT", "msg F..", "err KIND").

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use zmtp::{Error, Message, MonitorEvent, Socket, SocketType};

/// libzmq, driven line by line.
pub struct Libzmq {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Libzmq {
    pub fn start() -> Libzmq {
        Libzmq::start_with(zmtp_testkit::python_with_pyzmq())
    }

    /// diff_peer.py under this python (e.g. one whose pyzmq has libzmq's draft API).
    pub fn start_with(python: std::process::Command) -> Libzmq {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/diff_peer.py");
        let mut child = Command::from(python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs (the differential tests need python3 with pyzmq: pip install pyzmq)");
        let stdin = child.stdin.take().expect("piped");
        let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        Libzmq { _child: child, stdin, lines }
    }

    pub async fn ask(&mut self, line: &str) -> String {
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.expect("diff_peer.py alive");
        self.stdin.flush().await.expect("diff_peer.py alive");
        let answer = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("diff_peer.py answers {line:?} within 30 s"))
            .expect("diff_peer.py output readable")
            .expect("diff_peer.py did not exit (is pyzmq installed? pip install pyzmq)");
        assert!(!answer.starts_with("fail"), "diff_peer.py could not run {line:?}: {answer}");
        answer
    }
}

/// A zmtp socket and its counts of successful handshakes and ended connections.
struct Ours {
    socket: Socket,
    handshakes: watch::Receiver<usize>,
    disconnects: watch::Receiver<usize>,
    /// Routing ids in the order first seen: `@N` names the Nth (see diff_peer.py).
    aliases: Vec<Bytes>,
}

impl Ours {
    fn alias(&mut self, routing_id: u32) -> String {
        self.alias_bytes(Bytes::copy_from_slice(&routing_id.to_be_bytes()))
    }

    fn alias_bytes(&mut self, routing_id: Bytes) -> String {
        let at = match self.aliases.iter().position(|id| *id == routing_id) {
            Some(at) => at,
            None => {
                self.aliases.push(routing_id);
                self.aliases.len() - 1
            }
        };
        format!("@{}", at + 1)
    }

    /// An alias this socket has not seen names nobody, as 0 does (see diff_peer.py).
    fn unalias(&self, token: &str) -> u32 {
        let n = token[1..].parse::<usize>().expect("@N");
        match n.checked_sub(1).and_then(|i| self.aliases.get(i)) {
            Some(id) => u32::from_be_bytes(id[..].try_into().expect("a 4-byte routing id")),
            None => 0,
        }
    }

    /// A received message as diff_peer.py words it.
    fn answer(&mut self, msg: &Message) -> String {
        if self.socket.socket_type() == SocketType::Stream {
            let rest = Message::from_iter(msg.iter().skip(1).cloned());
            let alias = self.alias_bytes(msg[0].clone());
            return format!("msg {alias}{}", &words(&rest)["msg".len()..]);
        }
        let mut out = words(msg);
        if let Some(id) = msg.routing_id() {
            out = format!("{out} {}", self.alias(id));
        }
        if let Some(group) = msg.group().filter(|g| !g.is_empty()) {
            out.push_str(" #");
            out.extend(group.iter().map(|b| format!("{b:02x}")));
        }
        out
    }

    /// `send S F [@P] [#G]`: frames, then the routing id and group a draft message carries.
    fn message(&self, tokens: &[&str]) -> Message {
        if self.socket.socket_type() == SocketType::Stream {
            let first = match tokens[0].strip_prefix('@') {
                Some(n) => {
                    let n = n.parse::<usize>().expect("@N");
                    n.checked_sub(1).and_then(|i| self.aliases.get(i)).cloned().unwrap_or_default()
                }
                None => frame(tokens[0]),
            };
            return Message::from_iter(std::iter::once(first).chain(tokens[1..].iter().map(|t| frame(t))));
        }
        let mut msg = Message::from_iter(tokens.iter().filter(|t| !t.starts_with(['@', '#'])).map(|t| frame(t)));
        for t in tokens {
            if t.starts_with('@') {
                msg.set_routing_id(self.unalias(t));
            } else if let Some(group) = t.strip_prefix('#') {
                msg.set_group(if group.is_empty() { Bytes::new() } else { frame(group) });
            }
        }
        msg
    }
}

/// zmtp, in this process.
#[derive(Default)]
pub struct Zmtp {
    sockets: HashMap<String, Ours>,
}

fn socket_type(name: &str) -> SocketType {
    name.parse().unwrap_or_else(|_| panic!("unknown socket type {name}"))
}

/// The errno name libzmq would use for `e`.
fn kind(e: &Error) -> String {
    match e {
        Error::WouldBlock => "EAGAIN".into(),
        Error::InvalidState => "EFSM".into(),
        Error::HostUnreachable(_) => "EHOSTUNREACH".into(),
        Error::NotSupported(_) => "ENOTSUP".into(),
        Error::AddressInUse(_) => "EADDRINUSE".into(),
        Error::EndpointNotFound(_) => "ENOENT".into(),
        Error::InvalidEndpoint(..) | Error::InvalidOption(_) | Error::InvalidArgument(_) => "EINVAL".into(),
        Error::UnsupportedTransport(_) => "EPROTONOSUPPORT".into(),
        Error::IncompatibleTransport(..) => "ENOCOMPATPROTO".into(),
        Error::Closed => "ETERM".into(),
        Error::Io(io) if io.kind() == std::io::ErrorKind::AddrInUse => "EADDRINUSE".into(),
        other => format!("OTHER({other})"),
    }
}

pub fn frame(token: &str) -> Bytes {
    if token == "-" { Bytes::new() } else { Bytes::from(decode_hex(token)) }
}

pub fn decode_hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn words(msg: &Message) -> String {
    let mut out = String::from("msg");
    for f in msg.frames() {
        out.push(' ');
        if f.is_empty() {
            out.push('-');
        } else {
            for b in f.iter() {
                out.push_str(&format!("{b:02x}"));
            }
        }
    }
    out
}

impl Zmtp {
    pub async fn ask(&mut self, line: &str) -> String {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[0] {
            "reset" => {
                for (_, s) in self.sockets.drain() {
                    s.socket.close().await;
                }
                return "ok".into();
            }
            "new" => {
                let socket = Socket::new(socket_type(w[2]));
                socket.set_linger(Some(Duration::ZERO));
                socket.set_reconnect_ivl(Some(Duration::from_millis(10)));
                for opt in &w[3..] {
                    let (key, value) = opt.split_once('=').expect("opt=value");
                    let on = value == "1";
                    match key {
                        "sndhwm" => socket.set_sndhwm(value.parse().unwrap()),
                        "rcvhwm" => socket.set_rcvhwm(value.parse().unwrap()),
                        "router_mandatory" => socket.set_router_mandatory(on),
                        "probe_router" => socket.set_probe_router(on),
                        "conflate" => socket.set_conflate(on),
                        "req_relaxed" => socket.set_req_relaxed(on),
                        "req_correlate" => socket.set_req_correlate(on),
                        "xpub_verbose" => socket.set_xpub_verbose(on),
                        "router_handover" => socket.set_router_handover(on),
                        "immediate" => socket.set_immediate(on),
                        "routing_id" => socket.set_routing_id(frame(value)).unwrap(),
                        "router_notify" => socket.set_router_notify(value.parse().unwrap()).unwrap(),
                        "reconnect_stop" => socket.set_reconnect_stop(value.parse().unwrap()),
                        "hello_msg" => socket.set_hello_msg(Some(frame(value))),
                        "disconnect_msg" => socket.set_disconnect_msg(Some(frame(value))),
                        "hiccup_msg" => socket.set_hiccup_msg(Some(frame(value))),
                        "xsub_verbose_unsubscribe" => socket.set_xsub_verbose_unsubscribe(on),
                        "invert_matching" => socket.set_invert_matching(on),
                        "xpub_verboser" => socket.set_xpub_verboser(on),
                        "xpub_manual" => socket.set_xpub_manual(on),
                        "xpub_manual_last_value" => socket.set_xpub_manual_last_value(on),
                        "only_first_subscribe" => socket.set_only_first_subscribe(on),
                        other => panic!("unknown option {other}"),
                    }
                }
                let mut monitor = socket.monitor();
                let (handshake_tx, handshakes) = watch::channel(0usize);
                let (disconnect_tx, disconnects) = watch::channel(0usize);
                tokio::spawn(async move {
                    while let Some(event) = monitor.next().await {
                        match event {
                            MonitorEvent::HandshakeSucceeded { .. } => handshake_tx.send_modify(|n| *n += 1),
                            MonitorEvent::Disconnected { .. } => disconnect_tx.send_modify(|n| *n += 1),
                            _ => {}
                        }
                    }
                });
                self.sockets.insert(w[1].to_owned(), Ours { socket, handshakes, disconnects, aliases: Vec::new() });
                return "ok".into();
            }
            _ => {}
        }
        let name = w[1];
        if w[0] == "close" {
            if let Some(s) = self.sockets.remove(name) {
                s.socket.close().await;
            }
            return "ok".into();
        }
        let ours = self.sockets.get_mut(name).unwrap_or_else(|| panic!("no socket {name}"));
        let socket = &ours.socket;
        let done = |r: zmtp::Result<()>| match r {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("err {}", kind(&e)),
        };
        match w[0] {
            "bind" => match socket.bind(w[2]).await {
                Ok(ep) => format!("ok {ep}"),
                Err(e) => format!("err {}", kind(&e)),
            },
            "connect" => done(socket.connect(w[2]).await),
            "disconnect" => done(socket.disconnect(w[2]).await),
            "unbind" => done(socket.unbind(w[2]).await),
            "sub" => done(socket.subscribe(frame(w[2]))),
            "unsub" => done(socket.unsubscribe(frame(w[2]))),
            "topics" => match socket.topics_count() {
                Ok(n) => format!("ok {n}"),
                Err(e) => format!("err {}", kind(&e)),
            },
            "join" => done(socket.join(frame(w[2]))),
            "leave" => done(socket.leave(frame(w[2]))),
            "connectpeer" => match socket.connect_peer(w[2]).await {
                Ok(id) => format!("ok {}", ours.alias(id)),
                Err(e) => format!("err {}", kind(&e)),
            },
            "send" => done(socket.try_send(ours.message(&w[2..]))),
            "recv" => match socket.try_recv() {
                Ok(m) => ours.answer(&m),
                Err(e) => format!("err {}", kind(&e)),
            },
            "recvwait" => {
                let ms = w[2].parse().unwrap();
                match tokio::time::timeout(Duration::from_millis(ms), socket.recv()).await {
                    Ok(Ok(m)) => ours.answer(&m),
                    Ok(Err(e)) => format!("err {}", kind(&e)),
                    Err(_) => "err EAGAIN".into(),
                }
            }
            "handshakes" | "disconnects" => {
                let (want, ms): (usize, u64) = (w[2].parse().unwrap(), w[3].parse().unwrap());
                let counter = if w[0] == "handshakes" { &mut ours.handshakes } else { &mut ours.disconnects };
                let wait = counter.wait_for(|n| *n >= want);
                match tokio::time::timeout(Duration::from_millis(ms), wait).await {
                    Ok(_) => "ok".into(),
                    Err(_) => "err TIMEOUT".into(),
                }
            }
            other => panic!("unknown command {other}"),
        }
    }
}
