//! The async runner: heartbeats over PUB/SUB, votes from the voter socket, the FSM in between.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::{Instant, MissedTickBehavior};
use zmtp::{Message, Monitor, MonitorEvent, Socket, SocketType};

use crate::codec;
use crate::config::Config;
use crate::error::Error;
use crate::fsm::{Event, Fsm, Role, State, Vote};
use crate::handle::{Handle, Shared, Status};
use crate::liveness::PeerClock;
use crate::notices::{Link, Notice, Notices, Outbox};
use crate::split::Split;

/// Upper bound on the SUB's reconnect interval, so a restarted peer is heard quickly.
const MAX_RECONNECT: Duration = Duration::from_millis(100);

/// Least time between two [`Notice::HandshakeFailed`] of one link for the same reason (a
/// misconfigured peer retries every 100 ms).
const HANDSHAKE_NOTICE_EVERY: Duration = Duration::from_secs(1);

/// After a failed handshake on the state SUB, the SUB is reconnected from scratch this much later:
/// a connection refused with an ERROR (our key not admitted) is not retried by zmtp (a protocol
/// error, as in libzmq), and the peer may since have been restarted with the right keys.
const REDIAL_AFTER: Duration = Duration::from_secs(1);

/// One server of a Binary Star pair.
///
/// [`bind`](Self::bind) binds the state PUB and the voter and connects the SUB to the peer;
/// [`run`](Self::run) heartbeats and judges votes until a fatal pair failure (`Err`), a
/// [`Handle::close`] (`Ok`), or until the future is dropped. Accepted requests, role changes and
/// peer liveness arrive on the [`Notices`] stream, in order.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use bstar::{BinaryStar, Config, Notice, State};
/// use zmtp::SocketType;
///
/// let dir = std::env::temp_dir();
/// let ep = |name: &str| format!("ipc://{}/bstar-doc-{}-{name}", dir.display(), std::process::id());
/// let heartbeat = Duration::from_millis(50);
///
/// let (primary, mut primary_notices) =
///     BinaryStar::bind(Config::primary(ep("p"), ep("b")).voter(ep("pv"), SocketType::Router).heartbeat(heartbeat))
///         .await?;
/// let (backup, _backup_notices) =
///     BinaryStar::bind(Config::backup(ep("b"), ep("p")).voter(ep("bv"), SocketType::Router).heartbeat(heartbeat))
///         .await?;
/// let (p, b) = (primary.handle(), backup.handle());
/// tokio::spawn(primary.run());
/// tokio::spawn(backup.run());
///
/// assert_eq!(primary_notices.recv().await, Some(Notice::PeerAlive(State::Backup)));
/// assert_eq!(primary_notices.recv().await, Some(Notice::BecameActive));
/// b.wait_for(|s| s.state == State::Passive).await;
///
/// // A client: the active server's accepted requests arrive as notices.
/// let client = zmtp::Socket::new(SocketType::Dealer);
/// client.connect(p.voter_endpoint()).await?;
/// client.send("hello").await?;
/// loop {
///     if let Some(Notice::Request(request)) = primary_notices.recv().await {
///         assert_eq!(request[1], "hello"); // [routing id, body]
///         p.voter().send(request).await?; // echo
///         break;
///     }
/// }
/// assert_eq!(client.recv().await?[0], "hello");
/// p.close();
/// b.close();
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct BinaryStar {
    config: Config,
    fsm: Fsm,
    statepub: Socket,
    statesub: Socket,
    voter: Socket,
    shared: Arc<Shared>,
    outbox: Outbox,
    /// Connection events of the state PUB, the SUB and the voter (for handshake failures).
    monitors: [(Link, Monitor); 3],
    /// When each link's last handshake failure was reported, and why.
    reported: [Option<(Instant, String)>; 3],
    /// When to reconnect the state SUB after a failed handshake.
    redial_at: Option<Instant>,
}

