//! A watcher reports each update once, with the server's sequence (issue 14). After a re-sync, a
//! fuzzy snapshot can already hold the value of an update that was also queued while it streamed;
//! `chp watch` used to report that update twice, first with the snapshot's sequence.

mod common;

use bytes::Bytes;
use chp::{Client, Event};
use common::*;
use zmtp_testkit::{bounded, step};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_in_both_the_resync_snapshot_and_the_queue_is_reported_once_with_its_sequence() {
    bounded(async {
        let fake = Fake::bind().await;
        let client = Client::start(options(&fake.address, "")).unwrap();
        let mut events = client.events();
        let (id, _) = fake.await_icanhaz().await;
        fake.reply(&id, &[("k", "old")], 5).await;
        step("sync", client.loaded()).await.unwrap();
        fake.publish("a", "1", 6).await;
        // The update must reach the client's subscriber before the snapshot's end reaches its
        // snapshot socket: two connections, so under load it sometimes does not, and then the
        // client cannot tell (the spec gives KVSYNCs no sequence of their own) and reports the
        // value with the snapshot's sequence, then again with the update's. Each round checks
        // that nothing else happens, and at least one round must show the queued case.
        let mut sequence = 6;
        for round in 0..20 {
            let value = format!("new-{round}");
            fake.publish("a", "2", sequence + 2).await; // a gap: the client re-syncs
            wait_event(&mut events, |e| matches!(e, Event::Gap { .. })).await;
            let (id, _) = fake.await_icanhaz().await;
            // The update is published while the snapshot streams (the client queues it), and the
            // fuzzy snapshot, read after it was applied, holds its value already.
            fake.publish("k", &value, sequence + 3).await;
            fake.reply(&id, &[("a", "2"), ("k", &value)], sequence + 2).await;
            fake.publish("marker", "m", sequence + 4).await;
            let marker = sequence + 4;
            let (_, seen) =
                wait_event(&mut events, |e| matches!(e, Event::Set { sequence, .. } if *sequence == marker)).await;
            let reports: Vec<&Event> =
                seen.iter().filter(|e| matches!(e, Event::Set { key, .. } if key == "k")).collect();
            let update = Event::Set { key: "k".into(), value: Bytes::from(value.clone()), sequence: sequence + 3 };
            assert_eq!(client.get("k").as_deref(), Some(value.as_bytes()));
            if reports == [&update] {
                client.close().await;
                return;
            }
            let late = Event::Set { key: "k".into(), value: Bytes::from(value.clone()), sequence: sequence + 2 };
            assert_eq!(reports, vec![&late, &update], "round {round}: {seen:?}");
            sequence += 4;
        }
        panic!("in 20 rounds the queued update never reached the client before the snapshot's end");
    })
    .await;
}
