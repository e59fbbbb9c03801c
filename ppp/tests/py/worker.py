#!/usr/bin/env python3
"""A Paranoid Pirate worker written from RFC 6/PPP with pyzmq (real libzmq), for interop tests.
It follows the Guide's ppworker: DEALER, READY on every new socket, HEARTBEAT every interval,
liveness counter reset by any message from the queue, reconnect with exponential backoff.

    worker.py --connect EP [--interval-ms MS] [--liveness N] [--init-ms MS] [--max-ms MS]

As strict as the Guide's ppworker: a request is exactly three frames [client address, "", body],
echoed whole; a one-frame HEARTBEAT is a heartbeat; anything else is an invalid message, logged
and dropped. Prints one line per event:

    ready ID | heartbeat-in | request | reconnect MS | malformed
"""
import argparse
import os
import sys
import time

import zmq

READY, HEARTBEAT = b"\x01", b"\x02"


def say(*words):
    print(*words, flush=True)


def new_socket(ctx, endpoint):
    sock = ctx.socket(zmq.DEALER)
    identity = os.urandom(4).hex().upper().encode()
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.linger = 0
    sock.connect(endpoint)
    sock.send(READY)
    say("ready", identity.hex())
    return sock


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connect", required=True)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--liveness", type=int, default=3)
    ap.add_argument("--init-ms", type=int, default=1000)
    ap.add_argument("--max-ms", type=int, default=32000)
    args = ap.parse_args()
    interval = args.interval_ms / 1000.0

    ctx = zmq.Context()
    sock = new_socket(ctx, args.connect)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    liveness = args.liveness
    backoff = args.init_ms
    heartbeat_at = time.monotonic() + interval
    while True:
        events = dict(poller.poll(args.interval_ms))
        if sock in events:
            frames = sock.recv_multipart()
            if frames == [HEARTBEAT]:
                say("heartbeat-in")
            elif len(frames) == 3 and frames[1] == b"":
                say("request")
                sock.send_multipart(frames)
            else:
                say("malformed")
            liveness = args.liveness
            backoff = args.init_ms
        else:
            liveness -= 1
            if liveness == 0:
                say("reconnect", backoff)
                time.sleep(backoff / 1000.0)
                backoff = min(backoff * 2, args.max_ms)
                poller.unregister(sock)
                sock.close()
                sock = new_socket(ctx, args.connect)
                poller.register(sock, zmq.POLLIN)
                liveness = args.liveness
        if time.monotonic() >= heartbeat_at:
            heartbeat_at = time.monotonic() + interval
            sock.send(HEARTBEAT)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
