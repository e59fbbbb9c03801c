//! Seeded scenarios: what each socket does, in order, written as the executors' command lines
//! (see tests/py/diff_peer.py for the command language) plus a few steps the runner performs
//! itself because they need several sockets (drain, fence, settle).
//!
//! Every family below keeps to what libzmq makes deterministic: peers are attached one at a time
//! (each connect settled by both ends' handshake counts, so round-robin order is fixed), a receiver
//! fed by several senders is compared as a sorted multiset (fair queueing interleaves), and
//! subscriptions are fenced (see [`Step::Fence`]) before anything is published, and a DISH's
//! joins and leaves (see [`Step::GroupFence`]) before anything is sent to their groups.

use std::fmt::Write as _;

/// SplitMix64: small, seedable, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() - 1)]
    }
}

/// One step of a scenario.
#[derive(Clone, Debug)]
pub enum Step {
    /// A command line for the executor that owns the socket named by its second word. A trailing
    /// `#mask<N>` (not sent) replaces frame N of a received message by its length: a value
    /// libzmq makes random.
    Cmd(String),
    /// Receive from the socket until it is quiet (the reference run) or until it has as many
    /// messages as the reference run saw (the others); `sorted` when several peers feed it.
    Drain { socket: String, sorted: bool },
    /// Make sure every subscription change `sub` made so far has reached `publisher`: `sub`
    /// subscribes a fresh topic `ff<n>` (it travels after the earlier changes on the same pipe),
    /// then an XPUB publisher receives until it sees that subscription's notice (a topic seen
    /// for the first time is always notified), and a PUB sends `ff<n>` until `sub` receives it.
    /// The PUB form proves nothing while `sub` holds the empty prefix (it matches the probe
    /// already), so PUB scenarios never unsubscribe it. Messages and notices starting with 0xff
    /// are never part of an outcome; anything else received while fencing is kept for the next
    /// drain.
    Fence { publisher: String, sub: String, xsub: bool, xpub: bool },
    /// RADIO/DISH's fence: make sure every join and leave `dish` made so far has reached
    /// `radio` (a RADIO drops what it sends to a group before the JOIN arrives): `dish` joins a
    /// fresh group `f<n>` (its JOIN travels after the earlier changes on the same pipe), then
    /// `radio` sends a probe, a message starting with 0xff, to that group until `dish` receives
    /// it. Probes are never part of an outcome; anything else received while fencing is kept for
    /// the next drain.
    GroupFence { radio: String, dish: String },
    /// Wait until each socket has seen the given number of successful handshakes in all.
    Settle(Vec<(String, usize)>),
    /// Wait until the socket has seen the given number of connections end in all.
    Disconnected(String, usize),
}

/// A scenario: its family (for reports and the divergence table) and its steps.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub family: &'static str,
    pub steps: Vec<Step>,
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "scenario seed={} family={}", self.seed, self.family)?;
        for s in &self.steps {
            match s {
                Step::Cmd(line) => writeln!(f, "  {line}")?,
                Step::Drain { socket, sorted } => {
                    writeln!(f, "  drain {socket}{}", if *sorted { " (sorted)" } else { "" })?
                }
                Step::Fence { publisher, sub, .. } => writeln!(f, "  fence {publisher} -> {sub}")?,
                Step::GroupFence { radio, dish } => writeln!(f, "  fence {radio} -> {dish} (join)")?,
                Step::Settle(counts) => writeln!(f, "  settle {counts:?}")?,
                Step::Disconnected(socket, n) => writeln!(f, "  disconnected {socket} {n}")?,
            }
        }
        Ok(())
    }
}

/// Endpoints in a scenario are written `@name`: `@b<n>` is resolved by a bind of
/// `tcp://127.0.0.1:*` (or a fresh ipc path), `@p<n>` is a free tcp port chosen before the
/// scenario runs (for a connect before the bind).
struct Builder {
    rng: Rng,
    steps: Vec<Step>,
    handshakes: Vec<(String, usize)>,
    endpoints: usize,
    ipc: bool,
}

impl Builder {
    fn cmd(&mut self, line: impl Into<String>) {
        self.steps.push(Step::Cmd(line.into()));
    }

    fn new_socket(&mut self, name: &str, kind: &str, options: &[String]) {
        let mut line = format!("new {name} {kind}");
        for o in options {
            let _ = write!(line, " {o}");
        }
        self.cmd(line);
        self.handshakes.push((name.to_owned(), 0));
    }

    /// A bind on a fresh endpoint; returns its `@` name.
    fn bind(&mut self, socket: &str) -> String {
        self.endpoints += 1;
        let ep = if self.ipc { format!("@i{}", self.endpoints) } else { format!("@b{}", self.endpoints) };
        self.cmd(format!("bind {socket} {ep}"));
        ep
    }

    /// `connecter` connects to `endpoint` (bound by `binder`); both handshakes are awaited.
    fn connect(&mut self, connecter: &str, binder: &str, endpoint: &str) {
        self.cmd(format!("connect {connecter} {endpoint}"));
        self.settle_new_link(connecter, binder);
    }

