//! Fuzzed bytes from a raw peer into a real ROUTER bound on ipc:// (a Unix socket), then a good
//! DEALER must still be served: the bad connection may only take itself down. (The inproc
//! transport is fuzzed the same way by `socket_e2e`.)
#![no_main]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tokio::io::AsyncWriteExt;
use zmtp::{Message, Socket, SocketType};

static NEXT: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let path = std::env::temp_dir().join(format!(
            "zmtp-fuzz-{}-{}.ipc",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let endpoint = format!("ipc://{}", path.display());
        let router = Socket::new(SocketType::Router);
        router.set_handshake_ivl(Some(Duration::from_millis(50)));
        router.set_maxmsgsize(Some(1 << 20));
        router.set_linger(Some(Duration::ZERO));
        router.bind(&endpoint).await.unwrap();
        if let Ok(mut raw) = tokio::net::UnixStream::connect(&path).await {
            let _ = tokio::time::timeout(Duration::from_millis(20), raw.write_all(data)).await;
            drop(raw);
        }
        let good = Socket::new(SocketType::Dealer);
        good.set_linger(Some(Duration::ZERO));
        good.set_routing_id("good-peer").unwrap();
        good.connect(&endpoint).await.unwrap();
        good.send("ping").await.unwrap();
        let served = async {
            loop {
                let msg = router.recv().await.unwrap();
                if msg[0] == "good-peer" {
                    router.send(Message::from(vec![msg[0].clone(), msg[1].clone()])).await.unwrap();
                    break;
                }
            }
            good.recv().await.unwrap()
        };
        let reply = tokio::time::timeout(Duration::from_secs(5), served).await.expect("good peer starved");
        assert_eq!(reply[0], "ping");
        router.close().await;
        good.close().await;
        let _ = std::fs::remove_file(&path);
    });
});
