#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine, builds, and trains the main example (the
# Fashion-MNIST CNN) data-parallel with 2 ranks under Open MPI's mpirun on the CPU (each rank
# gets cores/ranks threads), printing progress and a JSON summary.
# Extra arguments go to the example, e.g. scripts/demo.sh --epochs 1; EDP_DEMO_RANKS=N sets the
# number of ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
mpi_flags=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then mpi_flags+=(--allow-run-as-root); fi
exec mpirun "${mpi_flags[@]}" -np "${EDP_DEMO_RANKS:-2}" \
  "${EDP_BUILD_DIR:-build}/examples/fashion_mnist_cnn" "$@"
