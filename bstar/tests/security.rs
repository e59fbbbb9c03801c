//! Binary Star over CURVE: the pair heartbeats and fails over with CURVE on the state link and the
//! voter (one shared key pair, or one per server); a pair configured with the wrong peer key never
//! hears each other; clients with the wrong server key, an unlisted key or no CURVE are refused by
//! the voter and never counted as votes.

mod common;

use std::time::Duration;

use bstar::fsm::Vote;
use bstar::{Config, Curve, Link, Liveness, Notice, State};
use common::{Node, PairEndpoints, Voter};
use zmtp::security::KeyPair;
use zmtp_testkit::{bounded, eventually};

const HEARTBEAT: Duration = Duration::from_millis(50);

/// Options set on a client socket before it connects.
type SocketSetup<'a> = Box<dyn FnOnce(&zmtp::Socket) + 'a>;

/// A voter that is a CURVE client of `server` with `keys`.
async fn curve_voter(node: &Node, server: [u8; 32], keys: KeyPair) -> Voter {
    Voter::with(node.handle.voter_endpoint(), |s| {
        s.set_curve_serverkey_bytes(server);
        s.set_curve_keypair(keys);
    })
    .await
}

/// Waits (bounded) until the node's recorder has logged a handshake failure on `link`; returns its
/// reason.
async fn handshake_failure(node: &Node, link: Link) -> String {
    let mut found = None;
    eventually(&format!("a handshake failure on the {link}"), || {
        found = node.notices().into_iter().find_map(|n| match n {
            Notice::HandshakeFailed { link: l, reason, .. } if l == link => Some(reason),
            _ => None,
        });
        found.is_some()
    })
    .await;
    found.expect("the failure just seen")
}

/// With one shared key pair and with a key pair per server: the pair converges, heartbeats flow
/// both ways, the active serves a CURVE client, and when it dies the passive takes over on the
/// next vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curve_pair_heartbeats_and_fails_over() {
    bounded(async {
        for shared in [true, false] {
            let eps = PairEndpoints::new();
            let (primary_keys, backup_keys) = if shared {
                let keys = KeyPair::generate();
                (keys.clone(), keys)
            } else {
                (KeyPair::generate(), KeyPair::generate())
            };
            let (p_curve, b_curve) = if shared {
                (Curve::shared(primary_keys.clone()), Curve::shared(backup_keys.clone()))
            } else {
                (
                    Curve::with_peer(primary_keys.clone(), backup_keys.public()),
                    Curve::with_peer(backup_keys.clone(), primary_keys.public()),
                )
            };
            let primary = Node::start(eps.primary(HEARTBEAT).curve(p_curve)).await;
            let backup = Node::start(eps.backup(HEARTBEAT).curve(b_curve)).await;
            primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
            backup.wait("backup PASSIVE", |s| s.state == State::Passive).await;

            // Heartbeats keep flowing: each hears the other again, several times over (the status
            // watch does not wake per heartbeat, so poll `last_heard`).
            for node in [&primary, &backup] {
                let later = node.handle.last_heard().expect("heard the peer") + HEARTBEAT * 3;
                eventually("three more heartbeats", || node.handle.last_heard().is_some_and(|t| t >= later)).await;
                assert!(node.handle.peer_alive());
            }
            assert_eq!(primary.status().peer_state, Some(State::Passive), "shared={shared}");
            assert_eq!(backup.status().peer_state, Some(State::Active), "shared={shared}");

            // The active serves a client that knows its public key.
            let mut to_primary = curve_voter(&primary, primary_keys.public(), KeyPair::generate()).await;
            assert_eq!(to_primary.vote(&primary).await.vote, Vote::Accept);
            let mut to_backup = curve_voter(&backup, backup_keys.public(), KeyPair::generate()).await;
            assert_eq!(to_backup.vote(&backup).await.vote, Vote::Reject, "the passive does not serve");

            // Failover: the active dies; once its heartbeats expire, the next vote promotes the backup.
            primary.kill().await;
            backup.wait("the primary silent", |s| s.peer == Liveness::Silent).await;
            assert_eq!(to_backup.vote(&backup).await.vote, Vote::Accept, "shared={shared}");
            assert_eq!(backup.roles(), vec![Notice::BecamePassive, Notice::BecameActive]);
            assert_eq!(backup.status().handshake_failures, 0, "shared={shared}: {:?}", backup.notices());
            backup.kill().await;
        }
    })
    .await;
}

/// The backup was given a key pair the primary does not expect: the primary's state PUB refuses
/// the backup's SUB (key not admitted), the primary's SUB cannot open the backup's PUB (wrong
/// server key), and neither ever hears the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_with_the_wrong_peer_key_never_hears_each_other() {
    bounded(async {
        let eps = PairEndpoints::new();
        let (primary_keys, expected_backup, actual_backup) =
            (KeyPair::generate(), KeyPair::generate(), KeyPair::generate());
        let primary =
            Node::start(eps.primary(HEARTBEAT).curve(Curve::with_peer(primary_keys.clone(), expected_backup.public())))
                .await;
        let backup =
            Node::start(eps.backup(HEARTBEAT).curve(Curve::with_peer(actual_backup, primary_keys.public()))).await;

        let refused = handshake_failure(&primary, Link::StatePub).await;
        assert!(refused.contains("400"), "the primary's PUB refuses the unknown key: {refused}");
        handshake_failure(&primary, Link::StateSub).await;
        handshake_failure(&backup, Link::StateSub).await;
        for node in [&primary, &backup] {
            let status = node.status();
            assert_eq!((status.peer_state, status.last_heard), (None, None), "{status:?}");
            assert!(!node.handle.peer_alive());
            assert!(!node.notices().iter().any(|n| matches!(n, Notice::PeerAlive(_))), "{:?}", node.notices());
        }
        primary.kill().await;
        backup.kill().await;
    })
    .await;
}

