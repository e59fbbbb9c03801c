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

The draft types (SERVER, CLIENT, RADIO, DISH, SCATTER, GATHER, PEER, CHANNEL) need a libzmq built
with drafts (.ci/draft-pyzmq). Their messages carry a routing id and a group:
  send S F [@P] [#G]           @P: routing id alias P (0: no routing id), #G: group (hex, # alone: "")
  recv/recvwait                -> "msg F @P #G", @P and #G present when the message carries them
  join|leave S HEX             DISH: zmq_join / zmq_leave
  connectpeer S ENDPOINT       PEER: zmq_connect_peer -> "ok @P"
  topics S                     ZMQ_TOPICS_COUNT -> "ok N"
Draft options on new: router_notify reconnect_stop (ints), hello_msg disconnect_msg hiccup_msg
(hex), xsub_verbose_unsubscribe invert_matching xpub_verboser (0/1).
Routing ids are random, so answers name them by alias: a socket's Nth distinct routing id (seen on
a received message or returned by connectpeer) is @N. A STREAM's routing id frames (the first of
each message) are aliased the same way, in answers and in sends.

KIND is the errno name: EAGAIN, EFSM, EHOSTUNREACH, ENOTSUP, EADDRINUSE, ENOENT, EINVAL, ...
"""

import errno
import sys

import zmq

TYPES = {
    name: getattr(zmq, name)
    for name in ["PAIR", "PUB", "SUB", "REQ", "REP", "DEALER", "ROUTER", "PULL", "PUSH", "XPUB", "XSUB", "STREAM"]
}
# The draft types, when this pyzmq was built against a libzmq with drafts.
TYPES.update({name: number for name, number in [("SERVER", 12), ("CLIENT", 13), ("RADIO", 14), ("DISH", 15),
                                                ("GATHER", 16), ("SCATTER", 17), ("PEER", 19), ("CHANNEL", 20)]}
             if zmq.has("draft") else {})
monitors = [0]  # monitors made so far
aliases = {}  # socket name -> [routing ids in the order first seen]


def alias(name, routing_id):
    ids = aliases.setdefault(name, [])
    if routing_id not in ids:
        ids.append(routing_id)
    return "@%d" % (ids.index(routing_id) + 1)


def unalias(name, token):
    # An alias this socket has not seen (a scenario gone astray, say a connect to a port another
    # lane took) names nobody, as 0 does: the answer then shows the divergence.
    n = int(token[1:])
    ids = aliases.get(name, [])
    return ids[n - 1] if 0 < n <= len(ids) else 0


def draft_send(sock, name, words):
    frames = [w for w in words if w[0] not in "@#"]
    if sock.type != TYPES["DISH"]:
        # Not on a DISH (it cannot send anyway): ZMQ_EVENTS reads a DISH's next message ahead,
        # and libzmq then delivers it even if its group is left before the receive.
        sock.getsockopt(zmq.EVENTS)
    if len(frames) > 1:
        # What libzmq says to the first frame of a multipart message (EINVAL on these types).
        sock.send(frame(frames[0]), zmq.SNDMORE | zmq.NOBLOCK)
    f = zmq.Frame(frame(frames[0]))
    for w in words:
        if w.startswith("@") and unalias(name, w):  # libzmq refuses to set 0: leave it unset
            f.routing_id = unalias(name, w)
        elif w.startswith("#"):
            f.group = frame(w[1:] or "-")
    sock.send(f, zmq.NOBLOCK, copy=False)


def draft_recv(sock, name, flags):
    f = sock.recv(flags, copy=False)
    out = "msg " + hexes([f.bytes])
    # pyzmq raises EINVAL reading a routing id a message does not carry.
    if sock.type in (TYPES["SERVER"], TYPES["PEER"]) and f.routing_id:
        out += " " + alias(name, f.routing_id)
    if f.group:
        out += " #" + f.group.encode().hex()
    return out


def connect_peer(sock, name, endpoint):
    import ctypes

    lib = ctypes.CDLL(zmq.backend.cython._zmq.__file__)
    lib.zmq_connect_peer.restype = ctypes.c_uint32
    lib.zmq_connect_peer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    routing_id = lib.zmq_connect_peer(sock.underlying, endpoint.encode())
    if routing_id == 0:
        raise zmq.ZMQError(ctypes.get_errno() or errno.EINVAL)
    return "ok " + alias(name, routing_id)
INT_OPTIONS = {
    "sndhwm": zmq.SNDHWM,
    "rcvhwm": zmq.RCVHWM,
    # draft options (libzmq built with drafts)
    "router_notify": 97,
    "reconnect_stop": 109,
}
BYTES_OPTIONS = {"routing_id": zmq.ROUTING_ID, "hello_msg": 110, "disconnect_msg": 111, "hiccup_msg": 114}
BOOL_OPTIONS = {
    "router_mandatory": zmq.ROUTER_MANDATORY,
    "probe_router": zmq.PROBE_ROUTER,
    "conflate": zmq.CONFLATE,
    "req_relaxed": zmq.REQ_RELAXED,
    "req_correlate": zmq.REQ_CORRELATE,
    "xpub_verbose": zmq.XPUB_VERBOSE,
    "router_handover": zmq.ROUTER_HANDOVER,
    "immediate": zmq.IMMEDIATE,
    "xpub_verboser": zmq.XPUB_VERBOSER,
    "invert_matching": zmq.INVERT_MATCHING,
    "xsub_verbose_unsubscribe": 115,
    "xpub_manual": zmq.XPUB_MANUAL,
    "xpub_manual_last_value": 98,
    "only_first_subscribe": 108,
}

DRAFT = {number for name, number in TYPES.items() if number >= 12}
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
        aliases.clear()
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
            elif key in BYTES_OPTIONS:
                sock.setsockopt(BYTES_OPTIONS[key], frame(value))
            else:
                raise ValueError("unknown option " + key)
        # A name of our own: pyzmq names monitors by the socket's FD, which thread-safe (draft)
        # sockets only emulate.
        monitors[0] += 1
        mon = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED, "inproc://diff-monitor-%d" % monitors[0]
        )
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
        elif op == "topics":
            return "ok %d" % sock.getsockopt(116)
        elif op in ("join", "leave"):
            getattr(sock, op)(frame(words[2]))
        elif op == "connectpeer":
            return connect_peer(sock, name, words[2])
        elif op == "send" and sock.type in DRAFT:
            draft_send(sock, name, words[2:])
        elif op == "recv" and sock.type in DRAFT:
            return draft_recv(sock, name, zmq.NOBLOCK)
        elif op == "recvwait" and sock.type in DRAFT:
            sock.setsockopt(zmq.RCVTIMEO, int(words[2]))
            try:
                return draft_recv(sock, name, 0)
            finally:
                sock.setsockopt(zmq.RCVTIMEO, -1)
        elif op == "send" and sock.type == zmq.STREAM:
            first = words[2]
            routing_id = unalias(name, first) if first.startswith("@") else frame(first)
            sock.getsockopt(zmq.EVENTS)
            sock.send_multipart([routing_id] + [frame(t) for t in words[3:]], zmq.NOBLOCK)
        elif op in ("recv", "recvwait") and sock.type == zmq.STREAM:
            if op == "recvwait":
                sock.setsockopt(zmq.RCVTIMEO, int(words[2]))
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK if op == "recv" else 0)
            finally:
                sock.setsockopt(zmq.RCVTIMEO, -1)
            return "msg " + alias(name, parts[0]) + " " + hexes(parts[1:])
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
