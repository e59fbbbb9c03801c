//! Behaviour where users meet the reference programs (issue 13): what the Guide's clients send and
//! expect, and what a new user of the CLI runs into.

mod common;

use bytes::Bytes;
use chp::command::SnapshotReply;
use chp::{Client, Event, Snapshot};
use common::*;
use zmtp::{Message, Socket, SocketType};
use zmtp_testkit::{bounded, eventually, step};

fn frames(v: Vec<Bytes>) -> Message {
    Message::from(v)
}

/// The reference server serves any byte prefix as a subtree; ours did not answer at all when the
/// prefix was not `/seg/.../`, leaving such a client waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn icanhaz_with_any_prefix_is_served() {
    bounded(async {
        let server = server().await;
        let addr = server.address().clone();
        let writer = client(&addr, "").await;
        for (k, v) in [("/a/1", "1"), ("/ab", "2"), ("/b/1", "3"), ("plain", "4")] {
            writer.set(k, v, None).await.unwrap();
        }
        let dealer = Socket::new(SocketType::Dealer);
        dealer.connect(&addr.snapshot()).await.unwrap();
        for (prefix, keys) in
            [("/a", vec!["/a/1", "/ab"]), ("pl", vec!["plain"]), ("/b/1", vec!["/b/1"]), ("zz", vec![])]
        {
            dealer.send(frames(vec!["ICANHAZ?".into(), Bytes::from(prefix)])).await.unwrap();
            let mut got = Vec::new();
            loop {
                match SnapshotReply::parse(step("reply", dealer.recv()).await.unwrap().frames()).unwrap() {
                    SnapshotReply::KvSync(kv) => got.push(String::from_utf8(kv.key.to_vec()).unwrap()),
                    SnapshotReply::KthxBai(end) => {
                        assert_eq!(end.sequence, 4);
                        assert_eq!(end.subtree, prefix);
                        break;
                    }
                }
            }
            assert_eq!(got, keys, "prefix {prefix:?}");
        }
    })
    .await;
}

/// One KVSET with 60,000 distinct property names (~0.6 MB) used to hold the server for seconds (the
/// parser scanned every name seen for each new one). It is now refused at decode by its size,
/// counted as rejected, and the very next KVSET from the same publisher is applied: no time limit is
/// asserted, the proof is that the refusal happens before any per-name work (see kvmsg's tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kvset_with_sixty_thousand_properties_is_refused_and_the_next_is_served() {
    bounded(async {
        let server = server().await;
        let addr = server.address().clone();
        let mut raw = Raw::connect(&addr, "").await;
        let publisher = raw_publisher(&addr, &mut raw).await;
        let base = server.sequence();
        let rejected = server.stats().rejected;
        let properties: String = (0..60_000).map(|i| format!("name{i}=x\n")).collect();
        let mut attack = chp::KvMsg::new("/attack", "v");
        attack.uuid = Some(chp::Uuid::new_v4());
        let mut wire = attack.to_message().into_frames();
        wire[3] = Bytes::from(properties);
        publisher.send(Message::from(wire)).await.unwrap();
        let mut after = chp::KvMsg::new("/after", "ok");
        after.uuid = Some(chp::Uuid::new_v4());
        publisher.send(after.to_message()).await.unwrap();
        let echo = raw.next_kvpub().await;
        assert_eq!((echo.key.as_ref(), echo.sequence), (&b"/after"[..], base + 1));
        assert_eq!(server.stats().rejected - rejected, 1);
        assert_eq!(server.get(b"/attack"), None);
    })
    .await;
}

/// The client asks for the snapshot at once, before its subscription is live (as the reference
/// client does, so a one-shot `get` needs no HUGZ). An update published in between is in neither
/// the snapshot nor the subscription: the client must notice (the first update it receives is not
/// the snapshot's next) and ask again, ending with the exact map and nothing reported twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_between_an_early_snapshot_and_the_live_subscription_is_not_lost() {
    bounded(async {
        let fake = Fake::bind().await;
        let client = Client::start(options(&fake.address, "")).unwrap();
        let mut events = client.events();
        let (id, _) = fake.await_icanhaz().await;
        fake.reply(&id, &[("a", "1")], 5).await;
        step("sync", client.loaded()).await.unwrap();
        // Sequence 6 ("x") went out before the subscription was live: the client never sees it.
        fake.publish("b", "2", 7).await;
        let (id, _) = fake.next_icanhaz().await;
        fake.reply(&id, &[("a", "1"), ("b", "2"), ("x", "6")], 7).await;
        eventually("exact map", || {
            client.snapshot() == Snapshot { sequence: 7, map: map(&[("a", "1"), ("b", "2"), ("x", "6")]) }
        })
        .await;
        fake.publish("c", "3", 8).await;
        let (_, skipped) = wait_event(&mut events, |e| matches!(e, Event::Set { key, .. } if key == "c")).await;
        let synced = skipped.iter().filter(|e| matches!(e, Event::Synced { .. })).count();
        assert_eq!(synced, 1, "one Synced for one attempt: {skipped:?}");
        let x = skipped.iter().filter(|e| matches!(e, Event::Set { key, .. } if key == "x")).count();
        assert_eq!(x, 1, "x reported once: {skipped:?}");
        assert!(!skipped.iter().any(|e| matches!(e, Event::Gap { .. } | Event::ServerLost { .. })), "{skipped:?}");
    })
    .await;
}

/// A client whose first message is a KVPUB right after the snapshot takes one snapshot only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_proven_by_the_next_update_is_not_asked_again() {
    bounded(async {
        let fake = Fake::bind().await;
        let client = Client::start(options(&fake.address, "")).unwrap();
        let (id, _) = fake.await_icanhaz().await;
        fake.reply(&id, &[("a", "1")], 5).await;
        step("sync", client.loaded()).await.unwrap();
        fake.publish("b", "2", 6).await;
        fake.publish("c", "3", 7).await;
        eventually("applied", || client.sequence() == 7).await;
        // No second request came: the router has nothing queued beyond repeats of the first.
        let more = tokio::time::timeout(std::time::Duration::from_millis(300), fake.next_icanhaz()).await;
        assert!(more.is_err(), "asked again: {more:?}");
        assert_eq!(client.snapshot().map, map(&[("a", "1"), ("b", "2"), ("c", "3")]));
    })
    .await;
}
