//! PPP over CURVE and PLAIN: a queue, workers and clients end to end; a worker or client with the
//! wrong server key, a key not on the allow list, no security or a wrong password is refused (no
//! reply, never READY); the CLI's security options as separate processes.

mod common;

use common::*;
use ppp::{
    Client, ClientConfig, ClientError, Queue, QueueError, QueueEvent, QueueHandle, Security, Worker, WorkerEvent,
};
use ppp::{WorkerHandle, display_id};
use tokio::time::Instant;
use zmtp::Message;
use zmtp::security::KeyPair;
use zmtp_testkit::{STEP, bounded, ipc_endpoint};

/// Everything already queued on the queue's event stream, without waiting.
fn pending_events(q: &mut QueueHandle) -> Vec<QueueEvent> {
    use futures::FutureExt;
    let mut events = Vec::new();
    while let Some(Some(ev)) = q.next_event().now_or_never() {
        events.push(ev);
    }
    events
}

/// Everything already queued on a worker's event stream, without waiting.
fn pending_worker_events(w: &mut WorkerHandle) -> Vec<WorkerEvent> {
    use futures::FutureExt;
    let mut events = Vec::new();
    while let Some(Some(ev)) = w.next_event().now_or_never() {
        events.push(ev);
    }
    events
}

/// Polls the queue's stats until `pred` holds (bounded by STEP).
async fn stats_until(q: &QueueHandle, what: &str, pred: impl Fn(&ppp::QueueStats) -> bool) {
    let deadline = Instant::now() + STEP;
    while !pred(&q.stats()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}; stats {:?}", q.stats());
        tokio::time::sleep(ms(2)).await; // polling period, not synchronisation
    }
}

async fn echo(request: Message) -> Message {
    request
}

fn fast_worker(endpoint: &str, security: Security) -> Worker {
    Worker { interval: ms(100), liveness: 5, reconnect_init: ms(100), reconnect_max: ms(400), ..Worker::new(endpoint) }
        .security(security)
}

async fn secure_queue(frontend: Security, backend: Security) -> QueueHandle {
    Queue {
        interval: ms(100),
        frontend_security: frontend,
        backend_security: backend,
        ..Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    }
    .spawn()
    .await
    .expect("queue starts")
}

/// A worker's identity from its first READY event.
async fn identity(w: &mut WorkerHandle) -> bytes::Bytes {
    match worker_event(w, "ready", |e| matches!(e, WorkerEvent::Ready { .. })).await {
        WorkerEvent::Ready { identity } => identity,
        _ => unreachable!(),
    }
}

/// Queue, worker and client all over CURVE, with allow lists on both sides of the queue: every
/// request is answered once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curve_queue_worker_and_client_end_to_end() {
    bounded(async {
        let (queue_keys, worker_keys, client_keys) = (KeyPair::generate(), KeyPair::generate(), KeyPair::generate());
        let mut q = secure_queue(
            Security::curve_server_allowing(queue_keys.clone(), [client_keys.public()]),
            Security::curve_server_allowing(queue_keys.clone(), [worker_keys.public()]),
        )
        .await;
        let mut w = fast_worker(q.backend(), Security::curve_client(queue_keys.public(), worker_keys))
            .spawn(echo)
            .await
            .unwrap();
        let id = identity(&mut w).await;
        queue_event(&mut q, "worker ready", |e| matches!(e, QueueEvent::WorkerReady { worker } if *worker == id)).await;

        let security = Security::curve_client(queue_keys.public(), client_keys);
        let mut client = Client::connect_secure(q.frontend(), ClientConfig::default(), security).await.unwrap();
        for i in 0..20 {
            let body = format!("secret {i}");
            let reply = client.request(Message::from(vec![body.clone(), "second frame".into()])).await.unwrap();
            assert_eq!(reply, Message::from(vec![body, "second frame".into()]));
        }
        assert_eq!(client.resends(), 0);
        let stats = q.stats();
        assert_eq!((stats.workers, stats.requests, stats.replies), (1, 20, 20), "{stats:?}");
        assert!(
            !pending_events(&mut q).iter().any(|e| matches!(e, QueueEvent::HandshakeFailed { .. })),
            "no handshake failed"
        );
        w.close().await;
        q.close().await;
    })
    .await;
}

