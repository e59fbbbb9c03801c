"""A minimal 12/CHP client written from the spec with pyzmq (libzmq), for interop tests.

Usage: client.py PORT SUBTREE KEY VALUE

Subscribes (SUBTREE and HUGZ), waits for a first message to know the subscription is live, asks
for the snapshot while queueing updates, applies the queued updates newer than KTHXBAI, then sets
KEY=VALUE (with a UUID and the property owner=py) and waits for the server to republish it.
Prints, one per line: "synced SEQ SUBTREE", "entry KEY=VALUE" per snapshot entry, "echo SEQ PROPS",
"final KEY=VALUE" per entry of its map at the end, "done".
"""
import struct
import sys
import time
import uuid

import zmq


def fail(why):
    print("error %s" % why, flush=True)
    sys.exit(1)


def main():
    port, subtree, key, value = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode(), sys.argv[4].encode()
    ctx = zmq.Context()
    sub, dealer, pub = ctx.socket(zmq.SUB), ctx.socket(zmq.DEALER), ctx.socket(zmq.PUB)
    for s in (sub, dealer, pub):
        s.linger = 0
    sub.setsockopt(zmq.SUBSCRIBE, subtree)
    if subtree:
        sub.setsockopt(zmq.SUBSCRIBE, b"HUGZ")
    sub.connect("tcp://127.0.0.1:%d" % (port + 1))
    dealer.connect("tcp://127.0.0.1:%d" % port)
    pub.connect("tcp://127.0.0.1:%d" % (port + 2))

    if not sub.poll(10000):
        fail("no message on the subscriber")
    queued = [sub.recv_multipart()]
    dealer.send_multipart([b"ICANHAZ?", subtree])
    kvmap = {}
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    poller.register(dealer, zmq.POLLIN)
    deadline = time.monotonic() + 10
    sequence = None
    while sequence is None:
        events = dict(poller.poll(max(0, deadline - time.monotonic()) * 1000))
        if not events:
            fail("no snapshot")
        if sub in events:
            queued.append(sub.recv_multipart())
        if dealer in events:
            k, seq, _, _, body = dealer.recv_multipart()
            if k == b"KTHXBAI":
                sequence = struct.unpack("!Q", seq)[0]
                print("synced %d %s" % (sequence, body.decode()), flush=True)
            else:
                kvmap[k] = body
    for k in sorted(kvmap):
        print("entry %s=%s" % (k.decode(), kvmap[k].decode()), flush=True)

    def apply(msg):
        nonlocal sequence
        k, seq, _, _, body = msg
        seq = struct.unpack("!Q", seq)[0]
        if k == b"HUGZ" or seq <= sequence:
            return
        sequence = seq
        if body:
            kvmap[k] = body
        else:
            kvmap.pop(k, None)

    for msg in queued:
        apply(msg)

    my_uuid = uuid.uuid4().bytes
    kvset = [key, struct.pack("!Q", 0), my_uuid, b"owner=py\n", value]
    deadline = time.monotonic() + 10
    resend = 0
    while True:
        now = time.monotonic()
        if now > deadline:
            fail("no echo")
        if now >= resend:
            pub.send_multipart(kvset)  # resent until echoed: a PUB drops until the subscription arrives
            resend = now + 0.5
        if sub.poll(100):
            msg = sub.recv_multipart()
            apply(msg)
            if msg[2] == my_uuid:
                print("echo %d %s" % (struct.unpack("!Q", msg[1])[0], msg[3].decode().replace("\n", "\\n")), flush=True)
                break
    for k in sorted(kvmap):
        print("final %s=%s" % (k.decode(), kvmap[k].decode()), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