impl BinaryStar {
    /// Binds the state PUB (at `config.local`) and the voter, and connects the SUB to
    /// `config.remote` (in the background: the peer need not be up). Nothing is published and no
    /// vote is read until [`run`](Self::run).
    pub async fn bind(config: Config) -> Result<(BinaryStar, Notices), Error> {
        let voter_at = config.validate()?.to_owned();
        let statepub = Socket::new(SocketType::Pub);
        statepub.set_linger(Some(Duration::ZERO));
        let statesub = Socket::new(SocketType::Sub);
        statesub.set_linger(Some(Duration::ZERO));
        statesub.set_reconnect_ivl(Some(config.heartbeat.min(MAX_RECONNECT)));
        statesub.subscribe("")?;
        let voter = Socket::new(config.voter_type);
        voter.set_backlog(config.voter_backlog);
        if let Some(curve) = &config.curve {
            curve.state_pub(&statepub);
            curve.state_sub(&statesub);
            curve.voter(&voter);
        }
        let monitors = [
            (Link::StatePub, statepub.monitor()),
            (Link::StateSub, statesub.monitor()),
            (Link::Voter, voter.monitor()),
        ];

        let state_endpoint = statepub.bind(&config.local).await?;
        statesub.connect(&config.remote).await?;
        let voter_endpoint = voter.bind(&voter_at).await?;

        let fsm = match config.heal_split_brain {
            true => Fsm::healing(config.side),
            false => Fsm::new(config.side),
        };
        let status = Status {
            side: config.side,
            state: fsm.state(),
            peer: crate::Liveness::Unknown,
            peer_state: None,
            last_heard: None,
            peer_expiry: Instant::now() + config.peer_expiry(),
            accepted: 0,
            rejected: 0,
            malformed: 0,
            handshake_failures: 0,
            running: true,
            fatal: None,
        };
        let shared = Arc::new(Shared {
            status: watch::Sender::new(status),
            stop: Notify::new(),
            voter: voter.clone(),
            state_endpoint,
            voter_endpoint,
            heartbeat: config.heartbeat,
            eligible: std::sync::atomic::AtomicBool::new(true),
            may_start_alone: std::sync::atomic::AtomicBool::new(true),
            confirms_with_restarted_peer: std::sync::atomic::AtomicBool::new(false),
            silent: std::sync::atomic::AtomicBool::new(false),
        });
        let (outbox, notices) = Outbox::new(config.request_queue);
        let star = BinaryStar {
            config,
            fsm,
            statepub,
            statesub,
            voter,
            shared,
            outbox,
            monitors,
            reported: Default::default(),
            redial_at: None,
        };
        Ok((star, notices))
    }

    /// A handle for status, liveness, replies and stopping.
    pub fn handle(&self) -> Handle {
        Handle { shared: self.shared.clone() }
    }

    /// Runs the pair protocol. Returns `Err(Error::Fatal(..))` on dual actives / dual passives,
    /// `Err(Error::Socket(..))` if a socket fails, `Ok(())` after [`Handle::close`]. The state PUB,
    /// the SUB and the voter are closed when it returns. On a fatal error the runner first publishes
    /// its state once more (flushed for up to one heartbeat), so a peer in the same broken
    /// situation — the other half of a healed split brain — detects it and stops too.
    pub async fn run(mut self) -> Result<(), Error> {
        let result = self.serve().await;
        match &result {
            Err(Error::Fatal(e)) => {
                tracing::error!(side = %self.config.side, error = %e, "binary star pair failure, stopping");
                let fatal = Some(*e);
                self.shared.update(|s| {
                    s.fatal = fatal;
                    true
                });
                // Say our state once more, and let it leave: a peer in the same broken situation
                // (the other half of a split brain) then detects it too, instead of depending on
                // which heartbeat happened to cross first.
                let _ = self.publish();
                self.statepub.set_linger(Some(self.config.heartbeat));
                let _ = tokio::time::timeout(self.config.heartbeat, self.statepub.clone().close()).await;
            }
            Err(e) => tracing::error!(side = %self.config.side, error = %e, "binary star runner failed"),
            Ok(()) => tracing::info!(side = %self.config.side, "binary star runner stopped"),
        }
        // Stop accepting clients at once; give replies already queued a heartbeat to leave.
        let voter = self.voter.clone();
        let _ = tokio::time::timeout(self.config.heartbeat, voter.close()).await;
        result
    }

