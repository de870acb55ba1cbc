#!/usr/bin/env bash
# Independent jobs sharing one GPU: N copies of a training program run one after another, then
# all at once under one MPS daemon (started here with private pipe and log folders, stopped at
# the end, also on failure). Prints each run's JSON line and, last, one JSON line with the wall
# times and the aggregate speed-up of running them together.
#   bench/gpu/shared_gpu_jobs.sh PROGRAM [N=3] [program flags...]   (default flags: --device cuda --epochs 2 --no-eval)
set -euo pipefail
PROG=${1:?usage: shared_gpu_jobs.sh PROGRAM [N] [flags...]}
N=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
FLAGS=("$@"); [ ${#FLAGS[@]} -gt 0 ] || FLAGS=(--device cuda --epochs 2 --no-eval)
ROOT_FLAG=(); [ "$(id -u)" = 0 ] && ROOT_FLAG=(--allow-run-as-root)
# --bind-to none: each mpirun binds its one rank to core 0 by default (Open MPI, np <= 2), and
# jobs started by separate mpiruns would then all share that core.
run_one() { mpirun "${ROOT_FLAG[@]}" --oversubscribe --bind-to none -np 1 "$PROG" "${FLAGS[@]}" | tail -n 1; }
now() { date +%s.%N; }

t0=$(now)
for i in $(seq "$N"); do run_one; done
t1=$(now)

MPS=$(mktemp -d /tmp/edp-colloc-mps.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY=$MPS/pipe CUDA_MPS_LOG_DIRECTORY=$MPS/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
stop_mps() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true; sleep 1; rm -rf "$MPS"; }
trap stop_mps EXIT
nvidia-cuda-mps-control -d
t2=$(now)
pids=()
for i in $(seq "$N"); do run_one > "$MPS/job$i.txt" & pids+=($!); done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
t3=$(now)
cat "$MPS"/job*.txt
[ "$rc" = 0 ] || { echo "a collocated job failed" >&2; exit 1; }
python3 -c "import json,sys; s,c=float(sys.argv[2])-float(sys.argv[1]),float(sys.argv[4])-float(sys.argv[3]); \
print(json.dumps({'jobs': int(sys.argv[5]), 'sequential_s': round(s,2), 'collocated_mps_s': round(c,2), 'speedup': round(s/c,3)}))" \
  "$t0" "$t1" "$t2" "$t3" "$N"
