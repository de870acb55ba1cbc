#!/usr/bin/env bash
# What a rescale of an elastic job is for: the job's speed over the rest of its run after the
# change, against the same job started at the new size, in one run, pair by pair.
#
#   bench/rescale.sh [--reps N] [--models "cnn mlp gpt gpt-example"] [--cases "grow1-2 grow2-4 shrink2-1 restart1-2"]
#                    [--load quiet|busy] [--hosts] [--gpu] [--zero 0|1|2] [--out FILE.jsonl]
#
# A case FROM-TO starts the job under edprun at FROM workers with its control file asking for TO
# (so the change is asked for at its first step and the job runs the rest at TO); growN-M and
# shrinkN-M change in place (the default rescale mode, auto), restartN-M by restart
# (EDP_RESCALE_MODE=restart: a checkpoint, edprun starts the job again at TO). Its pair is the
# same job started at TO. Both run to their end; the rate is samples/s (the GPT: tokens/s) from the
# end of the first step at TO to the end of the training, from the job's events (EDP_EVENTS_FILE:
# the rescale and end events, and for the job started at TO its first rate window, which begins at
# the end of its first step). The two jobs of a pair run one after the other, in alternating order
# from repetition to repetition, and the ratio is taken pair by pair; the table gives every
# ratio and the median. Also the change's pause (request to the end of the first step at TO) and
# visible pause (what the training lost: a grow's new ranks start while the job trains on).
#
#   --load busy   runs stress-ng --cpu <cores> beside the jobs (Debian's stress-ng)
#   --hosts       one more case on the namespace test cluster (scripts/testcluster.sh, root): the
#                 job on a hostfile of 3 hosts x 1 slot grows 1 -> 3 in place (its new ranks on
#                 the other two hosts), against a job started on the 3 hosts; one thread per rank
#                 (the hosts share this machine's cores). Brings the cluster up if it is not, and
#                 down again at the end if it did.
#   --gpu         every rank on GPU 0 (--device cuda), the ranks sharing it under edprun's MPS daemon
#                 (--ranks-per-gpu, --mps on): a spawned rank joins the running daemon and the
#                 device communicator (the colocated one) is rebuilt for the grown job
#   --zero 1      the optimizer state sharded over the ranks (the examples' --zero 1): an in-place change
#                 moves it rank to rank; the table's reshard_s is that move (the rescale event's phase);
#                 --zero 2: the gradients sharded too (the same move)
#   --out FILE    appends one JSON line per pair to FILE
# Models: cnn, mlp, gpt (a small GPT, 2 layers, d 128), gpt-example (gpt_text at its default size:
# 4 layers, d 256, context 128, 3.3M parameters; 100 steps).
# The build: scripts/build.sh's build/, or EDP_BUILD_DIR.
# Compute threads follow the ranks on a host (no --threads), as a user runs the examples; where a
# case has more ranks than the host has cores (grow2-4 on 2 cores), both jobs of the pair run
# under edprun --cores-per-host <ranks> --bind-to none (edprun allows no more ranks than cores). Needs the
# build of scripts/build.sh, python3, and for the GPT the corpus (scripts/prepare_text_corpus.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=5 MODELS="cnn mlp gpt" CASES="grow1-2 grow2-4 shrink2-1 restart1-2" LOAD=quiet HOSTS=0 GPU=0 ZERO=0 OUT=""
usage() { echo "usage: $0 [--reps N] [--models \"cnn mlp gpt gpt-example\"] [--cases \"grow1-2 ...\"] [--load quiet|busy] [--hosts] [--gpu] [--zero 0|1|2] [--out FILE]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --load) LOAD=$2; shift 2 ;;
    --hosts) HOSTS=1; shift ;;
    --gpu) GPU=1; shift ;;
    --zero) ZERO=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) usage ;;
  esac
