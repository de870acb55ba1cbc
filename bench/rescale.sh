#!/usr/bin/env bash
# Rescale cost of an elastic job (elastic::Job), measured the way it happens, in one run:
#   in place   mpirun -np 2 runs a Fashion-MNIST example with a control file; the script asks
#              for 1 worker (a shrink: the communicator is split, rank 1 leaves), waits for the
#              job's event, then asks for 2 again (a grow: MPI_Comm_spawn starts a rank, which
#              loads the data, builds the model and receives the state by broadcast).
#   by restart edprun -np 2 with EDP_RESCALE_MODE=restart, the control file asking for 1 worker:
#              checkpoint, exit 75, edprun starts the job again on 1 rank, which resumes.
# The pause is the wall time from rank 0 reading the request to the end of the first optimizer
# step at the new size (the job's membership events, EDP_EVENTS_FILE); in-place pauses are split
# into the job's phases (split / spawn / state / rebuild / first step). Prints a table and one
# JSON line per measurement.
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
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$W"' EXIT

ask() {  # ask WORKERS: replace the control file atomically
  echo "{\"workers\": $1}" > "$W/control.tmp" && mv "$W/control.tmp" "$W/control.json"
}
wait_events() {  # wait_events N: until the events file has N rescale lines (or the job ended)
  for _ in $(seq 1 600); do
    [ "$(grep -c '"rescale"' "$W/events.jsonl" 2>/dev/null || true)" -ge "$1" ] && return 0
    kill -0 "$PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
report() {  # report MODEL KIND EVENT_JSON
  python3 - "$@" <<'PY'
import json, sys
model, kind, line = sys.argv[1], sys.argv[2], sys.argv[3]
e = json.loads(line)
ph = e.get("phases", {})
cols = " ".join(f"{k[:-2]}={v:.3f}" for k, v in ph.items())
print(f"{'fashion_mnist_' + model:<18} {kind:<10} {e['from_workers']}->{e['workers']:<3} {e['pause_s']:8.3f}  {cols}")
print("JSON " + json.dumps({"bench": "rescale", "model": "fashion_mnist_" + model, "kind": kind,
                            "from": e["from_workers"], "to": e["workers"], "pause_s": round(e["pause_s"], 4),
                            "phases": {k: round(v, 4) for k, v in ph.items()}}))
PY
}

printf "%-18s %-10s %-6s %8s  %s\n" model kind "from->to" pause_s "phases (s)"
for m in $MODELS; do
  limit=60000 epochs=5; [ "$m" = cnn ] && limit=12000 epochs=1  # long enough for both requests
  for r in $(seq 1 "$REPS"); do
    # In place: shrink 2 -> 1, then grow 1 -> 2, in one job.
    rm -f "$W/events.jsonl"; ask 2
    EDP_EVENTS_FILE="$W/events.jsonl" mpirun --oversubscribe -np 2 "build/examples/fashion_mnist_$m" \
      --epochs $epochs --limit $limit --threads 1 --no-eval --control-file "$W/control.json" \
      > "$W/out.txt" 2> "$W/err.txt" &
    PID=$!
    until grep -q '"start"' "$W/events.jsonl" 2>/dev/null; do sleep 0.1; done
    sleep 1; ask 1
    wait_events 1 || { cat "$W/err.txt" >&2; exit 1; }
    sleep 1; ask 2
    wait_events 2 || { cat "$W/err.txt" >&2; exit 1; }
    wait "$PID" || { cat "$W/err.txt" >&2; exit 1; }
    PID=""
    report "$m" in_place "$(grep '"rescale"' "$W/events.jsonl" | sed -n 1p)"
    report "$m" in_place "$(grep '"rescale"' "$W/events.jsonl" | sed -n 2p)"
    # By restart: 2 -> 1 through edprun.
    rm -rf "$W/events.jsonl" "$W/ckpt"; ask 1
    EDP_RESCALE_MODE=restart EDP_EVENTS_FILE="$W/events.jsonl" "$EDPRUN" "${ROOT[@]}" --oversubscribe -np 2 \
      --control-file "$W/control.json" -- "build/examples/fashion_mnist_$m" --epochs 1 --limit 4000 --threads 1 \
      --no-eval --checkpoint-dir "$W/ckpt" --control-every 20 > "$W/out.txt" 2> "$W/err.txt" \
      || { cat "$W/err.txt" >&2; exit 1; }
    ev=$( (grep '"rescale"' "$W/events.jsonl" 2>/dev/null || true) | sed -n 1p)
    if [ -z "$ev" ]; then  # an edprun that points EDP_EVENTS_FILE at its job directory: its log line
      p=$(sed -n 's/.*first step at 1 worker(s) done, \([0-9.e-]*\) s after the request (by restart).*/\1/p' "$W/err.txt")
      ev="{\"from_workers\": 2, \"workers\": 1, \"pause_s\": $p}"
    fi
    report "$m" restart "$ev"
  done
done
