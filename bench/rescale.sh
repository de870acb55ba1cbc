#!/usr/bin/env bash
# Rescale of an elastic job (elastic::Job): what it costs and what it is for, in one run.
#   in place   edprun -np 2 runs a Fashion-MNIST example with a control file; the script asks for 1
#              worker (a shrink: the communicator is split, rank 1 leaves, rank 0 takes its cores),
#              waits for the job's settled speed at 1, then asks for 2 again (a grow: MPI_Comm_spawn
#              starts a rank, which loads the data, builds the model and receives the state).
#   fresh      the same job started at 1 and at 2 workers: the speed a rescale should reach.
#   by restart edprun -np 2 with EDP_RESCALE_MODE=restart, the control file asking for 1 worker:
#              checkpoint, exit 75, edprun starts the job again on 1 rank, which resumes.
# The pause is the wall time from rank 0 reading the request to the end of the first optimizer
# step at the new size (the job's membership events, EDP_EVENTS_FILE); in-place pauses are split
# into the job's phases (split / background / state / rebuild / first step). The visible pause is
# what the training lost: a grow starts its new ranks in the background while the job trains on,
# so only its join (state, rebuild) and first step count, less a typical step. The speed after a change
# is the job's "rate" event: samples/s over the 20 steps after the first one at the new size; it is
# compared with the rate of a job started at that size (after_vs_fresh). Compute threads follow the
# ranks on the host (no --threads), as a user runs it. Prints a table and one JSON line per row.
#   bench/rescale.sh [--reps N] [--models "cnn mlp"]
# Needs the build of scripts/build.sh (build/examples, build/tools/edprun) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=3 MODELS="cnn mlp"
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--models \"cnn mlp\"]" >&2; exit 2 ;;
  esac
done
EDPRUN=build/tools/edprun/edprun
ROOT=(); [ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d /tmp/edp-rescale.XXXXXX)
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT

ask() {  # ask WORKERS: replace the control file atomically
  echo "{\"workers\": $1}" > "$W/control.tmp" && mv "$W/control.tmp" "$W/control.json"
}
report() {  # report MODEL KIND EVENTS_FILE N FRESH_RATE: the N-th rescale of the file and the rate after it
  python3 - "$@" <<'PY'
import json, sys
model, kind, path, n, fresh = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
ev = [json.loads(l) for l in open(path)]
idx = [i for i, e in enumerate(ev) if e["event"] == "rescale"][n - 1]
e = ev[idx]
after = next((x["samples_per_s"] for x in ev[idx + 1:] if x["event"] == "rate"), float("nan"))
ph = e.get("phases", {})
cols = " ".join(f"{k[:-2]}={v:.3f}" for k, v in ph.items())
ratio = after / fresh if fresh > 0 else float("nan")
print(f"{'fashion_mnist_' + model:<18} {kind:<9} {e['from_workers']}->{e['workers']:<3} {e['pause_s']:8.3f} {e.get('visible_s', float('nan')):9.3f} "
      f"{after:10.0f} {fresh:10.0f} {ratio:6.2f}  threads={e.get('threads')}  {cols}")
print("JSON " + json.dumps({"bench": "rescale", "model": "fashion_mnist_" + model, "kind": kind,
                            "from": e["from_workers"], "to": e["workers"], "pause_s": round(e["pause_s"], 4),
                            "visible_s": round(e.get("visible_s", float("nan")), 4),
                            "rate_after": round(after, 1), "rate_fresh": round(fresh, 1),
                            "after_vs_fresh": round(ratio, 3), "threads": e.get("threads"),
                            "phases": {k: round(v, 4) for k, v in ph.items()}}))
PY
}
first_rate() {  # first_rate EVENTS_FILE: samples/s of the first "rate" event
  python3 -c 'import json,sys; print(next(json.loads(l)["samples_per_s"] for l in open(sys.argv[1]) if "\"rate\"" in l))' "$1"
}
count() { local n; n=$(grep -c "\"$2\"" "$1" 2>/dev/null); echo "${n:-0}"; }
wait_count() {  # wait_count FILE EVENT N: until the events file has N such lines (or the job ended)
  for _ in $(seq 1 1200); do
    [ "$(count "$1" "$2")" -ge "$3" ] && return 0
    kill -0 "$PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
start_job() {  # start_job MODEL WORKERS EVENTS_FILE [edprun/env args...]: a long job, in the background
  local m=$1 np=$2 ev=$3; shift 3
  rm -rf "$W/ckpt"
  "$EDPRUN" "${ROOT[@]}" --oversubscribe -np "$np" --control-file "$W/control.json" -- \
    env EDP_EVENTS_FILE="$ev" "$@" "build/examples/fashion_mnist_$m" --epochs 20 --limit 12000 --no-eval \
    --checkpoint-dir "$W/ckpt" \
    > "$W/out.txt" 2> "$W/err.txt" &
  PID=$!
}
stop_job() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; PID=""; }

printf "%-18s %-9s %-6s %8s %9s %10s %10s %6s  %s\n" model kind "from->to" pause_s visible_s rate_after rate_fresh ratio "threads, phases (s)"
for m in $MODELS; do
  for r in $(seq 1 "$REPS"); do
    # The speed of a job started at 1 and at 2 workers.
    declare -A fresh=()
    for np in 1 2; do
      rm -f "$W/ev.jsonl"; ask "$np"
      start_job "$m" "$np" "$W/ev.jsonl"
      wait_count "$W/ev.jsonl" rate 1 || { cat "$W/err.txt" >&2; exit 1; }
      fresh[$np]=$(first_rate "$W/ev.jsonl")
      stop_job
    done
    # In place: shrink 2 -> 1, then grow 1 -> 2, in one job, each once the speed has settled.
    rm -f "$W/ev.jsonl"; ask 2
    start_job "$m" 2 "$W/ev.jsonl"
    wait_count "$W/ev.jsonl" rate 1 || { cat "$W/err.txt" >&2; exit 1; }
    ask 1
    wait_count "$W/ev.jsonl" rate 2 || { cat "$W/err.txt" >&2; exit 1; }
    ask 2
    wait_count "$W/ev.jsonl" rate 3 || { cat "$W/err.txt" >&2; exit 1; }
    stop_job
    report "$m" in_place "$W/ev.jsonl" 1 "${fresh[1]}"
    report "$m" in_place "$W/ev.jsonl" 2 "${fresh[2]}"
    # By restart: 2 -> 1 through edprun.
    rm -f "$W/ev.jsonl"; ask 2
    start_job "$m" 2 "$W/ev.jsonl" EDP_RESCALE_MODE=restart
    wait_count "$W/ev.jsonl" rate 1 || { cat "$W/err.txt" >&2; exit 1; }
    ask 1
    wait_count "$W/ev.jsonl" rate 2 || { cat "$W/err.txt" >&2; exit 1; }
    stop_job
    report "$m" restart "$W/ev.jsonl" 1 "${fresh[1]}"
  done
done