    async fn serve(&mut self) -> Result<(), Error> {
        let mut clock = PeerClock::new(Instant::now(), self.config.peer_expiry());
        let expiry = clock.expiry();
        self.shared.update(|s| {
            s.peer_expiry = expiry;
            false
        });
        let mut ticker = tokio::time::interval(self.config.heartbeat);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tracing::info!(side = %self.config.side, heartbeat = ?self.config.heartbeat, "binary star running");
        loop {
            let deadline = clock.deadline();
            tokio::select! {
                biased;
                () = self.shared.stop.notified() => return Ok(()),
                _ = ticker.tick() => {
                    if !self.shared.silent.load(std::sync::atomic::Ordering::Relaxed) {
                        self.publish()?;
                    }
                }
                msg = self.statesub.recv() => self.on_state_message(msg?, &mut clock)?,
                () = sleep_until(deadline), if deadline.is_some() => self.check_peer(&mut clock, Instant::now()),
                msg = gated_recv(&self.outbox, &self.voter) => self.on_request(msg?, &mut clock)?,
                () = sleep_until(self.redial_at), if self.redial_at.is_some() => self.redial().await?,
                (i, event) = next_monitor_event(&mut self.monitors) => {
                    if let MonitorEvent::HandshakeFailed { peer, error, .. } = event {
                        if self.config.curve.is_none() && error.closed_by_peer() {
                            // Without security, a short-lived client or a port scanner: not a
                            // handshake failure. (Under CURVE a server closes on a key it cannot
                            // decrypt, so a close mid-handshake is reported.)
                            tracing::debug!(side = %self.config.side, %peer, %error, "connection closed during the handshake");
                        } else {
                            self.handshake_failed(i, peer, error.to_string());
                        }
                    }
                }
            }
        }
    }

    /// Reconnects the state SUB from scratch (see [`REDIAL_AFTER`]).
    async fn redial(&mut self) -> Result<(), Error> {
        self.redial_at = None;
        tracing::info!(side = %self.config.side, peer = %self.config.remote, "reconnecting the state SUB after a failed handshake");
        let _ = self.statesub.disconnect(&self.config.remote).await;
        self.statesub.connect(&self.config.remote).await?;
        Ok(())
    }

    fn handshake_failed(&mut self, i: usize, peer: String, reason: String) {
        let link = self.monitors[i].0;
        if link == Link::StateSub && self.redial_at.is_none() {
            self.redial_at = Some(Instant::now() + REDIAL_AFTER);
        }
        self.shared.update(|s| {
            s.handshake_failures += 1;
            true
        });
        let now = Instant::now();
        let repeated = |(at, last): &(Instant, String)| now < *at + HANDSHAKE_NOTICE_EVERY && *last == reason;
        if self.reported[i].as_ref().is_some_and(repeated) {
            tracing::debug!(side = %self.config.side, %link, %peer, %reason, "security handshake failed");
            return;
        }
        self.reported[i] = Some((now, reason.clone()));
        tracing::warn!(side = %self.config.side, %link, %peer, %reason, "security handshake failed");
        self.outbox.send(Notice::HandshakeFailed { link, peer, reason });
    }

    fn on_state_message(&mut self, msg: Message, clock: &mut PeerClock) -> Result<(), Error> {
        let peer = match codec::decode(&msg) {
            Ok(peer) => peer,
            Err(e) => {
                if let Some(suppressed) = zmtp::throttle::allow("bstar: malformed state message") {
                    tracing::warn!(side = %self.config.side, error = %e, suppressed, "dropping malformed state message");
                }
                self.shared.update(|s| {
                    s.malformed += 1;
                    true
                });
                return Ok(());
            }
        };
        let now = Instant::now();
        let revived = clock.heard(now, peer);
        let expiry = clock.expiry();
        // Heard as PRIMARY or BACKUP after silence or another state: the peer restarted.
        let mut restarted = false;
        self.shared.update(|s| {
            let changed = revived || s.peer_state != Some(peer);
            restarted = changed && matches!(peer, State::Primary | State::Backup);
            s.peer = clock.liveness();
            s.peer_state = Some(peer);
            s.last_heard = Some(now);
            s.peer_expiry = expiry;
            changed
        });
        if revived {
            tracing::info!(side = %self.config.side, peer = %peer, "peer alive");
            self.outbox.send(Notice::PeerAlive(peer));
        }
        if restarted && self.shared.silent.swap(false, std::sync::atomic::Ordering::Relaxed) {
            // It no longer knows why this server fell silent, and hearing nothing it would wait
            // for good (see `Handle::fall_silent`). A late copy of the state it had before we
            // fell silent is no change, and leaves us silent.
            tracing::info!(side = %self.config.side, peer = %peer, "the peer restarted: publishing our state again");
        }
        self.sync_eligibility();
        let outcome = self.fsm.handle(Event::from_peer(peer), false)?;
        if let Some(split) = outcome.split {
            self.split(split);
        }
        if let Some(role) = outcome.became {
            self.became(role)?;
        }
        Ok(())
    }

