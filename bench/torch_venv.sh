#!/usr/bin/env bash
# Makes (once, cached) the PyTorch 2.x virtual environment of the CPU benchmarks against PyTorch
# (bench/cpu_vs_pytorch.sh, bench/gpt_vs_pytorch.sh) and prints its python's path on stdout.
# Everything is installed by package name with pip as the user has configured it (its index,
# mirror or proxy). PyPI's torch wheel is built with CUDA and loads its CUDA libraries at import
# even without a GPU, so the wheel goes in without dependencies, then its pure-Python requirements,
# then those NVIDIA wheels that a CUDA toolkit in /usr/local/cuda does not supply (cuFile,
# cuSPARSELt, NVSHMEM, and an NCCL new enough for torch), at the versions torch pins. Where even
# that does not import (no toolkit), everything torch requires is installed.
#   TORCH2_VERSION (default 2.15.0) and TORCH2_VENV (default .cache/venv-torch2) choose it.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH2_VERSION=${TORCH2_VERSION:-2.15.0}
VENV=$(realpath -m "${TORCH2_VENV:-.cache/venv-torch2}")  # absolute: torch is imported from /tmp
torch2_ok() { [ -x "$VENV/bin/python" ] && (cd /tmp && "$VENV/bin/python" -c 'import torch, numpy' >/dev/null 2>&1); }
if ! torch2_ok; then
  ./scripts/setup.sh python3-venv >&2
  echo "torch_venv: creating $VENV with torch $TORCH2_VERSION (once; cached)" >&2
  /usr/bin/python3 -m venv "$VENV"
  pip=("$VENV/bin/pip" install -q)
  "${pip[@]}" --no-deps "torch==$TORCH2_VERSION" >&2
  meta=$(ls -d "$VENV"/lib/python3*/site-packages/torch-"$TORCH2_VERSION"*.dist-info)/METADATA
  pins() { sed -n "s/^Requires-Dist: \($1[^;]*\).*/\1/p" "$meta" | tr -d ' '; }
  "${pip[@]}" filelock typing-extensions sympy networkx jinja2 fsspec numpy "setuptools>=77.0.3" >&2
  "${pip[@]}" --no-deps nvidia-cufile $(pins nvidia-cusparselt) $(pins nvidia-nccl) $(pins nvidia-nvshmem) >&2
  if ! torch2_ok; then
    echo "torch_venv: torch does not import with the minimal set; installing all its requirements" >&2
    "${pip[@]}" "torch==$TORCH2_VERSION" numpy >&2
  fi
  torch2_ok || { echo "torch_venv: torch $TORCH2_VERSION in $VENV does not import" >&2; exit 1; }
fi
echo "$VENV/bin/python"