done
case "$LOAD" in quiet|busy) ;; *) usage ;; esac
case "$ZERO" in 0|1|2) ;; *) usage ;; esac
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || usage
BUILD=$(cd "${EDP_BUILD_DIR:-build}" 2>/dev/null && pwd) || { echo "$0: no build directory ${EDP_BUILD_DIR:-build}: run scripts/build.sh first" >&2; exit 1; }
EDPRUN=$BUILD/tools/edprun/edprun
TC=$PWD/scripts/testcluster.sh
[ -x "$EDPRUN" ] || { echo "$0: no $EDPRUN: run scripts/build.sh first" >&2; exit 1; }
ROOT=(); [ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The hosts of the test cluster see the source tree but not this machine's /tmp.
if [ "$HOSTS" = 1 ]; then W=$(mktemp -d "$BUILD/rescale-bench.XXXXXX"); else W=$(mktemp -d /tmp/edp-rescale.XXXXXX); fi
STRESS="" CLUSTER_UP=0
cleanup() {
  [ -n "$STRESS" ] && kill "$STRESS" 2>/dev/null && wait "$STRESS" 2>/dev/null
  [ "$CLUSTER_UP" = 1 ] && "$TC" down >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

model_args() {  # the program and its arguments: about 5 s of training at 2 workers on 2 quiet cores
  if [ "$GPU" = 1 ]; then  # on a GPU the same runs end before a new rank has started (~1 s)
    case "$1" in
      cnn) echo "$BUILD/examples/fashion_mnist_cnn --epochs 4 --no-eval"; return ;;
      gpt) echo "$BUILD/examples/gpt_text --data $PWD/.cache/corpus --layers 6 --dim 512 --heads 8 --context 256 --batch 16 --steps 400 --no-progress --sample-tokens 0 --eval-windows 16"; return ;;
    esac
  fi
  case "$1" in
    mlp) echo "$BUILD/examples/fashion_mnist_mlp --limit 30000 --epochs 20 --no-eval" ;;
    cnn) echo "$BUILD/examples/fashion_mnist_cnn --limit 10000 --epochs 4 --no-eval" ;;
    gpt) echo "$BUILD/examples/gpt_text --data $PWD/.cache/corpus --layers 2 --dim 128 --heads 4 --context 64 --batch 8 --steps 400 --no-progress --sample-tokens 0 --eval-windows 16" ;;
    gpt-example) echo "$BUILD/examples/gpt_text --data $PWD/.cache/corpus --batch 8 --steps 100 --no-progress --sample-tokens 0 --eval-windows 16" ;;
    *) echo "$0: unknown model '$1' (cnn, mlp, gpt, gpt-example)" >&2; exit 2 ;;
  esac
}
[[ " $MODELS " == *" gpt"* ]] && [ ! -f .cache/corpus/train.tok ] && { echo "$0: the GPT needs scripts/prepare_text_corpus.sh first" >&2; exit 1; }

# run_job DIR FROM TO HOSTFILE [VAR=VALUE...] -- MODEL ARGS: one job started at FROM whose control
# file asks for TO, run to its end.
run_job() {
  local d=$1 from=$2 to=$3 hostfile=$4; shift 4
  local envs=() place=(--oversubscribe) pre=()
  # More ranks than cores (grow2-4 on 2 cores): edprun plans with as many cores as ranks, unbound.
  local most=$((from > to ? from : to))
  if [ "$GPU" = 1 ]; then
    place+=(--gpus 0 --ranks-per-gpu "$most" --mps on)
    set -- "$@" --device cuda
  elif [ "$most" -gt "$(nproc)" ]; then
    place+=(--cores-per-host "$most" --bind-to none)
  fi
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  rm -rf "$d"; mkdir -p "$d"
  echo "{\"workers\": $to}" > "$d/control.json"
  if [ -n "$hostfile" ]; then place=(--hostfile "$hostfile"); pre=("$TC" exec edp-h1 --); fi
  if ! "${pre[@]}" env "${envs[@]}" "$EDPRUN" "${ROOT[@]}" "${place[@]}" -np "$from" --control-file "$d/control.json" -- \
       env EDP_EVENTS_FILE="$d/events.jsonl" "$@" --checkpoint-dir "$d/ck" > "$d/out.txt" 2> "$d/err.txt"; then
    echo "$0: the job failed:" >&2; tail -n 30 "$d/err.txt" >&2; exit 1
  fi
}

# report MODEL CASE FROM TO CHANGED_DIR FRESH_DIR UNIT_SCALE: one pair's line (and its JSON).
report() {
  python3 - "$@" "$LOAD" "$OUT" <<'PY'
import json, sys
model, case, frm, to, a, b, scale, zero, load, out = sys.argv[1:11]
frm, to, scale = int(frm), int(to), float(scale)
def events(d):
    return [json.loads(l) for l in open(f"{d}/events.jsonl") if l.strip()]
def end(ev):
    e = [x for x in ev if x["event"] == "end"]
    if not e: sys.exit(f"rescale.sh: no end event in {ev}")
    return e[-1]
ea, eb = events(a), events(b)
resc = [x for x in ea if x["event"] == "rescale"]
if not resc or resc[0]["workers"] != to: sys.exit(f"rescale.sh: {model} {case}: no rescale to {to} in {a}/events.jsonl")
r, ena = resc[0], end(ea)
after = (ena["samples"] - r["samples"]) / (ena["t"] - r["t"])
rate = next(x for x in eb if x["event"] == "rate")   # the window from the end of the first step
t0 = rate["t"] - rate["steps"] * rate["global_batch"] / rate["samples_per_s"]
s0 = rate["samples"] - rate["steps"] * rate["global_batch"]
enb = end(eb)
fresh = (enb["samples"] - s0) / (enb["t"] - t0)
row = {"bench": "rescale", "model": model, "case": case, "mode": r["mode"], "from": frm, "to": to, "load": load,
       "zero": int(zero), "reshard_s": round(r.get("phases", {}).get("reshard_s", 0), 4),
       "pause_s": round(r["pause_s"], 4), "visible_s": round(r.get("visible_s", r["pause_s"]), 4),
       "rate_after": round(after * scale, 1), "rate_fresh": round(fresh * scale, 1),
       "after_vs_fresh": round(after / fresh, 3), "threads": r.get("threads"),
       "rest_s": round(ena["t"] - r["t"], 2)}
print(f"{model:<5} {case:<11} {r['mode']:<9} {row['reshard_s']:9.4f} {row['pause_s']:8.3f} {row['visible_s']:9.3f} {row['rate_after']:11.0f} "
      f"{row['rate_fresh']:11.0f} {row['after_vs_fresh']:6.3f}  rest {row['rest_s']:.1f} s, threads {row.get('threads')}")
if out:
    with open(out, "a") as f: f.write(json.dumps(row) + "\n")
print("JSON " + json.dumps(row))
PY
}

