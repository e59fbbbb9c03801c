"""A minimal 12/CHP server written from the spec with pyzmq (libzmq), for interop tests.

Usage: server.py [HUGZ_SECONDS]

Binds SNAPSHOT (ROUTER) at a free port P on 127.0.0.1, PUBLISHER (PUB) at P+1, COLLECTOR (SUB) at
P+2, prints "port P", and serves until its stdin closes. It follows the spec literally where our
server interprets it: each KVSYNC carries the sequence that last set its key, KTHXBAI the highest
KVSYNC sequence sent (0 for an empty snapshot), and HUGZ goes out only in the absence of updates.
No ttl support (the spec says SHOULD).
"""
import struct
import sys
import time

import zmq


def main():
    hugz_ivl = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    ctx = zmq.Context()
    while True:
        snapshot, publisher, collector = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
        for s in (snapshot, publisher, collector):
            s.linger = 0
        collector.setsockopt(zmq.SUBSCRIBE, b"")
        port = snapshot.bind_to_random_port("tcp://127.0.0.1", min_port=20000, max_port=60000)
        try:
            publisher.bind("tcp://127.0.0.1:%d" % (port + 1))
            collector.bind("tcp://127.0.0.1:%d" % (port + 2))
            break
        except zmq.ZMQError:
            for s in (snapshot, publisher, collector):
                s.close()
    print("port %d" % port, flush=True)

    kvmap = {}  # key -> (sequence, value)
    sequence = 0
    poller = zmq.Poller()
    for s in (snapshot, collector):
        poller.register(s, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    last_publish = time.monotonic()
    while True:
        wait = max(0.0, last_publish + hugz_ivl - time.monotonic())
        events = dict(poller.poll(wait * 1000))
        if sys.stdin in events or sys.stdin.fileno() in events:
            if not sys.stdin.readline():
                return
        if collector in events:
            msg = collector.recv_multipart()
            if len(msg) == 5 and len(msg[1]) == 8 and len(msg[2]) in (0, 16) and msg[0]:
                key, _, uuid, props, body = msg
                sequence += 1
                publisher.send_multipart([key, struct.pack("!Q", sequence), uuid, props, body])
                last_publish = time.monotonic()
                if body:
                    kvmap[key] = (sequence, body)
                else:
                    kvmap.pop(key, None)
        if snapshot in events:
            msg = snapshot.recv_multipart()
            if len(msg) == 3 and msg[1] == b"ICANHAZ?":
                identity, _, subtree = msg
                highest = 0
                for key in sorted(kvmap):
                    if key.startswith(subtree):
                        seq, value = kvmap[key]
                        highest = max(highest, seq)
                        snapshot.send_multipart([identity, key, struct.pack("!Q", seq), b"", b"", value])
                snapshot.send_multipart([identity, b"KTHXBAI", struct.pack("!Q", highest), b"", b"", subtree])
        if time.monotonic() >= last_publish + hugz_ivl:
            publisher.send_multipart([b"HUGZ", struct.pack("!Q", 0), b"", b"", b""])
            last_publish = time.monotonic()


if __name__ == "__main__":
    main()
