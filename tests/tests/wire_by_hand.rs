//! `zmtp-wire` alone, driven by hand as an embedded user would (its example `handshake_by_hand`, a
//! sans-IO `Session` over blocking `std::net`), against libzmq 4.3.5 (pyzmq) over CURVE, both
//! directions: our REQ to libzmq's REP, libzmq's REQ to our REP.

use std::net::TcpListener;

#[path = "../../zmtp/wire/examples/handshake_by_hand.rs"]
#[allow(dead_code)]
mod by_hand;

use zmtp_wire::curve::{KeyPair, decode_key};

#[path = "common/sync_peer.rs"]
mod sync_peer;
use sync_peer::{Peer, hex};

#[test]
fn hand_driven_req_gets_a_reply_from_libzmq_rep_over_curve() {
    let mut peer =
        Peer::spawn(&["type=REP", "bind=tcp://127.0.0.1:*", "curve_server=1", "curve_generate=1", "--", "echo:1"]);
    let keys = peer.expect("keys");
    let public = keys.split(' ').next().expect("keys PUBLIC SECRET");
    let endpoint = peer.expect("ready");
    let address = endpoint.strip_prefix("tcp://").expect("a tcp endpoint");
    let reply = by_hand::request(address, decode_key(public).expect("Z85 key"), b"hello from zmtp-wire")
        .expect("a reply over CURVE");
    assert_eq!(reply, [&b"hello from zmtp-wire"[..]]);
    // libzmq saw one two-frame request: REQ's empty delimiter, then the body.
    // libzmq's REP saw the body (its REQ envelope, our empty delimiter, stripped), from no ZAP user.
    assert_eq!(peer.expect("recv"), format!("- {}", hex(b"hello from zmtp-wire")));
}

#[test]
fn libzmq_req_gets_a_reply_from_hand_driven_rep_over_curve() {
    let ours = KeyPair::generate();
    let public = ours.public_z85();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let server = std::thread::spawn(move || by_hand::serve_one(&listener, ours));
    let mut peer = Peer::spawn(&[
        "type=REQ",
        &format!("connect=tcp://{address}"),
        &format!("curve_serverkey={public}"),
        "curve_generate=1",
        "--",
        &format!("send:{}", hex(b"ping")),
        "recv:1",
    ]);
    peer.expect("keys");
    peer.expect("ready");
    let echoed = peer.expect("recv");
    assert_eq!(echoed, format!("- {}", hex(b"ping")), "what libzmq's REQ got back");
    drop(peer);
    let request = server.join().expect("server thread").expect("served one request");
    assert_eq!(request, [&b""[..], &b"ping"[..]]);
}

/// The session bounds a message in bytes, all frames together: a peer's endless run of MORE frames
/// (each small enough for the frame codec) is refused past 1 MiB instead of piling up.
#[test]
fn a_message_of_many_frames_is_bounded_in_bytes() {
    let server_keys = KeyPair::generate();
    let mut client = by_hand::Session::curve_client(server_keys.public());
    let mut server = by_hand::Session::curve_server(server_keys);
    for _ in 0..3 {
        let to_server = client.output();
        server.input(&to_server).expect("handshake");
        let to_client = server.output();
        client.input(&to_client).expect("handshake");
    }
    let frame = [7u8; 1000];
    client.send(&[&frame[..]; 1000]).unwrap(); // 1000 frames, 1 MB: under the bound
    assert_eq!(server.input(&client.output()).unwrap().len(), 1);
    client.send(&[&frame[..]; 1100]).unwrap(); // 1.1 MB in one message
    let err = server.input(&client.output()).unwrap_err();
    assert!(err.to_string().contains("more than"), "{err}");
}
