#!/usr/bin/env python3
"""A `chp server` under a crowd of clients, and the snapshot storm when they all reconnect at once.

What it measures (after `cargo build --release -p zmtp-chp --bin chp --example crowd`):
  1. starts `chp server --port 0 --bind 127.0.0.1`; server VmRSS = baseline;
  2. starts --processes processes of `crowd` with --clients each (a SUB per client on the
     publisher, held, and a DEALER on the snapshot port from its request to its KTHXBAI, as a
     `chp::Client` does); the first loads --keys keys (100 B values) first; every client takes one
     snapshot of them;
  3. server VmRSS with every client connected and synced: (RSS - baseline) / clients = memory per
     client on the server;
  4. the storm: every process is told `storm` at once; each client connects a fresh DEALER and
     asks for a snapshot (what every client does after a failover); reported: the
     time until the last process has every KTHXBAI back, the server's CPU time (user + system) and
     peak RSS meanwhile, and its
     snapshot counters (served / abandoned: a storm is coalesced by the server's 32 concurrent
     snapshot streams, the rest wait holding nothing).

The server's open-file limit bounds the crowd: one connection per client between snapshots, so
RLIMIT_NOFILE clients at most (20,000 on the machine this was written on, minus the listeners and
the few files a process holds). While more clients ask at once than it has files left, the server's
accepts fail (EMFILE) and the rest wait in the listen backlog until finished snapshots free theirs.
With --keep-dealers every client keeps its DEALER (two connections each).

Run: python3 bench/chp_crowd.py [--processes 4] [--clients 1200] [--keys 1000] [--json FILE]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User + system CPU time of `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_until(proc, pattern, timeout):
    """The first stdout line of `proc` matching `pattern` (a regex), or an error after `timeout`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"process {proc.pid} exited: {proc.stderr.read() if proc.stderr else ''}")
        m = re.search(pattern, line)
        if m:
            return m
    raise RuntimeError(f"no line matching {pattern!r} within {timeout} s")


def metrics(url):
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--clients", type=int, default=1200, help="clients per process")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--binary", default="target/release/chp")
    ap.add_argument("--crowd", default="target/release/examples/crowd")
    ap.add_argument("--keep-dealers", action="store_true", help="clients keep their DEALER between snapshots")
    ap.add_argument("--json")
    args = ap.parse_args()

    server = subprocess.Popen(
        [args.binary, "server", "--port", "0", "--bind", "127.0.0.1", "--metrics", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    crowds = []
    try:
        port = int(read_until(server, r"tcp://127\.0\.0\.1:(\d+)", 30).group(1))
        murl = read_until(server, r"metrics on (http://\S+)", 30).group(1)
        time.sleep(0.5)
        baseline = rss_kib(server.pid)
        endpoint = f"tcp://127.0.0.1:{port}"

        t0 = time.time()
        for i in range(args.processes):
            cmd = [args.crowd, "--server", endpoint, "--clients", str(args.clients)]
            if i == 0:
                cmd += ["--load", str(args.keys)]
            if args.keep_dealers:
                cmd += ["--keep-dealers"]
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            crowds.append(p)
            if i == 0:
                read_until(p, r"^loaded", 120)
        synced = [float(read_until(p, r"^synced \d+ in ([\d.]+) s", 300).group(1)) for p in crowds]
        connect_all = time.time() - t0
        time.sleep(1.0)
        clients = args.processes * args.clients
        with_crowd = rss_kib(server.pid)
        before = metrics(murl)

        peak = [with_crowd]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_kib(server.pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.time()
        cpu0 = cpu_seconds(server.pid)
        for p in crowds:
            p.stdin.write("storm\n")
            p.stdin.flush()
        stormed = [float(read_until(p, r"^stormed \d+ in ([\d.]+) s", 600).group(1)) for p in crowds]
        storm_wall = time.time() - t0
        storm_cpu = cpu_seconds(server.pid) - cpu0
        done.set()
        sampler.join()
        after = metrics(murl)

        result = {
            "clients": clients,
            "processes": args.processes,
            "keys": args.keys,
            "server_rss_baseline_kib": baseline,
            "server_rss_with_crowd_kib": with_crowd,
            "server_bytes_per_client": (with_crowd - baseline) * 1024 / clients,
            "connect_and_sync_all_s": connect_all,
            "slowest_process_sync_s": max(synced),
            "storm_s": storm_wall,
            "storm_slowest_process_s": max(stormed),
            "storm_server_cpu_s": storm_cpu,
            "storm_peak_rss_kib": peak[0],
            "storm_snapshots_served": after.get("chp_snapshots_total", 0) - before.get("chp_snapshots_total", 0),
            "storm_snapshots_abandoned": after.get("chp_snapshots_aborted_total", 0)
            - before.get("chp_snapshots_aborted_total", 0),
        }
        for k, v in result.items():
            print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    finally:
        for p in crowds:
            try:
                p.stdin.close()
            except OSError:
                pass
            p.kill()
        server.kill()
        for p in crowds + [server]:
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
