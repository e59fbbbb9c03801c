#!/usr/bin/env python3
"""Records what real libzmq (via pyzmq) sends to a raw TCP peer, as seed corpora for the fuzz targets.

Run from fuzz/: python3 seeds/capture.py  (writes corpus/<target>/libzmq-*). Needs pyzmq.
The raw peer answers with a ZMTP 3.1 greeting (and, for NULL, a READY) so libzmq proceeds."""
import os, socket, struct, threading, time, zmq

OUT = os.path.join(os.path.dirname(__file__), "..", "corpus")

def greeting(mech=b"NULL", server=0):
    return b"\xff" + b"\x00" * 7 + b"\x01\x7f\x03\x01" + mech.ljust(20, b"\x00") + bytes([server]) + b"\x00" * 31

def ready(socket_type):
    prop = b"\x0bSocket-Type" + struct.pack(">I", len(socket_type)) + socket_type
    body = b"\x05READY" + prop
    return b"\x04" + bytes([len(body)]) + body

def capture(zmq_type, peer_type, setup, mech=b"NULL", send_ready=True, seconds=0.4):
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    port = srv.getsockname()[1]
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq_type); s.linger = 0
    security = getattr(setup, "security", False)
    if security:
        setup(s)
    s.connect(f"tcp://127.0.0.1:{port}")
    if not security:
        setup(s)  # after connect: libzmq blocks a send with no peer
    conn, _ = srv.accept(); conn.settimeout(0.2)
    conn.sendall(greeting(mech))
    if send_ready:
        conn.sendall(ready(peer_type))
    data = b""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        except socket.timeout:
            pass
    s.close(); conn.close(); srv.close()
    return data

def write(target, name, data):
    d = os.path.join(OUT, target); os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def frames(data):
    """Splits a byte stream after the 64-byte greeting into (flags, body) frames."""
    out, i = [], 64
    while i + 2 <= len(data):
        flags = data[i]
        if flags & 2:
            if i + 9 > len(data): break
            n = struct.unpack(">Q", data[i + 1:i + 9])[0]; h = 9
        else:
            n = data[i + 1]; h = 2
        out.append((flags, data[i + h:i + h + n])); i += h + n
    return out

def main():
    def dealer(s):
        s.routing_id = b"seed"
        s.send_multipart([b"", b"hello"])
    def sub(s):
        s.subscribe(b"topic"); s.subscribe(b"")
    def push(s):
        for n in (0, 1, 255, 256, 3000):
            s.send(b"x" * n)
    streams = {
        "dealer": capture(zmq.DEALER, b"ROUTER", dealer),
        "sub": capture(zmq.SUB, b"PUB", sub),
        "push": capture(zmq.PUSH, b"PULL", push),
        "req": capture(zmq.REQ, b"REP", lambda s: s.send(b"request")),
    }
    for name, data in streams.items():
        write("greeting", f"libzmq-{name}", data[:64])
        write("frame_decoder", f"libzmq-{name}", b"\x07\x00" + data[64:])
        write("socket_e2e", f"libzmq-{name}", data)
        for k, (flags, body) in enumerate(frames(data)):
            if flags & 4:
                write("command", f"libzmq-{name}-{k}", body)
                write("null_handshake", f"libzmq-{name}-{k}", b"\x00" + bytes([min(len(body), 255)]) + body[:255])
    pub, sec = zmq.curve_keypair()
    def curve(s):
        s.curve_serverkey = zmq.curve_keypair()[0]
        s.curve_publickey, s.curve_secretkey = pub, sec
    curve.security = True
    data = capture(zmq.DEALER, b"ROUTER", curve, mech=b"CURVE", send_ready=False)
    write("greeting", "libzmq-curve", data[:64])
    for k, (flags, body) in enumerate(frames(data)):
        write("curve_server", f"libzmq-hello-{k}", b"\x00" + bytes([min(len(body), 255)]) + body[:255])
    def plain(s):
        s.plain_username, s.plain_password = b"admin", b"secret"
    plain.security = True
    data = capture(zmq.REQ, b"REP", plain, mech=b"PLAIN", send_ready=False)
    for k, (flags, body) in enumerate(frames(data)):
        write("plain_handshake", f"libzmq-hello-{k}", b"\x00" + bytes([len(body)]) + body)
    for text in ["tcp://127.0.0.1:5555", "tcp://[::1]:*", "ipc:///tmp/x.ipc", "inproc://name", "Hello World"[:10], "rq:Ai]X=b4ZAm3Pg0xpWZt%i#$.?cEP1n3@E/tK>"]:
        write("z85_endpoint", "seed-" + str(abs(hash(text)) % 10**8), text.encode())

if __name__ == "__main__":
    main()
