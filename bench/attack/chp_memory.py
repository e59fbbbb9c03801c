#!/usr/bin/env python3
"""Memory of a `chp server` under a slow-reader attack, and how much of it comes back afterwards.

What it measures (per run, per binary):
  1. starts `chp server --port 0 --bind 127.0.0.1` (snapshot P, publisher P+1, collector P+2);
  2. loads a map of --keys keys (--value-size byte values) by publishing KVSETs to P+2 from a pyzmq
     PUB, paced by the echoes on a SUB to P+1, then checks it with one ICANHAZ? snapshot read fully;
  3. baseline = server VmRSS (/proc/PID/status);
  4. attack: --dealers DEALERs to P each send ["ICANHAZ?", ""] and never read, plus --snails SUBs
     to P+1 (subscribed to everything) that never read; all with RCVHWM=1 and SO_RCVBUF=4096 so
     neither libzmq nor the kernel absorbs much on the attacker's side;
  5. publishes --updates updates of --update-size bytes (default 300 x 1 MiB) to one key via P+2
     (paced by the echoes seen by a well-behaved SUB);
  6. samples server RSS every 200 ms during 4-5 and --settle seconds after; peak increase = max - baseline;
  7. `chp get` of a loaded key runs once during the attack and once after it, while the attackers are
     still connected: it must print the expected value (the legitimate client is still served);
  8. closes the attacker sockets, waits --after seconds, reports RSS (what the allocator kept);
  9. if gdb is available: `call (int)malloc_trim(0)` in the server and RSS again (how much a trim
     would return; glibc only, musl has no malloc_trim).
The server is always killed at the end (also on error / Ctrl-C).

Run (from the workspace root, after `cargo build --release -p zmtp-chp`):
  python3 bench/attack/chp_memory.py                                  # target/release/chp, 1 run
  python3 bench/attack/chp_memory.py --runs 3 \
      --binary target/release/chp --binary target/x86_64-unknown-linux-musl/release/chp
  python3 bench/attack/chp_memory.py --no-trim --json /tmp/out.json
Needs python3 with pyzmq; gdb is optional.
"""

import argparse
import atexit
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid

import zmq

MiB = 1024 * 1024
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

_servers = []  # every server Popen still possibly running, killed at exit


def _kill_all():
    for p in _servers:
        if p.poll() is None:
            try:
                p.terminate()
                p.wait(3)
            except Exception:
                try:
                    p.kill()
                    p.wait(3)
                except Exception:
                    pass


