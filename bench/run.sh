#!/usr/bin/env bash
# The one command of issue 9: builds every stack's bench binary (bench/ is its own cargo workspace),
# runs every row side by side on this machine and writes BENCHMARKS.md, bench/throughput.svg and
# bench/results.tsv.
#
#   bench/run.sh            full run: 3 runs per cell, 10,000 idle connections (~15 min on 2 cores)
#   bench/run.sh --quick    smaller counts, 1 run, 1,000 connections (a couple of minutes; for checking
#                           the harness, not for quoting)
#   extra arguments go to the driver: --runs N, --mem-n N, --only <row-id prefix> (e.g. thr/tcp),
#   --stacks zmtp,libzmq,...  (partial runs still overwrite BENCHMARKS.md: use --out FILE to write
#   elsewhere; the plot and raw table then go beside FILE, as FILE.svg and FILE.tsv)
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="bench/run.sh${*:+ $*}"

if ! pkg-config --exists libzmq 2>/dev/null && ! [ -e /usr/include/zmq.h ]; then
  echo "installing libzmq3-dev" >&2
  apt-get update -qq && apt-get install -y -qq libzmq3-dev pkg-config >/dev/null
fi

# Build each stack on its own so one that does not build here only loses its column.
cd bench
cargo build --release -q -p bench-driver -p bench-common
for pkg in bench-zmtp bench-libzmq bench-rawtcp bench-zeromq bench-rzmq bench-omq bench-monocoque bench-chp; do
  if ! cargo build --release -q -p "$pkg"; then
    echo "warning: $pkg does not build here; its column is left out" >&2
    rm -f "target/release/$pkg"
  fi
done
# libzmq's own perf tools in C, for cross-checking the libzmq column by hand (see bench/compare.sh).
gcc -O2 -o target/release/libzmq-perf libzmq/perf.c -lzmq || echo "warning: libzmq/perf.c did not build" >&2
cd ..

# The memory row holds 10,000 connections (libzmq: two descriptors per socket): ask for the hard limit.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

exec bench/target/release/bench-driver --command "$cmd" "$@"
