#!/usr/bin/env bash
# The mutants run: proves the checks have teeth (issue 7). For every injected bug
# (`lockd --bug NAME`, impl/src/bugs.rs) it runs the cheapest check that should catch it and
# fails unless that run ends invalid (exit 1); every check is also run without a bug and must
# end valid (exit 0). The model comes first: a bounded search (exhaustive within its bounds)
# where one fits, then the plain `locksmith model check` (small scope, search and random walks;
# it must also finish within 2 minutes); then a seeded chaos run (`locksmith test`) where only
# real processes show the bug (stale-leader under partitions; no-fsync: SIGKILL loses a
# user-space buffer; early-expire: real time). skip-phantom-release is a
# liveness bug in a history (the lock stays held until its lease ends, which every checker
# must allow), so only the model's property catches it; see README "Mutants".
#
# Prints one row per run (bug, check, verdict, seconds, seeds) and exits non-zero on any miss.
# Keeps every run's output in $MUTANTS_OUT (default store/mutants/<utc time>/), with
# table.md: the rows with the explanation each checker printed (abbreviated).
#
# Usage: ci/mutants.sh [BUG...]        (default: every bug in impl/src/bugs.rs)
#   MUTANTS_SEEDS="1 2 3"  chaos seeds (default "1 2"); a chaos row passes only if every seed
#                          gives the expected verdict.
#   MUTANTS_SKIP_CLEAN=1   skip the runs without a bug (for a quick look only).
#   MUTANTS_KINDS=model    run only the model checks (or only chaos); default "model chaos".
# Budget: about 10 minutes on 2 cores with the default two seeds (model 4 min, chaos 6 min).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${MUTANTS_OUT:-store/mutants/$(date -u +%Y%m%dT%H%M%SZ)}"
seeds="${MUTANTS_SEEDS:-1 2}"
kinds="${MUTANTS_KINDS:-model chaos}"
mkdir -p "$out"

echo "== cargo build --release -p nemesis -p lockd"
cargo build --release -p nemesis -p lockd
bin=target/release/locksmith

# The checks. model-*: `locksmith model check` bounds; chaos-*: `locksmith test` options
# (the seed is added per run). Every model check is bounded in time. The default `model check`
# runs a small-scope search, the search and random walks, with one crash: the bounded checks
# switch off what they do not name (--no-small-scope, --no-walks, --crashes), so that each
# shows its one search catching the bug; model-default is the plain command (issue 14: every
# bug the model can express is caught by `locksmith model check --bug NAME` within 2 minutes).
declare -A check_args check_kind
check_kind[model-1]=model
check_args[model-1]="--threads 1 --servers 1 --clients 2 --depth 7 --log-max 6 --crashes 0 --no-walks"
check_kind[model-1-crash]=model
check_args[model-1-crash]="--threads 1 --servers 1 --clients 2 --depth 7 --log-max 6 --crashes 1 --no-walks"
check_kind[model-2-giveup]=model
check_args[model-2-giveup]="--threads 1 --servers 2 --clients 2 --term-max 1 --log-max 6 --messages-max 8 \
--no-pre-vote --no-check-quorum --crashes 0 --give-up 1 --depth 14 --dfs --no-small-scope --no-walks"
check_kind[model-default]=model
check_args[model-default]=""
check_kind[chaos-partition]=chaos
check_args[chaos-partition]="--nodes 5 --time-s 30 --nemesis partition --keys 5 --think-ms 200-1000"
check_kind[chaos-kill]=chaos
check_args[chaos-kill]="--nodes 5 --time-s 30 --nemesis kill"
check_kind[chaos-none]=chaos
check_args[chaos-none]="--nodes 5 --time-s 20 --nemesis none"

# bug -> the checks that must catch it (in order, cheapest first).
declare -A bug_checks
bug_checks[release-by-key]="model-1 model-default"
bug_checks[follower-grants]="model-1 model-default"
bug_checks[early-expire]="model-1 model-default chaos-none"
bug_checks[token-from-local-counter]="model-1-crash model-default"
bug_checks[no-fsync]="model-1-crash model-default chaos-kill"
# A late Expire meets a newer grant only after a phantom Release (a client that gave up):
# the same two-server bounds with no client giving up hold no such state (a DFS within 16 steps,
# 1.6M states without symmetry, finds none), so its bounded check is model-2-giveup.
bug_checks[expire-ignores-token]="model-2-giveup model-default"
bug_checks[skip-phantom-release]="model-2-giveup model-default"
bug_checks[stale-leader]="model-default chaos-partition"
# A vote sent before it is durable shows only when a crash falls between the send and the
# save: the default model check's three-server walks split their steps there (save_later).
bug_checks[vote-before-persist]="model-default"
# A leader counting an entry of an older term shows when a follower's match index stops on
# one: the default walks send one entry per AppendEntries (append_entries_max).
bug_checks[commit-old-term]="model-default"

all_bugs=(release-by-key follower-grants early-expire token-from-local-counter no-fsync
  expire-ignores-token skip-phantom-release stale-leader vote-before-persist commit-old-term)
