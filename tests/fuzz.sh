#!/usr/bin/env bash
# Short fuzzing of the parsers (`make fuzz` builds the libFuzzer targets into build-fuzz and runs
# this): for each of tests/fuzz/fuzz_{cifar,checkpoint,config,image}.c,
#  - every input in tests/fuzz/regressions/TARGET (crashes found before, now fixed) passes;
#  - FUZZ_SECONDS (default 30; the four at once) of fuzzing from the seed corpus
#    tests/fuzz/corpus/TARGET ends without a crash, a sanitizer report, a leak or a timeout (a
#    crashing input is kept in the failure message's directory: add it to regressions/ once
#    fixed).
# The executions per target are printed. Longer runs: FUZZ_SECONDS=3600 tests/fuzz.sh.
# Usage: BUILD=build-fuzz tests/fuzz.sh
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_EACH=${FUZZ_SECONDS:-30}
export ASAN_OPTIONS=detect_leaks=1
TARGETS=(cifar checkpoint config image)
for t in "${TARGETS[@]}"; do
  bin=$BIN/tests/fuzz/fuzz_$t
  regressions=("$SRC/tests/fuzz/regressions/$t"/*)
  if [[ -e ${regressions[0]} ]]; then
    run "$bin" "${regressions[@]}"
    expect_rc 0 "fuzz_$t: the regression inputs (${#regressions[@]})"
  fi
done
# The four targets fuzz at once (libFuzzer runs one thread each): with two cores each gets
# about half of one for SECONDS_EACH, about a minute of fuzzing in all, in a quarter of the time
# one after the other would take.
declare -A pids
for t in "${TARGETS[@]}"; do
  mkdir -p "$T/$t/corpus" "$T/$t/crashes"
  cp "$SRC/tests/fuzz/corpus/$t/"* "$T/$t/corpus/"
  "$BIN/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$T/$t/crashes/" "$T/$t/corpus" >"$T/$t/out" 2>"$T/$t/err" &
  pids[$t]=$!
done
for t in "${TARGETS[@]}"; do
  wait "${pids[$t]}"
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$T/$t/err")
  if [[ $rc == 0 && -n $runs ]]; then
    pass
  else
    mkdir -p "/tmp/cifar10-fuzz-$t" && cp "$T/$t/crashes/"* "/tmp/cifar10-fuzz-$t/" 2>/dev/null
    fail "fuzz_$t: exit $rc ($(grep -m1 -aE 'ERROR|runtime error|not one line' "$T/$t/err" | cut -c1-300)); inputs kept in /tmp/cifar10-fuzz-$t"
  fi
  echo "fuzz_$t: ${runs:-?} executions in $SECONDS_EACH s, $(find "$T/$t/crashes" -type f | wc -l) crashes"
done
summary fuzz
