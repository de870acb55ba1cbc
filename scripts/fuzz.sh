#!/usr/bin/env bash
# Builds the fuzz targets (clang, libFuzzer, AddressSanitizer + UBSan; tests/fuzz/) in
# $EDP_FUZZ_BUILD_DIR (default build-fuzz/) and runs each for SECONDS (default 20), one after the
# other, one process each at the lowest priority. New inputs go to a work copy of the seed corpus
# ($EDP_FUZZ_WORK, default build-fuzz/work/<target>), never into the repository; a crash stops the
# script with exit 1 and names the input libFuzzer wrote (put it in tests/fuzz/regressions/<target>/
# once the bug is fixed).
#   scripts/fuzz.sh               # every target for 20 s (what .ci/run does)
#   scripts/fuzz.sh 600 plan idx  # the plan and IDX targets for 10 minutes each
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
shift || true
BUILD=${EDP_FUZZ_BUILD_DIR:-build-fuzz}
WORK=${EDP_FUZZ_WORK:-$BUILD/work}
ALL="idx cifar tokens checkpoint data_cache plan job_spec control hostfile owner events arrays"
TARGETS=${*:-$ALL}
./scripts/setup.sh clang libclang-rt-dev >/dev/null  # clang with libFuzzer's runtime
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  generator=()
  if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEDP_FUZZ=ON \
    -DEDP_CUDA=OFF -DEDP_MPI=OFF -DEDP_DNNL=OFF -DEDP_BUILD_TESTS=OFF -DEDP_BUILD_EXAMPLES=OFF -DEDP_BUILD_BENCH=OFF \
    >/dev/null
fi
cmake --build "$BUILD" --target edp_fuzz -j "${EDP_BUILD_JOBS:-$(nproc)}"
failed=()
for t in $TARGETS; do
  mkdir -p "$WORK/$t" "$WORK/findings/$t"
  cp -n tests/fuzz/corpus/"$t"/* "$WORK/$t"/ 2>/dev/null || true
  seeds=("$WORK/$t")
  if [ -d tests/fuzz/regressions/"$t" ]; then seeds+=(tests/fuzz/regressions/"$t"); fi
  dict=()
  case $t in plan | job_spec | control | owner | events) dict=(-dict=tests/fuzz/json.dict) ;; esac
  echo "fuzz: $t for ${SECONDS_EACH}s"
  # One process, in-process fuzzing (libFuzzer's -jobs would write fuzz-N.log into the working
  # directory, shared by runs side by side). -rss_limit_mb: a parser must not need more.
  if ! nice -n 19 "$BUILD/tests/fuzz/fuzz_$t" "${dict[@]}" -max_total_time="$SECONDS_EACH" \
      -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$WORK/findings/$t/" \
      "${seeds[@]}" 2>"$WORK/$t.log"; then
    echo "fuzz: $t FAILED; the input is in $WORK/findings/$t/ (log: $WORK/$t.log):"
    grep -E "ERROR|SUMMARY|Test unit written" "$WORK/$t.log" | head -5
    failed+=("$t")
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$WORK/$t.log" | tr '\n' ' ' | sed 's/^/  /'
    echo
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}"
  exit 1
fi
echo "fuzz: every target ran ${SECONDS_EACH}s without a finding"
