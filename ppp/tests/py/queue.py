#!/usr/bin/env python3
"""A Paranoid Pirate queue written from RFC 6/PPP with pyzmq (real libzmq), for interop tests.

    queue.py [--interval-ms MS] [--liveness N] [--frontend EP] [--backend EP]

Binds a frontend ROUTER (clients) and a backend ROUTER (workers), by default on random
tcp://127.0.0.1 ports, and prints "frontend: EP" and "backend: EP". Then it prints one line per
event, with worker ids in hex:

    ready ID | heartbeat ID | request ID | reply ID | expired ID | unregistered ID | malformed ID

Per the spec: a worker must start with READY (anything else from an unknown worker is ignored);
idle workers wait in LRU order; the queue heartbeats every registered worker (idle or busy) every
interval; a worker silent for LIVENESS intervals is forgotten. A worker becomes idle only on READY
or on a reply, never on a heartbeat.
"""
import argparse
import sys
import time
from collections import OrderedDict

import zmq

READY, HEARTBEAT = b"\x01", b"\x02"


def say(*words):
    print(*words, flush=True)


def bind(sock, ep):
    if ep is None:
        return "tcp://127.0.0.1:%d" % sock.bind_to_random_port("tcp://127.0.0.1")
    sock.bind(ep)
    return ep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--liveness", type=int, default=3)
    ap.add_argument("--frontend")
    ap.add_argument("--backend")
    args = ap.parse_args()
    interval = args.interval_ms / 1000.0
    span = interval * args.liveness

    ctx = zmq.Context()
    front, back = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
    for s in (front, back):
        s.linger = 0
    say("frontend:", bind(front, args.frontend))
    say("backend:", bind(back, args.backend))

    idle = OrderedDict()  # worker id -> expiry, least recently used first
    busy = {}  # worker id -> expiry
    only_back = zmq.Poller()
    only_back.register(back, zmq.POLLIN)
    both = zmq.Poller()
    both.register(back, zmq.POLLIN)
    both.register(front, zmq.POLLIN)
    heartbeat_at = time.monotonic() + interval

    while True:
        poller = both if idle else only_back
        timeout = max(0.0, heartbeat_at - time.monotonic())
        events = dict(poller.poll(int(timeout * 1000) + 1))
        now = time.monotonic()
        if back in events:
            frames = back.recv_multipart()
            wid, rest = frames[0], frames[1:]
            known = wid in idle or wid in busy
            if rest == [READY]:
                busy.pop(wid, None)
                idle[wid] = now + span
                idle.move_to_end(wid)
                say("ready", wid.hex())
            elif rest == [HEARTBEAT]:
                if wid in idle:
                    idle[wid] = now + span
                    say("heartbeat", wid.hex())
                elif wid in busy:
                    busy[wid] = now + span
                    say("heartbeat", wid.hex())
                else:
                    say("unregistered", wid.hex())
            elif len(rest) == 1:
                say("malformed", wid.hex())
            elif wid in busy:
                del busy[wid]
                idle[wid] = now + span
                front.send_multipart(rest)
                say("reply", wid.hex())
            else:
                say("unregistered" if not known else "malformed", wid.hex())
        if front in events and idle:
            frames = front.recv_multipart()
            wid, _ = idle.popitem(last=False)
            busy[wid] = now + span
            back.send_multipart([wid] + frames)
            say("request", wid.hex())
        if now >= heartbeat_at:
            for wid in list(idle) + list(busy):
                back.send_multipart([wid, HEARTBEAT])
            heartbeat_at = now + interval
        for table in (idle, busy):
            for wid in [w for w, expiry in table.items() if expiry <= now]:
                del table[wid]
                say("expired", wid.hex())


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