if [ "$LOAD" = busy ]; then
  command -v stress-ng >/dev/null || { echo "$0: --load busy needs stress-ng (apt-get install stress-ng)" >&2; exit 1; }
  stress-ng --cpu "$(nproc)" --timeout 0 >/dev/null 2>&1 &
  STRESS=$!
fi
HOSTFILE=""
if [ "$HOSTS" = 1 ]; then
  if ! "$TC" status >/dev/null 2>&1; then "$TC" up 3 >/dev/null; CLUSTER_UP=1; fi
  HOSTFILE=$W/hosts1x3
  "$TC" hostfile 1 3 > "$HOSTFILE"
fi

DEVICE=cpu
[ "$GPU" = 1 ] && DEVICE="gpu: $( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo none) | head -1)"
echo "# bench/rescale.sh: $(nproc) cores, $(python3 -c 'import platform; print(platform.processor() or platform.machine())'), $DEVICE, load $LOAD, zero $ZERO, $(mpirun --version 2>/dev/null | head -1), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
printf "%-5s %-11s %-9s %9s %8s %9s %11s %11s %6s\n" model case mode reshard_s pause_s visible_s rate_after rate_fresh ratio
SUMMARY=$W/summary.jsonl
for m in $MODELS; do
  read -r -a args <<<"$(model_args "$m")"
  [ "$ZERO" != 0 ] && args+=(--zero "$ZERO")
  scale=1; [ "$m" = gpt ] && scale=64  # tokens per window
  [ "$m" = gpt-example ] && scale=128
  cases=$CASES
  [ "$HOSTS" = 1 ] && cases="$cases hosts1-3"
  for c in $cases; do
    kind=${c%%[0-9]*}
    fromto=${c#"$kind"}
    from=${fromto%-*} to=${fromto#*-}
    envs=() hf="" targs=()
    [ "$kind" = restart ] && envs+=(EDP_RESCALE_MODE=restart)
    [ "$kind" = hosts ] && hf=$HOSTFILE && targs=(--threads 1)
    for r in $(seq 1 "$REPS"); do
      # Alternate the order from repetition to repetition (a drifting machine favours neither).
      for which in $([ $((r % 2)) = 1 ] && echo "a b" || echo "b a"); do
        if [ "$which" = a ]; then
          run_job "$W/a" "$from" "$to" "$hf" "${envs[@]}" -- "${args[@]}" "${targs[@]}"
        else
          run_job "$W/b" "$to" "$to" "$hf" -- "${args[@]}" "${targs[@]}"
        fi
      done
      report "$m" "$c" "$from" "$to" "$W/a" "$W/b" "$scale" "$ZERO" | tee -a "$W/lines" | grep -v '^JSON '
      grep '^JSON ' "$W/lines" | tail -n 1 | cut -c6- >> "$SUMMARY"
    done
  done
done
echo
echo "# median after/fresh per model and case (every pair's ratio in order), $REPS run(s) each"
python3 - "$SUMMARY" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = []
for r in rows:
    k = (r["model"], r["case"])
    if k not in keys: keys.append(k)
for k in keys:
    rs = [r for r in rows if (r["model"], r["case"]) == k]
    ratios = [r["after_vs_fresh"] for r in rs]
    vis = [r["visible_s"] for r in rs]
    print(f"{k[0]:<5} {k[1]:<11} median {statistics.median(ratios):.3f}  ({', '.join(f'{x:.2f}' for x in ratios)})  "
          f"visible pause median {statistics.median(vis):.3f} s")
    print("JSON " + json.dumps({"bench": "rescale_summary", "model": k[0], "case": k[1], "load": rs[0]["load"],
                                "zero": rs[0]["zero"], "median_reshard_s": statistics.median(r["reshard_s"] for r in rs),
                                "median_after_vs_fresh": statistics.median(ratios), "ratios": ratios,
                                "median_visible_s": statistics.median(vis)}))
PY
