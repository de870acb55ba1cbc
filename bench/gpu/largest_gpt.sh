#!/usr/bin/env bash
# The largest GPT (examples/gpt_text) that trains when RANKS data-parallel ranks share one GPU
# (edprun --ranks-per-gpu RANKS --mps on: each rank has about 1/RANKS of the GPU's memory), with the
# optimizer state whole on every rank (--zero 0), sharded over the ranks (--zero 1), and the
# gradients sharded too (--zero 2). AdamW in float32 holds 16 bytes per parameter on every rank
# unsharded (weights, gradients, the bucket's copy of them, two moments: 20 with the copy), 12 +
# 8/RANKS at zero 1 and 4 + 8/RANKS at zero 2 (plus the gradients of one layer and the buckets in
# flight), where activations are small.
#
#   bench/gpu/largest_gpt.sh [--ranks 2] [--layers 24] [--widths "2048 2560 3072 3584 4096 4608 5120"]
#       [--head-dim 128] [--context 256] [--batch 4] [--steps 2] [--timeout 300] [--build DIR]
#       [--device cuda|cpu] [--mem-limit-mb N] [--zeros "0 1 2"] [--out FILE]
#
# For each --zero, a binary search over the widths (at --layers blocks, heads = width / head-dim)
# for the widest that runs --steps steps; the widths must be ascending, and a width that fits is
# taken to mean every narrower one does. A run that fails for another reason than memory stops the
# search with its log. Prints a table (per setting: the largest width and its parameters, the
# device memory its ranks peaked at, the first width that did not fit) and one JSON line per
# setting, also appended to --out when given.
#
# --device cpu is this script's dry run on any machine: plain mpirun, each rank under
# `ulimit -v --mem-limit-mb` (standing for the GPU's memory), small widths.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
ranks=2 layers=24 widths="2048 2560 3072 3584 4096 4608 5120" head_dim=128 context=256 batch=4 steps=2
timeout_s=300 build="${EDP_BUILD_DIR:-$here/build}" device=cuda mem_mb=0 out="" zeros="0 1 2"
need() { [[ $# -ge 2 && -n "$2" ]] || { echo "largest_gpt.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) need "$@"; ranks=$2; shift 2 ;;
    --layers) need "$@"; layers=$2; shift 2 ;;
    --widths) need "$@"; widths=$2; shift 2 ;;
    --head-dim) need "$@"; head_dim=$2; shift 2 ;;
    --context) need "$@"; context=$2; shift 2 ;;
    --batch) need "$@"; batch=$2; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    --timeout) need "$@"; timeout_s=$2; shift 2 ;;
    --build) need "$@"; build=$2; shift 2 ;;
    --device) need "$@"; device=$2; shift 2 ;;
    --mem-limit-mb) need "$@"; mem_mb=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --zeros) need "$@"; zeros=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "largest_gpt.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
