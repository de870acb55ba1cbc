#!/usr/bin/env bash
# elastic::Job's guarantees end to end, with the examples started the way users start them (real
# mpirun / edprun). One case per call; each waits for the event it needs (a file, a log line, the
# job's exit), never for an amount of time, so the speed of the machine does not matter.
#   guarantees.sh CASE BUILD_DIR WORK_DIR
# Cases:
#   threads       2 -> 1 -> 2 workers in place, unbound (mpirun --bind-to none) and bound (edprun):
#                 at every event the ranks' compute threads fit the cores (sum <= cores) and after
#                 the shrink the remaining rank has more threads than before
#   batch_range   {"global_batch": 8000} on a job started at 64 is refused naming the rule; the job
#                 trains on at 64 and exits 0
#   lock          a second job on a running job's checkpoint directory is refused naming it; after
#                 the first is SIGKILLed, a third takes the stale lock over and resumes
#   node_local    rank 1 sees other files behind the same checkpoint path (a private mount): refused
#                 at start naming both ranks' newest checkpoints, instead of hanging; sharded
#                 (--zero 1), the first commit fails naming the part rank 0 cannot see
#   failed_spawn  under plain mpirun, a grow beyond mpirun's slots without a checkpoint directory:
#                 3 attempts, then given up with a message; the job and mpirun end (rc 0)
#   complete      a finished job started again says so and reports its model's test accuracy
#   control_kind  a FIFO or a directory as the control file is reported, never blocks the job
set -uo pipefail
CASE=$1 BUILD=$(realpath "$2") WORK=$3
MLP=$BUILD/examples/fashion_mnist_mlp SEQ=$BUILD/tests/elastic/elastic_sequence EDPRUN=$BUILD/tools/edprun/edprun
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done' EXIT
fail() { echo "FAIL ($CASE): $*" >&2; for f in "$WORK"/*.err; do [ -f "$f" ] && { echo "--- $f" >&2; tr '\r' '\n' < "$f" | tail -20 >&2; }; done; exit 1; }
# Waits (bounded: a hang fails the test instead of CTest's timeout) until "$@" succeeds.
wait_for() { for _ in $(seq 1 1200); do "$@" && return 0; sleep 0.1; done; fail "timed out waiting for: $*"; }
ask() { echo "$2" > "$1.tmp" && mv "$1.tmp" "$1"; }

case "$CASE" in
threads)
  cores=$(nproc)
  [ "$cores" -ge 2 ] || { echo "one core: nothing to share"; exit 77; }
  check() {  # check EVENTS_FILE: the thread counts of each start/rescale event
    python3 - "$1" "$cores" <<'PY' || fail "thread counts (events in $1)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"threads"' in l]
cores = int(sys.argv[2])
print("threads per event:", [(e["event"], e["workers"], e["threads"]) for e in ev])
assert [e["workers"] for e in ev] == [2, 1, 2], "expected start at 2, shrink to 1, grow to 2"
for e in ev:
    assert len(e["threads"]) == e["workers"] and min(e["threads"]) >= 1, e
    assert sum(e["threads"]) <= cores, f"{e['threads']} threads on {cores} cores"
assert ev[1]["threads"][0] > ev[0]["threads"][0], "the rank that stayed did not take the freed cores"
PY
  }
  mkdir -p ra rb
  EDP_EVENTS_FILE=$WORK/a.jsonl mpirun --oversubscribe --bind-to none -np 2 "$SEQ" --plan 5:1,12:2 --settle-at 14 --record "$WORK/ra" \
    --limit 1000 --epochs 1 > a.out 2> a.err || fail "mpirun run"
  check "$WORK/a.jsonl"
  "$EDPRUN" --allow-run-as-root --oversubscribe -np 2 --control-file "$WORK/rb/control.json" -- \
    env EDP_EVENTS_FILE="$WORK/b.jsonl" "$SEQ" --plan 5:1,12:2 --settle-at 14 --record "$WORK/rb" --limit 1000 --epochs 1 \
    > b.out 2> b.err || fail "edprun run"
  check "$WORK/b.jsonl"
  ;;
batch_range)
  ask ctl.json '{"workers": 1, "global_batch": 8000}'
  "$MLP" --limit 4000 --epochs 1 --no-eval --control-file "$WORK/ctl.json" > a.out 2> a.err || fail "exit $?"
  grep -q 'refusing the rescale request in .*global batch 8000): a global batch of 8000 is larger than the job accepts (512: within 8x of the job.s first global batch 64' a.err ||
    fail "no refusal naming the rule"
  grep -q '"global_batch": 64' a.out || fail "the job did not keep its global batch"
  ;;
lock)
  "$MLP" --limit 640 --epochs 100000 --no-eval --checkpoint-dir "$WORK/ck" --checkpoint-every 5 > a.out 2> a.err &
  PIDS+=($!)
  # Any checkpoint: the rotation removes older ones, so a fast machine may never show step 5 when looked at.
  have_ckpt() { compgen -G "$WORK/ck/ckpt-*.edp" > /dev/null; }
  wait_for have_ckpt
  "$MLP" --limit 640 --epochs 1 --no-eval --checkpoint-dir "$WORK/ck" > b.out 2> b.err && fail "the second job ran"
  grep -q "checkpoint directory $WORK/ck is in use by job 'fashion_mnist_mlp' (pid ${PIDS[0]} on host" b.err ||
    fail "the refusal does not name the running job"
  kill -9 "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null
  "$MLP" --limit 640 --epochs 100000 --no-eval --checkpoint-dir "$WORK/ck" --stop-after-steps 1 > c.out 2> c.err
  [ $? = 3 ] || fail "the third job did not run"
  grep -q "taking over the lock of job 'fashion_mnist_mlp' (pid ${PIDS[0]}" c.err || fail "no take-over message"
  grep -q 'resumed from' c.err || fail "the third job did not resume"
  [ ! -e "$WORK/ck/lock" ] || fail "the lock was left behind"
  ;;
node_local)
  unshare -m true 2>/dev/null || { echo "no mount namespaces here (unshare -m)"; exit 77; }
  mkdir -p ck other
  "$MLP" --limit 640 --epochs 1 --no-eval --checkpoint-dir "$WORK/ck" --checkpoint-every 5 --stop-after-steps 7 \
    > a.out 2> a.err; [ $? = 3 ] || fail "the first run"
  # Rank 1 runs in its own mount namespace where the same path shows another (empty) directory.
  timeout 120 mpirun --oversubscribe -np 1 "$MLP" --limit 640 --epochs 1 --no-eval --checkpoint-dir "$WORK/ck" : \
    -np 1 unshare -m sh -c "mount --bind '$WORK/other' '$WORK/ck' && exec '$MLP' --limit 640 --epochs 1 --no-eval --checkpoint-dir '$WORK/ck'" \
    > b.out 2> b.err
  rc=$?
  [ $rc = 124 ] && fail "the job hung"
  [ $rc = 0 ] && fail "the job ran"
  grep -q "newest checkpoint in the checkpoint directory: 'ckpt-000000000005.edp, step 5, digest [0-9a-f]*' on rank 0; 'none' on rank 1" b.err ||
    fail "the error does not name what each rank found"
  # Sharded (--zero 1), every rank writes its part: rank 0 must see rank 1's, else the first commit
  # fails naming the part (its checkpoint would be unreadable on resume), not later, not silently.
  mkdir -p ck2 other2
  timeout 120 mpirun --oversubscribe -np 1 "$MLP" --limit 640 --epochs 1 --no-eval --zero 1 --checkpoint-dir "$WORK/ck2" \
    --checkpoint-every 5 : -np 1 unshare -m sh -c "mount --bind '$WORK/other2' '$WORK/ck2' && exec '$MLP' --limit 640 \
    --epochs 1 --no-eval --zero 1 --checkpoint-dir '$WORK/ck2' --checkpoint-every 5" > c.out 2> c.err
  rc=$?
  [ $rc = 124 ] && fail "the sharded job hung"
  [ $rc = 0 ] && fail "the sharded job ran with parts rank 0 cannot see"
  grep -q "rank 0 does not see the part rank 1 wrote .*shard-1-of-2.*needs a checkpoint directory every rank shares" c.err ||
    fail "the error does not name the part rank 0 cannot see"
  ls ck2 | grep -q '^ckpt-[0-9]*\.edp$' && fail "a checkpoint was written without its parts"
  ;;
failed_spawn)
  slots=$(mpirun -np 1 printenv OMPI_UNIVERSE_SIZE) || fail "mpirun"
  ask ctl.json "{\"workers\": $((slots + 1))}"
  timeout 120 mpirun -np 1 "$MLP" --limit 4000 --epochs 1 --no-eval --control-file "$WORK/ctl.json" > a.out 2> a.err
  rc=$?
  [ $rc = 124 ] && fail "the job or mpirun hung"
  [ $rc = 0 ] || fail "exit $rc"
  n=$(grep -c 'cannot grow in place' a.err)
  [ "$n" = 3 ] || fail "$n attempts to grow, expected 3"
  grep -q 'giving up on the request in .* after 3 failed attempts' a.err || fail "no give-up message"
  ;;
complete)
  "$MLP" --limit 640 --epochs 1 --checkpoint-dir "$WORK/ck" > a.out 2> a.err || fail "first run"
  "$MLP" --limit 640 --epochs 1 --checkpoint-dir "$WORK/ck" > b.out 2> b.err || fail "second run"
  grep -q 'the training is already complete (all 1 epoch(s), step 10)' b.err || fail "no 'already complete'"
  python3 - <<'PY' || fail "the reports differ"
import json
a = json.loads(open("a.out").read().strip().splitlines()[-1])
b = json.loads(open("b.out").read().strip().splitlines()[-1])
print("first run", a["test_acc"], "again", b)
assert b["already_complete"] is True and b["test_acc"] == a["test_acc"] and b["test_acc"] > 0
PY
  ;;
control_kind)
  mkfifo fifo && mkdir dir
  for c in fifo dir; do
    timeout 120 "$MLP" --limit 640 --epochs 1 --no-eval --control-file "$WORK/$c" > $c.out 2> $c.err || fail "$c: exit $?"
  done
  grep -q "control file $WORK/fifo: a FIFO" fifo.err || fail "the FIFO is not named"
  grep -q "control file $WORK/dir: a directory" dir.err || fail "the directory is not named"
  ;;
*) echo "unknown case $CASE" >&2; exit 2 ;;
esac
echo "ok: $CASE"
