#!/usr/bin/env bash
# edp vs PyTorch on the CPU, side by side in one run: the same model, per-rank batch, thread
# count and data; training throughput and peak RSS. Two peers:
#   torch2  a current PyTorch 2.x from PyPI, as a user has it (pip; MKL and oneDNN inside), in a
#           virtual environment made once and cached by bench/torch_venv.sh (.cache/venv-torch2);
#   torch1  Debian 12's python3-torch 1.13 on OpenBLAS (the peer of the earlier comparisons).
# Each configuration (ranks x threads) runs --reps times, edp and the peers interleaved; the table
# shows the median samples/s and the range, the JSON lines every run and a summary per
# configuration. With 2 ranks, edp runs under mpirun (DistributedDataParallel) and PyTorch as two
# processes with DDP on gloo (started the way torch.distributed.run would).
# Threads, as each framework documents them: edp --threads (EDP_NUM_THREADS: its OpenMP pool, which
# also runs Eigen and oneDNN); PyTorch torch.set_num_threads(t) in the script plus
# OMP_NUM_THREADS=t, MKL_NUM_THREADS=t (2.x) and OPENBLAS_NUM_THREADS=t (1.13).
# Both sides time the training loop only and evaluate the test set once at the end in chunks of
# 256 samples (edp's train::evaluate default), so peak RSS compares like with like.
#   bench/cpu_vs_pytorch.sh [--limit N] [--epochs E] [--configs "1x1 1x2 2x1"] [--reps 3]
#                           [--models "mlp cnn"] [--batch 64] [--no-torch1]
# TORCH2_VERSION (default 2.15.0) and TORCH2_VENV choose the PyTorch 2.x environment (bench/torch_venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=20000 EPOCHS=1 CONFIGS="1x1 1x2 2x1" MODELS="mlp cnn" BATCH=64 REPS=3 TORCH1=1
while [ $# -gt 0 ]; do
  case "$1" in
    --limit) LIMIT=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --no-torch1) TORCH1=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ $TORCH1 = 1 ]; then ./scripts/setup.sh python3-torch libopenblas0-pthread python3-venv >&2; fi
./scripts/build.sh >&2
BUILD=${EDP_BUILD_DIR:-build}
OUT=${OUT:-bench-results/cpu_vs_pytorch.jsonl}
# ---- the PyTorch 2.x environment (once; bench/torch_venv.sh) ---------------------------------
PY2=$(./bench/torch_venv.sh) PY1=/usr/bin/python3
VENV=$(dirname "$(dirname "$PY2")")

