#!/usr/bin/env bash
# Preemption by the live autoscaler, with real processes: one CPU slot, policy dp. Job A
# (preemptible, weight 1, checkpoints only at the end of an epoch) runs; job B (weight 10, not
# preemptible) arrives. Checks:
#   - the plan stops A for B (a "stop" in decisions.jsonl), B runs and ends "done";
#   - A stopped as its control file asked (exit 78, a "stop" event at step S > 0, no SIGTERM
#     needed), was queued again, restarted after B and resumed at exactly step S (its log says
#     "resumed from ... step S": no step lost or redone), and ends "done" with all its samples;
#   - A started exactly twice and stopped once (its own events), the controller counts one
#     preemption, nothing is left running or behind.
# usage: live_preempt.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/serve_lib.sh" "$1" preempt

spec() {  # name limit weight preemptible
  cat <<JSON
{"name": "$1", "command": ["$cnn", "--limit", "$2", "--epochs", "2", "--batch", "64", "--threads", "1",
  "--no-eval", "--checkpoint-dir", "{job_dir}/ckpt"],
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
# B arrives once A has taken 10 steps (of 94 in its first epoch): its only checkpoint will be the
# one it commits when it is asked to stop.
a_step() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("step", 0))' "$root/jobs/$ida/status.json" 2>/dev/null || echo 0; }
for i in $(seq 1 120); do
  (( $(a_step) >= 10 )) && break
  kill -0 "$serve_pid" || fail "the controller died"
  sleep 0.5
done
(( $(a_step) >= 10 )) || fail "job A did not reach step 10 in 60 s"
idb=$("$as" submit --root "$root" "$work/b.json")
for i in $(seq 1 240); do
  sa=$(field "$ida" state); sb=$(field "$idb" state)
  [[ "$sa" =~ ^(done|failed|cancelled)$ && "$sb" =~ ^(done|failed|cancelled)$ ]] && break
  kill -0 "$serve_pid" || fail "the controller died"
  sleep 0.5
done
"$as" status --root "$root"
kill "$serve_pid"; wait "$serve_pid" || true; serve_pid=""

python3 - "$root" "$ida" "$idb" "$work/serve.log" <<'PY' || fail "checks failed"
import json, os, re, sys
root, a, b = sys.argv[1:4]
jobs = {j["id"]: j for j in json.load(open(os.path.join(root, "jobs.json")))["jobs"]}
for i in (a, b):
    assert jobs[i]["state"] == "done", f"{i}: {jobs[i]['state']} {jobs[i].get('error')}"
plans = [json.loads(l) for l in open(os.path.join(root, "decisions.jsonl"))]
stops = [p for pl in plans for p in pl["jobs"] if p["job"] == a and p["action"] == "stop"]
assert stops, "A was never preempted"
ev = [json.loads(l) for l in open(os.path.join(root, "jobs", a, "events.jsonl"))]
starts = sum(e["event"] == "start" for e in ev)
assert starts == 2, f"A started {starts} times, expected 2 (before and after the preemption)"
stopped = [e for e in ev if e["event"] == "stop"]
assert len(stopped) == 1 and stopped[0]["step"] > 0, f"A's stop events: {stopped}"
log = open(os.path.join(root, "jobs", a, "log")).read()
assert "edprun: the job stopped as its control file asked (exit 78)" in log, "A did not stop with exit 78"
m = re.search(r"resumed from \S+: step (\d+)", log)
assert m, "A did not resume from a checkpoint after its preemption"
assert int(m.group(1)) == stopped[0]["step"], f"A stopped at step {stopped[0]['step']} but resumed at {m.group(1)}"
assert jobs[a]["preemptions"] == 1, f"A's preemptions: {jobs[a]['preemptions']}"
serve_log = open(sys.argv[4]).read()
assert "SIGTERM to edprun" not in serve_log, "A needed SIGTERM: it did not stop when asked"
st = json.load(open(os.path.join(root, "jobs", a, "status.json")))
assert st["samples_done"] == st["samples_total"] == 12000, f"A's status: {st}"
print(f"ok: A preempted ({stops[0]['reason']}), stopped and resumed at step {m.group(1)}, done; B done")
PY
sleep 1
left=$(pgrep -f "$root/jobs" || true)
[[ -z "$left" ]] || fail "processes left: $left"
[[ -z "$(ls -A "$TMPDIR")" ]] || fail "left in TMPDIR: $(ls -A "$TMPDIR")"
echo PASS