/// The primary expects another backup key and refuses the backup's SUB with an ERROR (which zmtp,
/// like libzmq, does not retry); once the primary is restarted with the right key, the backup's SUB
/// dials again by itself and the pair converges without restarting the backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_state_link_heals_when_the_peer_is_fixed() {
    bounded(async {
        let eps = PairEndpoints::new();
        let (primary_keys, backup_keys) = (KeyPair::generate(), KeyPair::generate());
        let wrong = Curve::with_peer(primary_keys.clone(), KeyPair::generate().public());
        let primary = Node::start(eps.primary(HEARTBEAT).curve(wrong)).await;
        let backup =
            Node::start(eps.backup(HEARTBEAT).curve(Curve::with_peer(backup_keys.clone(), primary_keys.public())))
                .await;
        let refused = handshake_failure(&backup, Link::StateSub).await;
        assert!(refused.contains("400"), "{refused}");
        assert_eq!(backup.status().peer_state, None);
        primary.kill().await;

        let fixed = Curve::with_peer(primary_keys, backup_keys.public());
        let primary = Node::start(eps.primary(HEARTBEAT).curve(fixed)).await;
        primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
        backup.wait("backup PASSIVE (it hears the fixed primary)", |s| s.state == State::Passive).await;
        assert!(backup.handle.peer_alive() && primary.handle.peer_alive());
        primary.kill().await;
        backup.kill().await;
    })
    .await;
}

/// Clients with the wrong server key, with a key not on the voter's allow list, and without CURVE
/// are refused at the handshake: their requests are never votes (neither accepted nor rejected),
/// and the server reports the refusals. A listed client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voter_refuses_clients_with_a_wrong_key_or_no_curve() {
    bounded(async {
        let eps = PairEndpoints::new();
        let (keys, client_keys) = (KeyPair::generate(), KeyPair::generate());
        let curve = Curve::shared(keys.clone()).allow_client(client_keys.public());
        let primary = Node::start(eps.primary(HEARTBEAT).curve(curve.clone())).await;
        let backup = Node::start(eps.backup(HEARTBEAT).curve(curve)).await;
        primary.wait("primary ACTIVE", |s| s.state == State::Active).await;
        backup.wait("backup PASSIVE", |s| s.state == State::Passive).await;

        let cases: [(&str, SocketSetup<'_>, &str); 3] = [
            (
                "wrong server key",
                Box::new(|s| {
                    s.set_curve_serverkey_bytes(KeyPair::generate().public());
                    s.set_curve_keypair(client_keys.clone());
                }),
                "hello",
            ),
            (
                "unlisted client key",
                Box::new(|s| {
                    s.set_curve_serverkey_bytes(keys.public());
                    s.set_curve_keypair(KeyPair::generate());
                }),
                "not allowed",
            ),
            ("no CURVE", Box::new(|_| {}), "mechanism"),
        ];
        for (what, setup, reason) in cases {
            let failures = primary.status().handshake_failures;
            let intruder = Voter::with(primary.handle.voter_endpoint(), setup).await;
            // The refusal may come before this send: like libzmq, a connecter drops its pipe (and
            // whatever was queued on it) after a failed handshake, so WouldBlock is also a refusal.
            match intruder.socket().try_send("let me in") {
                Ok(()) | Err(zmtp::Error::WouldBlock) => {}
                Err(e) => panic!("{what}: {e}"),
            }
            let status = primary.wait(what, |s| s.handshake_failures > failures).await;
            assert_eq!((status.accepted, status.rejected), (0, 0), "{what}: never a vote");
            let recv = tokio::time::timeout(HEARTBEAT * 4, intruder.socket().recv()).await;
            assert!(recv.is_err(), "{what}: no answer, got {recv:?}");
            let status = primary.status();
            assert_eq!((status.accepted, status.rejected), (0, 0), "{what}: never a vote");
            eventually(&format!("{what}: a {reason:?} refusal"), || {
                primary.notices().iter().any(|n| {
                    matches!(n, Notice::HandshakeFailed { link: Link::Voter, reason: r, .. } if r.to_lowercase().contains(reason))
                })
            })
            .await;
        }

        let mut client = curve_voter(&primary, keys.public(), client_keys).await;
        assert_eq!(client.vote(&primary).await.vote, Vote::Accept);
        primary.kill().await;
        backup.kill().await;
    })
    .await;
}

/// `Config::curve` is off by default.
#[test]
fn curve_is_off_by_default() {
    assert!(Config::primary("ipc://a", "ipc://b").curve.is_none());
}