atexit.register(_kill_all)


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGHUP, _on_signal)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def proc_status(pid):
    """VmRSS, VmHWM in bytes and Threads from /proc/PID/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
            elif k == "Threads":
                out[k] = int(v)
    return out


def rss(pid):
    return proc_status(pid)["VmRSS"]


def established(port):
    """Established TCP connections whose local port is `port` (the server's side)."""
    if not shutil.which("ss"):
        return None
    try:
        out = subprocess.run(["ss", "-tnH", "state", "established", f"( sport = :{port} )"],
                             capture_output=True, text=True, timeout=5).stdout
        return sum(1 for line in out.splitlines() if line.strip())
    except Exception:
        return None


class Sampler(threading.Thread):
    """Samples the server's VmRSS every `interval` s, tagging each sample with the current phase."""

    def __init__(self, pid, interval=0.2):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.samples = []  # (t, phase, rss)
        self.phase = "idle"
        self._halt = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        while not self._halt.is_set():
            try:
                self.samples.append((time.monotonic() - self.t0, self.phase, rss(self.pid)))
            except (FileNotFoundError, ProcessLookupError, KeyError):
                break
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join(2)

    def peak(self, phases):
        vals = [s[2] for s in self.samples if s[1] in phases]
        return max(vals) if vals else None


def kvset(key, body, props=b""):
    return [key, struct.pack(">Q", 0), uuid.uuid4().bytes, props, body]


def start_server(binary, log_path, extra_env=()):
    env = dict(os.environ)
    env.setdefault("RUST_LOG", "info")
    for kv in extra_env:
        k, _, v = kv.partition("=")
        env[k] = v
    errf = open(log_path, "wb")
    p = subprocess.Popen([binary, "server", "--port", "0", "--bind", "127.0.0.1"],
                         stdout=subprocess.PIPE, stderr=errf, env=env)
    _servers.append(p)
    errf.close()
    deadline = time.monotonic() + 15
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
        if p.poll() is not None:
            break
    m = re.search(rb"listening on tcp://[^:]+:(\d+)", line)
    if not m:
        raise RuntimeError(f"server did not report its port (stdout {line!r}, exit {p.poll()}); see {log_path}")
    return p, int(m.group(1))


def stop_server(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def wait_echo(sub, want_key, timeout):
    """Reads `sub` until an update of `want_key` arrives; returns it (5 frames) or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sub.poll(100):
            f = sub.recv_multipart()
            if f[0] == want_key:
                return f
    return None


def load_map(ctx, port, n_keys, value_size, window=5000, check_timeout=60):
    """Publishes n_keys KVSETs to P+2, paced so at most `window` are unechoed on P+1."""
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port + 1}")
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.connect(f"tcp://127.0.0.1:{port + 2}")
    # Slow joiner on both sides: repeat a probe until it comes back.
    deadline = time.monotonic() + 15
    while True:
        pub.send_multipart(kvset(b"/probe/ready", b"1"))
        if wait_echo(sub, b"/probe/ready", 0.2) is not None:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the server never echoed a probe KVSET")
    t0 = time.monotonic()
    sent = echoed = 0

    def drain(block_ms):
        nonlocal echoed
        while sub.poll(block_ms):
            f = sub.recv_multipart()
            if f[0].startswith(b"/bench/"):
                echoed += 1
            block_ms = 0

    while sent < n_keys:
        if sent - echoed >= window:
            drain(50)
            continue
        pub.send_multipart(kvset(key_of(sent), value_of(sent, value_size)))
        sent += 1
        if sent % 500 == 0:
            drain(0)
    deadline = time.monotonic() + check_timeout
    while echoed < n_keys and time.monotonic() < deadline:
        drain(100)
    secs = time.monotonic() - t0
    pub.close(0)
    sub.close(0)
    return echoed, secs


def key_of(i):
    return b"/bench/k%06d" % i


def value_of(i, size):
    v = b"v%06d-" % i
    return (v + b"x" * size)[:size]


def snapshot_count(ctx, port, timeout=60):
    """One full ICANHAZ? "" snapshot; returns (keys under /bench/, total KVSYNCs, KTHXBAI sequence)."""
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.connect(f"tcp://127.0.0.1:{port}")
    d.send_multipart([b"ICANHAZ?", b""])
    bench = total = 0
    seq = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not d.poll(1000):
            continue
        f = d.recv_multipart()
        if f[0] == b"KTHXBAI":
            seq = struct.unpack(">Q", f[1])[0]
            break
        total += 1
        if f[0].startswith(b"/bench/"):
            bench += 1
    d.close(0)
    return bench, total, seq


def run_get(binary, port, key, timeout_s=5.0):
    t0 = time.monotonic()
    try:
        r = subprocess.run([binary, "get", key, "--server", f"tcp://127.0.0.1:{port}", "--timeout", str(timeout_s)],
                           capture_output=True, timeout=timeout_s + 30)
        return r.returncode, r.stdout, r.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return None, b"", b"(hung)", time.monotonic() - t0


def gdb_trim(pid):
    gdb = shutil.which("gdb")
    if not gdb:
        return None, "gdb not installed"
    try:
        r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "call (int)malloc_trim(0)"],
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, "gdb timed out"
    m = re.search(r"^\$1 = (-?\d+)", r.stdout, re.M)
    if not m and 'No symbol "malloc_trim"' in r.stdout + r.stderr:
        return None, "n/a (this libc has no malloc_trim)"
    if not m:
        tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
        return None, "malloc_trim call failed: " + " | ".join(tail)
    return int(m.group(1)), "ok"


def summarize_log(path):
    """Counts the server's log lines by message (timestamps and peer ids stripped)."""
    counts = {}
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = re.sub(r"\x1b\[[0-9;]*m", "", line.strip())
                line = re.sub(r"^\S+Z\s+", "", line)
                line = re.sub(r"peer=\S+|Some\(\[[^\]]*\]\)|\d+", "#", line)
                counts[line[:160]] = counts.get(line[:160], 0) + 1
    except FileNotFoundError:
        pass
    return sorted(counts.items(), key=lambda kv: -kv[1])


def one_run(binary, args, run_no):
    variant = ("musl" if "musl" in binary else "glibc") + (f" {args.label}" if args.label else "")
    log_path = f"/tmp/chp_memory_{variant.replace(' ', '_')}_{run_no}_{os.getpid()}.log"
    res = {"binary": binary, "variant": variant, "run": run_no, "server_log": log_path}
    ctx = zmq.Context()
    attackers = []
    server = None
    sampler = None
    try:
        server, port = start_server(binary, log_path, args.server_env or ())
        pid = server.pid
        log(f"[{res['variant']} run {run_no}] server pid {pid} on port {port} (RSS {rss(pid) / MiB:.1f} MiB)")
        res["rss_start_mib"] = rss(pid) / MiB

        echoed, secs = load_map(ctx, port, args.keys, args.value_size)
        log(f"loaded {args.keys} keys in {secs:.1f} s ({echoed} echoed on P+1)")
        bench, total, seq = snapshot_count(ctx, port)
        log(f"ICANHAZ? snapshot: {bench} /bench/ keys ({total} in all), KTHXBAI sequence {seq}")
        res.update(load_secs=secs, echoed=echoed, snapshot_keys=bench)
        if bench != args.keys:
            log(f"WARNING: the snapshot holds {bench} keys, expected {args.keys}")
        time.sleep(2)
        base = rss(pid)
        res["baseline_mib"] = base / MiB
        res["baseline_hwm_mib"] = proc_status(pid)["VmHWM"] / MiB
        log(f"baseline RSS {base / MiB:.1f} MiB (VmHWM so far {res['baseline_hwm_mib']:.1f} MiB)")

        sampler = Sampler(pid, 0.2)
        sampler.start()

        # A well-behaved subscriber, used to pace the big updates by their echoes.
        good = ctx.socket(zmq.SUB)
        good.setsockopt(zmq.LINGER, 0)
        good.setsockopt(zmq.SUBSCRIBE, b"/attack/")
        good.connect(f"tcp://127.0.0.1:{port + 1}")
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.setsockopt(zmq.SNDHWM, 0)
        pub.connect(f"tcp://127.0.0.1:{port + 2}")

        # d. the attackers
        sampler.phase = "attack"
        for _ in range(args.dealers):
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.LINGER, 0)
            d.setsockopt(zmq.RCVHWM, 1)
            d.setsockopt(zmq.RCVBUF, 4096)
            d.connect(f"tcp://127.0.0.1:{port}")
            d.send_multipart([b"ICANHAZ?", b""])
            attackers.append(d)
        for _ in range(args.snails):
            snail = ctx.socket(zmq.SUB)
            snail.setsockopt(zmq.LINGER, 0)
            snail.setsockopt(zmq.RCVHWM, 1)
            snail.setsockopt(zmq.RCVBUF, 4096)
            snail.setsockopt(zmq.SUBSCRIBE, b"")
            snail.connect(f"tcp://127.0.0.1:{port + 1}")
            attackers.append(snail)
        time.sleep(1.0)
        res["conns_on_P_after_connect"] = established(port)

        # Synchronise the pacing subscriber and the publisher (slow joiner) with a small probe.
        deadline = time.monotonic() + 10
        if wait_echo_send(pub, good, deadline) is None:
            raise RuntimeError("no echo of the /attack/ probe")

        # g1. a legitimate get while the attack runs (in the background)
        get_during = subprocess.Popen([binary, "get", key_of(args.get_index).decode(), "--server",
                                       f"tcp://127.0.0.1:{port}", "--timeout", "5"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        get_during_t0 = time.monotonic()
        get_during_done = {}

        def _reap():
            try:
                o, e = get_during.communicate(timeout=40)
                get_during_done.update(out=o, err=e, secs=time.monotonic() - get_during_t0)
            except subprocess.TimeoutExpired:
                get_during.kill()
                get_during_done.update(out=b"", err=b"hung", secs=None)

        reaper = threading.Thread(target=_reap, daemon=True)
        reaper.start()

        # e. the big updates, at most `window` unechoed
        payload = bytearray(os.urandom(args.update_size))
        t0 = time.monotonic()
        sent = echoed_big = 0
        window = 4
        stalled = False
        while sent < args.updates:
            if sent - echoed_big >= window and not stalled:
                if good.poll(5000):
                    f = good.recv_multipart()
                    if f[0] == b"/attack/big":
                        echoed_big += 1
                    continue
                log(f"WARNING: no echo for 5 s after {sent} big updates; sending the rest unpaced")
                stalled = True
            payload[:8] = struct.pack(">Q", sent)
            pub.send_multipart(kvset(b"/attack/big", bytes(payload)))
            sent += 1
        deadline = time.monotonic() + 30
        while echoed_big < args.updates and time.monotonic() < deadline:
            if good.poll(200):
                if good.recv_multipart()[0] == b"/attack/big":
                    echoed_big += 1
        res["update_secs"] = time.monotonic() - t0
        res["big_echoed"] = echoed_big
        log(f"published {sent} x {args.update_size} B in {res['update_secs']:.1f} s; "
            f"{echoed_big} echoed to the good subscriber; server RSS {rss(pid) / MiB:.1f} MiB")

        reaper.join(45)
        rc = get_during.returncode
        res["get_during"] = {"rc": rc, "ok": rc == 0 and get_during_done.get("out", b"").strip() ==
                             value_of(args.get_index, args.value_size),
                             "err": get_during_done.get("err", b"?").decode(errors="replace").strip()[:300],
                             "secs": get_during_done.get("secs")}
        log(f"get during the attack: {res['get_during']}")

        sampler.phase = "settle"
        time.sleep(args.settle)
        res["conns_on_P_before_close"] = established(port)

        # g. a legitimate client after the burst, attackers still connected
        rc, out, err, secs = run_get(binary, port, key_of(args.get_index).decode())
        ok = rc == 0 and out.strip() == value_of(args.get_index, args.value_size)
        res["get_after"] = {"rc": rc, "ok": ok, "secs": secs, "err": err.decode(errors="replace").strip()[:300]}
        log(f"get after the burst (attackers connected): rc={rc} ok={ok} in {secs:.2f} s {err.strip()[:200]!r}")

        peak = sampler.peak({"attack", "settle"})
        res["peak_mib"] = peak / MiB
        res["peak_increase_mib"] = (peak - base) / MiB
        res["vmhwm_mib"] = proc_status(pid)["VmHWM"] / MiB
        res["rss_with_attackers_mib"] = rss(pid) / MiB
        log(f"peak RSS {peak / MiB:.1f} MiB (+{(peak - base) / MiB:.1f} MiB over baseline; VmHWM "
            f"{res['vmhwm_mib']:.1f}); now {res['rss_with_attackers_mib']:.1f} MiB")

        # h. the attackers leave
        sampler.phase = "after"
        for s in attackers:
            s.close(0)
        attackers.clear()
        good.close(0)
        pub.close(0)
        time.sleep(args.after)
        after = rss(pid)
        res["rss_after_mib"] = after / MiB
        res["after_increase_mib"] = (after - base) / MiB
        res["conns_on_P_after_close"] = established(port)
        log(f"{args.after:.0f} s after the attackers closed: RSS {after / MiB:.1f} MiB "
            f"(+{(after - base) / MiB:.1f} over baseline, {100 * (peak - after) / max(peak - base, 1):.0f}% of the "
            f"increase returned)")

        # i. what a malloc_trim would return
        if args.trim:
            sampler.phase = "trim"
            ret, why = gdb_trim(pid)
            time.sleep(1)
            if ret is None:
                res["trim"] = why
                log(f"malloc_trim: {why}")
            else:
                t = rss(pid)
                res["rss_after_trim_mib"] = t / MiB
                res["trim_increase_mib"] = (t - base) / MiB
                res["trim"] = f"returned {ret}"
                log(f"after malloc_trim(0) (returned {ret}): RSS {t / MiB:.1f} MiB (+{(t - base) / MiB:.1f})")
        res["threads"] = proc_status(pid)["Threads"]
        sampler.stop()
        res["samples"] = [(round(t, 2), ph, round(v / MiB, 1)) for t, ph, v in sampler.samples]
        res["server_alive"] = server.poll() is None
    finally:
        if sampler:
            sampler.stop()
        for s in attackers:
            try:
                s.close(0)
            except Exception:
                pass
        ctx.destroy(linger=0)
        if server:
            stop_server(server)
    res["log_summary"] = summarize_log(log_path)[:12]
    return res


def wait_echo_send(pub, sub, deadline):
    while time.monotonic() < deadline:
        pub.send_multipart(kvset(b"/attack/probe", b"1"))
        f = wait_echo(sub, b"/attack/probe", 0.2)
        if f is not None:
            return f
    return None


def fmt(v, spec="{:.1f}"):
    return "-" if v is None else (spec.format(v) if isinstance(v, (int, float)) else str(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", action="append", help="chp binary (repeatable) [target/release/chp]")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--value-size", type=int, default=50)
    ap.add_argument("--dealers", type=int, default=100)
    ap.add_argument("--snails", type=int, default=1, help="stalled subscribers on P+1")
    ap.add_argument("--updates", type=int, default=300)
    ap.add_argument("--update-size", type=int, default=MiB)
    ap.add_argument("--get-index", type=int, default=42, help="which loaded key `chp get` reads")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds sampled after the burst, attackers still on")
    ap.add_argument("--after", type=float, default=10.0, help="seconds waited after the attackers close")
    ap.add_argument("--no-trim", dest="trim", action="store_false", help="skip the gdb malloc_trim(0) step")
    ap.add_argument("--server-env", action="append", metavar="KEY=VALUE",
                    help="extra environment for the server, e.g. GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072")
    ap.add_argument("--label", help="appended to the variant name in the table")
    ap.add_argument("--json", help="write every run's results (with RSS samples) here")
    args = ap.parse_args()
    binaries = [os.path.abspath(os.path.join(ROOT, b)) if not os.path.isabs(b) else b
                for b in (args.binary or ["target/release/chp"])]
    for b in binaries:
        if not os.access(b, os.X_OK):
            sys.exit(f"no executable {b}: build it first (cargo build --release -p chp)")

    results = []
    try:
        for b in binaries:
            for r in range(1, args.runs + 1):
                results.append(one_run(b, args, r))
    finally:
        _kill_all()
        if args.json and results:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)

    print()
    print(f"{args.keys} keys x {args.value_size} B; {args.dealers} stalled ICANHAZ? + {args.snails} stalled SUB; "
          f"{args.updates} x {args.update_size} B updates.  RSS in MiB.")
    hdr = ["variant", "run", "baseline", "peak", "peak incr", "VmHWM", "after close", "after incr",
           "after trim", "get during", "get after"]
    rows = []
    for r in results:
        rows.append([r["variant"], str(r["run"]), fmt(r.get("baseline_mib")), fmt(r.get("peak_mib")),
                     "+" + fmt(r.get("peak_increase_mib")), fmt(r.get("vmhwm_mib")), fmt(r.get("rss_after_mib")),
                     "+" + fmt(r.get("after_increase_mib")),
                     fmt(r.get("rss_after_trim_mib")) if "rss_after_trim_mib" in r else ("n/a" if str(r.get("trim", "")).startswith("n/a") else "failed" if "trim" in r else "-"),
                     ("ok %.2fs" % r["get_during"]["secs"]) if r.get("get_during", {}).get("ok") else "FAIL",
                     ("ok %.2fs" % r["get_after"]["secs"]) if r.get("get_after", {}).get("ok") else "FAIL"])
    w = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(hdr)]
    print(" | ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
    print("-+-".join("-" * x for x in w))
    for row in rows:
        print(" | ".join(c.ljust(w[i]) for i, c in enumerate(row)))
    for r in results:
        print(f"\n{r['variant']} run {r['run']}: server log {r['server_log']}; connections on P: "
              f"after connect {r.get('conns_on_P_after_connect')}, before close {r.get('conns_on_P_before_close')}, "
              f"after close {r.get('conns_on_P_after_close')}; big updates echoed {r.get('big_echoed')}")
        for line, n in r.get("log_summary", []):
            print(f"  {n:5d} x {line}")
    ok = all(r.get("get_after", {}).get("ok") for r in results)
    sys.exit(0 if ok and results else 1)


if __name__ == "__main__":
    main()
