#!/usr/bin/env bash
# The simulator has teeth (issue 11): for every bug of impl/src/bugs.rs, `locksmith sim
# --bug NAME` with default options, seeds from 1, must end invalid (exit 1) within
# SIM_MUTANTS_LIMIT_S (default 60) seconds of wall time, on a seed that passes without the
# bug (else the seed found a defect of lockd, not the mutant). Prints one row per bug: the first
# failing seed, the wall time and the checker's explanation (abbreviated), and writes them
# to $OUT/table.md. Exits non-zero on any miss.
#
# Usage: ci/sim-mutants.sh [BUG...]     (default: every bug)
set -euo pipefail
cd "$(dirname "$0")/.."
limit="${SIM_MUTANTS_LIMIT_S:-60}"
out="${SIM_MUTANTS_OUT:-store/sim-mutants/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
cargo build --release -p nemesis
bin=target/release/locksmith
all=(release-by-key follower-grants early-expire token-from-local-counter no-fsync
  expire-ignores-token skip-phantom-release stale-leader granted-before-commit
  snapshot-loses-state new-leader-expires trust-retry-after-unknown reply-before-persist
  invalid-after-sent grant-to-closed-connection activity-at-registration
  committed-time-from-uptime grant-lost-on-gone check-quorum-any-message vote-before-persist
  commit-old-term follower-commit-past-sent cancel-not-orphaned snapshot-refused
  link-panics-on-empty-reply cancel-crossing-answer-forgotten connection-end-unseen
  grant-written-after-end-kept waiters-served-lifo
  refused-retry-to-head late-snapshot-answer-stalls snapshot-ack-before-persist
  tick-misses-timers-due-now)
if [ $# -gt 0 ]; then bugs=("$@"); else bugs=("${all[@]}"); fi
misses=0
printf '| bug | verdict | first failing seed | wall s | explanation (abbreviated) |\n|---|---|---|---|---|\n' > "$out/table.md"
printf '%-26s %-8s %-6s %7s\n' bug verdict seed seconds
for bug in "${bugs[@]}"; do
  start=$(date +%s.%N)
  set +e
  timeout "$((limit + 30))" "$bin" sim --bug "$bug" --seeds 1..100000 --no-shrink \
    --store "$out/store" > "$out/$bug.out" 2> "$out/$bug.err"
  code=$?
  set -e
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  seed=$(grep -m1 -oE '^seed [0-9]+: invalid' "$out/$bug.out" | grep -oE '[0-9]+' || true)
  why=$(grep -m1 -A3 -E '^seed [0-9]+ failed:' "$out/$bug.out" | tail -n +2 | tr -s ' \n' ' ' | cut -c1-200 || true)
  verdict=$([ "$code" = 1 ] && echo invalid || echo "exit $code")
  mark=""
  if [ "$code" != 1 ] || awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s > l) }'; then
    mark="  <-- MISS"
    misses=$((misses + 1))
  elif [ -n "$seed" ] && ! "$bin" sim --seeds "$seed" --no-shrink --store "$out/clean-store" \
      > "$out/$bug.clean.out" 2>&1; then
    # A catch counts only where the same seed passes without the bug: otherwise the seed
    # found a defect of lockd itself, not this mutant.
    verdict="clean seed $seed fails too"
    mark="  <-- MISS"
    misses=$((misses + 1))
  fi
  printf '%-26s %-8s %-6s %7s%s\n' "$bug" "$verdict" "${seed:--}" "$secs" "$mark"
  printf '| %s | %s | %s | %s | %s |\n' "$bug" "$verdict" "${seed:--}" "$secs" "${why//|/\\|}" >> "$out/table.md"
done
echo "== ci/sim-mutants.sh: outputs in $out (table.md)"
if [ "$misses" -gt 0 ]; then
  echo "== ci/sim-mutants.sh: $misses bug(s) missed or too slow" >&2
  exit 1
fi
echo "== ci/sim-mutants.sh: every bug caught within ${limit} s"
