//! Healing a split brain: what a server does when its peer claims its own role.
//!
//! The Guide's Binary Star aborts both servers on dual actives (a healed partition, or an active
//! that stalled — a long GC-like pause, `SIGSTOP` — for longer than the peer expiry while its peer
//! took over). That turns one stall into a total outage. With healing on
//! ([`Config::heal_split_brain`](crate::Config::heal_split_brain)) the pair settles back to exactly
//! one active, deterministically, without any message beyond the Guide's one-frame state:
//!
//! - **Dual actives.** A server that *took over* — became active on a client's vote because its
//!   peer had gone silent — since it last heard the peer in any state but ACTIVE holds the newer
//!   truth: the peer was out of contact (stalled or partitioned away) when the clients moved, so
//!   it **stays** active and the peer must yield. A server that did not take over since then
//!   **yields** at once: it becomes passive and follows (re-syncs from) the other. Only one side of
//!   a stall or a partition can have taken over (a server that is active cannot take over again),
//!   so in every real case exactly one side yields. Should both have taken over anyway, both
//!   stay for [`STAY_LIMIT`] conflicting state messages, then the backup yields.
//! - **Dual passives** (both yielded, which needs both to be active without a takeover: a
//!   misconfiguration or a race): the primary becomes active and the backup waits.
//!
//! [`Healer`] is a pure type: events in, decisions out, no clock and no sockets.

use crate::roles::{Event, Side, State};

/// How many conflicting ACTIVE state messages a server that took over waits for its peer to
/// yield before the side decides (the backup yields). Two heartbeats are one peer expiry.
pub const STAY_LIMIT: u32 = 3;

/// What a server did about a peer in its own role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Split {
    /// Dual actives: this server took over while the peer was out of contact; it stays active and
    /// waits for the peer to yield.
    Stay,
    /// Dual actives: the peer took over while this server was out of contact; this server became
    /// passive and follows the peer.
    Yield,
    /// Dual passives: this server (the primary) became active.
    Serve,
    /// Dual passives: this server (the backup) waits for the primary to become active.
    Wait,
}

/// The memory needed to decide (see the [module docs](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Healer {
    /// Became active on a vote (peer expired) since the peer was last heard in a non-ACTIVE state.
    took_over: bool,
    /// Conflicting ACTIVE state messages heard in a row.
    conflicts: u32,
}

impl Healer {
    /// Notes an event the state machine handled without conflict, and the state it led to.
    pub fn observe(&mut self, before: State, event: Event, after: State) {
        match event {
            Event::ClientRequest if before != State::Active && after == State::Active => self.took_over = true,
            Event::ClientRequest | Event::PeerActive => {}
            // The peer is heard in a role that does not conflict with ours: contact is restored.
            Event::PeerPrimary | Event::PeerBackup | Event::PeerPassive => *self = Healer::default(),
        }
        if after == State::Passive {
            *self = Healer::default();
        }
    }

    /// This server is ACTIVE and so is its peer: stay or yield.
    pub fn dual_active(&mut self, side: Side) -> Split {
        self.conflicts = self.conflicts.saturating_add(1);
        let stay = self.took_over && (self.conflicts <= STAY_LIMIT || side == Side::Primary);
        if stay {
            Split::Stay
        } else {
            *self = Healer::default();
            Split::Yield
        }
    }

    /// This server is PASSIVE and so is its peer: the primary serves, the backup waits.
    pub fn dual_passive(&mut self, side: Side) -> Split {
        *self = Healer::default();
        match side {
            Side::Primary => Split::Serve,
            Side::Backup => Split::Wait,
        }
    }

    /// True when this server took over since it last heard its peer in a non-ACTIVE state.
    pub fn took_over(&self) -> bool {
        self.took_over
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::*;
    use State::*;

    #[test]
    fn the_server_that_took_over_stays_and_the_other_yields() {
        // The stalled active: active since the pair formed, never took over.
        let mut stalled = Healer::default();
        stalled.observe(Primary, PeerBackup, Active);
        stalled.observe(Active, PeerPassive, Active);
        // Its peer: passive, then took over on a vote while the active was silent.
        let mut peer = Healer::default();
        peer.observe(Backup, PeerActive, Passive);
        peer.observe(Passive, ClientRequest, Active);
        assert!(peer.took_over() && !stalled.took_over());
        for side in [Side::Primary, Side::Backup] {
            assert_eq!(peer.clone().dual_active(side), Split::Stay);
            assert_eq!(stalled.clone().dual_active(side), Split::Yield);
        }
    }

    #[test]
    fn hearing_the_peer_in_a_peaceful_role_forgets_the_takeover() {
        let mut h = Healer::default();
        h.observe(Passive, ClientRequest, Active);
        assert!(h.took_over());
        h.observe(Active, PeerActive, Active); // a conflict, handled elsewhere: remembered
        assert!(h.took_over());
        h.observe(Active, PeerPassive, Active);
        assert!(!h.took_over());
        h.observe(Primary, ClientRequest, Active);
        assert!(h.took_over());
        h.observe(Active, PeerBackup, Active);
        assert!(!h.took_over());
        // A rejected vote is no takeover; nor is serving while already active.
        h.observe(Passive, ClientRequest, Passive);
        h.observe(Active, ClientRequest, Active);
        assert!(!h.took_over());
    }

    #[test]
    fn both_took_over_the_backup_yields_after_the_limit() {
        let mut primary = Healer::default();
        let mut backup = Healer::default();
        primary.observe(Primary, ClientRequest, Active);
        backup.observe(Passive, ClientRequest, Active);
        for _ in 0..STAY_LIMIT {
            assert_eq!(primary.dual_active(Side::Primary), Split::Stay);
            assert_eq!(backup.dual_active(Side::Backup), Split::Stay);
        }
        assert_eq!(primary.dual_active(Side::Primary), Split::Stay);
        assert_eq!(backup.dual_active(Side::Backup), Split::Yield);
        assert!(!backup.took_over());
    }

    #[test]
    fn neither_took_over_both_yield_then_the_primary_serves() {
        let mut h = Healer::default();
        assert_eq!(h.dual_active(Side::Primary), Split::Yield);
        assert_eq!(h.dual_active(Side::Backup), Split::Yield);
        assert_eq!(h.dual_passive(Side::Primary), Split::Serve);
        assert_eq!(h.dual_passive(Side::Backup), Split::Wait);
    }
}
