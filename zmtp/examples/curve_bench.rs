//! CURVE throughput relative to NULL: PUSH → PULL over TCP loopback, 64 B and 64 KiB messages, both
//! mechanisms in the same run (same machine, same moment), like libzmq's local_thr/remote_thr: the clock
//! starts at the first message received and stops at the last.
//!
//! Run: `cargo run --release --example curve_bench [-- <count-64B> <count-64KiB> <rounds>]`
//! (defaults 1000000, 20000, 3; each figure is the median of the rounds).

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use zmtp::security::KeyPair;
use zmtp::wire::curve::{CurveCipher, CurveClient, CurveServer};
use zmtp::wire::rand_core::OsRng;
use zmtp::wire::{HandshakeConfig, Step};
use zmtp::{Socket, SocketType};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mechanism {
    Null,
    Curve,
}

/// Messages per second for one PUSH/PULL pair sending `count` messages of `size` bytes.
async fn throughput(mechanism: Mechanism, size: usize, count: u64) -> zmtp::Result<f64> {
    let pull = Socket::new(SocketType::Pull);
    let push = Socket::new(SocketType::Push);
    if mechanism == Mechanism::Curve {
        let server = KeyPair::generate();
        pull.set_curve_server(true);
        pull.set_curve_keypair(server.clone());
        push.set_curve_keypair(KeyPair::generate());
        push.set_curve_serverkey_bytes(server.public());
    }
    let endpoint = pull.bind("tcp://127.0.0.1:*").await?;
    push.connect(&endpoint).await?;
    let payload = Bytes::from(vec![0x5Au8; size]);
    let sender = tokio::spawn(async move {
        for _ in 0..count {
            push.send(payload.clone()).await?;
        }
        push.close().await;
        Ok::<_, zmtp::Error>(())
    });
    let first = pull.recv().await?;
    assert_eq!(first[0].len(), size);
    let start = Instant::now();
    for _ in 1..count {
        pull.recv().await?;
    }
    let elapsed = start.elapsed();
    sender.await.expect("sender task panicked")?;
    pull.close().await;
    Ok((count - 1) as f64 / elapsed.as_secs_f64())
}

fn config(socket_type: SocketType) -> HandshakeConfig {
    HandshakeConfig::new(socket_type)
}

/// A client and a server session from an in-memory handshake (the sans-IO types, no sockets).
fn sessions() -> (CurveCipher, CurveCipher) {
    let server_keys = KeyPair::generate();
    let mut client = CurveClient::new(config(SocketType::Push), KeyPair::generate(), server_keys.public(), &mut OsRng);
    let mut server = CurveServer::new(config(SocketType::Pull), server_keys, &mut OsRng);
    let sent = |step: Step| match step {
        Step::Send(mut v) => v.remove(0),
        other => panic!("unexpected {other:?}"),
    };
    let welcome = sent(server.on_command(client.start().expect("HELLO")).expect("WELCOME"));
    let initiate = sent(client.on_command(welcome).expect("INITIATE"));
    let Step::Authenticate(_) = server.on_command(initiate).expect("INITIATE accepted") else { panic!("no ZAP step") };
    let Step::Done { send, cipher: Some(server_cipher), .. } =
        server.on_auth(zmtp::security::ZapReply::allow("")).expect("READY")
    else {
        panic!("server not done")
    };
    let Step::Done { cipher: Some(client_cipher), .. } = client.on_command(send[0].clone()).expect("done") else {
        panic!("client not done")
    };
    (client_cipher, server_cipher)
}

/// The crypto ceiling: frames per second through encode_frame + decode_frame on one thread.
fn crypto_only(size: usize, count: u64) -> f64 {
    let (client, server) = sessions();
    let (mut enc, _) = client.split();
    let (_, mut dec) = server.split();
    let payload = vec![0x5Au8; size];
    let mut wire = BytesMut::with_capacity(size + 64);
    let start = Instant::now();
    for _ in 0..count {
        wire.clear();
        enc.encode_frame(false, false, &payload, &mut wire).expect("encode");
        // Outer header: 2 bytes (short frame) or 9 (long).
        let header = if wire[0] & 0x02 != 0 { 9 } else { 2 };
        let frame = dec.decode_frame(&wire[header..]).expect("decode");
        assert_eq!(frame.body.len(), size);
    }
    count as f64 / start.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> zmtp::Result<()> {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("counts are integers")).collect();
    let small = args.first().copied().unwrap_or(1_000_000);
    let large = args.get(1).copied().unwrap_or(20_000);
    let rounds = args.get(2).copied().unwrap_or(3).max(1);

    println!("PUSH -> PULL over tcp://127.0.0.1, median of {rounds} rounds");
    println!(
        "{:>9} {:>9} {:>14} {:>11} {:>14} {:>11} {:>10}",
        "size", "count", "NULL msg/s", "NULL MB/s", "CURVE msg/s", "CURVE MB/s", "CURVE/NULL"
    );
    for (size, count) in [(64usize, small), (64 * 1024, large)] {
        let (mut null, mut curve) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            // Interleaved so that both mechanisms see the same machine load.
            null.push(throughput(Mechanism::Null, size, count).await?);
            curve.push(throughput(Mechanism::Curve, size, count).await?);
        }
        let (null, curve) = (median(null), median(curve));
        let mb = |rate: f64| rate * size as f64 / 1e6;
        println!(
            "{:>9} {:>9} {:>14.0} {:>11.1} {:>14.0} {:>11.1} {:>9.1}%",
            size,
            count,
            null,
            mb(null),
            curve,
            mb(curve),
            100.0 * curve / null
        );
    }
    println!("CURVE crypto alone (encode_frame + decode_frame, one thread, no sockets):");
    for (size, count) in [(64usize, small), (64 * 1024, large)] {
        let rate = crypto_only(size, count);
        println!("{:>9} {:>9} {:>14.0} frames/s {:>9.1} MB/s", size, count, rate, rate * size as f64 / 1e6);
    }
    Ok(())
}