if [ $# -gt 0 ]; then
  bugs=("$@")
else
  bugs=("${all_bugs[@]}")
fi
for bug in "${bugs[@]}"; do
  if [ -z "${bug_checks[$bug]:-}" ]; then
    echo "ci/mutants.sh: unknown bug $bug (known: ${all_bugs[*]})" >&2
    exit 2
  fi
done

verdict_of() {
  case "$1" in
    0) echo valid ;;
    1) echo invalid ;;
    2) echo unknown ;;
    124) echo timeout ;;
    *) echo "error($1)" ;;
  esac
}

# The checker's explanation, abbreviated: the model's violated property and its "=>" line;
# the first "violated:" line of a chaos run.
explanation_of() {
  local kind=$1 file=$2 text
  if [ "$kind" = model ]; then
    text="$(grep -m1 '^VIOLATED' "$file" | sed -E 's/^VIOLATED +always //; s/: counterexample in/ (counterexample in/; s/steps:$/steps)/' || true)"
    text="$text $(grep -m1 '^ *=> ' "$file" | sed -E 's/^ *=> //' || true)"
  else
    text="$(grep -m1 'violated:' "$file" || true)"
  fi
  text="$(echo "$text" | tr -s ' ' | sed -E 's/^ //; s/ $//')"
  if [ "${#text}" -gt 240 ]; then
    text="${text:0:237}..."
  fi
  echo "$text"
}

misses=0
printf '%-26s %-16s %-9s %8s  %s\n' bug check verdict seconds seeds
printf '| bug | check | verdict | seconds | seeds | explanation (abbreviated) |\n|---|---|---|---|---|---|\n' \
  > "$out/table.md"

# run_check BUG CHECK: BUG "-" for no bug. Expects invalid with a bug, valid without.
run_check() {
  local bug=$1 check=$2 kind=${check_kind[$2]} args=${check_args[$2]}
  local want=1 name="$bug" bug_flag=() start code verdict ok=1 used=""
  if [ "$bug" = - ]; then
    want=0
    name=none
  else
    bug_flag=(--bug "$bug")
  fi
  start=$(date +%s.%N)
  local file explanation="" verdicts=()
  if [ "$kind" = model ]; then
    file="$out/$check.$name.out"
    set +e
    # shellcheck disable=SC2086  # args is a list of flags
    timeout 400 "$bin" model check --timeout-s 300 --progress-s 60 $args \
      "${bug_flag[@]}" > "$file" 2>&1
    code=$?
    set -e
    verdicts+=("$(verdict_of $code)")
    [ "$code" = "$want" ] || ok=0
    [ "$want" = 1 ] && explanation="$(explanation_of model "$file")"
    used="-"
  else
    for seed in $seeds; do
      file="$out/$check.$name.seed$seed.out"
      set +e
      # shellcheck disable=SC2086
      timeout 300 "$bin" test $args --seed "$seed" --store "$out/store" "${bug_flag[@]}" \
        > "$file" 2>&1
      code=$?
      set -e
      verdicts+=("$(verdict_of $code)")
      [ "$code" = "$want" ] || ok=0
      if [ "$want" = 1 ] && [ -z "$explanation" ]; then
        explanation="$(explanation_of chaos "$file")"
      fi
      used="${used:+$used }$seed"
    done
  fi
  local secs verdict_text
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  verdict_text="$(printf '%s\n' "${verdicts[@]}" | sort -u | paste -sd/)"
  local mark=""
  if [ "$ok" != 1 ]; then
    mark="  <-- MISS (expected $(verdict_of $want))"
    misses=$((misses + 1))
  elif [ "$check" = model-default ] && awk -v s="$secs" 'BEGIN { exit !(s > 120) }'; then
    # Issue 14: the plain command decides within 2 minutes on 2 cores.
    mark="  <-- MISS (over 2 minutes)"
    misses=$((misses + 1))
  fi
  printf '%-26s %-16s %-9s %8s  %s%s\n' "$name" "$check" "$verdict_text" "$secs" "$used" "$mark"
  printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$check" "$verdict_text" "$secs" "$used" \
    "${explanation//|/\\|}" >> "$out/table.md"
}

# The checks these bugs need, in first-use order, each run once without a bug.
# wanted CHECK: whether CHECK's kind is one of $kinds.
wanted() {
  case " $kinds " in *" ${check_kind[$1]} "*) return 0 ;; *) return 1 ;; esac
}
needed=()
for bug in "${bugs[@]}"; do
  for check in ${bug_checks[$bug]}; do
    wanted "$check" || continue
    case " ${needed[*]} " in *" $check "*) ;; *) needed+=("$check") ;; esac
  done
done

total_start=$(date +%s)
if [ "${MUTANTS_SKIP_CLEAN:-0}" != 1 ]; then
  for check in "${needed[@]}"; do
    run_check - "$check"
  done
fi
for bug in "${bugs[@]}"; do
  for check in ${bug_checks[$bug]}; do
    wanted "$check" || continue
    run_check "$bug" "$check"
  done
done
echo "== ci/mutants.sh: $(( $(date +%s) - total_start )) s; outputs in $out (table.md)"
if [ "$misses" -gt 0 ]; then
  echo "== ci/mutants.sh: $misses run(s) missed" >&2
  exit 1
fi
echo "== ci/mutants.sh: every bug caught, every clean run valid"
