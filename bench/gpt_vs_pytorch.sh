#!/usr/bin/env bash
# edp's GPT (examples/gpt_text.cpp) against PyTorch 2.x (bench/pytorch/train_gpt.py) on the CPU, side
# by side in one run: the same model, corpus (scripts/prepare_text_corpus.sh), context, batch,
# optimizer, schedule and number of steps; at each thread count, in float32 and in bfloat16 (edp
# --bf16: oneDNN bf16 products, fp32 master weights; PyTorch: torch.autocast("cpu",
# dtype=torch.bfloat16)). Reports tokens/s (the steps after the first 3), the achieved GFLOP/s
# (6 FLOPs per weight per token plus the causal attention products, nn::GPT::train_flops_per_token)
# against the machine's peak, peak RSS, and the validation loss after the same steps.
#   bench/gpt_vs_pytorch.sh [--threads "1 2"] [--precisions "fp32 bf16"] [--steps 150] [--reps 1]
#                           [--layers 4] [--dim 256] [--heads 4] [--context 128] [--batch 16]
#                           [--summary-only]   (the table again from the JSON lines in $OUT)
# The peak: bench/cpu_peak.py (threads x nominal GHz x FLOPs per cycle; PEAK_GHZ overrides the clock).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="1 2" PRECISIONS="fp32 bf16" STEPS=150 REPS=1 LAYERS=4 DIM=256 HEADS=4 CONTEXT=128 BATCH=16 RUN=1
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS=$2; shift 2 ;;
    --precisions) PRECISIONS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    --dim) DIM=$2; shift 2 ;;
    --heads) HEADS=$2; shift 2 ;;
    --context) CONTEXT=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --summary-only) RUN=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BUILD=${EDP_BUILD_DIR:-build}
CORPUS=${EDP_CORPUS_DIR:-.cache/corpus}
OUT=${OUT:-bench-results/gpt_vs_pytorch.jsonl}
if [ $RUN = 1 ]; then
./scripts/build.sh >&2
./scripts/prepare_text_corpus.sh >&2
PY=$(./bench/torch_venv.sh)
mkdir -p "$(dirname "$OUT")"; : > "$OUT"
common=(--layers "$LAYERS" --dim "$DIM" --heads "$HEADS" --context "$CONTEXT" --batch "$BATCH" --steps "$STEPS")
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|amx)' | sort | tr '\n' ' ')"
echo "# edp $(git rev-parse --short HEAD 2>/dev/null || echo '?') ($BUILD, $(grep -o 'EDP_CPU_ARCH "[^"]*"' "$BUILD/include/edp/config.h" | cut -d'"' -f2)); torch $(cd /tmp && "$PY" -c 'import torch; print(torch.__version__)')"
echo "# GPT: $LAYERS layers, d $DIM, $HEADS heads, context $CONTEXT, batch $BATCH, $STEPS steps; corpus $CORPUS; $REPS interleaved run(s) each; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $THREADS; do
  for prec in $PRECISIONS; do
    flag=(); [ "$prec" = bf16 ] && flag=(--bf16)
    for rep in $(seq 1 "$REPS"); do
      e=$(EDP_NUM_THREADS=$t "$BUILD/examples/gpt_text" "${common[@]}" "${flag[@]}" --threads "$t" --data "$CORPUS" \
            --no-progress --sample-tokens 0 2>/dev/null | tail -1)
      p=$(OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t "$PY" bench/pytorch/train_gpt.py "${common[@]}" "${flag[@]}" \
            --threads "$t" --data "$CORPUS" | tail -1)
      echo "{\"bench\": \"gpt_vs_pytorch\", \"threads\": $t, \"precision\": \"$prec\", \"rep\": $rep, \"load\": \"$(cut -d' ' -f1 /proc/loadavg)\", \"edp\": $e, \"torch\": $p}" >> "$OUT"
    done
  done
done
fi
PYTHONPATH=bench /usr/bin/python3 - "$OUT" "$LAYERS" "$DIM" "$CONTEXT" <<'PY'
import json, statistics, sys
from cpu_peak import describe, peak_gflops
path = sys.argv[1]
L, D, T = (int(x) for x in sys.argv[2:5])
runs = [json.loads(l) for l in open(path) if '"rep"' in l]
with open(path) as f:  # a summary-only pass replaces the earlier summary lines
    kept = [l for l in f if '"rep"' in l]
with open(path, "w") as f:
    f.writelines(kept)
flops_tok = 6 * (L * 12 * D * D + 256 * D) + L * 12 * D * (T + 1) / 2  # nn::GPT::train_flops_per_token
med = statistics.median
groups = {}
for r in runs:
    groups.setdefault((r["threads"], r["precision"]), []).append(r)
fp32_edp = {t: med([r["edp"]["tokens_per_s"] for r in rs]) for (t, p), rs in groups.items() if p == "fp32"}
print(f"{'thr':>3} {'prec':>5}  {'edp tok/s':>9} {'torch tok/s':>11} {'edp/torch':>9} {'edp/edp32':>9}  "
      f"{'edp GF/s':>8} {'%peak':>6} {'torch GF/s':>10}  {'val edp':>7} {'torch':>7} {'diff':>6}  {'rss edp':>7} {'torch':>6} {'ratio':>5}")
summary = []
for (t, p), rs in sorted(groups.items()):
    e = med([r["edp"]["tokens_per_s"] for r in rs]); q = med([r["torch"]["tokens_per_s"] for r in rs])
    ve = rs[-1]["edp"]["val_loss"]; vt = rs[-1]["torch"]["val_loss"]
    re = max(r["edp"]["peak_rss_mb_per_rank"] for r in rs); rt = max(r["torch"]["peak_rss_mb"] for r in rs)
    peak = peak_gflops(t, p)
    ge, gt = e * flops_tok / 1e9, q * flops_tok / 1e9
    own = e / fp32_edp[t] if t in fp32_edp else float("nan")
    print(f"{t:>3} {p:>5}  {e:>9.0f} {q:>11.0f} {e / q:>9.2f} {own:>9.2f}  {ge:>8.1f} {100 * ge / peak:>5.0f}% {gt:>10.1f}  "
          f"{ve:>7.4f} {vt:>7.4f} {100 * (ve - vt) / vt:>+5.1f}%  {re:>7.0f} {rt:>6.0f} {re / rt:>5.2f}")
    summary.append({"bench": "gpt_vs_pytorch_summary", "threads": t, "precision": p, "reps": len(rs),
                    "edp_tokens_per_s": e, "torch_tokens_per_s": q, "edp_over_torch": round(e / q, 3),
                    "edp_over_edp_fp32": round(own, 3), "edp_gflops": round(ge, 1), "torch_gflops": round(gt, 1),
                    "peak_gflops": round(peak, 1), "edp_val_loss": ve, "torch_val_loss": vt,
                    "val_loss_diff": round((ve - vt) / vt, 4), "edp_rss_mb": re, "torch_rss_mb": rt,
                    "rss_ratio": round(re / rt, 3), "torch": rs[-1]["torch"]["torch"], "edp_cpu_isa": rs[-1]["edp"]["cpu_isa"]})
with open(path, "a") as f:
    for s in summary:
        f.write(json.dumps(s) + "\n")
print(f"# tokens/s: median of the runs; GF/s: tokens/s x {flops_tok / 1e6:.1f} MFLOP per token; %peak of {describe()}; "
      "val: validation loss after the same steps (last run); rss: MiB")
PY
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg); JSON lines: $OUT"