for v in ranks layers head_dim context batch steps timeout_s mem_mb; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "largest_gpt.sh: --${v//_/-} must be a whole number, got '${!v}'" >&2; exit 2; }
done
[[ "$ranks" -ge 2 ]] || { echo "largest_gpt.sh: --ranks must be >= 2 (sharding over one rank changes nothing)" >&2; exit 2; }
[[ "$device" == cuda || "$device" == cpu ]] || { echo "largest_gpt.sh: --device must be cuda or cpu" >&2; exit 2; }
read -r -a Z <<< "$zeros"
[[ ${#Z[@]} -ge 1 ]] || { echo "largest_gpt.sh: --zeros is empty" >&2; exit 2; }
for z in "${Z[@]}"; do
  [[ "$z" == 0 || "$z" == 1 || "$z" == 2 ]] || { echo "largest_gpt.sh: --zeros takes 0, 1 and 2, got '$zeros'" >&2; exit 2; }
done
read -r -a W <<< "$widths"
[[ ${#W[@]} -ge 1 ]] || { echo "largest_gpt.sh: --widths is empty" >&2; exit 2; }
prev=0
for w in "${W[@]}"; do
  [[ "$w" =~ ^[0-9]+$ && "$w" -gt "$prev" ]] || { echo "largest_gpt.sh: --widths must be ascending whole numbers, got '$widths'" >&2; exit 2; }
  (( w % head_dim == 0 )) || { echo "largest_gpt.sh: width $w is not a multiple of --head-dim $head_dim" >&2; exit 2; }
  prev=$w
done
exe="$build/examples/gpt_text"
[[ -x "$exe" ]] || { echo "largest_gpt.sh: no $exe (build the examples)" >&2; exit 2; }
[[ -s "$here/.cache/corpus/train.tok" ]] || { echo "largest_gpt.sh: no .cache/corpus (scripts/prepare_text_corpus.sh)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
logs=$(mktemp -d /tmp/edp-largest-gpt.XXXXXX)
trap 'rm -rf "$logs"' EXIT

# try ZERO WIDTH: 0 when it trained, 1 when it ran out of memory, 2 on another failure (log kept
# in $logs/last.txt); its JSON line in $logs/ok-ZERO-WIDTH.json.
try() {
  local z=$1 w=$2 rc log="$logs/z$1-w$2.txt"
  local args=(--device "$device" --layers "$layers" --dim "$w" --heads $((w / head_dim)) --context "$context"
              --batch "$batch" --steps "$steps" --zero "$z" --eval-windows 1 --sample-tokens 0 --no-progress
              --warmup-steps 1 --data "$here/.cache/corpus")
  if [[ "$device" == cuda ]]; then
    timeout -k 30 "$timeout_s" "$build/tools/edprun/edprun" --allow-run-as-root --oversubscribe -np "$ranks" \
      --ranks-per-gpu "$ranks" --gpus 0 --mps on -- "$exe" "${args[@]}" > "$log" 2>&1
  else
    local limit=""
    [[ "$mem_mb" -gt 0 ]] && limit="ulimit -v $((mem_mb * 1024));"
    timeout -k 30 "$timeout_s" mpirun --oversubscribe -np "$ranks" bash -c "$limit exec \"\$0\" \"\$@\"" "$exe" \
      "${args[@]}" --threads 1 > "$log" 2>&1
  fi
  rc=$?
  cp "$log" "$logs/last.txt"
  if [[ $rc -eq 0 ]] && grep -q '^{' "$log"; then
    grep '^{' "$log" | tail -n 1 > "$logs/ok-$z-$w.json"
    return 0
  fi
  grep -qiE "out of ([a-z]+ )?memory|bad_alloc|cannot allocate|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation" "$log" && return 1
  return 2
}

status=0
for z in "${Z[@]}"; do
  lo=-1 hi=${#W[@]} failed=""  # W[lo] fits (-1: none known), W[hi] does not (len: none known)
  while (( hi - lo > 1 )); do
    mid=$(( (lo + hi) / 2 ))
    echo "largest_gpt.sh: --zero $z, width ${W[$mid]} ($layers layers)..." >&2
    try "$z" "${W[$mid]}"
    case $? in
      0) lo=$mid ;;
      1) hi=$mid ;;
      *) failed=${W[$mid]}; echo "largest_gpt.sh: --zero $z width ${W[$mid]} failed (not memory):" >&2
         tail -n 15 "$logs/last.txt" >&2; status=1; break ;;
    esac
  done
  python3 - "$logs" "$z" "$lo" "$hi" "$layers" "$ranks" "$device" "$failed" "$out" "${W[@]}" <<'PY'
import json, os, sys
logs, z, lo, hi, layers, ranks, device, failed, out = sys.argv[1:10]
W = [int(w) for w in sys.argv[10:]]
lo, hi = int(lo), int(hi)
line = {"bench": "largest_gpt", "device": device, "ranks_sharing_gpu": int(ranks), "zero": int(z),
        "layers": int(layers), "widths_tried": W}
if lo >= 0:
    ok = json.load(open(os.path.join(logs, "ok-%s-%d.json" % (z, W[lo]))))
    line.update(largest_width=W[lo], parameters=ok["parameters"], peak_gpu_mb_per_rank=ok.get("peak_gpu_mb_per_rank"),
                peak_rss_mb_per_rank=ok.get("peak_rss_mb_per_rank"), tokens_per_s=ok.get("tokens_per_s"))
else:
    line["largest_width"] = None
line["first_too_large"] = W[hi] if hi < len(W) else None
if failed:
    line["failed_width"] = int(failed)
print("zero %s: largest width %s (%s parameters, %s MiB peak device memory per rank); first too large: %s%s" % (
    z, line["largest_width"], line.get("parameters", "-"), line.get("peak_gpu_mb_per_rank", "-"),
    line["first_too_large"], "; stopped: width %s failed otherwise" % failed if failed else ""))
print(json.dumps(line))
if out:
    with open(out, "a") as f:
        f.write(json.dumps(line) + "\n")
PY
done
exit $status
