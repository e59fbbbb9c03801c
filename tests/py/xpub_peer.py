#!/usr/bin/env python3
"""Interactive libzmq driver (via pyzmq) for the zmtp XPUB/XSUB and socket-option tests.

Unlike peer.py (one socket, a fixed script), this process holds any number of named libzmq sockets
and executes one command per stdin line, answering each with exactly one stdout line. That lets a
Rust test interleave steps on its own sockets and on libzmq sockets, and run the very same scenario
against a libzmq XPUB to learn the reference behaviour.

Usage: python3 xpub_peer.py        (then commands on stdin)

Frames are written as hex, a message as its frames joined by ',' (so "" is one empty frame).

Commands (answer "ok ..." on success, "err <text>" on failure):
  new NAME TYPE                create a socket (TYPE: PUB SUB XPUB XSUB REQ REP DEALER ROUTER PUSH PULL PAIR)
  opt NAME OPTION INT          setsockopt with an integer value (OPTION: a zmq constant name, e.g. XPUB_VERBOSE)
  optb NAME OPTION HEX         setsockopt with a bytes value (e.g. SUBSCRIBE, XPUB_WELCOME_MSG, ROUTING_ID)
  bind NAME ENDPOINT           answers "ok <last endpoint>"
  connect NAME ENDPOINT
  disconnect NAME ENDPOINT
  unbind NAME ENDPOINT
  send NAME MSG                blocking send (bounded by a 10 s SNDTIMEO): "ok" or "err timeout"
  trysend NAME MSG             non-blocking send: "ok" or "again"
  recv NAME TIMEOUT_MS         "msg MSG", or "timeout" if nothing arrived within TIMEOUT_MS
  monitor NAME                 start a monitor on NAME (events read with "event")
  event NAME TIMEOUT_MS        "ev <EVENT_NAME> <value>", or "timeout"
  close NAME                   close with LINGER 0
  quit                         close everything and exit ("ok")

The process exits when stdin reaches EOF, and never outlives its watchdog (120 s).
"""

import signal
import sys

try:
    import zmq
    from zmq.utils.monitor import recv_monitor_message
except Exception as e:  # pragma: no cover - depends on the environment
    sys.stdout.write("err pyzmq is not installed or broken (%r): pip install pyzmq\n" % (e,))
    sys.stdout.flush()
    sys.exit(1)

WATCHDOG_S = 120
SEND_TIMEOUT_MS = 10000

EVENT_NAMES = {
    value: name[len("EVENT_"):]
    for name, value in vars(zmq).items()
    if name.startswith("EVENT_") and isinstance(value, int) and name not in ("EVENT_ALL", "EVENT_ALL_V1", "EVENT_ALL_V2")
}


def decode(msg):
    return [bytes.fromhex(f) for f in msg.split(",")]


def encode(frames):
    return ",".join(f.hex() for f in frames)


def main():
    ctx = zmq.Context()
    sockets = {}
    monitors = {}

    def handle(words):
        cmd = words[0]
        if cmd == "quit":
            return "ok", True
        name = words[1]
        if cmd == "new":
            sock = ctx.socket(getattr(zmq, words[2]))
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
            sockets[name] = sock
            return "ok", False
        sock = sockets[name]
        if cmd == "opt":
            sock.setsockopt(getattr(zmq, words[2]), int(words[3]))
        elif cmd == "optb":
            sock.setsockopt(getattr(zmq, words[2]), bytes.fromhex(words[3] if len(words) > 3 else ""))
        elif cmd == "bind":
            sock.bind(words[2])
            return "ok " + sock.getsockopt(zmq.LAST_ENDPOINT).decode(), False
        elif cmd == "connect":
            sock.connect(words[2])
        elif cmd == "disconnect":
            sock.disconnect(words[2])
        elif cmd == "unbind":
            sock.unbind(words[2])
        elif cmd == "send":
            try:
                sock.send_multipart(decode(words[2] if len(words) > 2 else ""))
            except zmq.Again:
                return "err timeout", False
        elif cmd == "trysend":
            try:
                sock.send_multipart(decode(words[2] if len(words) > 2 else ""), flags=zmq.DONTWAIT)
            except zmq.Again:
                return "again", False
        elif cmd == "recv":
            if sock.poll(int(words[2]), zmq.POLLIN) == 0:
                return "timeout", False
            return "msg " + encode(sock.recv_multipart()), False
        elif cmd == "monitor":
            monitors[name] = sock.get_monitor_socket()
        elif cmd == "event":
            mon = monitors[name]
            if mon.poll(int(words[2]), zmq.POLLIN) == 0:
                return "timeout", False
            ev = recv_monitor_message(mon)
            return "ev %s %s" % (EVENT_NAMES.get(ev["event"], str(ev["event"])), ev["value"]), False
        elif cmd == "close":
            if name in monitors:
                sock.disable_monitor()
                monitors.pop(name).close(0)
            sockets.pop(name).close(0)
        else:
            return "err unknown command %r" % (cmd,), False
        return "ok", False

    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            try:
                answer, stop = handle(words)
            except Exception as e:
                answer, stop = "err %s: %s" % (type(e).__name__, e), False
            sys.stdout.write(answer + "\n")
            sys.stdout.flush()
            if stop:
                break
    finally:
        for mon in monitors.values():
            mon.close(0)
        for sock in sockets.values():
            sock.close(0)
        ctx.term()


if __name__ == "__main__":
    signal.signal(signal.SIGALRM, lambda *_: sys.exit(2))
    signal.alarm(WATCHDOG_S)
    main()
