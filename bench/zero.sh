#!/usr/bin/env bash
# What ZeRO stages 1 and 2 are for, on the CPU: per rank, the optimizer-state bytes, the peak RSS and
# the step time of a GPT trained data-parallel with the AdamW state sharded over the ranks (zero 1),
# the gradients too (zero 2) and neither (zero 0), at 1, 2 and 4 ranks, edp (bench/zero/zero.cpp
# under mpirun) beside PyTorch's ZeroRedundancyOptimizer (bench/pytorch/zero_gpt.py, gloo; zero 0
# and 1: it shards the optimizer state only) on the same model, batch and steps, in one run. One thread per rank (more ranks than cores: oversubscribed, both alike).
#   bench/zero.sh [--ranks "1 2 4"] [--layers 4 --dim 256 --heads 4 --context 128 --batch 8]
#                 [--steps 20] [--no-torch] [--out FILE.jsonl]
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS="1 2 4" LAYERS=4 DIM=256 HEADS=4 CONTEXT=128 BATCH=8 STEPS=20 TORCH=1 OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) RANKS=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    --dim) DIM=$2; shift 2 ;;
    --heads) HEADS=$2; shift 2 ;;
    --context) CONTEXT=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --no-torch) TORCH=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "usage: $0 [--ranks \"1 2 4\"] [--layers N --dim N --heads N --context N --batch N] [--steps N] [--no-torch] [--out FILE]" >&2; exit 2 ;;
  esac
done
BUILD=${EDP_BUILD_DIR:-build}
BIN=$BUILD/bench/zero/edp_bench_zero
[ -x "$BIN" ] || { echo "$0: $BIN missing: run scripts/build.sh first" >&2; exit 1; }
PY=""
if [ "$TORCH" = 1 ]; then PY=$(./bench/torch_venv.sh); fi
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
MODEL=(--layers "$LAYERS" --dim "$DIM" --heads "$HEADS" --context "$CONTEXT" --batch "$BATCH" --steps "$STEPS")
LINES=$(mktemp)
trap 'rm -f "$LINES"' EXIT
echo "# bench/zero.sh: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# $(mpirun --version 2>/dev/null | head -1); GPT ${LAYERS} layers, d ${DIM}, ${HEADS} heads, context ${CONTEXT}, batch ${BATCH} per rank, ${STEPS} timed steps, 1 thread per rank"
for n in $RANKS; do
  for z in 0 1 2; do
    EDP_NUM_THREADS=1 mpirun --oversubscribe -np "$n" "$BIN" --zero "$z" "${MODEL[@]}" | grep '^{' >> "$LINES"
    if [ -n "$PY" ] && [ "$z" -le 1 ]; then
      (cd /tmp && "$PY" "$OLDPWD/bench/pytorch/zero_gpt.py" --ranks "$n" --zero "$z" "${MODEL[@]}") | grep '^{' >> "$LINES"
    fi
  done
done
[ -n "$OUT" ] && cat "$LINES" >> "$OUT"
python3 - "$LINES" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'impl':<8} {'ranks':>5} {'zero':>4} {'state MiB/rank':>15} {'peak RSS MiB/rank':>18} {'step ms':>8}  {'state vs zero 0':>15} {'step vs zero 0':>14}")
base = {(r['impl'], r['ranks']): r for r in rows if r['zero'] == 0}
for r in rows:
    b = base.get((r['impl'], r['ranks']))
    sv = f"{r['optimizer_state_mib_per_rank'] / b['optimizer_state_mib_per_rank']:.3f}" if b else "-"
    tv = f"{r['step_ms'] / b['step_ms']:.3f}" if b else "-"
    print(f"{r['impl']:<8} {r['ranks']:>5} {r['zero']:>4} {r['optimizer_state_mib_per_rank']:>15.2f} "
          f"{r['peak_rss_mib_per_rank']:>18.1f} {r['step_ms']:>8.1f}  {sv:>15} {tv:>14}")
PY
