//! CHP over CURVE: a server and its clients, clients refused (wrong server key, key not on the
//! allow list, no CURVE), a high-availability pair whose every link is CURVE (client keys on an
//! allow list, one key pair per server) surviving a SIGKILL of the active, and the CLI.

mod common;

use std::collections::BTreeMap;
use std::process::{Output, Stdio};
use std::time::Duration;

use bstar::Side;
use bytes::Bytes;
use chp::{Client, ClientCurve, ClientError, ClientOptions, Event, Server, ServerAddress, ServerCurve, Status};
use common::pair::free_ports;
use common::pair::{PairPorts, ServerProc, caught_up};
use common::process::{BIN, spawn_server};
use common::{map, server_with, synced, wait_event};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use zmtp::security::KeyPair;
use zmtp_testkit::{bounded, eventually, step};

/// Test client options for one server over CURVE with `keys`.
fn curve_options(server: &Server, server_key: [u8; 32], keys: &KeyPair, subtree: &str) -> ClientOptions {
    common::options(server.address(), subtree).curve(ClientCurve::new(server_key).keys(keys.clone()))
}

/// A test server over CURVE, on ports below the OS's ephemeral range (see [`free_ports`]).
async fn curve_server(curve: ServerCurve) -> Server {
    server_with(|c| {
        c.curve = Some(curve);
        c.port = free_ports(1)[0];
    })
    .await
}

fn as_str(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Waits until `client` fails; returns why.
async fn refused(client: &Client) -> String {
    match step("the client is refused", client.synced()).await {
        Err(ClientError::Failed(why)) => why.to_string(),
        other => panic!("expected a refusal, got {other:?} (status {:?})", client.status()),
    }
}

/// A server admitting two listed client keys; a writer sets, deletes and sets with a ttl; a
/// watcher sees exactly those changes with their sequences; a late client gets the snapshot over
/// CURVE; every replica equals the server's map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_and_clients_over_curve_set_and_watch_exact_values() {
    bounded(async {
        let server_keys = KeyPair::generate();
        let (writer_keys, watcher_keys) = (KeyPair::generate(), KeyPair::generate());
        let curve = ServerCurve::new(server_keys.clone())
            .allow_client(writer_keys.public())
            .allow_client(watcher_keys.public());
        let server = curve_server(curve).await;
        let public = server_keys.public();

        let writer = Client::start(curve_options(&server, public, &writer_keys, "")).unwrap();
        let watcher = synced(Client::start(curve_options(&server, public, &watcher_keys, "")).unwrap()).await;
        let (before, mut events) = watcher.watch();
        assert_eq!((before.sequence, before.map.len()), (0, 0));

        assert_eq!(writer.set("/config/color", "blue", None).await.unwrap(), Some(1));
        assert_eq!(writer.set("/hosts/web1", "10.0.0.1", Some(Duration::from_secs(60))).await.unwrap(), Some(2));
        assert_eq!(writer.delete("/config/color").await.unwrap(), Some(3));
        assert_eq!(
            writer.set(Bytes::from_static(b"/bin/\x00\xff"), Bytes::from_static(b"\x00\x01\xfe"), None).await.unwrap(),
            Some(4)
        );

        let want = [
            Event::Set { key: "/config/color".into(), value: "blue".into(), sequence: 1 },
            Event::Set { key: "/hosts/web1".into(), value: "10.0.0.1".into(), sequence: 2 },
            Event::Deleted { key: "/config/color".into(), sequence: 3 },
            Event::Set {
                key: Bytes::from_static(b"/bin/\x00\xff"),
                value: Bytes::from_static(b"\x00\x01\xfe"),
                sequence: 4,
            },
        ];
        for expected in want {
            assert_eq!(step("watcher event", events.next()).await, Some(expected));
        }
        assert_eq!(events.try_next(), None, "nothing else");

        let mut expected_map = map(&[("/hosts/web1", "10.0.0.1")]);
        expected_map.insert(Bytes::from_static(b"/bin/\x00\xff"), Bytes::from_static(b"\x00\x01\xfe"));
        assert_eq!(server.map(), (4, expected_map.clone()));
        assert_eq!(watcher.snapshot().map, expected_map);
        assert_eq!(writer.snapshot().map, expected_map);

        // A later client of one subtree: ICANHAZ? and KVSYNCs over CURVE too.
        let hosts = synced(Client::start(curve_options(&server, public, &watcher_keys, "/hosts/")).unwrap()).await;
        assert_eq!(hosts.snapshot().map, map(&[("/hosts/web1", "10.0.0.1")]));
        assert_eq!(hosts.sequence(), 4);
        for c in [writer, watcher, hosts] {
            c.close().await;
        }
    })
    .await;
}

