//! A high-availability pair whose servers keep their maps on disk: restarted together, the pair
//! serves the newer of the two maps (by epoch, then sequence), with nothing confirmed lost and
//! sequences carrying on; the server holding the older map steps aside (it falls silent until its
//! peer has taken over) and follows.

use std::path::{Path, PathBuf};

use bstar::{Side, State};
use chp::server::ha::HaServer;
use chp::{Client, Status};
use zmtp_testkit::{bounded, step, unique};

mod common;

use common::pair::{PairPorts, collector_publisher, free_ports, kvset};

/// A fresh data directory (removed when dropped).
struct DataDir(PathBuf);

impl DataDir {
    fn new() -> DataDir {
        DataDir(std::env::temp_dir().join(unique("chp-ha-data")))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn bind(ports: &PairPorts, side: Side, dir: &DataDir) -> HaServer {
    let mut config = ports.config(side);
    config.server.data_dir = Some(dir.path().to_owned());
    HaServer::bind(config).await.expect("pair server with a data directory binds")
}

/// Both servers on their directories, once the backup is passive with a complete copy.
async fn formed(ports: &PairPorts, a: &DataDir, b: &DataDir) -> (HaServer, HaServer) {
    let primary = bind(ports, Side::Primary, a).await;
    let backup = bind(ports, Side::Backup, b).await;
    step("pair formed", backup.wait_for(|s| s.state == State::Passive && s.peer_synced)).await.unwrap();
    (primary, backup)
}

/// Writes `n` keys `/{tag}/{i}` through `client`, each confirmed; returns the last sequence.
async fn write(client: &Client, tag: &str, n: usize) -> u64 {
    let mut last = 0;
    for i in 0..n {
        last =
            step("set confirmed", client.set(format!("/{tag}/{i}"), format!("{tag}{i}"), None)).await.unwrap().unwrap();
    }
    last
}

/// Every key `write` confirmed is in `client`'s replica.
fn holds(client: &Client, tag: &str, n: usize) {
    for i in 0..n {
        assert_eq!(client.get(format!("/{tag}/{i}")).as_deref(), Some(format!("{tag}{i}").as_bytes()), "/{tag}/{i}");
    }
}

async fn synced_client(ports: &PairPorts) -> Client {
    let client = Client::start(ports.options()).unwrap();
    step("client synced", client.synced()).await.unwrap();
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_restarted_together_serves_its_map_and_carries_on() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let (primary, backup) = formed(&ports, &a, &b).await;
        let client = synced_client(&ports).await;
        let last = write(&client, "one", 40).await;
        step("backup followed", backup.wait_for(|s| s.sequence == last)).await.unwrap();
        client.close().await;
        backup.close().await;
        primary.close().await;

        // Both back: the primary's map (the newer one, or equal) is served, in a new epoch.
        let primary = bind(&ports, Side::Primary, &a).await;
        let backup = bind(&ports, Side::Backup, &b).await;
        assert_eq!((primary.sequence(), primary.len()), (last, 40), "recovered before serving");
        step("pair formed again", backup.wait_for(|s| s.state == State::Passive && s.peer_synced)).await.unwrap();
        assert_eq!(primary.state(), State::Active);
        let client = synced_client(&ports).await;
        holds(&client, "one", 40);
        let next = step("set", client.set("/two/0", "x", None)).await.unwrap().unwrap();
        assert_eq!(next, last + 1, "the sequence carries on");
        step("backup follows", backup.wait_for(|s| s.sequence == next)).await.unwrap();
        client.close().await;
        backup.close().await;
        primary.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newer_map_wins_and_the_older_server_steps_aside() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let (primary, backup) = formed(&ports, &a, &b).await;
        let client = synced_client(&ports).await;
        write(&client, "one", 20).await;

        // The primary dies; the backup takes over and confirms more; then it dies too.
        primary.close().await;
        let last = write(&client, "two", 20).await;
        assert_eq!(backup.state(), State::Active);
        client.close().await;
        backup.close().await;

        // Both back, the primary first: it holds the older map, so it steps aside for the backup
        // (silent until the backup has taken over; it does not stop).
        let primary = bind(&ports, Side::Primary, &a).await;
        let backup = bind(&ports, Side::Backup, &b).await;
        // A client's vote, once the primary is silent, makes the backup active with its (newer) map.
        let client = synced_client(&ports).await;
        assert!(matches!(client.status(), Status::Active(a) if a == ports.backup));
        holds(&client, "one", 20);
        holds(&client, "two", 20);
        assert!(client.sequence() >= last, "sequences never go back: {} < {last}", client.sequence());
        let next = step("set", client.set("/three/0", "x", None)).await.unwrap().unwrap();
        assert!(next > last);

        // The primary, which never served, yields to the backup, follows it and takes its map.
        step("primary follows", primary.wait_for(|s| s.state == State::Passive && s.peer_synced)).await.unwrap();
        step("primary caught up", primary.wait_for(|s| s.sequence == next)).await.unwrap();
        assert_eq!(primary.map(), backup.map());
        client.close().await;
        primary.close().await;
        backup.close().await;

        // What the primary copied is on its disk, in the backup's epoch: restarted together, the
        // two maps are equal, so the primary serves it (and neither steps aside).
        let primary = bind(&ports, Side::Primary, &a).await;
        let backup = bind(&ports, Side::Backup, &b).await;
        assert_eq!(primary.sequence(), next, "the copied map was journaled");
        step("pair formed a third time", backup.wait_for(|s| s.state == State::Passive && s.peer_synced))
            .await
            .unwrap();
        let client = synced_client(&ports).await;
        assert!(matches!(client.status(), Status::Active(a) if a == ports.primary));
        holds(&client, "one", 20);
        holds(&client, "two", 20);
        assert_eq!(client.get("/three/0").as_deref(), Some(&b"x"[..]));
        client.close().await;
        backup.close().await;
        primary.close().await;
    })
    .await;
}

