#!/usr/bin/env bash
# Several ranks per GPU on a GPU machine: training throughput of the CNN example with
# K = 1, 2, 4 ranks on one GPU under MPS, and K = 2 without MPS (time-sliced), then the
# colocated allreduce benchmark for K = 2 and 4. Prints a table and writes one JSON line per run
# to $OUT (default bench-results/colocated-<date>.jsonl).
#
#   bench/gpu/colocated.sh                 # GPU 0, build/ as built by scripts/build.sh
#   GPU=1 EPOCHS=2 BATCH=128 bench/gpu/colocated.sh
#
# Needs: a CUDA build (build/ configured with nvcc), nvidia-cuda-mps-control for the MPS runs,
# and the example's --device cuda (the CUDA backend). The per-rank batch is fixed, so the global
# batch grows with K: compare samples/s, and look at test_acc before drawing conclusions.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${EDP_BUILD_DIR:-build}
GPU=${GPU:-0}
EPOCHS=${EPOCHS:-1}
BATCH=${BATCH:-64}
MODEL=${MODEL:-fashion_mnist_cnn}
OUT=${OUT:-bench-results/colocated-$(date +%Y%m%d-%H%M%S).jsonl}
mkdir -p "$(dirname "$OUT")"
EDPRUN="$BUILD/tools/edprun/edprun"
ROOT_FLAG=()
if [ "$(id -u)" = 0 ]; then ROOT_FLAG=(--allow-run-as-root); fi
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this script needs a GPU machine" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,compute_mode --format=csv,noheader -i "$GPU"

run_train() {  # K MPS
  local k=$1 mps=$2 line
  line=$("$EDPRUN" "${ROOT_FLAG[@]}" --oversubscribe -np "$k" --ranks-per-gpu "$k" --gpus "$GPU" --mps "$mps" -- \
    "$BUILD/examples/$MODEL" --device cuda --epochs "$EPOCHS" --batch "$BATCH" --no-eval | tail -n 1)
  echo "{\"run\": \"train\", \"k\": $k, \"mps\": \"$mps\", \"result\": $line}" >> "$OUT"
  printf '%-8s K=%d  mps=%-3s  %s samples/s\n' train "$k" "$mps" \
    "$(echo "$line" | sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p')"
}

for k in 1 2 4; do run_train "$k" on; done
run_train 2 off

for k in 2 4; do
  line=$("$EDPRUN" "${ROOT_FLAG[@]}" --oversubscribe -np "$k" --ranks-per-gpu "$k" --gpus "$GPU" --mps on -- \
    "$BUILD/bench/colocated/edp_bench_colocated" -b 1M -e 64M -f 4 | tee /dev/stderr | tail -n 1)
  echo "{\"run\": \"allreduce\", \"k\": $k, \"result\": $line}" >> "$OUT"
done
echo "results: $OUT"
