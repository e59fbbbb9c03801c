#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 20 s each) and fails if any crashes.
# Usage: fuzz/run.sh [seconds-per-target] [target...]
# Targets run FUZZ_JOBS at a time (default: one per core; libFuzzer uses one core per run), so the
# wall time is about targets x seconds / cores; each still gets its full time.
# Longer runs: fuzz/run.sh 3600 frame_decoder   (or plain `cargo +nightly fuzz run <target>` from fuzz/)
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-20}; shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
jobs=${FUZZ_JOBS:-$(nproc)}
cargo +nightly fuzz build -O 2>&1 | tail -n 3

# One target: its summary lines when it passes, its log's tail when it fails (printed whole, after
# it ends, so two targets' output never interleaves).
run_one() {
  local t=$1 secs=$2 scratch status=0
  scratch=$(mktemp -d)
  mkdir -p "corpus/$t"
  # New inputs go to a scratch directory; the committed seeds in corpus/ are only read.
  cargo +nightly fuzz run -O "$t" "$scratch" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 \
    >"$scratch.log" 2>&1 || status=$?
  {
    echo "fuzz: $t for ${secs}s"
    grep -E "^Done [0-9]+ runs|ERROR|SUMMARY|panicked" "$scratch.log" | head -n 5 || true
    if [ "$status" -ne 0 ]; then
      tail -n 40 "$scratch.log"
      echo "fuzz: $t FAILED (exit $status; reproducer in fuzz/artifacts/$t)"
    fi
  }
  rm -rf "$scratch" "$scratch.log"
  return "$status"
}
export -f run_one

if ! printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$1" "$2"' _ {} "$secs"; then
  echo "fuzz: a target failed (above)"; exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${secs}s without a crash ($jobs at a time)"