/// A passive that never finished copying the active's map, and the active restarted from its
/// journal. Binary Star left the two waiting for each other for good: the passive, not eligible to
/// take over, stayed PASSIVE on hearing PEER_PRIMARY, and a PRIMARY ignores PEER_PASSIVE, so the
/// pair served nobody although the primary held the newest map. Now the durable passive goes
/// ACTIVE only to confirm, the primary's PEERSYNC? shows its map is newer, the passive steps aside
/// and the primary serves its map whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_primary_and_a_passive_without_a_copy_do_not_wait_for_each_other() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let (primary, backup) = formed(&ports, &a, &b).await;
        let client = synced_client(&ports).await;
        let first = write(&client, "one", 20).await;
        step("backup followed", backup.wait_for(|s| s.sequence == first)).await.unwrap();
        backup.close().await;

        // The backup comes back unable to copy the active's map (its peer's CHP address serves
        // nothing): passive, with no complete copy, so not eligible to take over.
        let mut config = ports.config(Side::Backup);
        config.server.data_dir = Some(b.path().to_owned());
        config.peer = chp::ServerAddress::new("127.0.0.1", free_ports(1)[0]).unwrap();
        let backup = HaServer::bind(config).await.unwrap();
        step("backup passive", backup.wait_for(|s| s.state == State::Passive)).await.unwrap();
        let last = write(&client, "two", 20).await;
        assert!(!backup.status().peer_synced);
        client.close().await;
        primary.close().await;

        // The primary restarts from its journal, newer than the backup's.
        let primary = bind(&ports, Side::Primary, &a).await;
        let client = synced_client(&ports).await;
        assert!(matches!(client.status(), Status::Active(a) if a == ports.primary));
        holds(&client, "one", 20);
        holds(&client, "two", 20);
        let next = step("set", client.set("/three/0", "x", None)).await.unwrap().unwrap();
        assert!(next > last, "sequences never go back: {next} <= {last}");
        client.close().await;
        primary.close().await;
        backup.close().await;
    })
    .await;
}

/// The same passive without a copy, as it compares maps with the restarted primary (which cannot
/// follow either: its peer's CHP address serves nothing, so it never sends its PEERSYNC?): the
/// primary dies again. Even with `start_alone`, the backup does not serve its old journal as the
/// truth — that would have outranked the primary's newer map under a new epoch when it returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passive_without_a_copy_does_not_serve_alone_when_the_restarted_peer_dies_again() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let (primary, backup) = formed(&ports, &a, &b).await;
        let client = synced_client(&ports).await;
        let first = write(&client, "one", 10).await;
        step("backup followed", backup.wait_for(|s| s.sequence == first)).await.unwrap();
        backup.close().await;
        let nowhere = || chp::ServerAddress::new("127.0.0.1", free_ports(1)[0]).unwrap();

        let mut config = ports.config(Side::Backup);
        config.server.data_dir = Some(b.path().to_owned());
        config.peer = nowhere();
        config.start_alone = true;
        let backup = HaServer::bind(config).await.unwrap();
        step("backup passive", backup.wait_for(|s| s.state == State::Passive)).await.unwrap();
        write(&client, "two", 10).await;
        client.close().await;
        primary.close().await;

        let mut config = ports.config(Side::Primary);
        config.server.data_dir = Some(a.path().to_owned());
        config.peer = nowhere();
        let primary = HaServer::bind(config).await.unwrap();
        step("the backup goes active to compare", backup.wait_for(|s| s.state == State::Active)).await.unwrap();
        // Events from here on (the first call hands over every event since the bind: skip them).
        let mut events = backup.events();
        while events.try_next().is_some() {}
        primary.close().await;
        loop {
            match step("the backup finds the primary silent", events.next()).await {
                Some(chp::server::ha::HaEvent::PeerSilent) => break,
                Some(chp::server::ha::HaEvent::BecameActive { .. }) => {
                    panic!("the backup served its old journal as the truth")
                }
                Some(_) => {}
                None => panic!("the backup stopped"),
            }
        }
        assert_eq!(backup.state(), State::Active, "still comparing: it serves nothing");
        assert_eq!(backup.status().sequence, first, "its map is its old journal's");
        backup.close().await;
    })
    .await;
}

