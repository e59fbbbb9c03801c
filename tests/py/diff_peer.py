#!/usr/bin/env python3
"""libzmq executor for the differential tests (tests/tests/differential.rs).

Reads one command per line on stdin and answers one line on stdout. The Rust harness sends the
same commands to its own executor (zmtp sockets), so every scenario runs on libzmq, on zmtp, and
mixed; the answers are compared. Frames are hex, an empty frame is "-".

Commands (S is a socket name chosen by the harness):
  new S TYPE [opt=value ...]   options: sndhwm rcvhwm router_mandatory probe_router conflate
                               req_relaxed req_correlate xpub_verbose router_handover
                               routing_id(hex) immediate; every socket gets LINGER 0,
                               RECONNECT_IVL 10 ms and a monitor for HANDSHAKE_SUCCEEDED
  bind S ENDPOINT              -> "ok ENDPOINT_AS_BOUND" | "err KIND"
  connect|disconnect|unbind S ENDPOINT  -> "ok" | "err KIND"
  sub|unsub S HEX              SUB: ZMQ_SUBSCRIBE / ZMQ_UNSUBSCRIBE
  send S F [F ...]             non-blocking -> "ok" | "err KIND"
  recv S                       non-blocking -> "msg F [F ...]" | "err KIND"
  recvwait S MS                waits up to MS ms -> "msg ..." | "err EAGAIN"
  handshakes S N MS            waits until S has seen N successful handshakes -> "ok" | "err TIMEOUT"
  disconnects S N MS           waits until S has seen N connections end -> "ok" | "err TIMEOUT"
  close S                      -> "ok"
  reset                        closes every socket -> "ok"

KIND is the errno name: EAGAIN, EFSM, EHOSTUNREACH, ENOTSUP, EADDRINUSE, ENOENT, EINVAL, ...
"""

import errno
import sys

import zmq

TYPES = {
    name: getattr(zmq, name)
    for name in ["PAIR", "PUB", "SUB", "REQ", "REP", "DEALER", "ROUTER", "PULL", "PUSH", "XPUB", "XSUB"]
}
INT_OPTIONS = {"sndhwm": zmq.SNDHWM, "rcvhwm": zmq.RCVHWM}
BOOL_OPTIONS = {
    "router_mandatory": zmq.ROUTER_MANDATORY,
    "probe_router": zmq.PROBE_ROUTER,
    "conflate": zmq.CONFLATE,
    "req_relaxed": zmq.REQ_RELAXED,
    "req_correlate": zmq.REQ_CORRELATE,
    "xpub_verbose": zmq.XPUB_VERBOSE,
    "router_handover": zmq.ROUTER_HANDOVER,
    "immediate": zmq.IMMEDIATE,
}

ctx = zmq.Context()
sockets = {}  # name -> (socket, monitor socket, {event: times seen})
COUNTED = {"handshakes": zmq.EVENT_HANDSHAKE_SUCCEEDED, "disconnects": zmq.EVENT_DISCONNECTED}


def frame(token):
    return b"" if token == "-" else bytes.fromhex(token)


def hexes(frames):
    return " ".join(f.hex() if f else "-" for f in frames)


ZMQ_ERRNOS = {zmq.EFSM: "EFSM", zmq.ETERM: "ETERM", zmq.ENOCOMPATPROTO: "ENOCOMPATPROTO", zmq.EMTHREAD: "EMTHREAD"}


def kind(e):
    return ZMQ_ERRNOS.get(e.errno) or errno.errorcode.get(e.errno, str(e.errno))


def count(name, event, wait_ms):
    _, mon, seen = sockets[name]
    if mon.poll(wait_ms):
        while True:
            try:
                parts = mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            got = int.from_bytes(parts[0][:2], "little")
            seen[got] = seen.get(got, 0) + 1
    return seen.get(event, 0)


def run(words):
    op = words[0]
    if op == "reset":
        for sock, mon, _ in sockets.values():
            sock.disable_monitor()
            mon.close(0)
            sock.close(0)
        sockets.clear()
        return "ok"
    name = words[1]
    if op == "new":
        sock = ctx.socket(TYPES[words[2]])
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 10)
        for opt in words[3:]:
            key, value = opt.split("=", 1)
            if key in INT_OPTIONS:
                sock.setsockopt(INT_OPTIONS[key], int(value))
            elif key in BOOL_OPTIONS:
                sock.setsockopt(BOOL_OPTIONS[key], int(value))
            elif key == "routing_id":
                sock.setsockopt(zmq.ROUTING_ID, frame(value))
            else:
                raise ValueError("unknown option " + key)
        mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        sockets[name] = (sock, mon, {})
        return "ok"
    sock = sockets[name][0]
    try:
        if op == "bind":
            sock.bind(words[2])
            return "ok " + sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        if op == "connect":
            sock.connect(words[2])
        elif op == "disconnect":
            sock.disconnect(words[2])
        elif op == "unbind":
            sock.unbind(words[2])
        elif op == "sub":
            sock.setsockopt(zmq.SUBSCRIBE, frame(words[2]))
        elif op == "unsub":
            sock.setsockopt(zmq.UNSUBSCRIBE, frame(words[2]))
        elif op == "send":
            # A non-blocking libzmq send skips the socket's pending commands (a peer attached,
            # room made in a pipe) if it processed them under ~1 ms ago, and may say EAGAIN where
            # a moment later it would not; ZMQ_EVENTS processes them first, so the outcome is
            # libzmq's semantics rather than that throttle's timing.
            sock.getsockopt(zmq.EVENTS)
            sock.send_multipart([frame(t) for t in words[2:]], zmq.NOBLOCK)
        elif op == "recv":
            return "msg " + hexes(sock.recv_multipart(zmq.NOBLOCK))
        elif op == "recvwait":
            # A blocking receive bounded by RCVTIMEO, as the caller of a blocking recv sees it
            # (EFSM at once in the wrong state, EAGAIN when the time runs out).
            sock.setsockopt(zmq.RCVTIMEO, int(words[2]))
            try:
                return "msg " + hexes(sock.recv_multipart())
            finally:
                sock.setsockopt(zmq.RCVTIMEO, -1)
        elif op in COUNTED:
            event, want, limit = COUNTED[op], int(words[2]), int(words[3])
            waited = 0
            while count(name, event, 0) < want:
                if waited >= limit:
                    return "err TIMEOUT"
                count(name, event, 10)
                waited += 10
            # libzmq attaches a new peer's pipe to the socket (and drops a dead one) when the
            # socket next processes its commands (a send may skip that for up to ~1 ms);
            # ZMQ_EVENTS processes them now, as zmtp's socket sees them at once.
            sock.getsockopt(zmq.EVENTS)
        elif op == "close":
            _, mon, _ = sockets.pop(name)
            sock.disable_monitor()
            mon.close(0)
            sock.close(0)
        else:
            raise ValueError("unknown command " + op)
    except zmq.ZMQError as e:
        return "err " + kind(e)
    return "ok"


def main():
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            answer = run(words)
        except Exception as e:  # a harness bug, not an outcome: say so plainly
            answer = "fail " + repr(e).replace("\n", " ")
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    for sock, mon, _ in sockets.values():
        mon.close(0)
        sock.close(0)
    ctx.term()


if __name__ == "__main__":
    main()