/// A worker with the wrong server key, and one with the right key that is not on the backend's
/// allow list, are refused at the handshake: the queue never registers them, and a request waits
/// for the one legitimate worker that comes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_with_a_wrong_or_unlisted_key_never_become_ready() {
    bounded(async {
        let (queue_keys, good_keys) = (KeyPair::generate(), KeyPair::generate());
        let mut q = secure_queue(
            Security::curve_server(queue_keys.clone()),
            Security::curve_server_allowing(queue_keys.clone(), [good_keys.public()]),
        )
        .await;

        // Wrong server key: the queue cannot open the HELLO and closes the connection.
        let impostor = KeyPair::generate();
        let mut wrong_server = fast_worker(q.backend(), Security::curve_client(impostor.public(), KeyPair::generate()))
            .spawn(echo)
            .await
            .unwrap();
        let wrong_server_id = identity(&mut wrong_server).await;
        for n in 0..2 {
            worker_event(&mut wrong_server, &format!("handshake failure {n}"), |e| {
                matches!(e, WorkerEvent::HandshakeFailed { .. })
            })
            .await;
        }
        let ev = queue_event(&mut q, "backend refusal", |e| matches!(e, QueueEvent::HandshakeFailed { .. })).await;
        let QueueEvent::HandshakeFailed { side, reason, .. } = ev else { unreachable!() };
        assert_eq!(side, "backend");
        assert!(reason.contains("HELLO"), "the queue could not open the HELLO: {reason}");

        // The right server key but a key the queue does not list: ERROR 400.
        let mut unlisted = fast_worker(q.backend(), Security::curve_client(queue_keys.public(), KeyPair::generate()))
            .spawn(echo)
            .await
            .unwrap();
        let unlisted_id = identity(&mut unlisted).await;
        let ev = worker_event(&mut unlisted, "refusal", |e| matches!(e, WorkerEvent::HandshakeFailed { .. })).await;
        let WorkerEvent::HandshakeFailed { reason } = ev else { unreachable!() };
        assert!(reason.contains("400"), "refused with status 400: {reason}");
        queue_event(&mut q, "unlisted refusal", |e| {
            matches!(e, QueueEvent::HandshakeFailed { side: "backend", reason, .. } if reason.contains("not allowed"))
        })
        .await;

        // A client request has no worker to go to: it waits in the queue.
        let (front, back) = (q.frontend().to_owned(), q.backend().to_owned());
        let client_security = Security::curve_client(queue_keys.public(), KeyPair::generate());
        let config = ClientConfig { timeout: ms(10_000), retries: 1 };
        let request = tokio::spawn(async move {
            let mut client = Client::connect_secure(front, config, client_security).await.unwrap();
            client.request("for the good worker").await
        });
        stats_until(&q, "the request waiting", |s| s.pending == 1).await;

        // The legitimate worker is the first and only one the queue ever registers, and serves it.
        let mut good =
            fast_worker(&back, Security::curve_client(queue_keys.public(), good_keys)).spawn(echo).await.unwrap();
        let good_id = identity(&mut good).await;
        let ev = queue_event(&mut q, "a worker ready", |e| matches!(e, QueueEvent::WorkerReady { .. })).await;
        assert_eq!(ev, QueueEvent::WorkerReady { worker: good_id.clone() }, "only the good worker registers");
        let reply = request.await.unwrap().expect("the good worker answers");
        assert_eq!(reply, Message::single("for the good worker"));

        // Meanwhile the refused workers kept trying and never got anywhere.
        worker_event(&mut wrong_server, "another failure", |e| matches!(e, WorkerEvent::HandshakeFailed { .. })).await;
        for (name, ev) in pending_events(&mut q).iter().enumerate() {
            assert!(!matches!(ev, QueueEvent::WorkerReady { .. }), "event {name}: {ev:?}");
        }
        let stats = q.stats();
        assert_eq!((stats.workers, stats.requests, stats.replies), (1, 1, 1), "{stats:?}");
        for (w, id) in [(&mut wrong_server, &wrong_server_id), (&mut unlisted, &unlisted_id)] {
            for ev in pending_worker_events(w) {
                let contact = matches!(ev, WorkerEvent::RequestReceived | WorkerEvent::HeartbeatReceived);
                assert!(!contact, "refused worker {} heard from the queue: {ev:?}", display_id(id));
            }
        }
        for w in [wrong_server, unlisted, good] {
            w.close().await;
        }
        q.close().await;
    })
    .await;
}

