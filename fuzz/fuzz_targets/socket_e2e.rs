//! Fuzzed bytes from a raw peer into a real ROUTER socket (over an in-memory stream), then a good DEALER
//! must still be served: the bad connection may only take itself down.
#![no_main]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tokio::io::AsyncWriteExt;
use zmtp::{Message, Socket, SocketType};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn rand_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(NEXT.load(Ordering::Relaxed));
    h.finish()
}

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let name = format!("inproc://fuzz-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let router = Socket::new(SocketType::Router);
        router.set_handshake_ivl(Some(Duration::from_millis(50)));
        router.set_maxmsgsize(Some(1 << 20));
        router.bind(&name).await.unwrap();
        let mut raw = zmtp::transport::inproc_raw_connect(&name["inproc://".len()..]).await;
        // The peer may stop reading: never wait on it for long.
        let _ = tokio::time::timeout(Duration::from_millis(20), raw.write_all(data)).await;
        let good = Socket::new(SocketType::Dealer);
        // An id the fuzzer cannot claim first (a duplicate id would legitimately refuse the good peer).
        let id = format!("good-{:016x}", rand_id());
        good.set_routing_id(id.clone()).unwrap();
        good.connect(&name).await.unwrap();
        good.send("ping").await.unwrap();
        let served = async {
            loop {
                let msg = router.recv().await.unwrap();
                if msg[0] == id.as_bytes() {
                    router.send(Message::from(vec![msg[0].clone(), msg[1].clone()])).await.unwrap();
                    break;
                }
            }
            good.recv().await.unwrap()
        };
        let reply = tokio::time::timeout(Duration::from_secs(5), served).await.expect("good peer starved");
        assert_eq!(reply[0], "ping");
        drop(raw);
        router.set_linger(Some(Duration::ZERO));
        good.set_linger(Some(Duration::ZERO));
    });
});
