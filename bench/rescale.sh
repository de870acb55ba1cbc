#!/usr/bin/env bash
# Rescale cost of an elastic job, measured the way it happens: edprun runs a Fashion-MNIST
# example on FROM ranks with a control file asking for TO ranks; at step 20 rank 0 notices, the
# job commits a checkpoint and exits 75, edprun starts it again on TO ranks and it resumes. The
# pause is the wall time from the request being noticed to the first optimizer step done at the
# new size, split into "restart" (checkpoint write, exit, mpirun and MPI start, data load, model
# build, checkpoint restore) and "first step". Prints a table and one JSON line per case.
#   bench/rescale.sh [--reps N] [--models "mlp cnn"] [--from 2] [--to 1]
# Needs the build of scripts/build.sh (build/examples, build/tools/edprun).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=3 MODELS="mlp cnn" FROM=2 TO=1
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --from) FROM=$2; shift 2 ;;
    --to) TO=$2; shift 2 ;;
    *) echo "usage: $0 [--reps N] [--models \"mlp cnn\"] [--from N] [--to N]" >&2; exit 2 ;;
  esac
done
EDPRUN=build/tools/edprun/edprun
ROOT=(); [ "$(id -u)" = 0 ] && ROOT=(--allow-run-as-root)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d /tmp/edp-rescale.XXXXXX)
trap 'rm -rf "$W"' EXIT
printf "%-18s %4s %6s %10s %10s %12s %10s\n" model from->to rep restart_s first_s pause_s ckpt_MiB
for m in $MODELS; do
  for r in $(seq 1 "$REPS"); do
    rm -rf "$W/ckpt"
    echo "{\"workers\": $TO}" > "$W/control.json"
    "$EDPRUN" "${ROOT[@]}" --oversubscribe -np "$FROM" --control-file "$W/control.json" -- \
      "build/examples/fashion_mnist_$m" --epochs 1 --limit 4000 --no-eval --checkpoint-dir "$W/ckpt" \
      --control-every 20 > "$W/out.txt" 2> "$W/err.txt" || { cat "$W/err.txt" >&2; exit 1; }
    t0=$(sed -n 's/.*rescale requested.*(t=\([0-9.]*\)).*/\1/p' "$W/err.txt")
    t1=$(sed -n 's/.*resumed from.*(t=\([0-9.]*\)).*/\1/p' "$W/err.txt")
    t2=$(sed -n 's/.*first step at the new size done (t=\([0-9.]*\)).*/\1/p' "$W/err.txt")
    mib=$(du -m "$(ls "$W"/ckpt/ckpt-000000000020.edp 2>/dev/null || ls "$W"/ckpt/*.edp | head -1)" | cut -f1)
    python3 - "$m" "$FROM" "$TO" "$r" "$t0" "$t1" "$t2" "$mib" <<'PY'
import json, sys
m, f, t, r, t0, t1, t2, mib = sys.argv[1:]
t0, t1, t2 = float(t0), float(t1), float(t2)
print(f"{'fashion_mnist_' + m:<18} {f + '->' + t:>6} {r:>4} {t1 - t0:10.3f} {t2 - t1:10.3f} {t2 - t0:12.3f} {mib:>10}")
print("JSON " + json.dumps({"bench": "rescale", "model": "fashion_mnist_" + m, "from": int(f), "to": int(t), "rep": int(r),
                            "restart_s": round(t1 - t0, 4), "first_step_s": round(t2 - t1, 4), "pause_s": round(t2 - t0, 4)}))
PY
  done
done
