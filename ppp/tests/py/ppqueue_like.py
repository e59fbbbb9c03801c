#!/usr/bin/env python3
"""A queue that behaves like the Guide's ppqueue, written from its documented behaviour with pyzmq
(real libzmq), for interop tests. Not the Guide's code.

    ppqueue_like.py [--interval-ms MS] [--liveness N]

Binds a frontend ROUTER (clients) and a backend ROUTER (workers) on random tcp://127.0.0.1 ports
and prints "frontend: EP" and "backend: EP". Like the reference:
- any message from a worker (READY, HEARTBEAT or a reply) puts it at the back of the idle list;
- a reply is forwarded to the client as it came (the frames after the worker's address);
- a request is read from the frontend only while some worker is idle, and forwarded as
  [worker address, client frames...], nothing added;
- HEARTBEAT to every idle worker every interval; a worker silent for LIVENESS intervals is purged.
"""
import argparse
import time
from collections import OrderedDict

import zmq

READY, HEARTBEAT = b"\x01", b"\x02"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--liveness", type=int, default=3)
    args = ap.parse_args()
    interval = args.interval_ms / 1000.0
    ctx = zmq.Context()
    front, back = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
    for s in (front, back):
        s.linger = 0
    fport = front.bind_to_random_port("tcp://127.0.0.1")
    bport = back.bind_to_random_port("tcp://127.0.0.1")
    print("frontend: tcp://127.0.0.1:%d" % fport, flush=True)
    print("backend: tcp://127.0.0.1:%d" % bport, flush=True)
    workers = OrderedDict()  # address -> expiry, in LRU order
    heartbeat_at = time.monotonic() + interval
    while True:
        poller = zmq.Poller()
        poller.register(back, zmq.POLLIN)
        if workers:
            poller.register(front, zmq.POLLIN)
        events = dict(poller.poll(int(interval * 1000)))
        if back in events:
            frames = back.recv_multipart()
            address, rest = frames[0], frames[1:]
            workers.pop(address, None)
            workers[address] = time.monotonic() + interval * args.liveness
            if len(rest) == 1 and rest[0] in (READY, HEARTBEAT):
                pass
            else:
                front.send_multipart(rest)
        if front in events:
            frames = front.recv_multipart()
            address, _ = workers.popitem(last=False)
            back.send_multipart([address] + frames)
        if time.monotonic() >= heartbeat_at:
            for address in workers:
                back.send_multipart([address, HEARTBEAT])
            heartbeat_at = time.monotonic() + interval
        now = time.monotonic()
        for address in [a for a, expiry in workers.items() if expiry < now]:
            del workers[address]


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
