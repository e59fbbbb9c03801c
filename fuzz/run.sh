#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 20 s each) and fails on the first crash.
# Usage: fuzz/run.sh [seconds-per-target] [target...]
# Longer runs: fuzz/run.sh 3600 frame_decoder   (or plain `cargo +nightly fuzz run <target>` from fuzz/)
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-20}; shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
cargo +nightly fuzz build -O 2>&1 | tail -n 3
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  mkdir -p "corpus/$t"
  echo "fuzz: $t for ${secs}s"
  # New inputs go to a scratch directory; the committed seeds in corpus/ are only read.
  log="$scratch.log"
  status=0
  cargo +nightly fuzz run -O "$t" "$scratch" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 \
    >"$log" 2>&1 || status=$?
  grep -E "^#[0-9]+ +DONE|ERROR|SUMMARY|panicked" "$log" | head -n 5 || true
  rm -rf "$scratch"
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log"
    echo "fuzz: $t FAILED (exit $status; reproducer in fuzz/artifacts/$t)"; exit 1
  fi
  rm -f "$log"
done
echo "fuzz: all ${#targets[@]} targets ran ${secs}s without a crash"
