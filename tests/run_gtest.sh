#!/usr/bin/env bash
# Runs a GoogleTest program (or mpirun with one) for CTest and turns "every test skipped" into
# exit code 77, which CTest reports as Skipped (SKIP_RETURN_CODE) with the reason shown. A run
# with any failure keeps its failing exit code; a run where some tests passed and others
# skipped passes, and the skips stay visible in the output.
set -u
export GTEST_COLOR=no  # mpirun may give the ranks a pseudo-terminal: keep the markers plain
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
sed -i 's/\x1b\[[0-9;]*m//g' "$out"
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
if grep -q '^\[  PASSED  \] 0 tests' "$out" && grep -q '^\[  SKIPPED \]' "$out"; then
  reason=$(grep -m1 -A1 'Skipped$' "$out" | tail -1)
  echo "run_gtest: every test skipped: ${reason}"
  exit 77
fi
exit 0