    fn settle_new_link(&mut self, a: &str, b: &str) {
        for (name, n) in self.handshakes.iter_mut() {
            if name == a || name == b {
                *n += 1;
            }
        }
        let counts = self.handshakes.iter().filter(|(n, _)| n == a || n == b).cloned().collect();
        self.steps.push(Step::Settle(counts));
    }

    /// Links `hub` with every leaf, one at a time: the hub binds once, or each leaf binds, or
    /// the hub connects to every leaf's (tcp) endpoint before the leaves bind.
    fn star(&mut self, hub: &str, leaves: &[String]) -> Vec<String> {
        match self.rng.range(0, 3) {
            0 => {
                let ep = self.bind(hub);
                for leaf in leaves {
                    self.connect(leaf, hub, &ep);
                }
                vec![ep; leaves.len()]
            }
            1 => {
                let eps: Vec<String> = leaves.iter().map(|_| self.port()).collect();
                for ep in &eps {
                    self.cmd(format!("connect {hub} {ep}"));
                }
                for (leaf, ep) in leaves.iter().zip(&eps) {
                    self.cmd(format!("bind {leaf} {ep}"));
                    self.settle_new_link(hub, leaf);
                }
                eps
            }
            _ => leaves
                .iter()
                .map(|leaf| {
                    let ep = self.bind(leaf);
                    self.connect(hub, leaf, &ep);
                    ep
                })
                .collect(),
        }
    }

    /// A tcp endpoint on a port chosen before the scenario runs (bound later).
    fn port(&mut self) -> String {
        self.endpoints += 1;
        format!("@p{}", self.endpoints)
    }

    fn drain(&mut self, socket: &str, sorted: bool) {
        self.steps.push(Step::Drain { socket: socket.to_owned(), sorted });
    }

    /// A message of 1–3 frames tagged with its origin and number; sometimes an empty frame.
    fn body(&mut self, origin: &str, n: usize) -> String {
        let mut frames = vec![hex(&format!("{origin}-{n}"))];
        for _ in 0..self.rng.range(0, 2) {
            frames.push(if self.rng.chance(25) { "-".into() } else { hex(&format!("x{}", self.rng.range(0, 99))) });
        }
        frames.join(" ")
    }
}

