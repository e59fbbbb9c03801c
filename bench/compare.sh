#!/usr/bin/env bash
# Side-by-side perf: zmtp's perf tools vs the same tools on libzmq (Debian libzmq3-dev), back to back on
# one machine, TCP loopback. Prints each figure and the ratio zmtp/libzmq (for latency, lower is better).
# Usage: bench/compare.sh [runs]   (default 3 runs per row; the median is reported)
# A/B of two zmtp builds beside libzmq: ZMTP_BEFORE=DIR bench/compare.sh, DIR holding the earlier
# build's perf tools and examples/idle_memory (e.g. a worktree's target/release); adds a "before"
# column, the ratio now/before, and the idle memory per connection of both.
# This is the quick cross-check with libzmq's own perf-tool semantics in C (bench/libzmq/perf.c); the
# full side-by-side benchmark of issue 9 (all stacks, all rows, BENCHMARKS.md + plot) is bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
if ! [ -e /usr/include/zmq.h ]; then
  apt-get update -qq && apt-get install -y -qq libzmq3-dev >/dev/null
fi
cargo build --release -q -p zmtp-tokio --bins
mkdir -p target/bench
gcc -O2 -o target/bench/libzmq-perf bench/libzmq/perf.c -lzmq
ours=target/release
theirs=target/bench/libzmq-perf
before=${ZMTP_BEFORE:-}
port=56000

run_thr() { # impl size count -> msg/s
  local impl=$1 size=$2 count=$3 ep="tcp://127.0.0.1:$((port++))" out
  if [ "$impl" = zmtp ] || [ "$impl" = before ]; then
    local bin=$ours; [ "$impl" = before ] && bin=$before
    $bin/local_thr "$ep" "$size" "$count" > target/bench/out.txt & local pid=$!
    sleep 0.3; timeout 120 $bin/remote_thr "$ep" "$size" "$count"
  else
    $theirs local_thr "$ep" "$size" "$count" > target/bench/out.txt & local pid=$!
    sleep 0.3; timeout 120 $theirs remote_thr "$ep" "$size" "$count"
  fi
  wait $pid
  grep 'msg/s' target/bench/out.txt | awk '{print $3}'
}

run_lat() { # impl size count -> us
  local impl=$1 size=$2 count=$3 ep="tcp://127.0.0.1:$((port++))"
  if [ "$impl" = zmtp ] || [ "$impl" = before ]; then
    local bin=$ours; [ "$impl" = before ] && bin=$before
    $bin/local_lat "$ep" "$size" "$count" & local pid=$!
    sleep 0.3; timeout 120 $bin/remote_lat "$ep" "$size" "$count" | awk '/latency/{print $3}'
  else
    $theirs local_lat "$ep" "$size" "$count" & local pid=$!
    sleep 0.3; timeout 120 $theirs remote_lat "$ep" "$size" "$count" | awk '/latency/{print $3}'
  fi
  wait $pid
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a/b}'; }

row() { # kind size count
  local kind=$1 size=$2 count=$3 z=() l=() b=()
  for _ in $(seq "$runs"); do
    z+=("$(run_"$kind" zmtp "$size" "$count")")
    l+=("$(run_"$kind" libzmq "$size" "$count")")
    [ -n "$before" ] && b+=("$(run_"$kind" before "$size" "$count")")
  done
  local zm lm
  zm=$(printf '%s\n' "${z[@]}" | median); lm=$(printf '%s\n' "${l[@]}" | median)
  printf '%-4s %7s B  zmtp %12s  libzmq %12s  ratio %s   (runs zmtp: %s; libzmq: %s)\n' "$kind" "$size" "$zm" "$lm" \
    "$(ratio "$zm" "$lm")" "${z[*]}" "${l[*]}"
  if [ -n "$before" ]; then
    local bm; bm=$(printf '%s\n' "${b[@]}" | median)
    printf '     %7s    before %10s  now/before %s  before/libzmq %s   (runs before: %s)\n' "" "$bm" \
      "$(ratio "$zm" "$bm")" "$(ratio "$bm" "$lm")" "${b[*]}"
  fi
}

echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "libzmq: $(pkg-config --modversion libzmq 2>/dev/null || echo unknown); thr in msg/s (higher is better), lat in us one-way (lower is better)"
row thr 64 2000000
row thr 1024 500000
row thr 65536 50000
row lat 64 20000
if [ -n "$before" ]; then
  cargo build --release -q -p zmtp-tokio --example idle_memory
  for impl in now before; do
    bin=$ours; [ "$impl" = before ] && bin=$before
    echo "idle $impl: $("$bin"/examples/idle_memory 2000)"
  done
fi
