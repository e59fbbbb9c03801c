//! A watcher reports each update once, with the server's sequence (issue 14). After a re-sync, a
//! fuzzy snapshot can already hold the value of an update that was also queued while it streamed;
//! `chp watch` used to report that update twice, first with the snapshot's sequence.

mod common;

use chp::{Client, Event};
use common::*;

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
        fake.publish("a", "2", 8).await; // a gap: the client re-syncs
        wait_event(&mut events, |e| matches!(e, Event::Gap { .. })).await;
        let (id, _) = fake.await_icanhaz().await;
        // Update 9 is published while the snapshot streams (the client queues it), and the fuzzy
        // snapshot, read after it was applied, holds its value already.
        fake.publish("k", "new", 9).await;
        fake.reply(&id, &[("a", "2"), ("k", "new")], 8).await;
        fake.publish("marker", "m", 10).await;
        let (_, seen) = wait_event(&mut events, |e| matches!(e, Event::Set { key, .. } if key == "marker")).await;
        let reports: Vec<&Event> = seen.iter().filter(|e| matches!(e, Event::Set { key, .. } if key == "k")).collect();
        assert_eq!(reports, vec![&Event::Set { key: "k".into(), value: "new".into(), sequence: 9 }], "{seen:?}");
        assert_eq!(client.get("k").as_deref(), Some(&b"new"[..]));
        client.close().await;
    })
    .await;
}