/// Clients with the wrong server key, with a key not on the frontend's allow list, and without
/// security get no reply (the error says the handshake failed) and the queue never sees their
/// requests; a client with the right keys is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_a_wrong_key_or_no_security_get_no_reply() {
    bounded(async {
        let (queue_keys, client_keys) = (KeyPair::generate(), KeyPair::generate());
        let mut q = secure_queue(
            Security::curve_server_allowing(queue_keys.clone(), [client_keys.public()]),
            Security::curve_server(queue_keys.clone()),
        )
        .await;
        let w = fast_worker(q.backend(), Security::curve_client(queue_keys.public(), KeyPair::generate()))
            .spawn(echo)
            .await
            .unwrap();
        queue_event(&mut q, "worker ready", |e| matches!(e, QueueEvent::WorkerReady { .. })).await;

        let config = ClientConfig { timeout: ms(500), retries: 2 };
        let refused = [
            ("wrong server key", Security::curve_client(KeyPair::generate().public(), client_keys.clone()), "hello"),
            ("unlisted key", Security::curve_client(queue_keys.public(), KeyPair::generate()), "not allowed"),
            ("NULL", Security::Null, "mechanism"),
        ];
        for (what, security, queue_says) in refused {
            let mut client = Client::connect_secure(q.frontend(), config, security).await.unwrap();
            let err = client.request("let me in").await.expect_err(what);
            let ClientError::NoReply { attempts, handshake, .. } = &err else { panic!("{what}: {err:?}") };
            assert_eq!(*attempts, 2, "{what}");
            assert!(handshake.is_some(), "{what}: the error names the failed handshake: {err}");
            assert!(err.to_string().contains("security handshake failed"), "{what}: {err}");
            // Earlier clients' retries may have left failures in the stream: find this one's.
            let ev = queue_event(&mut q, what, |e| {
                matches!(e, QueueEvent::HandshakeFailed { reason, .. } if reason.to_lowercase().contains(queue_says))
            })
            .await;
            assert!(matches!(ev, QueueEvent::HandshakeFailed { side: "frontend", .. }), "{what}: {ev:?}");
            assert_eq!(q.stats().requests, 0, "{what}: the queue never saw the request");
        }

        let mut client =
            Client::connect_secure(q.frontend(), config, Security::curve_client(queue_keys.public(), client_keys))
                .await
                .unwrap();
        assert_eq!(client.request("let me in").await.unwrap(), Message::single("let me in"));
        let stats = q.stats();
        assert_eq!((stats.requests, stats.replies), (1, 1), "{stats:?}");
        w.close().await;
        q.close().await;
    })
    .await;
}

/// PLAIN: workers and clients with the right password are served; a wrong password is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_passwords_end_to_end_and_a_wrong_password_is_refused() {
    bounded(async {
        let users = Security::plain_server([("worker", "w-pass"), ("client", "c-pass")]);
        let mut q = Queue { interval: ms(100), ..Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*") }
            .security(users)
            .spawn()
            .await
            .unwrap();
        let w = fast_worker(q.backend(), Security::plain_client("worker", "w-pass")).spawn(echo).await.unwrap();
        queue_event(&mut q, "worker ready", |e| matches!(e, QueueEvent::WorkerReady { .. })).await;

        let config = ClientConfig { timeout: ms(300), retries: 1 };
        let mut bad =
            Client::connect_secure(q.frontend(), config, Security::plain_client("client", "guess")).await.unwrap();
        let err = bad.request("hello").await.expect_err("wrong password");
        assert!(
            matches!(&err, ClientError::NoReply { handshake: Some(reason), .. } if reason.contains("400")),
            "{err}"
        );
        assert_eq!(q.stats().requests, 0);

        let mut good =
            Client::connect_secure(q.frontend(), config, Security::plain_client("client", "c-pass")).await.unwrap();
        assert_eq!(good.request("hello").await.unwrap(), Message::single("hello"));
        w.close().await;
        q.close().await;
    })
    .await;
}