mkdir -p "$(dirname "$OUT")"; : > "$OUT"
tv() { (cd /tmp && "$1" -c 'import re, torch; m = re.search(r"MKL-DNN v([0-9.]+)", torch.__config__.show()); print(torch.__version__, "(oneDNN", (m.group(1) if m else "?") + ")")' 2>/dev/null); }
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|amx)' | sort | tr '\n' ' ')"
echo "# edp $(git rev-parse --short HEAD 2>/dev/null || echo '?') ($BUILD, $(grep -o 'EDP_CPU_ARCH "[^"]*"' "$BUILD/include/edp/config.h" | cut -d'"' -f2), oneDNN $(grep -q 'EDP_HAVE_DNNL 1' "$BUILD/include/edp/config.h" && echo on || echo off), EDP_CPU_ISA=${EDP_CPU_ISA:-host})"
echo "# torch2: $(tv "$PY2") ($VENV); torch1: $( [ $TORCH1 = 1 ] && tv "$PY1" || echo skipped)"
echo "# threads: edp --threads t; torch torch.set_num_threads(t), OMP_NUM_THREADS=t, MKL_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t"
echo "# limit $LIMIT samples, $EPOCHS epoch(s), batch $BATCH per rank, $REPS interleaved runs each; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"

mpi_flags=(--oversubscribe --bind-to none)
if [ "$(id -u)" = 0 ]; then mpi_flags+=(--allow-run-as-root); fi
port=29500
# Where the vCPUs sit right now: the cache-line round trip between them, before edp's run and after
# the peers' (null on one CPU). On the VMs this was measured on it is ~55 ns or ~330 ns, changing
# with the hypervisor's placement every few seconds to minutes, and a 2-thread MLP step runs at
# half speed in the far placement; runs are summarised per placement (near: both probes below
# FAR_NS, far: both above, mixed: it moved during the rep).
FAR_NS=${FAR_NS:-150}
core_rtt() {
  "$BUILD/bench/corelat/edp_bench_core_latency" --round-trips 100000 2>/dev/null |
    grep -o '"max_round_trip_ns":[0-9.]*' | cut -d: -f2 | grep . || echo null
}
run_edp() {  # model ranks threads -> JSON line
  local common=(--threads "$3" --batch "$BATCH" --epochs "$EPOCHS" --limit "$LIMIT" --no-eval)
  if [ "$2" = 1 ]; then
    "$BUILD/examples/fashion_mnist_$1" "${common[@]}" 2>/dev/null | tail -1
  else
    mpirun "${mpi_flags[@]}" -np "$2" "$BUILD/examples/fashion_mnist_$1" "${common[@]}" 2>/dev/null | tail -1
  fi
}
run_torch() {  # python model ranks threads -> JSON line
  local py=$1 common=(--model "$2" --threads "$4" --batch "$BATCH" --epochs "$EPOCHS" --limit "$LIMIT" --eval-batch 256)
  local envs=(OMP_NUM_THREADS="$4" MKL_NUM_THREADS="$4" OPENBLAS_NUM_THREADS="$4")
  if [ "$3" = 1 ]; then
    env "${envs[@]}" "$py" bench/pytorch/train_fashion_mnist.py "${common[@]}" | tail -1
  else
    port=$((port + 1))
    local tmp r
    tmp=$(mktemp -d)
    for r in $(seq 0 $(($3 - 1))); do
      env "${envs[@]}" RANK="$r" WORLD_SIZE="$3" MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$py" bench/pytorch/train_fashion_mnist.py --ddp "${common[@]}" > "$tmp/$r.out" 2> "$tmp/$r.err" &
    done
    wait
    tail -1 "$tmp/0.out"
    rm -rf "$tmp"
  fi
}

for model in $MODELS; do
  for cfg in $CONFIGS; do
    n=${cfg%x*} t=${cfg#*x}
    for rep in $(seq 1 "$REPS"); do
      c0=$(core_rtt)
      e=$(run_edp "$model" "$n" "$t")
      p2=$(run_torch "$PY2" "$model" "$n" "$t")
      p1=null
      if [ $TORCH1 = 1 ]; then p1=$(run_torch "$PY1" "$model" "$n" "$t"); fi
      c1=$(core_rtt)
      echo "{\"bench\": \"cpu_vs_pytorch\", \"model\": \"fashion_mnist_$model\", \"ranks\": $n, \"threads\": $t, \"rep\": $rep, \"core_rtt_ns\": [$c0, $c1], \"edp\": $e, \"torch2\": $p2, \"torch1\": $p1}" >> "$OUT"
    done
  done
done

PYTHONPATH=bench /usr/bin/python3 - "$OUT" "$REPS" "$FAR_NS" <<'PY'
import json, statistics, sys
from cpu_peak import describe, peak_gflops
path, reps, far_ns = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
runs = [json.loads(l) for l in open(path) if '"rep"' in l]
def placement(r):
    c = [x for x in r.get("core_rtt_ns", []) if x is not None]
    if not c: return "-"
    return "near" if max(c) < far_ns else "far" if min(c) >= far_ns else "mixed"
groups = {}
for r in runs:
    groups.setdefault((r["model"], r["ranks"], r["threads"], placement(r)), []).append(r)
def med(xs): return statistics.median(xs) if xs else float("nan")
def rng(xs): return f"{min(xs):.0f}-{max(xs):.0f}" if xs else "-"
print(f"{'model':<18} {'ranks':>5} {'thr':>3} {'cpus':>5}  {'edp samples/s':>19}  {'torch2 samples/s':>19}  {'torch1 samples/s':>19}"
      f"  {'edp/t2':>6} {'edp/t1':>6}  {'edp GF/s':>8} {'%peak':>5}  {'rss edp':>7} {'t2':>5} {'t1':>5} {'edp/t2':>6}  {'comm_exp':>8}  {'acc edp':>7} {'t2':>6} {'t1':>6}")
summary = []
for (m, n, t, pl), rs in groups.items():
    e = [r["edp"]["samples_per_s"] for r in rs]
    p2 = [r["torch2"]["samples_per_s"] for r in rs]
    p1 = [r["torch1"]["samples_per_s"] for r in rs if r["torch1"]]
    re = max(r["edp"]["peak_rss_mb_per_rank"] for r in rs)
    r2 = max(r["torch2"]["peak_rss_mb"] for r in rs)
    r1 = max((r["torch1"]["peak_rss_mb"] for r in rs if r["torch1"]), default=float("nan"))
    share = med([r["edp"]["comm_exposed_share"] for r in rs])
    ratio2 = med(e) / med(p2)
    ratio1 = med(e) / med(p1) if p1 else float("nan")
    # The products of a training step (nn::Module::forward_flops + backward_flops) at edp's median speed.
    gf = med(e) * rs[-1]["edp"].get("train_mflop_per_sample", float("nan")) / 1e3
    peak = peak_gflops(n * t)
    a = (rs[-1]["edp"]["test_acc"], rs[-1]["torch2"]["test_acc"], rs[-1]["torch1"]["test_acc"] if rs[-1]["torch1"] else float("nan"))
    print(f"{m:<18} {n:>5} {t:>3} {pl:>5}  {med(e):>7.0f} ({rng(e):>11})  {med(p2):>7.0f} ({rng(p2):>11})  "
          f"{med(p1):>7.0f} ({rng(p1):>11})  {ratio2:>6.2f} {ratio1:>6.2f}  {gf:>8.1f} {100 * gf / peak:>4.0f}%  "
          f"{re:>7.0f} {r2:>5.0f} {r1:>5.0f} {re / r2:>6.2f}  "
          f"{share:>8.3f}  {a[0]:>7.4f} {a[1]:>6.4f} {a[2]:>6.4f}")
    summary.append({"bench": "cpu_vs_pytorch_summary", "model": m, "ranks": n, "threads": t, "placement": pl, "reps": len(rs),
                    "edp_samples_per_s_median": med(e), "edp_samples_per_s_range": [min(e), max(e)],
                    "torch2_samples_per_s_median": med(p2), "torch2_samples_per_s_range": [min(p2), max(p2)],
                    "torch1_samples_per_s_median": med(p1) if p1 else None,
                    "edp_over_torch2": round(ratio2, 3), "edp_over_torch1": round(ratio1, 3) if p1 else None,
                    "edp_rss_mb": re, "torch2_rss_mb": r2, "torch1_rss_mb": r1 if p1 else None,
                    "edp_gflops": round(gf, 1), "peak_gflops": round(peak, 1),
                    "rss_edp_over_torch2": round(re / r2, 3), "edp_comm_exposed_share_median": share,
                    "edp_cpu_conv": rs[-1]["edp"].get("cpu_conv"), "torch2": rs[-1]["torch2"]["torch"]})
with open(path, "a") as f:
    for s in summary:
        f.write(json.dumps(s) + "\n")
print("# samples/s: median of the runs (range); rss: peak resident set per process, MiB, the largest of the runs;")
print(f"# GF/s: edp's training products per second (its train_mflop_per_sample x samples/s); %peak of {describe()}")
print("# comm_exp: edp's comm_exposed_share (time waiting for gradient buckets after backward / step time)")
print(f"# cpus: the vCPUs' placement during the rep, from edp_bench_core_latency before and after it: near (< {far_ns:.0f} ns")
print("# round trip both times), far (both above), mixed (it moved); '-': one CPU, no probe")
PY
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg); JSON lines: $OUT"
