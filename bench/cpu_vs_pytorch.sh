#!/usr/bin/env bash
# edp vs PyTorch (Debian python3-torch on OpenBLAS) on the CPU, side by side in one run: the same
# model, per-rank batch, thread count and data; training throughput and peak RSS. With
# --ranks "2", edp runs under mpirun (DistributedDataParallel) and PyTorch under
# torch.distributed.run with DDP on gloo. Prints a table and writes JSON lines to $OUT
# (default bench-results/cpu_vs_pytorch.jsonl).
#   bench/cpu_vs_pytorch.sh [--limit N] [--epochs E] [--threads "1 2"] [--ranks "1"] [--models "mlp cnn"]
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=20000 EPOCHS=1 THREADS="1 2" RANKS="1" MODELS="mlp cnn" BATCH=64
while [ $# -gt 0 ]; do
  case "$1" in
    --limit) LIMIT=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
./scripts/setup.sh python3-torch libopenblas0-pthread >&2
./scripts/build.sh >&2
BUILD=${EDP_BUILD_DIR:-build}
OUT=${OUT:-bench-results/cpu_vs_pytorch.jsonl}
mkdir -p "$(dirname "$OUT")"; : > "$OUT"
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), edp $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# limit $LIMIT samples, $EPOCHS epoch(s), batch $BATCH"
printf "%-18s %5s %7s %14s %15s %7s %10s %12s %9s %9s\n" model ranks threads edp_samples/s torch_samples/s ratio edp_rss_mb torch_rss_mb edp_acc torch_acc
mpi_flags=(--oversubscribe --bind-to none)
if [ "$(id -u)" = 0 ]; then mpi_flags+=(--allow-run-as-root); fi
port=29500
for model in $MODELS; do
  for n in $RANKS; do
    for t in $THREADS; do
      common=(--threads "$t" --batch "$BATCH" --epochs "$EPOCHS" --limit "$LIMIT")
      if [ "$n" = 1 ]; then
        e=$(OMP_NUM_THREADS=$t "$BUILD/examples/fashion_mnist_$model" "${common[@]}" --no-eval 2>/dev/null | tail -1)
        p=$(OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t /usr/bin/python3 bench/pytorch/train_fashion_mnist.py \
              --model "$model" "${common[@]}" | tail -1)
      else
        e=$(OMP_NUM_THREADS=$t mpirun "${mpi_flags[@]}" -np "$n" -x OMP_NUM_THREADS \
              "$BUILD/examples/fashion_mnist_$model" "${common[@]}" --no-eval 2>/dev/null | tail -1)
        port=$((port + 1))
        # torch.distributed.run of Debian's torch 1.13 fails on Python 3.11; start the
        # workers the way it would (env:// rendezvous on loopback).
        tmp=$(mktemp -d)
        for r in $(seq 0 $((n - 1))); do
          RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t /usr/bin/python3 bench/pytorch/train_fashion_mnist.py \
            --ddp --model "$model" "${common[@]}" > "$tmp/$r.out" 2> "$tmp/$r.err" &
        done
        wait
        p=$(tail -1 "$tmp/0.out")
        rm -rf "$tmp"
      fi
      echo "{\"bench\": \"cpu_vs_pytorch\", \"edp\": $e, \"pytorch\": $p}" >> "$OUT"
      /usr/bin/python3 - "$model" "$n" "$t" "$e" "$p" <<'PY'
import json, sys
m, n, t, e, p = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5])
print(f"{'fashion_mnist_'+m:<18} {n:>5} {t:>7} {e['samples_per_s']:>14.0f} {p['samples_per_s']:>15.0f} "
      f"{e['samples_per_s']/p['samples_per_s']:>7.2f} {e['peak_rss_mb_per_rank']:>10.0f} {p['peak_rss_mb']:>12.0f} "
      f"{e['test_acc']:>9.4f} {p['test_acc']:>9.4f}")
PY
    done
  done
done
echo "# JSON lines: $OUT"