/// A client role on the queue, or a server role on a worker or client, is a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_roles_are_checked() {
    bounded(async {
        let keys = KeyPair::generate();
        let client_role = Security::curve_client(keys.public(), keys.clone());
        let err = Queue::new("tcp://127.0.0.1:*", "tcp://127.0.0.1:*").security(client_role.clone()).spawn().await;
        assert!(matches!(err, Err(QueueError::Config(_))), "{err:?}");
        let server_role = Security::curve_server(keys);
        let err = Worker::new("tcp://127.0.0.1:5556").security(server_role.clone()).spawn(echo).await;
        assert!(err.is_err());
        let err = Client::connect_secure("tcp://127.0.0.1:5555", ClientConfig::default(), server_role).await;
        assert!(matches!(err, Err(ClientError::Config(_))), "{err:?}");
    })
    .await;
}

fn key_line(p: &Proc, prefix: &str) -> String {
    let line = p.seen.iter().find(|l| l.text.starts_with(prefix)).unwrap_or_else(|| panic!("{}", p.report(prefix)));
    after(&line.text, prefix).unwrap().to_owned()
}

/// The CLI: `ppp keygen`, a CURVE queue, a worker and a client with the queue's public key (and the
/// worker on the backend's allow list); a client with another key gets no reply and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_over_curve() {
    bounded(async {
        let mut queue_keys = Proc::ppp("keygen", &["keygen"]);
        queue_keys.drain().await;
        assert!(queue_keys.wait_exit().await.success());
        let (public, secret) = (key_line(&queue_keys, "public:"), key_line(&queue_keys, "secret:"));
        assert_eq!((public.len(), secret.len()), (40, 40));
        let worker_keys = KeyPair::generate();

        let (front, back) = (ipc_endpoint("sec-front"), ipc_endpoint("sec-back"));
        let mut q = Proc::ppp(
            "queue",
            &[
                "queue",
                "--frontend",
                &front,
                "--backend",
                &back,
                "--interval-ms",
                "100",
                "--curve-server",
                &secret,
                "--curve-allow-worker",
                &worker_keys.public_z85(),
            ],
        );
        let line = q.wait_for("public key line", |l| l.text.starts_with("curve public key:")).await;
        assert_eq!(after(&line.text, "curve public key:"), Some(public.as_str()));
        let mut worker = Proc::ppp(
            "worker",
            &[
                "worker",
                "--connect",
                &back,
                "--curve-serverkey",
                &public,
                "--curve-secretkey",
                &worker_keys.secret_z85(),
            ],
        );
        q.wait_for("worker ready", |l| l.stderr && l.text.contains("worker ready")).await;

        let mut client = Proc::ppp(
            "client",
            &["client", "--connect", &front, "--requests", "5", "--timeout-ms", "2000", "--curve-serverkey", &public],
        );
        client.drain().await;
        assert!(client.wait_exit().await.success(), "{}", client.report("success"));
        assert!(client.seen.iter().any(|l| l.text.starts_with("summary: requests=5 replies=5 resends=0")));

        let wrong = KeyPair::generate().public_z85();
        let mut intruder = Proc::ppp(
            "intruder",
            &[
                "client",
                "--connect",
                &front,
                "--requests",
                "1",
                "--timeout-ms",
                "300",
                "--retries",
                "2",
                "--curve-serverkey",
                &wrong,
            ],
        );
        intruder.drain().await;
        assert_eq!(intruder.wait_exit().await.code(), Some(1), "{}", intruder.report("exit 1"));
        let error = intruder.seen.iter().find(|l| l.text.starts_with("ppp: error:")).expect("an error line");
        assert!(error.text.contains("security handshake failed"), "{}", error.text);
        assert!(intruder.seen.iter().any(|l| l.text.starts_with("summary: requests=1 replies=0")));
        q.wait_for("refusal logged", |l| l.stderr && l.text.contains("security handshake failed")).await;

        // A worker without the key is refused, and says so.
        let mut stranger = Proc::ppp("stranger", &["worker", "--connect", &back, "--curve-serverkey", &public]);
        stranger.wait_for("refusal", |l| l.stderr && l.text.contains("security handshake with the queue failed")).await;
        for p in [&mut stranger, &mut worker, &mut q] {
            p.kill().await;
        }
        remove_ipc(&front);
        remove_ipc(&back);
    })
    .await;
}
