//! The high-availability server pair: two CHP servers, a primary and a backup, under Binary Star
//! (the Guide's Clone Model Six, with the reference's bugs fixed).
//!
//! Each server binds the usual three ports — SNAPSHOT (ROUTER) at P, PUBLISHER (PUB) at P+1,
//! COLLECTOR (SUB) at P+2 — plus the Binary Star state PUB, and connects a SUB to its peer's state
//! PUB ([`bstar`]). The SNAPSHOT socket is Binary Star's *voter*: a client's ICANHAZ? is the
//! request that lets a passive server take over once the active's heartbeats have expired. Clients
//! publish every KVSET to *both* collectors.
//!
//! - **Active:** exactly the single [`Server`](super::Server): sequences, stores and republishes
//!   updates, expires ttls, answers snapshots, sends HUGZ; plus it drops a KVSET whose UUID it (or
//!   the active it took over from) already published, so a client's retransmit after a failover
//!   is not published twice.
//! - **Passive:** holds each client update on the pending list ([`pending`](super::pending)) and
//!   follows the active: a SUB to the peer's P+1 (subscribe all), proven live by its first message
//!   (zguide #818), then a `PEERSYNC?` snapshot of the peer's whole map with each key's remaining
//!   ttl ([`crate::command::PEERSYNC`]), then every update in sequence order. Each update from the
//!   active removes its copy from the pending list. The snapshot fetch never blocks anything (it
//!   is one more branch of the event loop, heartbeats run in their own task) and is retried on a
//!   fresh socket after [`HaConfig::peer_sync_timeout`]. A passive server publishes HUGZ but no
//!   updates, so clients that fail over to it can vote.
//! - **Promotion:** stop following, replay the pending list with new sequences, then serve the
//!   snapshot request that caused the failover (Binary Star delivers `BecameActive` before that
//!   request). **A server that never held the truth does not take over:** one that was never
//!   active and has no complete copy of the active's map yet (a restarted peer still copying it)
//!   rejects votes and stays passive when its peer restarts ([`bstar::Handle::set_eligible`]),
//!   and logs why (a durable one does go active when its peer restarts, but only to confirm, as
//!   below: it serves only if its journal's map is at least as new as the restarted peer's, and
//!   otherwise steps aside for it; should the peer die again first, it waits for it even with
//!   [`HaConfig::start_alone`]). If the active dies then, the pair serves nobody — clients keep the maps they
//!   hold and one-shot commands fail — rather than serve a partial map as the truth; with both
//!   copies gone, restarting both servers starts over from an empty map. (A server promoted in the
//!   middle of a re-sync after a gap, which held a complete copy before, starts from what it has
//!   and says so.)
//! - **Split brain:** Binary Star runs with healing on ([`bstar::split`]): when both servers are
//!   active (a partition healed, or an active resumed after a stall longer than the peer expiry),
//!   the one that took over stays, the other becomes passive and re-syncs from it (keeping its old
//!   map until the new copy is complete). Neither stops.
//! - **On disk** (a [`data_dir`](crate::ServerConfig::data_dir) for each server): the active
//!   journals before it publishes, the passive journals what it follows and takes the active's
//!   map whole on a `PEERSYNC?`. Each promotion starts a new epoch, stored beside the map, and
//!   maps are ordered by (epoch, sequence) ([`crate::command::Freshness`]). A durable passive's
//!   `PEERSYNC?` carries its own; an active formed with a live peer after a restart serves
//!   nothing until it has it. If the peer's map is newer it answers
//!   [`PEER_NEWER`](crate::command::PEER_NEWER) and falls silent (no Binary Star state, no HUGZ:
//!   [`bstar::Handle::fall_silent`]); the peer, finding it silent, takes over on a client's vote,
//!   and the silent server, hearing the peer ACTIVE, yields ([`bstar::split`]) and follows it (if
//!   the peer restarts first, and so forgets the answer, Binary Star speaks again and the two
//!   compare anew). It does not stop: a stopped server that a service manager restarted at once came back ACTIVE
//!   before its peer had found it silent, and stopped again. A durable primary restarted alone waits for
//!   its peer unless [`HaConfig::start_alone`]. Under CURVE only the peer's key may say how new
//!   its map is (another key's `PEERSYNC?` is a client's request); without it nothing is
//!   authenticated, and anyone who reaches P could claim a newer map.
//! - **CURVE** ([`HaConfig::curve`], [`ServerCurve`](crate::security::ServerCurve)): the CHP
//!   sockets, the Binary Star voter and state link, and the passive's SUB and PEERSYNC? DEALER to
//!   the peer (CURVE clients of it, with this server's key pair, which the peer admits even when it
//!   has a client allow list) are all encrypted and authenticated.
//!
//! The code: `config.rs` holds the settings, `handle.rs` what the application holds ([`HaServer`]
//! and what it reports), `driver.rs` the task that runs the pair (its passive side in
//! `driver/follow.rs`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), chp::server::ha::HaError> {
//! use chp::server::ha::{HaConfig, HaServer};
//! // The reference's pair: primary P=5556 (state 5003), backup P=5566 (state 5004).
//! let primary = HaServer::bind(HaConfig::reference_primary()).await?;
//! let backup = HaServer::bind(HaConfig::reference_backup()).await?;
//! // Clients list both: chp::ClientOptions::for_servers(vec![primary.address().clone(), backup.address().clone()])
//! primary.wait().await
//! # }
//! ```

mod config;
mod driver;
mod handle;
mod reports;

pub use self::config::{HaConfig, HaError};
pub use self::handle::HaServer;
pub use self::reports::{HaEvent, HaStats, HaStatus};
