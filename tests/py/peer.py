#!/usr/bin/env python3
"""Scriptable libzmq peer (via pyzmq) for the zmtp interop tests (tests/tests/interop.rs).

Usage: python3 peer.py '<json config>'

Config keys:
  type              socket type name: PAIR PUB SUB REQ REP DEALER ROUTER PULL PUSH XPUB XSUB (required)
  bind | connect    endpoint; bind may use a wildcard port (tcp://127.0.0.1:*)
  routing_id        hex; ZMQ_ROUTING_ID
  router_mandatory  bool; ZMQ_ROUTER_MANDATORY
  heartbeat_ivl, heartbeat_timeout, heartbeat_ttl   milliseconds
  rcvhwm            ZMQ_RCVHWM (messages)
  subscribe         list of hex topics (SUB)
  ignore            list of hex values: received messages whose first frame equals one are dropped
                    silently by recv/echo (warm-up traffic)
  timeout_ms        RCVTIMEO/SNDTIMEO and the limit of every waiting op (default 10000)
  linger_ms         LINGER used when closing at the end (default timeout_ms)
  script           list of ops, run in order:
    {"op": "send", "frames": [F...]}          F = hex string, or {"gen": n} = n bytes, byte i = i % 251
    {"op": "send_mandatory", "frames": [F...]} ROUTER: retry while the peer is unknown (EHOSTUNREACH)
    {"op": "recv", "count": n}                prints {"event": "recv", "frames": [hex...]} per message
    {"op": "echo", "count": n}                recv (printed as above), then send the same frames back
    {"op": "sync", "topics": [hex...]}        recv until every topic was seen as frame 0; prints
                                              {"event": "synced"}
    {"op": "send_until_stdin", "messages": [[F...]...], "interval_ms": 5}
                                              send all messages repeatedly until a line arrives on stdin
    {"op": "wait_stdin"}                      wait for a line on stdin
    {"op": "mark", "name": s}                 prints {"event": "mark", "name": s}

Output: one JSON object per line on stdout. First {"event": "ready", "endpoint": e} (the bound
LAST_ENDPOINT, or the endpoint connected to), last {"event": "done"}. Any failure prints
{"event": "error", "msg": ...} and exits 1. The process never outlives its watchdog (60 s), and
exits when stdin reaches EOF while it waits on stdin.
"""

import json
import os
import select
import signal
import sys
import time


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(msg):
    emit({"event": "error", "msg": msg})
    sys.exit(1)


try:
    import zmq
except Exception as e:  # pragma: no cover - depends on the environment
    fail("pyzmq is not installed or broken (%r): install it with `pip install pyzmq`" % (e,))


WATCHDOG_S = 60