/// Clients with the wrong server key, with a key not on the allow list, or without CURVE are
/// refused: each fails with a reason naming the cause, holds nothing, cannot set; the server's
/// map is unchanged (the next good update takes the next sequence).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_a_wrong_key_or_no_curve_are_refused_and_change_nothing() {
    bounded(async {
        let server_keys = KeyPair::generate();
        let good_keys = KeyPair::generate();
        let server = curve_server(ServerCurve::new(server_keys.clone()).allow_client(good_keys.public())).await;
        let public = server_keys.public();
        let good = Client::start(curve_options(&server, public, &good_keys, "")).unwrap();
        assert_eq!(good.set("/a", "1", None).await.unwrap(), Some(1));
        let before = server.map();
        assert_eq!(before, (1, map(&[("/a", "1")])));

        let wrong_server_key =
            Client::start(curve_options(&server, KeyPair::generate().public(), &good_keys, "")).unwrap();
        let not_allowed = Client::start(curve_options(&server, public, &KeyPair::generate(), "")).unwrap();
        let no_curve = Client::start(common::options(server.address(), "")).unwrap();
        let cases = [
            (&wrong_server_key, "wrong server public key?"),
            (&not_allowed, "is this client's public key on the server's allow list?"),
            (&no_curve, "CURVE on one side only?"),
        ];
        for (client, cause) in cases {
            let why = refused(client).await;
            assert!(why.starts_with("refused by the server: tcp://127.0.0.1:"), "{why}");
            assert!(why.contains(cause), "{why}");
            assert!(matches!(client.status(), Status::Failed(w) if w.to_string() == why));
            assert!(client.is_empty() && client.sequence() == 0, "nothing synced");
            let set = client.set("/a", "evil", None).await;
            assert!(matches!(set, Err(ClientError::Failed(_) | ClientError::Closed)), "{set:?}");
        }

        // Nothing reached the server: the next update is sequence 2 and the map is as it was.
        assert_eq!(server.map(), before);
        assert_eq!(good.set("/b", "2", None).await.unwrap(), Some(2));
        assert_eq!(server.map(), (2, map(&[("/a", "1"), ("/b", "2")])));
        assert_eq!(server.stats().rejected, 0);
        assert_eq!(good.snapshot().map, map(&[("/a", "1"), ("/b", "2")]));

        // A server key is needed for every server.
        let other: ServerAddress = "tcp://127.0.0.1:9".parse().unwrap();
        let options = ClientOptions::for_servers(vec![server.address().clone(), other.clone()])
            .curve(ClientCurve::per_server([(server.address().clone(), public)]));
        assert_eq!(Client::start(options).err(), Some(ClientError::NoServerKey(other)));
        for c in [good, wrong_server_key, not_allowed, no_curve] {
            c.close().await;
        }
    })
    .await;
}

