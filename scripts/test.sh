#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine, builds, and runs the whole test suite
# (unit tests, tests under a real mpirun with 1-4 ranks, the find_package consumer).
# GPU tests skip with a reason on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
# Open MPI refuses root without these; tests run ranks oversubscribed on small machines.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${EDP_BUILD_DIR:-build}" --output-on-failure "$@"
