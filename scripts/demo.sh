#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine, builds, and trains the main example (the
# Fashion-MNIST CNN) data-parallel with 2 ranks launched through edprun. On a machine without
# a GPU (like CI) edprun runs in CPU mode: the ranks share the cores. Prints progress and a
# JSON summary. Extra arguments go to the example, e.g. scripts/demo.sh --epochs 1;
# EDP_DEMO_RANKS=N sets the number of ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
BUILD=${EDP_BUILD_DIR:-build}
ranks=${EDP_DEMO_RANKS:-2}
flags=(-np "$ranks")
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
if [ "$(nproc)" -lt "$ranks" ]; then flags+=(--oversubscribe); fi
exec "$BUILD/tools/edprun/edprun" "${flags[@]}" -- "$BUILD/examples/fashion_mnist_cnn" "$@"