/// The primary writes `/one/0..10`, dies; the backup takes over and writes `/two/0..10`, dies.
/// Both come back, no client yet (nobody votes): the primary, holding the older map, stands aside
/// (falls silent) for the backup. Then the backup stops before anyone voted for it. Returns the
/// primary, still standing aside.
async fn primary_stands_aside_for_the_backup(ports: &PairPorts, a: &DataDir, b: &DataDir) -> HaServer {
    let (primary, backup) = formed(ports, a, b).await;
    let client = synced_client(ports).await;
    write(&client, "one", 10).await;
    primary.close().await;
    write(&client, "two", 10).await;
    client.close().await;
    backup.close().await;

    let primary = bind(ports, Side::Primary, a).await;
    let backup = bind(ports, Side::Backup, b).await;
    step("the primary stands aside", async {
        while !primary.star().is_silent() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    backup.close().await;
    primary
}

/// The older server stood aside (fell silent) for its newer peer, which then restarted before
/// taking over, and lost the answer that said its map was newer. Before, the pair waited for
/// good: the restarted peer never heard the silent server, and the silent server never spoke
/// again. Now Binary Star speaks again when its peer restarts, the maps are compared anew, and the
/// newer map is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newer_peer_restarting_while_the_older_stands_aside_is_compared_again() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let primary = primary_stands_aside_for_the_backup(&ports, &a, &b).await;
        // The backup restarts before any client voted for it. The two compare again on their own
        // (no client asks anything) and the backup learns that its map is newer.
        let backup = bind(&ports, Side::Backup, &b).await;
        step("the restarted backup learns its map is newer", async {
            while !backup.star().eligible() {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        let client = synced_client(&ports).await;
        assert!(matches!(client.status(), Status::Active(a) if a == ports.backup));
        holds(&client, "one", 10);
        holds(&client, "two", 10);
        client.close().await;
        primary.close().await;
        backup.close().await;
    })
    .await;
}

/// As above, but the backup comes back with its data directory replaced (empty): its map is no
/// longer newer. The primary, which stood aside for the map the backup had, serves its own, and
/// the backup copies it. (Before, the primary kept standing aside and the pair served nobody.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_restarts_with_an_older_map_than_it_had_is_compared_again() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let primary = primary_stands_aside_for_the_backup(&ports, &a, &b).await;
        // The epoch of the map the primary stood aside for (the `epoch` file: u64 BE, then a CRC).
        let epoch = |dir: &DataDir| {
            let bytes = std::fs::read(dir.path().join("epoch")).expect("an epoch file");
            u64::from_be_bytes(bytes[..8].try_into().unwrap())
        };
        let discarded = epoch(&b);
        let emptied = DataDir::new();
        let backup = bind(&ports, Side::Backup, &emptied).await;
        step("the backup copies the primary's map", backup.wait_for(|s| s.state == State::Passive && s.peer_synced))
            .await
            .unwrap();
        let client = synced_client(&ports).await;
        assert!(matches!(client.status(), Status::Active(a) if a == ports.primary));
        holds(&client, "one", 10);
        assert_eq!(primary.map(), backup.map());
        // Served from now on above the discarded map, were it ever restored.
        assert!(epoch(&a) > discarded, "epoch {} is not above the discarded map's {discarded}", epoch(&a));
        client.close().await;
        primary.close().await;
        backup.close().await;
    })
    .await;
}

/// A PEERSYNC? claiming the largest epoch (anyone who reaches the snapshot port can send one) does
/// not overflow the epoch arithmetic: the active keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absurd_peer_epoch_does_not_overflow() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let (primary, backup) = formed(&ports, &a, &b).await;
        let dealer = zmtp::Socket::new(zmtp::SocketType::Dealer);
        dealer.connect(&ports.primary.snapshot()).await.unwrap();
        let fresh = chp::command::Freshness { epoch: u64::MAX, sequence: u64::MAX };
        dealer.send(chp::command::peersync_message(Some(fresh))).await.unwrap();
        // The answer is the map (a KTHXBAI ends it), and the server is still there.
        loop {
            let msg = step("snapshot", dealer.recv()).await.unwrap();
            if msg[0] == chp::command::KTHXBAI {
                break;
            }
        }
        let client = synced_client(&ports).await;
        step("a set after it", client.set("/after", "1", None)).await.unwrap();
        assert_eq!(primary.state(), State::Active);
        client.close().await;
        dealer.close().await;
        backup.close().await;
        primary.close().await;
    })
    .await;
}

