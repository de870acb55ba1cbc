#!/usr/bin/env bash
# Copies the header-only and static build dependencies of edp (Eigen, nlohmann-json,
# GoogleTest, zlib's headers) from this Debian machine into .gpu-deps/usr, relocatable (their
# CMake package files locate themselves), and tells git to ignore the folder. Carry .gpu-deps to
# a GPU machine that lacks them; bench/gpu/run.sh picks it up. About 13 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.gpu-deps/usr
rm -rf .gpu-deps
mkdir -p "$D/include" "$D/share" "$D/share/cmake" "$D/lib/x86_64-linux-gnu/cmake"
cp -r /usr/include/eigen3 "$D/include/"
mkdir -p "$D/share/eigen3" && cp -r /usr/share/eigen3/cmake "$D/share/eigen3/"
cp -r /usr/include/nlohmann "$D/include/"
cp -r /usr/share/cmake/nlohmann_json "$D/share/cmake/"
cp -r /usr/include/gtest /usr/include/gmock "$D/include/"
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$D/lib/x86_64-linux-gnu/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest "$D/lib/x86_64-linux-gnu/cmake/"
cp /usr/include/zlib.h /usr/include/zconf.h "$D/include/"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu-deps/' "$exclude" 2>/dev/null || echo '/.gpu-deps/' >> "$exclude"
du -sh .gpu-deps
echo "carry .gpu-deps with bench/gpu/run.sh (device tool: carry [\".gpu-deps\"])"