/// An HA pair whose every link is CURVE — one key pair per server (`--curve-peer`), clients on an
/// allow list that does not name the peer (admitted anyway), clients holding one key per server —
/// forms (the passive syncs from the active over CURVE), survives a SIGKILL of the active: the
/// clients fail over, the writer's sets all confirmed, every map converges on the survivor's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_over_curve_fails_over_on_sigkill_and_maps_converge() {
    bounded(async {
        let ports = PairPorts::new();
        let (primary_keys, backup_keys) = (KeyPair::generate(), KeyPair::generate());
        let (writer_keys, reader_keys) = (KeyPair::generate(), KeyPair::generate());
        let (writer_public, reader_public) = (writer_keys.public_z85(), reader_keys.public_z85());
        let server_args = |own: &KeyPair, peer: &KeyPair| -> Vec<String> {
            let args = ["--curve-server", &own.secret_z85(), "--curve-peer", &peer.public_z85()];
            let allow = ["--curve-allow", &writer_public, "--curve-allow", &reader_public];
            args.iter().chain(allow.iter()).map(|s| s.to_string()).collect()
        };
        let primary_args = server_args(&primary_keys, &backup_keys);
        let backup_args = server_args(&backup_keys, &primary_keys);
        let mut primary = ServerProc::spawn("primary", Side::Primary, &ports, &as_str(&primary_args));
        let mut backup = ServerProc::spawn("backup", Side::Backup, &ports, &as_str(&backup_args));
        let listening = primary.expect("listening on").await;
        assert!(listening.contains(&format!("CURVE, public key {}", primary_keys.public_z85())), "{listening}");
        primary.expect("role: ACTIVE").await;
        backup.expect("role: PASSIVE").await;
        backup.expect("peer: synced").await;

        let curve = |keys: &KeyPair| {
            ClientCurve::per_server([
                (ports.primary.clone(), primary_keys.public()),
                (ports.backup.clone(), backup_keys.public()),
            ])
            .keys(keys.clone())
        };
        let writer = synced(Client::start(ports.options().curve(curve(&writer_keys))).unwrap()).await;
        let reader = synced(Client::start(ports.options().curve(curve(&reader_keys))).unwrap()).await;
        let mut events = reader.events();
        let mut want = BTreeMap::new();
        for i in 0..20 {
            let (key, value) = (format!("/k/{}", i % 7), format!("v{i}"));
            writer.set(key.clone(), value.clone(), None).await.unwrap();
            want.insert(Bytes::from(key), Bytes::from(value));
        }
        let fence = caught_up(&mut primary, &mut backup).await;
        assert_eq!((fence.sequence, fence.keys), (20, 7));
        eventually("the reader holds the writer's map", || reader.snapshot().map == want).await;

        primary.kill9().await;
        // Sets after the kill wait for the takeover and are confirmed by the backup.
        for i in 20..30 {
            let (key, value) = (format!("/k/{}", i % 7), format!("v{i}"));
            let sequence = writer.set(key.clone(), value.clone(), None).await.unwrap();
            assert!(sequence.is_some_and(|s| s > 20), "{key}: {sequence:?}");
            want.insert(Bytes::from(key), Bytes::from(value));
        }
        backup.expect("role: ACTIVE").await;
        let (failover, _) =
            wait_event(&mut events, |e| matches!(e, Event::Failover { to, .. } if *to == ports.backup)).await;
        assert!(matches!(failover, Event::Failover { sequence, keys: 7, .. } if sequence >= 20), "{failover:?}");

        let survivor = backup.status_until("holding every update", |s| s.state == "ACTIVE" && s.sequence >= 30).await;
        assert_eq!(survivor.keys, 7);
        eventually("every client converges on the survivor", || {
            let seq = backup.status().map(|s| s.sequence).unwrap_or(0);
            [&writer, &reader].iter().all(|c| c.snapshot().map == want && c.sequence() == seq)
        })
        .await;
        // A fresh client of the survivor alone receives exactly that map (and one not on the
        // allow list is refused by it).
        let fresh_options = ClientOptions::for_servers(vec![ports.backup.clone()]).server_ttl(Duration::from_secs(1));
        let fresh = synced(Client::start(fresh_options.clone().curve(curve(&reader_keys))).unwrap()).await;
        assert_eq!(fresh.snapshot().map, want);
        let stranger = Client::start(fresh_options.curve(curve(&KeyPair::generate()))).unwrap();
        assert!(refused(&stranger).await.contains("allow list"));
        for c in [writer, reader, fresh, stranger] {
            c.close().await;
        }
    })
    .await;
}

/// 32 random bytes whose Z85 form begins with '-' (the first 4 bytes, big-endian, divided by
/// 85^4 give 63, the index of '-' in the Z85 alphabet).
fn hyphen_key() -> [u8; 32] {
    let mut key = KeyPair::generate().public();
    key[..4].copy_from_slice(&(63u32 * 85u32.pow(4) + 12_345).to_be_bytes());
    key
}

