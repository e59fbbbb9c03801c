#!/usr/bin/env python3
"""A libzmq REP server (via pyzmq) for zmtp/tests/cli.rs: answers each request with its frames upper-cased.

Usage: python3 rep_upper.py COUNT
Binds tcp://127.0.0.1:* and prints the bound endpoint as its first stdout line, answers COUNT requests,
then exits 0. Every wait is limited to 20 s (exit 1 with a message on stderr).
"""
import sys

import zmq


def main() -> int:
    count = int(sys.argv[1])
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.setsockopt(zmq.RCVTIMEO, 20000)
    rep.setsockopt(zmq.SNDTIMEO, 20000)
    rep.setsockopt(zmq.LINGER, 5000)
    rep.bind("tcp://127.0.0.1:*")
    print(rep.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    try:
        for _ in range(count):
            frames = rep.recv_multipart()
            rep.send_multipart([f.upper() for f in frames])
    except zmq.Again:
        print("rep_upper.py: timed out waiting for a request", file=sys.stderr)
        return 1
    rep.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
