#!/usr/bin/env python3
"""libzmq peer (via pyzmq) with PLAIN/CURVE security, for tests/tests/security.rs.

Usage: python3 secure_peer.py key=value... -- op...

Keys:
  type=NAME             socket type (PAIR, PUSH, PULL, REQ, REP, DEALER, ROUTER, ...), required
  bind=EP | connect=EP  endpoint (bind may use tcp://127.0.0.1:*)
  routing_id=HEX        ZMQ_ROUTING_ID
  plain_server=1        ZMQ_PLAIN_SERVER
  plain_user=U          ZMQ_PLAIN_USERNAME
  plain_password=P      ZMQ_PLAIN_PASSWORD
  curve_server=1        ZMQ_CURVE_SERVER (needs curve_secret)
  curve_secret=Z85      ZMQ_CURVE_SECRETKEY (ZMQ_CURVE_PUBLICKEY is derived with zmq.curve_public)
  curve_generate=1      generate the key pair with zmq.curve_keypair(); prints "keys PUBLIC SECRET"
  curve_serverkey=Z85   ZMQ_CURVE_SERVERKEY (makes the socket a CURVE client)
  zap_domain=D          ZMQ_ZAP_DOMAIN
  auth_plain=U:P,...    start a zmq.auth.thread.ThreadAuthenticator with configure_plain(passwords)
  auth_curve=any|Z85,...  ... with configure_curve(CURVE_ALLOW_ANY) or a certificate directory
                          holding exactly these public keys
  auth_allow=IP / auth_deny=IP   ThreadAuthenticator address lists
  timeout_ms=N          limit of every waiting op (default 10000)
  linger_ms=N           ZMQ_LINGER at close (default 2000)

Ops (run in order):
  send:HEX,HEX...       send one multipart message (empty frames allowed: "a1,,b2")
  send_nowait:HEX,...   send with DONTWAIT; prints "sent", or "unsent" if it would block (a libzmq
                        client whose handshake already failed with a protocol error has no pipe)
  recv:N                receive N messages; prints "recv USER_ID HEX,HEX..." (USER_ID "-" when the
                        message has no User-Id property)
  echo:N                like recv, then sends each message back
  event:NAME[|NAME...]  read monitor events until one with one of these names (zmq.Event names,
                        e.g. HANDSHAKE_FAILED_AUTH); prints "event NAME VALUE" for each event read
  quiet:MS              fail if a message arrives within MS milliseconds; prints "quiet"
  wait_stdin            wait for a line on stdin

Output, one line each: "keys ..." (if asked), "ready ENDPOINT", the ops' lines, "done". Any failure
prints "error MESSAGE" and exits 1. A watchdog ends the process after 40 s.
"""

import os
import select
import shutil
import signal
import sys
import tempfile


