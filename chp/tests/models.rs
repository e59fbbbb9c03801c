//! The Guide's Clone models 1–5 (`examples/clone*.rs`), run to completion with exact assertions.
//! The example sources are compiled into this test as modules, so each test runs the example's own
//! code (its `main` is unused here).

#[allow(dead_code)]
#[path = "../examples/clone1.rs"]
mod clone1;
#[allow(dead_code)]
#[path = "../examples/clone2.rs"]
mod clone2;
#[allow(dead_code)]
#[path = "../examples/clone3.rs"]
mod clone3;
#[allow(dead_code)]
#[path = "../examples/clone4.rs"]
mod clone4;
#[allow(dead_code)]
#[path = "../examples/clone5.rs"]
mod clone5;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use zmtp_testkit::bounded;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model1_client_stores_a_contiguous_run_of_updates() {
    bounded(async {
        let count = 2000;
        let out = clone1::run(count).await.unwrap();
        // Pub-sub alone: the client sees a contiguous run starting wherever it joined.
        assert_eq!(out.last - out.first + 1, count as u64);
        let expected: BTreeMap<Bytes, Bytes> =
            (out.first..=out.last).map(clone1::update).map(|m| (m.key, m.body)).collect();
        assert_eq!(out.map, expected);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model2_snapshot_plus_queued_updates_equals_the_server_map() {
    bounded(async {
        let out = clone2::run(500).await.unwrap();
        assert!(out.snapshot_sequence >= 1, "the client proved its subscription with an update first");
        assert_eq!(out.sequence, out.snapshot_sequence + 500);
        assert_eq!(out.map, clone2::expected_map(out.sequence));
        assert!(out.discarded >= 1, "the proving update was queued and then discarded as already in the snapshot");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model3_every_client_converges_on_the_server_map() {
    bounded(async {
        let (clients, count) = (3, 60);
        let (server, outcomes) = clone3::run(clients, count).await.unwrap();
        assert_eq!(server.sequence, (clients * count) as u64);
        let expected: BTreeMap<Bytes, Bytes> =
            (0..clients).flat_map(|id| clone3::updates(id, count)).map(|m| (m.key, m.body)).collect();
        assert_eq!(server.map, expected);
        for c in outcomes {
            assert_eq!(c.sequence, server.sequence);
            assert_eq!(c.map, expected);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model4_subtree_clients_hold_exactly_their_subtree() {
    bounded(async {
        let (per_group, count) = (2, 40);
        let (server, outcomes) = clone4::run(per_group, count).await.unwrap();
        assert_eq!(server.sequence, (2 * per_group * count) as u64);
        assert_eq!(server.map.len(), 2 * per_group * count);
        for (group, c) in outcomes {
            let subtree = clone4::subtree(group);
            assert_eq!(c.map, clone4::within(&server.map, &subtree));
            assert_eq!(c.map.len(), per_group * count);
            assert!(c.map.keys().all(|k| subtree.contains(k)));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model5_ttl_and_deletes_converge_everywhere() {
    bounded(async {
        let (clients, count) = (3, 40);
        let ttl = Duration::from_millis(200);
        let (server, outcomes) = clone5::run(clients, count, ttl, Duration::from_millis(50)).await.unwrap();
        let expected = clone5::expected_map(clients, count);
        assert_eq!(expected.len(), clients * count / 4);
        assert_eq!(server.sequence, clients as u64 * clone5::sequences_per_client(count));
        assert_eq!(server.map, expected);
        for c in outcomes {
            assert_eq!(c.sequence, server.sequence);
            assert_eq!(c.map, expected);
        }
    })
    .await;
}
