#!/usr/bin/env bash
# Configures (once) and builds edp into $EDP_BUILD_DIR (default: build/). Extra arguments are
# passed to CMake at configure time, e.g. scripts/build.sh -DEDP_CUDA=OFF; so are the words of
# $EDP_CMAKE_ARGS (e.g. EDP_CMAKE_ARGS="-DEDP_NATIVE=ON").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${EDP_BUILD_DIR:-build}
JOBS=${EDP_BUILD_JOBS:-$(nproc)}
read -r -a extra <<<"${EDP_CMAKE_ARGS:-}"
set -- "${extra[@]}" "$@"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  generator=()
  if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE="${EDP_BUILD_TYPE:-Release}" "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" "$@"
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
