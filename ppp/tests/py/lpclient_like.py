#!/usr/bin/env python3
"""A Lazy Pirate client that behaves like the Guide's lpclient, written from its documented
behaviour with pyzmq (real libzmq), for interop tests. Not the Guide's code.

    lpclient_like.py --connect EP [--requests N] [--timeout-ms MS] [--retries N]

A REQ socket; each request is its sequence number as one frame ("1", "2", ...), and only a reply
of exactly that one frame counts. After a timeout the socket is closed and a fresh one sends the
same request again; after RETRIES attempts the client gives up. Prints "served N of M".
"""
import argparse

import zmq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connect", required=True)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--timeout-ms", type=int, default=2500)
    ap.add_argument("--retries", type=int, default=3)
    args = ap.parse_args()
    ctx = zmq.Context()

    def fresh():
        s = ctx.socket(zmq.REQ)
        s.linger = 0
        s.connect(args.connect)
        return s

    sock = fresh()
    served = 0
    for sequence in range(1, args.requests + 1):
        request = str(sequence).encode()
        for _ in range(args.retries):
            sock.send(request)
            if sock.poll(args.timeout_ms, zmq.POLLIN):
                reply = sock.recv_multipart()
                if reply == [request]:
                    served += 1
                    break
                print("unexpected reply", reply, flush=True)
            sock.close()
            sock = fresh()
        else:
            break  # the server seems to be offline: give up, as the reference does
    print("served %d of %d" % (served, args.requests), flush=True)


if __name__ == "__main__":
    main()
