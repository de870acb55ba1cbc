#!/usr/bin/env bash
# Installs the Debian packages edp needs to build, test and run its examples, and, where the CUDA
# toolkit is (nvcc), cudnn-frontend's headers into .cache/cudnn-frontend (the fused attention of
# the GPU bfloat16 path; a header-only library, fetched as its Python wheel with pip). Idempotent:
# when everything is present it only checks and returns. Usage: scripts/setup.sh [extra packages...]
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config python3
  openmpi-bin libopenmpi-dev
  libeigen3-dev zlib1g-dev libgtest-dev nlohmann-json3-dev
  libspdlog-dev libfmt-dev libcli11-dev
  libdnnl-dev  # oneDNN 2.x: the CPU convolutions (optional at build time: -DEDP_DNNL=OFF)
  dataset-fashion-mnist
  python3-matplotlib
  python3-pip    # fetches cudnn-frontend's headers (below)
  python3-numpy  # the install test writes a user's .npy arrays with NumPy itself
  libstb-dev     # image decoding for data::load_image_folder (PNG, JPEG, ...)
  iproute2 util-linux  # scripts/testcluster.sh: network namespaces, nsenter (the cluster_* tests)
  # scripts/testcluster.sh slurm-up: a real Slurm on the test cluster (the cluster_slurm* tests).
  # The packages start their system services where systemd runs (munged, and slurmd/slurmctld
  # fail for want of /etc/slurm/slurm.conf); the test cluster uses none of them: it runs its own
  # munged, slurmctld and slurmds with its own key, sockets and slurm.conf.
  slurmctld slurmd slurm-client munge
)
PACKAGES+=("$@")

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present"
fi

# cudnn-frontend: the version edp was tested with on a GPU (docs/cuda.md).
CUDNN_FRONTEND_VERSION=1.32.0
FE=.cache/cudnn-frontend
cd "$(dirname "$0")/.."
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   [ "$(cat "$FE/version" 2>/dev/null)" != "$CUDNN_FRONTEND_VERSION" ]; then
  echo "setup: fetching cudnn-frontend $CUDNN_FRONTEND_VERSION's headers into $FE"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # Optional: without it the build runs the bfloat16 attention on cuBLAS products (and says so).
  if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
       --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" &&
     python3 -m zipfile -e "$tmp"/nvidia_cudnn_frontend-*.whl "$tmp/x"; then
    rm -rf "$FE" && mkdir -p "$FE"
    cp -r "$tmp/x/include" "$FE/include"
    echo "$CUDNN_FRONTEND_VERSION" > "$FE/version"
  else
    echo "setup: could not fetch cudnn-frontend (no pip or no package index?); the GPU build goes on without its fused attention" >&2
  fi
fi
