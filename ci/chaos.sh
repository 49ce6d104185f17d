#!/usr/bin/env bash
# Chaos runs: `locksmith test` over N seeds (release build); prints each verdict and, on
# failure, the failing seed and its rerun command. Keeps every run in store/, a JUnit report
# per seed in store/junit/, and a copy of each failing run's store in store-failing/ (for CI
# to publish and upload).
# Usage: ci/chaos.sh [RUNS] [TIME_S] [extra locksmith test flags...]
#   RUNS (default 5) seeds from CHAOS_SEED_BASE (default: picked from the clock, printed).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
time_s="${2:-30}"
shift $(( $# > 2 ? 2 : $# )) || true
base="${CHAOS_SEED_BASE:-$(( $(date +%s) % 100000 * 100 ))}"
echo "== chaos: $runs runs of ${time_s}s, seeds from $base"
cargo build --release -p lockd -p nemesis
mkdir -p store/junit
rm -rf store-failing
failed=()
for i in $(seq 0 $((runs - 1))); do
  seed=$((base + i))
  set +e
  target/release/locksmith test --time-s "$time_s" --seed "$seed" --junit "store/junit/chaos-$seed.xml" "$@" \
    > "store/chaos-$seed.out" 2>&1
  code=$?
  set -e
  tail -n 3 "store/chaos-$seed.out" | sed "s/^/  [seed $seed] /"
  if [ "$code" != 0 ]; then
    failed+=("$seed")
    echo "FAILING SEED: $seed (exit $code)  (rerun: locksmith test --time-s $time_s --seed $seed $*)"
    run_dir="$(sed -n 's/^store: //p' "store/chaos-$seed.out" | head -n 1)"
    if [ -n "$run_dir" ] && [ -d "$run_dir" ]; then
      mkdir -p "store-failing/seed-$seed"
      cp -r "$run_dir" "store-failing/seed-$seed/"
      cp "store/chaos-$seed.out" "store-failing/seed-$seed/"
    fi
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "== chaos: ${#failed[@]} of $runs failed; failing seeds: ${failed[*]}"
  exit 1
fi
echo "== chaos: all $runs runs valid"
