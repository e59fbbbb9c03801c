#!/usr/bin/env bash
# Side-by-side perf: zmtp's perf tools vs the same tools on libzmq (Debian libzmq3-dev), back to back on
# one machine, TCP loopback. Prints each figure and the ratio zmtp/libzmq (for latency, lower is better).
# Usage: bench/compare.sh [runs]   (default 3 runs per row; the median is reported)
# This is the quick cross-check with libzmq's own perf-tool semantics in C (bench/libzmq/perf.c); the
# full side-by-side benchmark of issue 9 (all stacks, all rows, BENCHMARKS.md + plot) is bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
if ! [ -e /usr/include/zmq.h ]; then
  apt-get update -qq && apt-get install -y -qq libzmq3-dev >/dev/null
fi
cargo build --release -q -p zmtp --bins
mkdir -p target/bench
gcc -O2 -o target/bench/libzmq-perf bench/libzmq/perf.c -lzmq
ours=target/release
theirs=target/bench/libzmq-perf
port=56000

run_thr() { # impl size count -> msg/s
  local impl=$1 size=$2 count=$3 ep="tcp://127.0.0.1:$((port++))" out
  if [ "$impl" = zmtp ]; then
    $ours/local_thr "$ep" "$size" "$count" > target/bench/out.txt & local pid=$!
    sleep 0.3; timeout 120 $ours/remote_thr "$ep" "$size" "$count"
  else
    $theirs local_thr "$ep" "$size" "$count" > target/bench/out.txt & local pid=$!
    sleep 0.3; timeout 120 $theirs remote_thr "$ep" "$size" "$count"
  fi
  wait $pid
  grep 'msg/s' target/bench/out.txt | awk '{print $3}'
}

run_lat() { # impl size count -> us
  local impl=$1 size=$2 count=$3 ep="tcp://127.0.0.1:$((port++))"
  if [ "$impl" = zmtp ]; then
    $ours/local_lat "$ep" "$size" "$count" & local pid=$!
    sleep 0.3; timeout 120 $ours/remote_lat "$ep" "$size" "$count" | awk '/latency/{print $3}'
  else
    $theirs local_lat "$ep" "$size" "$count" & local pid=$!
    sleep 0.3; timeout 120 $theirs remote_lat "$ep" "$size" "$count" | awk '/latency/{print $3}'
  fi
  wait $pid
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

row() { # kind size count
  local kind=$1 size=$2 count=$3 z=() l=()
  for _ in $(seq "$runs"); do
    z+=("$(run_"$kind" zmtp "$size" "$count")")
    l+=("$(run_"$kind" libzmq "$size" "$count")")
  done
  local zm lm
  zm=$(printf '%s\n' "${z[@]}" | median); lm=$(printf '%s\n' "${l[@]}" | median)
  printf '%-4s %7s B  zmtp %12s  libzmq %12s  ratio %s   (runs zmtp: %s; libzmq: %s)\n' "$kind" "$size" "$zm" "$lm" \
    "$(awk -v a="$zm" -v b="$lm" 'BEGIN{printf "%.2f", a/b}')" "${z[*]}" "${l[*]}"
}

echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "libzmq: $(pkg-config --modversion libzmq 2>/dev/null || echo unknown); thr in msg/s (higher is better), lat in us one-way (lower is better)"
row thr 64 2000000
row thr 1024 500000
row thr 65536 50000
row lat 64 20000