def emit(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fail(msg):
    emit("error " + str(msg).replace("\n", " "))
    # os._exit: never wait for libzmq's linger or the authenticator thread on the way out.
    os._exit(1)


try:
    import zmq
    import zmq.auth
    from zmq.auth.thread import ThreadAuthenticator
    from zmq.utils.monitor import recv_monitor_message
except Exception as e:  # pragma: no cover - depends on the environment
    fail("pyzmq is not installed or broken (%r): install it with `pip install pyzmq`" % (e,))

WATCHDOG_S = 40


def frames_of(spec):
    return [bytes.fromhex(part) for part in spec.split(",")]


def user_id(frame):
    try:
        value = frame.get("User-Id")
    except zmq.ZMQError:
        return "-"
    return value if value else "-"


def event_name(number):
    try:
        return zmq.Event(number).name
    except ValueError:
        return "EVENT_%d" % number


def main():
    argv = sys.argv[1:]
    if "--" in argv:
        split = argv.index("--")
        opts, ops = argv[:split], argv[split + 1 :]
    else:
        opts, ops = argv, []
    cfg = {}
    for item in opts:
        key, _, value = item.partition("=")
        cfg[key] = value
    timeout_ms = int(cfg.get("timeout_ms", "10000"))
    timeout_s = timeout_ms / 1000.0

    ctx = zmq.Context()
    certs_dir = None
    auth = None
    if any(k in cfg for k in ("auth_plain", "auth_curve", "auth_allow", "auth_deny")):
        auth = ThreadAuthenticator(ctx)
        auth.start()
        if "auth_allow" in cfg:
            auth.allow(cfg["auth_allow"])
        if "auth_deny" in cfg:
            auth.deny(cfg["auth_deny"])
        if "auth_plain" in cfg:
            passwords = dict(p.split(":", 1) for p in cfg["auth_plain"].split(",") if p)
            auth.configure_plain(domain="*", passwords=passwords)
        if "auth_curve" in cfg:
            if cfg["auth_curve"] == "any":
                auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
            else:
                certs_dir = tempfile.mkdtemp(prefix="secure_peer_certs_")
                for i, key in enumerate(k for k in cfg["auth_curve"].split(",") if k):
                    with open(os.path.join(certs_dir, "client%d.key" % i), "w") as f:
                        f.write('metadata\ncurve\n    public-key = "%s"\n' % key)
                auth.configure_curve(domain="*", location=certs_dir)

    sock = ctx.socket(getattr(zmq, cfg["type"]))
    sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
    sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
    sock.setsockopt(zmq.LINGER, int(cfg.get("linger_ms", "2000")))
    if "routing_id" in cfg:
        sock.setsockopt(zmq.ROUTING_ID, bytes.fromhex(cfg["routing_id"]))
    if "zap_domain" in cfg:
        sock.setsockopt(zmq.ZAP_DOMAIN, cfg["zap_domain"].encode())
    if cfg.get("plain_server") == "1":
        sock.setsockopt(zmq.PLAIN_SERVER, 1)
    if "plain_user" in cfg:
        sock.setsockopt(zmq.PLAIN_USERNAME, cfg["plain_user"].encode())
    if "plain_password" in cfg:
        sock.setsockopt(zmq.PLAIN_PASSWORD, cfg["plain_password"].encode())
    secret = None
    if cfg.get("curve_generate") == "1":
        public, secret = zmq.curve_keypair()
        emit("keys %s %s" % (public.decode(), secret.decode()))
    elif "curve_secret" in cfg:
        secret = cfg["curve_secret"].encode()
    if secret is not None:
        sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, zmq.curve_public(secret))
    if cfg.get("curve_server") == "1":
        sock.setsockopt(zmq.CURVE_SERVER, 1)
    if "curve_serverkey" in cfg:
        sock.setsockopt(zmq.CURVE_SERVERKEY, cfg["curve_serverkey"].encode())

    monitor = None
    if any(op.startswith("event:") for op in ops):
        monitor = sock.get_monitor_socket()
        monitor.setsockopt(zmq.RCVTIMEO, timeout_ms)

    if "bind" in cfg:
        sock.bind(cfg["bind"])
        endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
    elif "connect" in cfg:
        sock.connect(cfg["connect"])
        endpoint = cfg["connect"]
    else:
        fail("need bind= or connect=")
    emit("ready " + endpoint)

    def recv():
        try:
            return sock.recv_multipart(copy=False)
        except zmq.Again:
            fail("recv timed out after %d ms" % timeout_ms)

    def send(frames):
        try:
            sock.send_multipart(frames)
        except zmq.Again:
            fail("send timed out after %d ms" % timeout_ms)

    for op in ops:
        name, _, arg = op.partition(":")
        if name == "send":
            send(frames_of(arg))
        elif name == "send_nowait":
            try:
                sock.send_multipart(frames_of(arg), flags=zmq.DONTWAIT)
                emit("sent")
            except zmq.Again:
                emit("unsent")
        elif name in ("recv", "echo"):
            for _ in range(int(arg or "1")):
                msg = recv()
                emit("recv %s %s" % (user_id(msg[0]), ",".join(bytes(f.bytes).hex() for f in msg)))
                if name == "echo":
                    send([f.bytes for f in msg])
        elif name == "event":
            while True:
                try:
                    ev = recv_monitor_message(monitor)
                except zmq.Again:
                    fail("event %s: not seen within %d ms" % (arg, timeout_ms))
                seen = event_name(ev["event"])
                emit("event %s %d" % (seen, ev["value"]))
                if seen in arg.split("|"):
                    break
        elif name == "quiet":
            if sock.poll(int(arg), zmq.POLLIN):
                msg = sock.recv_multipart()
                fail("quiet: unexpected message %s" % ",".join(f.hex() for f in msg))
            emit("quiet")
        elif name == "wait_stdin":
            ready, _, _ = select.select([sys.stdin.fileno()], [], [], timeout_s)
            if not ready:
                fail("wait_stdin: nothing within %d ms" % timeout_ms)
            sys.stdin.readline()
        else:
            fail("unknown op %r" % (op,))

    emit("done")
    if monitor is not None:
        sock.disable_monitor()
        monitor.close(0)
    sock.close()
    if auth is not None:
        auth.stop()
    ctx.term()
    if certs_dir is not None:
        shutil.rmtree(certs_dir, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGALRM, lambda *_: fail("watchdog: peer ran for %d s" % WATCHDOG_S))
    signal.alarm(WATCHDOG_S)
    try:
        main()
    except Exception as e:
        fail("%s: %s" % (type(e).__name__, e))