class Stdin:
    """Line reader on fd 0 that cooperates with select()."""

    def __init__(self):
        self.fd = sys.stdin.fileno()
        self.buf = b""

    def readline(self, timeout):
        """A line, or None if none arrived within `timeout` seconds. EOF raises."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    raise EOFError("stdin closed by the test")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


def gen(n):
    pattern = bytes(range(251))
    reps = n // 251 + 1
    return (pattern * reps)[:n]


def frame(spec):
    if isinstance(spec, str):
        return bytes.fromhex(spec)
    if isinstance(spec, dict) and "gen" in spec:
        return gen(int(spec["gen"]))
    raise ValueError("bad frame spec %r" % (spec,))


def frames_of(specs):
    return [frame(s) for s in specs]


def main():
    if len(sys.argv) != 2:
        fail("usage: peer.py '<json config>'")
    cfg = json.loads(sys.argv[1])
    timeout_ms = int(cfg.get("timeout_ms", 10000))
    timeout_s = timeout_ms / 1000.0
    linger_ms = int(cfg.get("linger_ms", timeout_ms))

    ctx = zmq.Context()
    sock_type = getattr(zmq, cfg["type"])
    sock = ctx.socket(sock_type)
    sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
    sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
    sock.setsockopt(zmq.LINGER, linger_ms)
    if "routing_id" in cfg:
        sock.setsockopt(zmq.ROUTING_ID, bytes.fromhex(cfg["routing_id"]))
    if cfg.get("router_mandatory"):
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    for key, opt in (
        ("heartbeat_ivl", zmq.HEARTBEAT_IVL),
        ("heartbeat_timeout", zmq.HEARTBEAT_TIMEOUT),
        ("heartbeat_ttl", zmq.HEARTBEAT_TTL),
    ):
        if key in cfg:
            sock.setsockopt(opt, int(cfg[key]))
    if "rcvhwm" in cfg:
        sock.setsockopt(zmq.RCVHWM, int(cfg["rcvhwm"]))
    for topic in cfg.get("subscribe", []):
        sock.setsockopt(zmq.SUBSCRIBE, bytes.fromhex(topic))
    ignore = {bytes.fromhex(t) for t in cfg.get("ignore", [])}

    if "bind" in cfg:
        sock.bind(cfg["bind"])
        endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
    elif "connect" in cfg:
        sock.connect(cfg["connect"])
        endpoint = cfg["connect"]
    else:
        fail("config needs `bind` or `connect`")
    emit({"event": "ready", "endpoint": endpoint})

    stdin = Stdin()

    def recv_filtered():
        while True:
            try:
                msg = sock.recv_multipart()
            except zmq.Again:
                fail("recv timed out after %d ms" % timeout_ms)
            if msg and msg[0] in ignore:
                continue
            return msg

    def send(frames):
        try:
            sock.send_multipart(frames)
        except zmq.Again:
            fail("send timed out after %d ms" % timeout_ms)

    for step in cfg.get("script", []):
        op = step["op"]
        if op == "send":
            send(frames_of(step["frames"]))
        elif op == "send_mandatory":
            frames = frames_of(step["frames"])
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    sock.send_multipart(frames, flags=zmq.DONTWAIT)
                    break
                except zmq.ZMQError as e:
                    if e.errno not in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                        raise
                    if time.monotonic() > deadline:
                        fail("peer never became routable within %d ms" % timeout_ms)
                    # The peer is not connected yet: retry shortly (bounded by the deadline).
                    time.sleep(0.005)
        elif op in ("recv", "echo"):
            for _ in range(int(step.get("count", 1))):
                msg = recv_filtered()
                emit({"event": "recv", "frames": [f.hex() for f in msg]})
                if op == "echo":
                    send(msg)
        elif op == "sync":
            wanted = {bytes.fromhex(t) for t in step["topics"]}
            deadline = time.monotonic() + timeout_s
            while wanted:
                if time.monotonic() > deadline:
                    fail("sync: never saw %r" % sorted(wanted))
                try:
                    msg = sock.recv_multipart()
                except zmq.Again:
                    fail("sync: recv timed out")
                if msg:
                    wanted.discard(msg[0])
            emit({"event": "synced"})
        elif op == "send_until_stdin":
            messages = [frames_of(m) for m in step["messages"]]
            interval = int(step.get("interval_ms", 5)) / 1000.0
            deadline = time.monotonic() + timeout_s
            while True:
                for m in messages:
                    send(m)
                if stdin.readline(interval) is not None:
                    break
                if time.monotonic() > deadline:
                    fail("send_until_stdin: no go-ahead within %d ms" % timeout_ms)
        elif op == "wait_stdin":
            if stdin.readline(timeout_s) is None:
                fail("wait_stdin: nothing within %d ms" % timeout_ms)
        elif op == "mark":
            emit({"event": "mark", "name": step["name"]})
        else:
            fail("unknown op %r" % (op,))

    emit({"event": "done"})
    sock.close()
    ctx.term()


if __name__ == "__main__":
    signal.signal(signal.SIGALRM, lambda *_: fail("watchdog: peer ran for %d s" % WATCHDOG_S))
    signal.alarm(WATCHDOG_S)
    try:
        main()
    except SystemExit:
        raise
    except EOFError as e:
        fail("%s" % (e,))
    except Exception as e:
        fail("%s: %s" % (type(e).__name__, e))