/// Under CURVE only the peer's key says how new "the peer's" map is. A client that floods the
/// restarted primary's snapshot port with PEERSYNC?s claiming the newest possible map, from
/// before the pair forms until after, neither makes it step aside while it confirms (without CURVE
/// it would: nothing there is authenticated) nor ends its confirming early: the backup's own
/// PEERSYNC? decides, and the pair serves the map it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_curve_a_clients_peersync_cannot_make_the_active_step_aside() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let pair_keys = zmtp::security::KeyPair::generate();
        let bind = |side: Side, dir: &DataDir| {
            let mut config = ports.config(side).curve(chp::ServerCurve::new(pair_keys.clone()));
            config.server.data_dir = Some(dir.path().to_owned());
            HaServer::bind(config)
        };
        let primary = bind(Side::Primary, &a).await.unwrap();
        let backup = bind(Side::Backup, &b).await.unwrap();
        step("pair formed", backup.wait_for(|s| s.state == State::Passive && s.peer_synced)).await.unwrap();
        let client = chp::Client::start(
            ports.options().curve(chp::ClientCurve::new(pair_keys.public()).keys(zmtp::security::KeyPair::generate())),
        )
        .unwrap();
        step("client synced", client.synced()).await.unwrap();
        let last = write(&client, "kept", 10).await;
        step("backup followed", backup.wait_for(|s| s.sequence == last)).await.unwrap();
        client.close().await;
        backup.close().await;
        primary.close().await;

        let primary = bind(Side::Primary, &a).await.unwrap();
        let forger = zmtp::Socket::new(zmtp::SocketType::Dealer);
        forger.set_security(&zmtp::Security::curve_client(pair_keys.public(), zmtp::security::KeyPair::generate()));
        forger.set_sndhwm(0);
        forger.connect(&ports.primary.snapshot()).await.unwrap();
        let newest = chp::command::Freshness { epoch: u64::MAX - 1, sequence: u64::MAX };
        let flood = tokio::spawn({
            let forger = forger.clone();
            async move {
                loop {
                    let _ = forger.send(chp::command::peersync_message(Some(newest))).await;
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
        });
        let backup = bind(Side::Backup, &b).await.unwrap();
        step("pair formed under the flood", backup.wait_for(|s| s.state == State::Passive && s.peer_synced))
            .await
            .unwrap();
        assert_eq!(primary.state(), State::Active, "the flood did not make the primary step aside");
        assert_eq!((primary.sequence(), primary.len()), (last, 10));
        flood.abort();
        forger.close().await;
        backup.close().await;
        primary.close().await;
    })
    .await;
}

/// A client's retransmit of a write confirmed just before both servers stopped is not applied
/// again once they are back: the journal's tail is remembered as published, as if the active had
/// never stopped. A fresh write sent after the retransmit, on the same connection, fences it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retransmit_after_a_restart_is_not_applied_twice() {
    bounded(async {
        let ports = PairPorts::new();
        let (a, b) = (DataDir::new(), DataDir::new());
        let (primary, backup) = formed(&ports, &a, &b).await;
        let once = kvset("/once", "1", true);
        let publisher = collector_publisher(ports.address(Side::Primary)).await;
        publisher.send(once.to_message()).await.unwrap();
        let status = step("applied", primary.wait_for(|s| s.keys == 1)).await.unwrap();
        let applied = status.sequence;
        step("backup followed", backup.wait_for(|s| s.sequence == applied)).await.unwrap();
        publisher.close().await;
        backup.close().await;
        primary.close().await;

        let primary = bind(&ports, Side::Primary, &a).await;
        let backup = bind(&ports, Side::Backup, &b).await;
        step("pair formed again", backup.wait_for(|s| s.state == State::Passive && s.peer_synced)).await.unwrap();
        let publisher = collector_publisher(ports.address(Side::Primary)).await;
        publisher.send(once.to_message()).await.unwrap();
        publisher.send(kvset("/fence", "2", true).to_message()).await.unwrap();
        let status = step("fence applied", primary.wait_for(|s| s.keys == 2)).await.unwrap();
        assert_eq!(status.sequence, applied + 1, "only the fence was applied, not the retransmit");
        publisher.close().await;
        backup.close().await;
        primary.close().await;
    })
    .await;
}
