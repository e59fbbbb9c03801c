//! Wire interop with libzmq: our client and CLI against a CHP server written from the spec with
//! pyzmq (`tests/py/server.py`), and a pyzmq CHP client (`tests/py/client.py`) against our server.
//!
//! Requires `python3` with `pyzmq` (`pip install pyzmq`); without them these tests fail saying so
//! (`zmtp_testkit::python_with_pyzmq`).

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use chp::{Client, Event, Snapshot};
use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use zmtp_testkit::{bounded, python_with_pyzmq, step};

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(name)
}

/// The pyzmq server (HUGZ every 100 ms) and its address.
async fn py_server() -> (Child, chp::ServerAddress) {
    let mut child = Command::from(python_with_pyzmq())
        .arg(script("server.py"))
        .arg("0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn server.py");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = step("server.py starts", lines.next_line()).await.unwrap().expect("server.py prints its port");
    let port: u16 = line.strip_prefix("port ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
    (child, chp::ServerAddress::new("127.0.0.1", port).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_against_a_pyzmq_server() {
    bounded(async {
        let (mut py, addr) = py_server().await;
        let writer = client(&addr, "").await;
        assert_eq!(writer.set("/a/1", "1", None).await, Ok(Some(1)));
        assert_eq!(writer.set("/a/2", "2", None).await, Ok(Some(2)));
        assert_eq!(writer.set("/b/1", "3", None).await, Ok(Some(3)));
        assert_eq!(writer.delete("/a/2").await, Ok(Some(4)));
        assert_eq!(writer.snapshot(), Snapshot { sequence: 4, map: map(&[("/a/1", "1"), ("/b/1", "3")]) });

        // This server's KTHXBAI is the highest KVSYNC sequence (1 for /a/, below its current 4).
        let sub = client(&addr, "/a/").await;
        assert_eq!(sub.snapshot(), Snapshot { sequence: 1, map: map(&[("/a/1", "1")]) });
        let whole = client(&addr, "").await;
        assert_eq!(whole.snapshot(), Snapshot { sequence: 3, map: map(&[("/a/1", "1"), ("/b/1", "3")]) });
        let mut sub_events = sub.events();
        let mut whole_events = whole.events();
        assert_eq!(writer.set("/a/3", "x", None).await, Ok(Some(5)));
        assert_eq!(writer.set("/b/2", "y", None).await, Ok(Some(6)));
        let (e, skipped) = wait_event(&mut sub_events, |e| matches!(e, Event::Set { .. })).await;
        assert_eq!(e, Event::Set { key: "/a/3".into(), value: "x".into(), sequence: 5 });
        assert!(skipped.is_empty());
        wait_event(&mut whole_events, |e| matches!(e, Event::Set { sequence: 6, .. })).await;
        assert_eq!(whole.snapshot().map, map(&[("/a/1", "1"), ("/a/3", "x"), ("/b/1", "3"), ("/b/2", "y")]));
        assert_eq!(whole.snapshot(), writer.snapshot());

        // The CLI works against it too.
        let cli = env!("CARGO_BIN_EXE_chp");
        let server = addr.to_string();
        let (set, get, dump) = tokio::task::spawn_blocking(move || {
            let run = |args: Vec<&str>| {
                let mut all = args;
                all.extend(["--server", server.as_str()]);
                let out = std::process::Command::new(cli).args(&all).output().unwrap();
                assert!(out.status.success(), "chp {all:?}: {}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8(out.stdout).unwrap()
            };
            let set = run(vec!["set", "/c/cli", "from the CLI"]);
            let get = run(vec!["get", "/a/3"]);
            run(vec!["del", "/b/2"]);
            let dump = run(vec!["dump"]);
            (set, get, dump)
        })
        .await
        .unwrap();
        assert_eq!((set.as_str(), get.as_str()), ("", "x\n"));
        assert_eq!(dump, "/a/1=1\n/a/3=x\n/b/1=3\n/c/cli=from the CLI\n");

        // Killing the server is noticed.
        py.kill().await.unwrap();
        wait_event(&mut whole_events, |e| matches!(e, Event::ServerLost { .. })).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyzmq_client_against_our_server() {
    bounded(async {
        let server = server().await;
        let addr = server.address().clone();
        let writer = client(&addr, "").await;
        writer.set("/x/1", "1", None).await.unwrap();
        writer.set("/y/1", "2", None).await.unwrap();
        writer.set("/x/2", "3", None).await.unwrap();
        let mut events = writer.events();
        let out = Command::from(python_with_pyzmq())
            .arg(script("client.py"))
            .args([&addr.port().to_string(), "/x/", "/x/py", "hello"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = step("client.py", out).await.unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "client.py failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            stdout,
            "synced 3 /x/\nentry /x/1=1\nentry /x/2=3\necho 4 owner=py\\n\nfinal /x/1=1\nfinal /x/2=3\nfinal /x/py=hello\ndone\n"
        );
        let (e, _) = wait_event(&mut events, |e| matches!(e, Event::Set { .. })).await;
        assert_eq!(e, Event::Set { key: "/x/py".into(), value: "hello".into(), sequence: 4 });
        assert_eq!(server.get(b"/x/py").as_deref(), Some(&b"hello"[..]));
        let late = Client::start(options(&addr, "/x/")).unwrap();
        let late = synced(late).await;
        assert_eq!(late.snapshot().map, map(&[("/x/1", "1"), ("/x/2", "3"), ("/x/py", "hello")]));
    })
    .await;
}