/// Lower-case hex of a string's bytes ("-" for empty).
pub fn hex(s: &str) -> String {
    if s.is_empty() {
        return "-".into();
    }
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// A family's name and the function that writes one of its scenarios.
type Family = (&'static str, fn(&mut Builder));

const FAMILIES: &[Family] = &[
    ("pipeline", pipeline),
    ("pair", pair),
    ("reqrep", reqrep),
    ("router", router),
    ("pubsub", pubsub),
    ("queue-before-connect", queue_before_connect),
    ("disconnect", disconnect),
    ("reconnect", reconnect),
    ("handover", handover),
];

/// The families of libzmq's draft socket types, run against a libzmq built with drafts.
const DRAFT_FAMILIES: &[Family] = &[
    ("scatter-gather", scatter_gather),
    ("channel", channel),
    ("client-server", client_server),
    ("radio-dish", radio_dish),
    ("peer", peer),
    ("stream", stream),
];

/// The scenario for `seed`.
pub fn generate(seed: u64) -> Scenario {
    generate_from(FAMILIES, seed)
}

/// The scenario for `seed` among the draft types' families.
pub fn generate_draft(seed: u64) -> Scenario {
    generate_from(DRAFT_FAMILIES, seed)
}

fn generate_from(families: &[Family], seed: u64) -> Scenario {
    let mut rng = Rng::new(seed);
    let (family, build) = families[(rng.next() % families.len() as u64) as usize];
    let ipc = rng.chance(25);
    let mut b = Builder { rng, steps: Vec::new(), handshakes: Vec::new(), endpoints: 0, ipc };
    build(&mut b);
    Scenario { seed, family, steps: b.steps }
}

/// PUSH → PULL: one pusher round-robins over 1–3 pullers (each receives an exact sequence), or
/// 1–3 pushers are fair-queued into one puller (a multiset).
fn pipeline(b: &mut Builder) {
    let fan_out = b.rng.chance(50);
    let n = b.rng.range(1, 3);
    let (pushers, pullers): (Vec<String>, Vec<String>) = if fan_out {
        (vec!["push0".into()], (0..n).map(|i| format!("pull{i}")).collect())
    } else {
        ((0..n).map(|i| format!("push{i}")).collect(), vec!["pull0".into()])
    };
    for p in &pushers {
        b.new_socket(p, "PUSH", &[]);
    }
    for p in &pullers {
        b.new_socket(p, "PULL", &[]);
    }
    if fan_out {
        b.star("push0", &pullers);
    } else {
        b.star("pull0", &pushers);
    }
    for i in 0..b.rng.range(1, 12) {
        let from = b.rng.pick(&pushers).clone();
        let body = b.body(&from, i);
        b.cmd(format!("send {from} {body}"));
    }
    for p in &pullers {
        b.drain(p, !fan_out);
    }
}

/// A single-frame message for the draft types; now and then two frames, which they refuse (EINVAL).
fn single_body(b: &mut Builder, origin: &str, n: usize) -> String {
    let body = hex(&format!("{origin}-{n}"));
    if b.rng.chance(10) { format!("{body} {}", hex("more")) } else { body }
}

/// SCATTER → GATHER: PUSH/PULL's rules for single frames (round-robin out, fair-queued in).
fn scatter_gather(b: &mut Builder) {
    let fan_out = b.rng.chance(50);
    let n = b.rng.range(1, 3);
    let (scatters, gathers): (Vec<String>, Vec<String>) = if fan_out {
        (vec!["sc0".into()], (0..n).map(|i| format!("g{i}")).collect())
    } else {
        ((0..n).map(|i| format!("sc{i}")).collect(), vec!["g0".into()])
    };
    for s in &scatters {
        b.new_socket(s, "SCATTER", &[]);
    }
    for g in &gathers {
        b.new_socket(g, "GATHER", &[]);
    }
    if fan_out {
        b.star("sc0", &gathers);
    } else {
        b.star("g0", &scatters);
    }
    for i in 0..b.rng.range(1, 12) {
        let from = b.rng.pick(&scatters).clone();
        let body = single_body(b, &from, i);
        b.cmd(format!("send {from} {body}"));
    }
    for g in &gathers {
        b.drain(g, !fan_out);
    }
}

/// CHANNEL ↔ CHANNEL: PAIR's rules for single frames.
fn channel(b: &mut Builder) {
    b.new_socket("a", "CHANNEL", &[]);
    b.new_socket("c", "CHANNEL", &[]);
    let ep = b.bind("a");
    b.connect("c", "a", &ep);
    for i in 0..b.rng.range(1, 10) {
        let from = if b.rng.chance(50) { "a" } else { "c" };
        let body = single_body(b, from, i);
        b.cmd(format!("send {from} {body}"));
    }
    b.drain("a", false);
    b.drain("c", false);
}

/// CLIENT → SERVER → CLIENT: 1–3 clients (round-robin over 1 server, or a server bound by each
/// or connecting to each), each request received at once (so the server names its senders in a
/// fixed order: routing ids are random, their aliases are not) and answered to its sender, or to
/// nobody (EHOSTUNREACH); each client's replies are an exact sequence.
fn client_server(b: &mut Builder) {
    let n = b.rng.range(1, 3);
    let clients: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    b.new_socket("s", "SERVER", &[]);
    for c in &clients {
        b.new_socket(c, "CLIENT", &[]);
    }
    b.star("s", &clients);
    let mut seen: Vec<String> = Vec::new();
    for i in 0..b.rng.range(1, 10) {
        let from = b.rng.pick(&clients).clone();
        let body = single_body(b, &from, i);
        let refused = body.contains(' ');
        b.cmd(format!("send {from} {body}"));
        if refused {
            continue;
        }
        b.cmd("recvwait s 5000");
        if !seen.contains(&from) {
            seen.push(from.clone());
        }
        let alias = seen.iter().position(|c| *c == from).expect("seen") + 1;
        let to = if b.rng.chance(10) { 0 } else { alias };
        b.cmd(format!("send s {} @{to}", hex(&format!("re-{i}"))));
    }
    for c in &clients {
        b.drain(c, false);
    }
}

/// RADIO → DISH: 1 RADIO to 1–3 DISHes (each receives an exact sequence) or 2 RADIOs to 1 DISH
/// (a multiset). Joins before and after linking, each fenced with every RADIO (see
/// [`Step::GroupFence`]) before anything is sent to its group; messages to joined groups, to
/// nobody's, with no group, with the empty group (which a DISH can join); leaves, fenced, then
/// more messages; a leave before a drain (a DISH drops what it already holds of a group it has
/// left). Refusals: a group joined twice or not joined left (EINVAL), a join of a group over 255
/// bytes (EINVAL), a DISH's send and a RADIO's receive (ENOTSUP), several frames (EINVAL).
fn radio_dish(b: &mut Builder) {
    let fan_in = b.rng.chance(30);
    let (radios, dishes): (Vec<String>, Vec<String>) = if fan_in {
        (vec!["r0".into(), "r1".into()], vec!["d0".into()])
    } else {
        let n = b.rng.range(1, 3);
        (vec!["r0".into()], (0..n).map(|i| format!("d{i}")).collect())
    };
    for r in &radios {
        b.new_socket(r, "RADIO", &[]);
    }
    for d in &dishes {
        b.new_socket(d, "DISH", &[]);
    }
    let long = "g".repeat(255);
    let groups = ["a", "ab", "b", "a", "ab", "b", ""];
    let mut joined: Vec<Vec<String>> = vec![Vec::new(); dishes.len()];
    // A join or leave, and what libzmq answers: EINVAL for a group joined twice or not joined
    // left, or over 255 bytes.
    let change = |b: &mut Builder, joined: &mut Vec<String>, d: &str, join: bool, g: &str| {
        b.cmd(format!("{} {d} {}", if join { "join" } else { "leave" }, hex(g)));
        let at = joined.iter().position(|j| j == g);
        match (join, at) {
            (true, None) if g.len() <= 255 => joined.push(g.to_owned()),
            (false, Some(at)) => {
                joined.remove(at);
            }
            _ => {}
        }
    };
    for (i, d) in dishes.iter().enumerate() {
        if b.rng.chance(40) {
            let g = *b.rng.pick(&groups);
            change(b, &mut joined[i], d, true, g);
        }
    }
    if fan_in {
        b.star("d0", &radios);
    } else {
        b.star("r0", &dishes);
    }
    for (i, d) in dishes.iter().enumerate() {
        for _ in 0..b.rng.range(1, 2) {
            let g = *b.rng.pick(&groups);
            change(b, &mut joined[i], d, true, g);
        }
        // The longest group: joined by d0 with one RADIO only. libzmq hands a message whose
        // group is over 14 bytes to two or more pipes without counting its references to the
        // group: after the first pipe is done with it, the others carry freed memory. So a second
        // DISH would miss a RADIO's messages to such a group, and a second RADIO a DISH's JOIN.
        // zmtp does not imitate that.
        if b.rng.chance(10) {
            let g = if b.rng.chance(50) || i > 0 || fan_in { long.clone() + "g" } else { long.clone() };
            change(b, &mut joined[i], d, true, &g);
        }
        if b.rng.chance(10) {
            change(b, &mut joined[i], d, false, "zz");
        }
        for r in &radios {
            b.steps.push(Step::GroupFence { radio: r.clone(), dish: d.clone() });
        }
    }
    let mut sent = 0;
    let mut publish = |b: &mut Builder| {
        for _ in 0..b.rng.range(1, 8) {
            let from = b.rng.pick(&radios).clone();
            let body = single_body(b, &from, sent);
            sent += 1;
            let group = match b.rng.range(0, 19) {
                0 => String::new(),               // no group at all
                1 => format!(" #{}", hex(&long)), // the longest group
                // No group over 255 bytes: libzmq's zmq_msg_set_group cuts it to 255 (strnlen)
                // where zmtp's send refuses it (EINVAL), an API difference, not the protocol's.
                2 => format!(" #{}", hex("ab")),
                3 => " #".into(),                   // the empty group
                4 | 5 => format!(" #{}", hex("c")), // nobody's
                _ => format!(" #{}", hex(["a", "ab", "b"][b.rng.range(0, 2)])),
            };
            b.cmd(format!("send {from} {body}{group}"));
        }
        if b.rng.chance(10) {
            let d = b.rng.pick(&dishes).clone();
            b.cmd(format!("send {d} {} #{}", hex("up"), hex("a"))); // ENOTSUP
        }
        if b.rng.chance(10) {
            let r = b.rng.pick(&radios).clone();
            b.cmd(format!("recv {r}")); // ENOTSUP
        }
    };
    publish(b);
    for (i, d) in dishes.iter().enumerate() {
        if !joined[i].is_empty() && b.rng.chance(15) {
            // Left before the drain: what the DISH holds of that group is dropped.
            let g = b.rng.pick(&joined[i]).clone();
            change(b, &mut joined[i], d, false, &g);
        }
        b.drain(d, fan_in);
    }
    for (i, d) in dishes.iter().enumerate() {
        let mut changed = false;
        if !joined[i].is_empty() && b.rng.chance(60) {
            let g = b.rng.pick(&joined[i]).clone();
            change(b, &mut joined[i], d, false, &g);
            changed = true;
        }
        if b.rng.chance(30) {
            let g = *b.rng.pick(&groups);
            change(b, &mut joined[i], d, true, g);
            changed = true;
        }
        if changed {
            for r in &radios {
                b.steps.push(Step::GroupFence { radio: r.clone(), dish: d.clone() });
            }
        }
    }
    publish(b);
    for d in &dishes {
        b.drain(d, fan_in);
    }
}

/// PEER ↔ PEER (RFC 51): 1–2 PEERs bind (at once, or after their peers connect to a port),
/// 1–3 more `connectpeer` to one or both (and the first binder sometimes to the second, twice
/// now and then: two links); each link's connecter knows its routing id at once, the binder
/// from its first message (received at once, so aliases come in a fixed order). Messages both
/// ways on known links; to no routing id or an unknown one (EHOSTUNREACH); several frames
/// (EINVAL). A PEER fed by several links is compared as a multiset.
fn peer(b: &mut Builder) {
    let binders: Vec<String> = (0..b.rng.range(1, 2)).map(|i| format!("pb{i}")).collect();
    let connecters: Vec<String> = (0..b.rng.range(1, 3)).map(|i| format!("pc{i}")).collect();
    for p in binders.iter().chain(&connecters) {
        b.new_socket(p, "PEER", &[]);
    }
    // Links (connecter, binder); what each socket has named so far, in alias order (@1 first).
    let mut links: Vec<(String, String)> = Vec::new();
    let mut known: std::collections::BTreeMap<String, Vec<usize>> = std::collections::BTreeMap::new();
    let mut link = |b: &mut Builder, links: &mut Vec<(String, String)>, c: &str, t: &str, ep: &str| {
        b.cmd(format!("connectpeer {c} {ep}"));
        links.push((c.to_owned(), t.to_owned()));
        known.entry(c.to_owned()).or_default().push(links.len() - 1);
    };
    for (i, t) in binders.iter().enumerate() {
        let mut from: Vec<String> = connecters.iter().filter(|_| b.rng.chance(70)).cloned().collect();
        if i == 0 && from.is_empty() {
            from.push(connecters[0].clone());
        }
        if i == 1 && b.rng.chance(40) {
            from.push(binders[0].clone());
            if b.rng.chance(25) {
                from.push(binders[0].clone());
            }
        }
        if b.rng.chance(25) {
            let ep = b.port();
            for c in &from {
                link(b, &mut links, c, t, &ep);
            }
            b.cmd(format!("bind {t} {ep}"));
            for c in &from {
                b.settle_new_link(c, t);
            }
        } else {
            let ep = b.bind(t);
            for c in &from {
                link(b, &mut links, c, t, &ep);
                b.settle_new_link(c, t);
            }
        }
    }
    let mut pending: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    let alias = |known: &std::collections::BTreeMap<String, Vec<usize>>, s: &str, l: usize| {
        known.get(s).and_then(|k| k.iter().position(|x| *x == l)).map(|at| at + 1)
    };
    for i in 0..b.rng.range(1, 12) {
        let l = b.rng.range(0, links.len() - 1);
        let (c, t) = links[l].clone();
        // From the binder only once it knows the link.
        let backwards = alias(&known, &t, l).is_some() && b.rng.chance(40);
        let (from, to) = if backwards { (t, c) } else { (c, t) };
        let body = single_body(b, &from, i);
        let at = alias(&known, &from, l).expect("the sender knows the link");
        let address = match b.rng.range(0, 19) {
            0 => String::new(), // no routing id: EHOSTUNREACH
            1 => " @9".into(),  // nobody (an alias not seen): EHOSTUNREACH
            _ => format!(" @{at}"),
        };
        let delivered = !body.contains(' ') && address.starts_with(" @") && address != " @9";
        // Received at once when the receiver does not know the link yet (it learns the link's
        // routing id now), or now and then; first, what it already holds.
        let at_once = delivered && (alias(&known, &to, l).is_none() || b.rng.chance(30));
        if at_once && pending.remove(&to).is_some() {
            b.drain(&to, fed_by(&links, &to) > 1);
        }
        b.cmd(format!("send {from} {body}{address}"));
        if at_once {
            b.cmd(format!("recvwait {to} 5000"));
            let k = known.entry(to).or_default();
            if !k.contains(&l) {
                k.push(l);
            }
        } else if delivered {
            *pending.entry(to).or_default() += 1;
        }
    }
    for p in binders.iter().chain(&connecters) {
        b.drain(p, fed_by(&links, p) > 1);
    }
}

/// STREAM ↔ STREAM: 1–2 STREAMs connect, one at a time, to a STREAM (each end's connect
/// notification, an empty message, received at once: it names the connection), then raw bytes
/// either way, each received before the next is sent (TCP may join two writes into one read);
/// to an unknown routing id (EHOSTUNREACH). No closes: which end libzmq notifies of a closed
/// connection, and when, is a matter of timing.
fn stream(b: &mut Builder) {
    b.new_socket("s", "STREAM", &[]);
    let conns: Vec<String> = (0..b.rng.range(1, 2)).map(|i| format!("c{i}")).collect();
    for c in &conns {
        b.new_socket(c, "STREAM", &[]);
    }
    let ep = b.bind("s");
    for c in &conns {
        b.cmd(format!("connect {c} {ep}"));
        b.cmd(format!("recvwait {c} 5000"));
        b.cmd("recvwait s 5000");
    }
    for i in 0..b.rng.range(1, 10) {
        let k = b.rng.range(0, conns.len() - 1);
        let c = conns[k].clone();
        match b.rng.range(0, 9) {
            // A routing id libzmq never makes (its are 5 bytes).
            0 => b.cmd(format!("send s {} {}", hex("?"), hex(&format!("s-{i}")))),
            1..=4 => {
                b.cmd(format!("send {c} @1 {}", hex(&format!("{c}-{i}"))));
                b.cmd("recvwait s 5000");
            }
            _ => {
                b.cmd(format!("send s @{} {}", k + 1, hex(&format!("s-{i}"))));
                b.cmd(format!("recvwait {c} 5000"));
            }
        }
    }
    b.drain("s", false);
    for c in &conns {
        b.drain(c, false);
    }
}

/// How many of `links` end at `socket`.
fn fed_by(links: &[(String, String)], socket: &str) -> usize {
    links.iter().filter(|(c, t)| c == socket || t == socket).count()
}

/// PAIR ↔ PAIR: messages both ways, each side's sequence exact.
fn pair(b: &mut Builder) {
    b.new_socket("a", "PAIR", &[]);
    b.new_socket("c", "PAIR", &[]);
    let ep = b.bind("a");
    b.connect("c", "a", &ep);
    for i in 0..b.rng.range(1, 10) {
        let from = if b.rng.chance(50) { "a" } else { "c" };
        let body = b.body(from, i);
        b.cmd(format!("send {from} {body}"));
    }
    b.drain("a", false);
    b.drain("c", false);
}

/// REQ/REP alternation, against REP, ROUTER, or through a DEALER; sometimes out of turn (EFSM),
/// sometimes with REQ_RELAXED / REQ_CORRELATE, sometimes a DEALER request with no delimiter.
fn reqrep(b: &mut Builder) {
    let client_kind = *b.rng.pick(&["REQ", "REQ", "DEALER"]);
    let server_kind = if client_kind == "DEALER" { "REP" } else { *b.rng.pick(&["REP", "ROUTER"]) };
    let mut client_opts = vec!["routing_id=".to_owned() + &hex("cli")];
    let relaxed = client_kind == "REQ" && b.rng.chance(25);
    let correlate = relaxed && b.rng.chance(50);
    if relaxed {
        client_opts.push("req_relaxed=1".into());
    }
    if correlate {
        client_opts.push("req_correlate=1".into());
    }
    let servers = if server_kind == "REP" { b.rng.range(1, 2) } else { 1 };
    b.new_socket("cli", client_kind, &client_opts);
    let names: Vec<String> = (0..servers).map(|i| format!("srv{i}")).collect();
    for s in &names {
        b.new_socket(s, server_kind, &[]);
    }
    b.star("cli", &names);
    for round in 0..b.rng.range(1, 4) {
        let srv = names[round % servers].clone();
        if b.rng.chance(15) {
            b.cmd("recv cli"); // before a send: EFSM for REQ, EAGAIN for DEALER
        }
        if b.rng.chance(10) {
            b.cmd(format!("send {srv} {}", hex("early"))); // a reply before a request
        }
        let req = hex(&format!("req-{round}"));
        match client_kind {
            "DEALER" if b.rng.chance(20) => b.cmd(format!("send cli {req}")), // no delimiter
            "DEALER" => b.cmd(format!("send cli - {req}")),
            _ => b.cmd(format!("send cli {req}")),
        }
        if b.rng.chance(15) {
            b.cmd(format!("send cli {}", hex("again"))); // out of turn: EFSM unless relaxed
        }
        // REQ_CORRELATE's request id is random (as libzmq's): a ROUTER sees it as frame 1.
        let mask = if correlate && server_kind == "ROUTER" { " #mask1" } else { "" };
        b.cmd(format!("recvwait {srv} 2000{mask}"));
        if b.rng.chance(20) {
            b.cmd(format!("recvwait {srv} 50{mask}")); // the "again" request when relaxed, else nothing
        }
        let rep = hex(&format!("rep-{round}"));
        if server_kind == "ROUTER" {
            b.cmd(format!("send {srv} {} - {rep}", hex("cli")));
        } else {
            b.cmd(format!("send {srv} {rep}"));
        }
        b.drain("cli", false);
    }
}

/// ROUTER addressing DEALERs by routing id: known ids, unknown ids (dropped, or EHOSTUNREACH
/// with ROUTER_MANDATORY), PROBE_ROUTER's empty message on connect, replies to the router.
fn router(b: &mut Builder) {
    let mut router_opts = Vec::new();
    let mandatory = b.rng.chance(50);
    if mandatory {
        router_opts.push("router_mandatory=1".into());
    }
    b.new_socket("rt", "ROUTER", &router_opts);
    let n = b.rng.range(1, 3);
    let dealers: Vec<String> = (0..n).map(|i| format!("d{i}")).collect();
    for d in &dealers {
        let mut opts = vec![format!("routing_id={}", hex(d))];
        if b.rng.chance(30) {
            opts.push("probe_router=1".into());
        }
        b.new_socket(d, "DEALER", &opts);
    }
    b.star("rt", &dealers);
    for i in 0..b.rng.range(1, 10) {
        if b.rng.chance(20) {
            b.cmd(format!("send rt {} {}", hex("nobody"), hex(&format!("lost-{i}"))));
        } else if b.rng.chance(50) {
            let d = b.rng.pick(&dealers).clone();
            let body = b.body("rt", i);
            b.cmd(format!("send rt {} {body}", hex(&d)));
        } else {
            let d = b.rng.pick(&dealers).clone();
            let body = b.body(&d, i);
            b.cmd(format!("send {d} {body}"));
        }
    }
    b.drain("rt", dealers.len() > 1);
    for d in &dealers {
        b.drain(d, false);
    }
}

/// PUB or XPUB to 1–3 SUB or XSUB subscribers: subscriptions (fenced), messages on several
/// topics, unsubscriptions (fenced), more messages; an XPUB's subscription notices (verbose or
/// not) are part of the outcome.
fn pubsub(b: &mut Builder) {
    let xpub = b.rng.chance(40);
    let verbose = xpub && b.rng.chance(50);
    let opts = if verbose { vec!["xpub_verbose=1".to_owned()] } else { vec![] };
    b.new_socket("pub", if xpub { "XPUB" } else { "PUB" }, &opts);
    let n = b.rng.range(1, 3);
    let subs: Vec<(String, bool)> = (0..n).map(|i| (format!("sub{i}"), b.rng.chance(25))).collect();
    for (s, xsub) in &subs {
        b.new_socket(s, if *xsub { "XSUB" } else { "SUB" }, &[]);
    }
    let topics = ["", "a", "ab", "b"];
    let subscribe = |b: &mut Builder, s: &str, xsub: bool, on: bool, t: &str| {
        let t = hex(t);
        match (xsub, on) {
            (false, true) => b.cmd(format!("sub {s} {t}")),
            (false, false) => b.cmd(format!("unsub {s} {t}")),
            // XSUB: the subscription is a message, 0x01 (or 0x00) then the topic.
            (true, on) => b.cmd(format!("send {s} {}{}", if on { "01" } else { "00" }, if t == "-" { "" } else { &t })),
        }
    };
    let mut held: Vec<Vec<&str>> = vec![Vec::new(); n];
    for (i, (s, xsub)) in subs.iter().enumerate() {
        if b.rng.chance(40) {
            let t = *b.rng.pick(&topics);
            subscribe(b, s, *xsub, true, t);
            held[i].push(t);
        }
    }
    let names: Vec<String> = subs.iter().map(|(s, _)| s.clone()).collect();
    b.star("pub", &names);
    for (i, (s, xsub)) in subs.iter().enumerate() {
        for _ in 0..b.rng.range(0, 2) {
            let t = *b.rng.pick(&topics);
            subscribe(b, s, *xsub, true, t);
            held[i].push(t);
        }
        b.steps.push(Step::Fence { publisher: "pub".into(), sub: s.clone(), xsub: *xsub, xpub });
    }
    let publish = |b: &mut Builder, round: usize| {
        for i in 0..b.rng.range(1, 6) {
            let topic = *b.rng.pick(&["a1", "ab2", "b3", "c4"]);
            b.cmd(format!("send pub {} {}", hex(&format!("{topic}-{round}-{i}")), hex("data")));
        }
    };
    publish(b, 0);
    for (s, _) in &subs {
        b.drain(s, false);
    }
    if xpub {
        b.drain("pub", true);
    }
    for (i, (s, xsub)) in subs.iter().enumerate() {
        let droppable: Vec<&str> = held[i].iter().copied().filter(|t| xpub || !t.is_empty()).collect();
        if !droppable.is_empty() && b.rng.chance(60) {
            let t = *b.rng.pick(&droppable);
            subscribe(b, s, *xsub, false, t);
            b.steps.push(Step::Fence { publisher: "pub".into(), sub: s.clone(), xsub: *xsub, xpub });
        }
    }
    publish(b, 1);
    for (s, _) in &subs {
        b.drain(s, false);
    }
    if xpub {
        b.drain("pub", true);
    }
}

/// Messages sent before the peer exists: a connecter's pipe holds SNDHWM of them (EAGAIN after;
/// EAGAIN at once with IMMEDIATE; only the newest with CONFLATE), a binder with no peer holds
/// none; then the peer binds and gets what was held.
fn queue_before_connect(b: &mut Builder) {
    let kind = *b.rng.pick(&["PUSH", "DEALER"]);
    let hwm = *b.rng.pick(&[1, 2, 3, 5, 10]);
    let mut opts = vec![format!("sndhwm={hwm}")];
    let variant = b.rng.range(0, 3);
    match variant {
        1 => opts.push("immediate=1".into()),
        2 if kind == "PUSH" => opts.push("conflate=1".into()),
        _ => {}
    }
    b.new_socket("snd", kind, &opts);
    b.new_socket("rcv", if kind == "PUSH" { "PULL" } else { "DEALER" }, &[]);
    if b.rng.chance(20) {
        // A binder with no peer: nothing to queue on.
        b.endpoints += 1;
        let ep = format!("@b{}", b.endpoints);
        b.cmd(format!("bind snd {ep}"));
        b.cmd(format!("send snd {}", hex("nobody")));
        b.cmd(format!("connect rcv {ep}"));
        b.settle_new_link("rcv", "snd");
    } else {
        b.endpoints += 1;
        let ep = format!("@p{}", b.endpoints);
        b.cmd(format!("connect snd {ep}"));
        for i in 0..hwm + 2 {
            b.cmd(format!("send snd {}", hex(&format!("q-{i}"))));
        }
        b.cmd(format!("bind rcv {ep}"));
        b.settle_new_link("rcv", "snd");
    }
    // What was held arrives first; only then is there room again (libzmq learns of it when the
    // session has read the held messages, and CONFLATE's one message could otherwise still be
    // replaced by the next send).
    b.drain("rcv", false);
    b.cmd(format!("send snd {}", hex("after")));
    b.drain("rcv", false);
}

/// A PUSH or DEALER connected to 2–3 peers disconnects from all but one, or all: its round-robin
/// skips them at once, and with none left a send is EAGAIN.
fn disconnect(b: &mut Builder) {
    let kind = *b.rng.pick(&["PUSH", "DEALER"]);
    b.new_socket("hub", kind, &[]);
    let n = b.rng.range(2, 3);
    let leaves: Vec<String> = (0..n).map(|i| format!("leaf{i}")).collect();
    for l in &leaves {
        b.new_socket(l, if kind == "PUSH" { "PULL" } else { "DEALER" }, &[]);
    }
    let mut eps = Vec::new();
    for l in &leaves {
        let ep = b.bind(l);
        b.connect("hub", l, &ep);
        eps.push(ep);
    }
    let mut sent = 0;
    let mut burst = |b: &mut Builder| {
        for _ in 0..b.rng.range(1, 6) {
            let body = b.body("hub", sent);
            b.cmd(format!("send hub {body}"));
            sent += 1;
        }
    };
    burst(b);
    for l in &leaves {
        b.drain(l, false);
    }
    // One leaf left, or none: with two or more left, which of them libzmq's round-robin picks
    // next is an artefact of its pipe array (a removed pipe swaps places with the last active
    // one), not an order it promises, so it is not compared.
    let gone = b.rng.range(n - 1, n);
    for (l, ep) in leaves.iter().zip(&eps).take(gone) {
        // No fence on the leaf: libzmq's connecter may keep the TCP connection open for a while
        // after zmq_disconnect (its session lingers), so the leaf's DISCONNECTED is not an event
        // to wait for. The hub's own round-robin skips the pipe at once, which the burst shows.
        let _ = l;
        b.cmd(format!("disconnect hub {ep}"));
    }
    if b.rng.chance(30) {
        b.cmd(format!("disconnect hub {}", eps[0])); // again: ENOENT
    }
    burst(b);
    for l in &leaves {
        b.drain(l, false);
    }
}

/// A connecter whose peer goes away keeps its messages queued while it reconnects, and delivers
/// them to the peer that binds the same endpoint next.
fn reconnect(b: &mut Builder) {
    let kind = *b.rng.pick(&["PUSH", "DEALER", "PAIR"]);
    let peer = match kind {
        "PUSH" => "PULL",
        "DEALER" => "DEALER",
        _ => "PAIR",
    };
    b.new_socket("c", kind, &[]);
    b.new_socket("r1", peer, &[]);
    let ep = b.port();
    b.cmd(format!("connect c {ep}"));
    b.cmd(format!("bind r1 {ep}"));
    b.settle_new_link("c", "r1");
    for i in 0..b.rng.range(1, 3) {
        let body = b.body("c", i);
        b.cmd(format!("send c {body}"));
    }
    b.drain("r1", false);
    b.cmd("close r1");
    b.steps.push(Step::Disconnected("c".into(), 1));
    for i in 10..10 + b.rng.range(0, 3) {
        let body = b.body("c", i);
        b.cmd(format!("send c {body}"));
    }
    b.new_socket("r2", peer, &[]);
    b.cmd(format!("bind r2 {ep}"));
    b.settle_new_link("c", "r2");
    b.drain("r2", false);
    b.cmd(format!("send c {}", hex("last")));
    b.drain("r2", false);
}

/// Two DEALERs with the same routing id connect to a ROUTER, one after the other: with
/// ROUTER_HANDOVER the newcomer takes the id over, without it the first keeps it.
fn handover(b: &mut Builder) {
    let on = b.rng.chance(50);
    let opts = if on { vec!["router_handover=1".to_owned()] } else { vec![] };
    b.new_socket("rt", "ROUTER", &opts);
    let id = format!("routing_id={}", hex("same"));
    b.new_socket("d1", "DEALER", std::slice::from_ref(&id));
    b.new_socket("d2", "DEALER", &[id]);
    let ep = b.bind("rt");
    b.connect("d1", "rt", &ep);
    b.cmd(format!("send d1 {}", hex("from-d1")));
    b.drain("rt", false);
    b.cmd(format!("send rt {} {}", hex("same"), hex("to-same-1")));
    b.drain("d1", false);
    b.connect("d2", "rt", &ep);
    b.cmd(format!("send rt {} {}", hex("same"), hex("to-same-2")));
    b.drain("d1", false);
    b.drain("d2", false);
}