async fn chp(args: &[&str]) -> Output {
    let run = Command::new(BIN).args(args).stdin(Stdio::null()).kill_on_drop(true).output();
    step("chp finishes", run).await.expect("chp runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `chp keygen`, a CURVE server with an allow list, set/get/del/dump/watch with the server key
/// (and a listed secret key); a wrong server key, an unlisted key, no key: a clear one-line error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_over_curve() {
    bounded(async {
        let keygen = |out: Output| -> (String, String) {
            assert!(out.status.success());
            let text = stdout(&out);
            let field = |name: &str| {
                text.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_else(|| panic!("{text}")).to_owned()
            };
            let (public, secret) = (field("public: "), field("secret: "));
            assert_eq!(KeyPair::from_secret_z85(&secret).unwrap().public_z85(), public);
            (public, secret)
        };
        let (server_public, server_secret) = keygen(chp(&["keygen"]).await);
        // Z85 keys may begin with '-' (1 in 85): such a key must still pass as an argument.
        let client = KeyPair::from_secret_bytes(hyphen_key());
        let (client_public, client_secret) = (client.public_z85(), client.secret_z85());
        assert!(client_secret.starts_with('-'), "{client_secret}");
        let server_args =
            ["--port", "0", "--hugz-ms", "50", "--curve-server", &server_secret, "--curve-allow", &client_public];
        let server = spawn_server(&server_args).await;
        let address = server.address.clone();
        let sec: [&str; 6] =
            ["--server", &address, "--curve-serverkey", &server_public, "--curve-secretkey", &client_secret];

        let mut watch = Command::new(BIN)
            .args(["watch", "--subtree", "/cfg/"])
            .args(sec)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut watched = BufReader::new(watch.stdout.take().unwrap()).lines();
        assert_eq!(
            step("watch synced", watched.next_line()).await.unwrap().unwrap(),
            "-- synced at sequence 0 (0 keys)"
        );

        let run = |args: Vec<&'static str>| {
            let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            all.extend(sec.iter().map(|s| s.to_string()));
            async move { chp(&all.iter().map(String::as_str).collect::<Vec<_>>()).await }
        };
        let out = run(vec!["set", "/cfg/color", "blue"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let out = run(vec!["set", "/cfg/size", "XL"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let out = run(vec!["get", "/cfg/color"]).await;
        assert_eq!((out.status.success(), stdout(&out).as_str()), (true, "blue\n"), "{}", stderr(&out));
        let out = run(vec!["del", "/cfg/size"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        let out = run(vec!["dump"]).await;
        assert_eq!(stdout(&out), "/cfg/color=blue\n", "{}", stderr(&out));
        for want in ["set 1 /cfg/color=blue", "set 2 /cfg/size=XL", "del 3 /cfg/size"] {
            assert_eq!(step("watch line", watched.next_line()).await.unwrap().unwrap(), want);
        }

        // Refusals: a clear error at once (well within --timeout), nothing on stdout.
        // (A public key beginning with '-' too.)
        let other_public = zmtp::security::PublicKey::from(hyphen_key()).to_string();
        assert!(other_public.starts_with('-'), "{other_public}");
        let refusals: [(Vec<&str>, &str); 3] = [
            (vec!["--curve-serverkey", &other_public, "--curve-secretkey", &client_secret], "wrong server public key?"),
            (vec!["--curve-serverkey", &server_public], "allow list?"),
            (vec![], "CURVE on one side only?"),
        ];
        for (keys, cause) in refusals {
            let mut args = vec!["set", "/cfg/color", "red", "--server", &address, "--timeout", "8"];
            args.extend(keys);
            let out = chp(&args).await;
            let err = stderr(&out);
            assert!(!out.status.success() && out.stdout.is_empty(), "{args:?}: {err}");
            assert!(err.starts_with("chp: client failed: refused by the server: tcp://127.0.0.1:"), "{err}");
            assert!(err.contains(cause) && err.lines().count() == 1, "{err}");
        }
        let out = run(vec!["get", "/cfg/color"]).await;
        assert_eq!(stdout(&out), "blue\n", "the refused sets changed nothing");

        // Bad keys and flag combinations are usage errors.
        let out = chp(&["get", "/a", "--curve-serverkey", "short"]).await;
        assert!(!out.status.success() && stderr(&out).contains("40 Z85 characters"), "{}", stderr(&out));
        let out =
            chp(&["server", "--port", "0", "--curve-peer", &server_public, "--curve-server", &server_secret]).await;
        assert!(!out.status.success() && stderr(&out).contains("--curve-peer needs --primary or --backup"));
        let out = chp(&[
            "get",
            "/a",
            "--server",
            &address,
            "--server",
            "tcp://127.0.0.1:9",
            "--curve-serverkey",
            &server_public,
            "--curve-serverkey",
            &server_public,
            "--curve-serverkey",
            &server_public,
        ])
        .await;
        assert!(!out.status.success() && stderr(&out).contains("once per --server"), "{}", stderr(&out));
    })
    .await;
}
