#!/usr/bin/env bash
# Sets up everything on a fresh Debian 12 machine, builds, and trains the main example
# (the Fashion-MNIST CNN) on the default device, printing its progress and a JSON summary.
# Extra arguments go to the example, e.g. scripts/demo.sh --epochs 1.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
exec "${EDP_BUILD_DIR:-build}/examples/fashion_mnist_cnn" "$@"
