//! Fuzzed bytes from a raw peer into a real RADIO (the peer says it is a DISH: JOIN/LEAVE commands
//! and anything else) or a real DISH (the peer says it is a RADIO: group and body frames and
//! anything else), after a valid greeting and READY so the fuzzer starts where the draft types'
//! own rules do. Then a good peer must still be served: the bad connection may only take itself
//! down, and whatever it joined must not reach the good peer's group.
#![no_main]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use libfuzzer_sys::fuzz_target;
use tokio::io::AsyncWriteExt;
use zmtp::{Message, Socket, SocketType};
use zmtp_wire::{Command, Metadata};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A NULL greeting and a READY naming `peer_type`, as a ZMTP 3.1 peer opens.
fn handshake(peer_type: &str) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_slice(&[0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 1]);
    let mut mechanism = [0u8; 20];
    mechanism[..4].copy_from_slice(b"NULL");
    out.put_slice(&mechanism);
    out.put_slice(&[0u8; 32]);
    let mut md = Metadata::default();
    md.insert("Socket-Type", peer_type.as_bytes().to_vec());
    let body = Command::Ready(md).body();
    out.put_slice(&[0x04, body.len() as u8]);
    out.put_slice(&body);
    out
}

async fn served(kind: SocketType, data: &[u8]) {
    let name = format!("inproc://draft-fuzz-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let under_test = Socket::new(kind);
    under_test.set_handshake_ivl(Some(Duration::from_millis(50)));
    under_test.set_maxmsgsize(Some(1 << 20));
    under_test.set_max_subscriptions(Some(64));
    under_test.bind(&name).await.unwrap();
    if kind == SocketType::Dish {
        under_test.join("good").unwrap();
    }
    let mut raw = zmtp::transport::inproc_raw_connect(&name["inproc://".len()..]).await;
    let mut bytes = handshake(if kind == SocketType::Radio { "DISH" } else { "RADIO" });
    bytes.put_slice(data);
    // The peer may stop reading: never wait on it for long.
    let _ = tokio::time::timeout(Duration::from_millis(20), raw.write_all(&bytes)).await;
    let good = Socket::new(if kind == SocketType::Radio { SocketType::Dish } else { SocketType::Radio });
    if kind == SocketType::Radio {
        good.join("good").unwrap();
    }
    good.connect(&name).await.unwrap();
    let (radio, dish) = if kind == SocketType::Radio { (&under_test, &good) } else { (&good, &under_test) };
    let delivered = async {
        // The JOIN travels on its own: send until one arrives, then the good peer was served. A
        // raw RADIO may send the DISH well-formed messages of its own; only the joined group's
        // ever come out.
        loop {
            radio.send(Message::from("ping").with_group("good")).await.unwrap();
            while let Ok(Ok(msg)) = tokio::time::timeout(Duration::from_millis(10), dish.recv()).await {
                assert_eq!(msg.group().map(|g| &g[..]), Some(&b"good"[..]), "a DISH gives only its groups");
                assert_eq!(msg.len(), 1, "one frame, its body");
                if msg[0] == "ping" {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), delivered).await.expect("good peer starved");
    drop(raw);
    under_test.set_linger(Some(Duration::ZERO));
    good.set_linger(Some(Duration::ZERO));
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let kind = if which & 1 == 0 { SocketType::Radio } else { SocketType::Dish };
    rt.block_on(served(kind, rest));
});