    /// Says what healing a split brain did (see [`crate::split`]).
    fn split(&self, split: Split) {
        let side = self.config.side;
        match split {
            Split::Stay => tracing::warn!(
                %side,
                "dual actives: this server took over while its peer was out of contact (stalled or partitioned); \
                 staying active, the peer must yield"
            ),
            Split::Yield => tracing::warn!(
                %side,
                "dual actives: the peer took over while this server was out of contact (stalled or partitioned); \
                 yielding: passive, following the peer"
            ),
            Split::Serve => tracing::warn!(%side, "dual passives: the primary becomes active"),
            Split::Wait => tracing::warn!(%side, "dual passives: waiting for the primary to become active"),
        }
        self.outbox.send(Notice::SplitBrain(split));
    }

    fn on_request(&mut self, msg: Message, clock: &mut PeerClock) -> Result<(), Error> {
        let now = Instant::now();
        self.check_peer(clock, now);
        self.sync_eligibility();
        let outcome = self.fsm.handle(Event::ClientRequest, clock.expired(now))?;
        if let Some(role) = outcome.became {
            self.became(role)?;
        }
        match outcome.vote {
            Some(Vote::Accept) => {
                self.shared.update(|s| {
                    s.accepted += 1;
                    true
                });
                if !self.outbox.send(Notice::Request(msg)) {
                    tracing::debug!(side = %self.config.side, "accepted request discarded: nobody reads notices");
                }
            }
            _ => {
                tracing::debug!(side = %self.config.side, state = %self.fsm.state(), "request rejected");
                self.shared.update(|s| {
                    s.rejected += 1;
                    true
                });
            }
        }
        Ok(())
    }

    /// Brings the application's [`Handle::set_eligible`] into the FSM.
    fn sync_eligibility(&mut self) {
        let eligible = self.shared.eligible.load(std::sync::atomic::Ordering::Relaxed);
        self.fsm.set_eligible(eligible);
        self.fsm.set_may_start_alone(self.shared.may_start_alone.load(std::sync::atomic::Ordering::Relaxed));
        self.fsm.set_confirms_with_restarted_peer(
            self.shared.confirms_with_restarted_peer.load(std::sync::atomic::Ordering::Relaxed),
        );
    }

    fn check_peer(&mut self, clock: &mut PeerClock, now: Instant) {
        if clock.check(now) {
            tracing::warn!(side = %self.config.side, state = %self.fsm.state(), "peer silent");
            let liveness = clock.liveness();
            self.shared.update(|s| {
                s.peer = liveness;
                true
            });
            self.outbox.send(Notice::PeerSilent);
        }
    }

    fn became(&mut self, role: Role) -> Result<(), Error> {
        let state = self.fsm.state();
        tracing::info!(side = %self.config.side, %state, "role change");
        // A new state is said again (see `Handle::fall_silent`).
        self.shared.silent.store(false, std::sync::atomic::Ordering::Relaxed);
        self.shared.update(|s| {
            s.state = state;
            true
        });
        self.outbox.send(match role {
            Role::Active => Notice::BecameActive,
            Role::Passive => Notice::BecamePassive,
        });
        // Tell the peer at once rather than at the next heartbeat.
        self.publish()
    }

    fn publish(&self) -> Result<(), Error> {
        match self.statepub.try_send(codec::encode(self.fsm.state())) {
            Ok(()) | Err(zmtp::Error::WouldBlock) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.fsm.state()
    }
}

impl Drop for BinaryStar {
    fn drop(&mut self) {
        self.shared.update(|s| {
            s.running = false;
            true
        });
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The next event of any of the monitors (pending forever once all have ended).
async fn next_monitor_event(monitors: &mut [(Link, Monitor); 3]) -> (usize, MonitorEvent) {
    let [(_, a), (_, b), (_, c)] = monitors;
    let ended = || std::future::pending::<(usize, MonitorEvent)>();
    tokio::select! {
        Some(ev) = a.next_event() => (0, ev),
        Some(ev) = b.next_event() => (1, ev),
        Some(ev) = c.next_event() => (2, ev),
        else => ended().await,
    }
}

/// Reads the next vote once the application has room for another accepted request.
async fn gated_recv(outbox: &Outbox, voter: &Socket) -> zmtp::Result<Message> {
    outbox.room().await;
    voter.recv().await
}
