//! Whether our KVSETs reach the collector we are in sync with: ZeroMQ's slow joiner, answered.
//!
//! Our PUB drops a KVSET sent before the collector's subscription has reached it, and a connection
//! is up (its handshake done) a moment before that subscription arrives. A dropped write is sent
//! again after the retransmit interval, but the writes sent behind it meanwhile got through: the
//! server applied them first, so a later write to a key could lose to an earlier one. So after each
//! new connection to a collector the client sends one write, the *probe*, and nothing else until
//! its echo comes back (retransmitting the probe itself if need be): the echo proves the
//! subscription, and the writes held behind the probe follow in order.
//!
//! Not covered: when no write is held, the probe after a reconnect is a retransmit, and the echo of
//! its copy sent on the earlier connection would pass for proof.

use tokio::time::Instant;

use super::outbox::State;
use crate::uuid::Uuid;

#[derive(Debug, Default)]
pub(super) struct CollectorProof {
    /// The collector endpoint whose current connection an echo has proven.
    proven: Option<String>,
    /// The write sent to prove a collector's connection, and that collector.
    probe: Option<(Uuid, String)>,
}

impl CollectorProof {
    /// A connection to `collector` came up (again) or went down: it has to be proven anew.
    pub fn forget(&mut self, collector: &str) {
        if self.proven.as_deref() == Some(collector) {
            self.proven = None;
        }
        if self.probe.as_ref().is_some_and(|(_, at)| at == collector) {
            self.probe = None;
        }
    }

    pub fn is_proven(&self, collector: &str) -> bool {
        self.proven.as_deref() == Some(collector)
    }

    /// The echo of our write `uuid` came: true if it proved a collector.
    pub fn echoed(&mut self, uuid: &Uuid) -> bool {
        match self.probe.take() {
            Some((probe, collector)) if probe == *uuid => {
                self.proven = Some(collector);
                true
            }
            other => {
                self.probe = other;
                false
            }
        }
    }

    /// While `collector` is not proven: the write to send now, if any — the probe when it is due
    /// for a retransmit, else (no probe in flight) the first write due, which becomes the probe.
    pub fn next_probe(
        &mut self,
        collector: &str,
        outbox: &mut State,
        now: Instant,
        retry: std::time::Duration,
    ) -> Option<Uuid> {
        if let Some((uuid, at)) = &self.probe
            && at == collector
            && let Some(p) = outbox.pending.get(uuid)
        {
            return p.sent.is_none_or(|t| t + retry <= now).then_some(*uuid);
        }
        let first = outbox.due(now, retry).into_iter().next()?;
        self.probe = Some((first, collector.to_owned()));
        Some(first)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;
    use crate::client::outbox::Outbox;
    use crate::kvmsg::KvMsg;

    fn add(state: &mut State, key: &str) -> Uuid {
        let mut msg = KvMsg::new(key.to_owned(), "v");
        let uuid = Uuid::new_v4();
        msg.uuid = Some(uuid);
        state.insert(msg, oneshot::channel().0, None, Instant::now() + Duration::from_secs(60));
        uuid
    }

    #[test]
    fn one_write_at_a_time_until_its_echo_proves_the_collector() {
        let outbox = Outbox::new(Duration::from_secs(60));
        let mut state = outbox.lock();
        let (collector, retry) = ("tcp://s:5558", Duration::from_secs(1));
        let (first, second) = (add(&mut state, "/a"), add(&mut state, "/b"));
        let mut proof = CollectorProof::default();
        let now = Instant::now();
        assert_eq!(proof.next_probe(collector, &mut state, now, retry), Some(first), "the first held write");
        state.pending.get_mut(&first).unwrap().sent = Some(now);
        assert_eq!(proof.next_probe(collector, &mut state, now, retry), None, "nothing behind the probe");
        assert_eq!(proof.next_probe(collector, &mut state, now + retry, retry), Some(first), "its retransmit");
        assert!(!proof.echoed(&second), "another write's echo proves nothing");
        assert!(!proof.is_proven(collector));
        assert!(proof.echoed(&first));
        assert!(proof.is_proven(collector) && !proof.is_proven("tcp://other:5558"));
        proof.forget(collector);
        assert!(!proof.is_proven(collector), "a new connection is proven anew");
        state.pending.remove(&first);
        assert_eq!(proof.next_probe(collector, &mut state, now, retry), Some(second));
        proof.forget(collector);
        assert!(!proof.echoed(&second), "a probe for a connection that went down");
    }
}
