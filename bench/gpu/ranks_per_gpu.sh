#!/usr/bin/env bash
# Several ranks per GPU on a GPU machine: training throughput of the CNN example with
# K = 1, 2, 4 ranks on one GPU under MPS, and K = 2 without MPS (time-sliced), then the
# colocated allreduce benchmark for K = 2 and 4. Prints a table and writes one JSON line per run
# to $OUT (default bench-results/colocated-<date>.jsonl).
#
#   bench/gpu/ranks_per_gpu.sh                 # GPU 0, build/ as built by scripts/build.sh
#   GPU=1 EPOCHS=2 BATCH=128 bench/gpu/ranks_per_gpu.sh
#   BATCHES="64 256" TORCH_PEER=1 bench/gpu/ranks_per_gpu.sh   (ALLREDUCE=0: no allreduce benchmark)   # several per-rank batches; PyTorch's CNN
#                                      as K independent processes under one MPS daemon, K = 1, 2, 4
#
# Needs: a CUDA build (build/ configured with nvcc), nvidia-cuda-mps-control for the MPS runs,
# and the example's --device cuda (the CUDA backend). The per-rank batch is fixed, so the global
# batch grows with K: compare samples/s, and look at test_acc before drawing conclusions. The
# learning rate follows the global batch by LR_SCALING (default linear, the example's default):
# K = 4 x batch 256 breaks the CNN that way (its divergence guard stops runs past 59 steps), so
# throughput runs at large batches may want LR_SCALING=sqrt.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${EDP_BUILD_DIR:-build}
GPU=${GPU:-0}
EPOCHS=${EPOCHS:-1}
BATCH=${BATCH:-64}
MODEL=${MODEL:-fashion_mnist_cnn}
LR_SCALING=${LR_SCALING:-linear}
OUT=${OUT:-bench-results/colocated-$(date +%Y%m%d-%H%M%S).jsonl}
mkdir -p "$(dirname "$OUT")"
EDPRUN="$BUILD/tools/edprun/edprun"
ROOT_FLAG=()
if [ "$(id -u)" = 0 ]; then ROOT_FLAG=(--allow-run-as-root); fi
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this script needs a GPU machine" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,compute_mode --format=csv,noheader -i "$GPU"

BATCHES=${BATCHES:-$BATCH}
run_train() {  # K MPS
  local k=$1 mps=$2 line
  if ! line=$("$EDPRUN" "${ROOT_FLAG[@]}" --oversubscribe -np "$k" --ranks-per-gpu "$k" --gpus "$GPU" --mps "$mps" -- \
      "$BUILD/examples/$MODEL" --device cuda --epochs "$EPOCHS" --batch "$BATCH" --lr-scaling "$LR_SCALING" --no-eval | tail -n 1); then
    echo "{\"run\": \"train\", \"k\": $k, \"mps\": \"$mps\", \"batch\": $BATCH, \"failed\": true}" >> "$OUT"
    echo "train K=$k mps=$mps FAILED" >&2; FAILED=1; return 0
  fi
  echo "{\"run\": \"train\", \"k\": $k, \"mps\": \"$mps\", \"batch\": $BATCH, \"result\": $line}" >> "$OUT"
  printf '%-8s K=%d  mps=%-3s  batch %-4s %s samples/s\n' train "$k" "$mps" "$BATCH" \
    "$(echo "$line" | sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p')"
}

FAILED=0
HAVE_MPS=on; command -v nvidia-cuda-mps-control >/dev/null || { HAVE_MPS=off; echo "no nvidia-cuda-mps-control: the K > 1 runs are time-sliced" >&2; }
for BATCH in $BATCHES; do
  run_train 1 off
  for k in 2 4; do run_train "$k" "$HAVE_MPS"; done
  [ "$HAVE_MPS" = on ] && run_train 2 off
done

# The peer: PyTorch's CNN (bench/pytorch/train_fashion_mnist.py, synthetic data, 4000 timed steps)
# as K independent processes started together under one MPS daemon; the sum of their samples/s.
if [ "${TORCH_PEER:-0}" = 1 ] && [ "$HAVE_MPS" = on ]; then
  MPSD=$(mktemp -d /tmp/edp-colo-torch.XXXXXX)
  export CUDA_MPS_PIPE_DIRECTORY=$MPSD/pipe CUDA_MPS_LOG_DIRECTORY=$MPSD/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  for BATCH in $BATCHES; do
    for k in 1 2 4; do
      for i in $(seq "$k"); do
        PYTHONUNBUFFERED=1 python3 bench/pytorch/train_fashion_mnist.py --model cnn --device cuda --batch "$BATCH" \
          --bench-steps 4000 --bench-warmup 50 --tf32 1 > "$MPSD/t$i.txt" 2>&1 &
      done
      wait
      tot=$(cat "$MPSD"/t*.txt | python3 -c 'import json, sys; print(round(sum(json.loads(l)["samples_per_s"] for l in sys.stdin if l.startswith("{")), 1))')
      echo "{\"run\": \"torch_mps\", \"k\": $k, \"batch\": $BATCH, \"samples_per_s\": ${tot:-0}}" >> "$OUT"
      printf '%-8s K=%d  mps=on   batch %-4s %s samples/s (sum of %d processes)\n' torch "$k" "$BATCH" "$tot" "$k"
      rm -f "$MPSD"/t*.txt
    done
  done
  echo quit | nvidia-cuda-mps-control; sleep 1; rm -rf "$MPSD"
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi

for k in $([ "${ALLREDUCE:-1}" = 1 ] && echo 2 4); do
  if line=$("$EDPRUN" "${ROOT_FLAG[@]}" --oversubscribe -np "$k" --ranks-per-gpu "$k" --gpus "$GPU" --mps "$HAVE_MPS" -- \
      "$BUILD/bench/colocated/edp_bench_colocated" -b 1M -e 64M -f 4 | tee /dev/stderr | tail -n 1); then
    echo "{\"run\": \"allreduce\", \"k\": $k, \"result\": $line}" >> "$OUT"
  else
    echo "allreduce K=$k FAILED" >&2; FAILED=1
  fi
done
echo "results: $OUT"
exit "$FAILED"
