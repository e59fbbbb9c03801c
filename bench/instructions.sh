#!/usr/bin/env bash
# Instructions per message on each side of a PUSH/PULL stream over TCP loopback, counted by
# callgrind: deterministic to a few instructions where wall-clock throughput on a shared 2-core
# machine varies by ±15%, so it can resolve a 1–3% change in the code path. What it does not see:
# cache misses, syscalls' cost, scheduling — confirm a real change with bench/compare.sh.
# Usage: bench/instructions.sh [BIN_DIR...]   (default target/release; each DIR holds local_thr
#        and remote_thr, e.g. an earlier build's target/release for an A/B)
# Env: SIZE (default 64), COUNT (default 1000000).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }
size=${SIZE:-64}
count=${COUNT:-1000000}
dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  cargo build --release -q -p zmtp-tokio --bins
  dirs=(target/release)
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$((61000 + RANDOM % 1000))
for dir in "${dirs[@]}"; do
  ep="tcp://127.0.0.1:$((port++))"
  valgrind --tool=callgrind --callgrind-out-file="$tmp/recv.out" "$dir/local_thr" "$ep" "$size" "$count" \
    >/dev/null 2>"$tmp/recv.log" &
  pid=$!
  sleep 1.5
  valgrind --tool=callgrind --callgrind-out-file="$tmp/send.out" "$dir/remote_thr" "$ep" "$size" "$count" \
    >/dev/null 2>"$tmp/send.log"
  wait $pid
  recv=$(grep -o 'Collected : [0-9]*' "$tmp/recv.log" | awk '{print $3}')
  send=$(grep -o 'Collected : [0-9]*' "$tmp/send.log" | awk '{print $3}')
  awk -v d="$dir" -v s="$size" -v r="$recv" -v t="$send" -v n="$count" \
    'BEGIN { printf "%s: %s B, instructions per message: send %.0f, receive %.0f, both %.0f\n", d, s, t/n, r/n, (t+r)/n }'
done
