#!/usr/bin/env bash
# Preemption by the live autoscaler, with real processes: one CPU slot, policy dp. Job A
# (preemptible, weight 1, checkpoints every 10 steps) runs; job B (weight 10, not preemptible)
# arrives. Checks:
#   - the plan stops A for B (a "stop" in decisions.jsonl), B runs and ends "done";
#   - A is queued again, restarts after B, resumes from its last checkpoint (its log says
#     "resumed from ... step N" with N > 0: the work before that checkpoint is not redone) and
#     ends "done" with all its samples (samples_done = samples_total);
#   - A started exactly twice (its own events), nothing is left running or behind.
# usage: live_preempt.sh BUILD_DIR
set -euo pipefail
build=$1
as="$build/tools/edp-autoscale/edp-autoscale"
cnn="$build/examples/fashion_mnist_cnn"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
work=$(mktemp -d /tmp/edp-preempt-test.XXXXXX)
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
root="$work/root"
serve_pid=""
fail() { echo "FAIL: $*" >&2; echo "--- controller log:" >&2; cat "$work/serve.log" >&2 || true; exit 1; }
cleanup() {
  [[ -n "$serve_pid" ]] && kill -9 "$serve_pid" 2>/dev/null || true
  pkill -9 -f "$root/jobs" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

spec() {  # name limit weight preemptible
  cat <<JSON
{"name": "$1", "command": ["$cnn", "--limit", "$2", "--epochs", "2", "--batch", "64", "--threads", "1",
  "--no-eval", "--checkpoint-dir", "{job_dir}/ckpt", "--checkpoint-every", "10"],
 "min_workers": 1, "max_workers": 1, "workers": 1, "min_batch": 64, "max_batch": 64, "batch": 64,
 "weight": $3, "preemptible": $4, "max_restarts": 0}
JSON
}
field() { "$as" status --root "$root" --json | python3 -c '
import json, sys
j = [j for j in json.load(sys.stdin)["jobs"] if j["id"] == sys.argv[1]][0]
print(j.get(sys.argv[2], ""))' "$1" "$2"; }

"$as" serve --root "$root" --slots 1 --slot-kind cpu --policy dp --replan 2 --tick 0.1 > "$work/serve.log" 2>&1 &
serve_pid=$!
spec a 6000 1 true > "$work/a.json"
spec b 3000 10 false > "$work/b.json"
ida=$("$as" submit --root "$root" "$work/a.json")
# B arrives once A has committed a checkpoint (step 10 of 94), so that the preemption has one to
# resume from.
for i in $(seq 1 120); do
  ls "$root/jobs/$ida/ckpt/"*.edp > /dev/null 2>&1 && break
  kill -0 "$serve_pid" || fail "the controller died"
  sleep 0.5
done
ls "$root/jobs/$ida/ckpt/"*.edp > /dev/null 2>&1 || fail "job A wrote no checkpoint in 60 s"
idb=$("$as" submit --root "$root" "$work/b.json")
for i in $(seq 1 240); do
  sa=$(field "$ida" state); sb=$(field "$idb" state)
  [[ "$sa" =~ ^(done|failed|cancelled)$ && "$sb" =~ ^(done|failed|cancelled)$ ]] && break
  kill -0 "$serve_pid" || fail "the controller died"
  sleep 0.5
done
"$as" status --root "$root"
kill "$serve_pid"; wait "$serve_pid" || true; serve_pid=""

python3 - "$root" "$ida" "$idb" <<'PY' || fail "checks failed"
import json, os, re, sys
root, a, b = sys.argv[1:]
jobs = {j["id"]: j for j in json.load(open(os.path.join(root, "jobs.json")))["jobs"]}
for i in (a, b):
    assert jobs[i]["state"] == "done", f"{i}: {jobs[i]['state']} {jobs[i].get('error')}"
plans = [json.loads(l) for l in open(os.path.join(root, "decisions.jsonl"))]
stops = [p for pl in plans for p in pl["jobs"] if p["job"] == a and p["action"] == "stop"]
assert stops, "A was never preempted"
ev = [json.loads(l) for l in open(os.path.join(root, "jobs", a, "events.jsonl"))]
starts = sum(e["event"] == "start" for e in ev)
assert starts == 2, f"A started {starts} times, expected 2 (before and after the preemption)"
log = open(os.path.join(root, "jobs", a, "log")).read()
m = re.search(r"resumed from \S+: step (\d+)", log)
assert m and int(m.group(1)) > 0, "A did not resume from a checkpoint after its preemption"
st = json.load(open(os.path.join(root, "jobs", a, "status.json")))
assert st["samples_done"] == st["samples_total"] == 12000, f"A's status: {st}"
print(f"ok: A preempted ({stops[0]['reason']}), resumed at step {m.group(1)}, done; B done")
PY
sleep 1
left=$(pgrep -f "$root/jobs" || true)
[[ -z "$left" ]] || fail "processes left: $left"
[[ -z "$(ls -A "$TMPDIR")" ]] || fail "left in TMPDIR: $(ls -A "$TMPDIR")"
echo PASS
