#!/usr/bin/env bash
# End-to-end test of the live autoscaler (edp-autoscale serve/submit/status/cancel) with real
# processes: a controller with 4 CPU slots, three Fashion-MNIST CNN jobs submitted at different
# times, the controller killed with SIGKILL in the middle and started again. Checks:
#   - every job ends "done" exactly once (none lost, none run twice: each job's events show as many
#     starts as the controller made), with sane accuracy (>= 0.70 after 2 epochs on 6000 samples;
#     the same run reaches ~0.85, so 0.70 only catches a broken training, not noise);
#   - the plan changed as jobs arrived and ended, and rescales really happened (in-place rescale
#     events in the jobs' own event files, not only in the controller's log);
#   - bad specs are refused at submit naming the field, leaving nothing in the inbox; a job that
#     crashes at start ends "failed" with its error; a cancelled queued job never runs;
#   - nothing is left: no process of the jobs, no edprun job directory.
# usage: live_e2e.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/serve_lib.sh" "$1" live
export EDP_MIN_STEP_MS=100  # a job's shortest run (4 workers, 47 steps of 256) is then 4.7 s

# --pause 0.1: these jobs train for some seconds; with the default pause (0.8 s) a grow predicted
# cautiously (docs/autoscaler.md §8) pays only for jobs with more than ~6 s left.
serve() {  # log name
  "$as" serve --root "$root" --slots 4 --slot-kind cpu --policy goodput --replan 3 --tick 0.1 --pause 0.1 > "$work/$1" 2>&1 &
  serve_pid=$!
}
spec() {  # name
  cat <<JSON
{"name": "$1", "command": ["$cnn", "--limit", "6000", "--epochs", "2", "--batch", "64", "--threads", "1",
  "--no-eval", "--checkpoint-dir", "{job_dir}/ckpt", "--control-every", "4"],
 "min_workers": 1, "max_workers": 4, "workers": 1, "min_batch": 64, "max_batch": 256, "batch": 64,
 "max_worker_batch": 128, "max_restarts": 1}
JSON
}
states() { "$as" status --root "$root" --json | python3 -c '
import json, sys
print(" ".join(j["id"] + ":" + j["state"] for j in json.load(sys.stdin)["jobs"]))'; }

# ---- bad input at submit: refused, naming the field, nothing left behind ----
mkdir -p "$root"
echo '{"name": "x", "command": ["/bin/true"], "min_batch": 64, "bogus": 1}' > "$work/bad1.json"
echo '{"name": "x", "command": ["/bin/true"], "min_batch": 64, "max_batch": 256, "batch": 100, "workers": 3, "max_workers": 4}' > "$work/bad2.json"
echo '{"name": "x", "command": [], "min_batch": 64}' > "$work/bad3.json"
echo 'not json' > "$work/bad4.json"
for b in 1 2 3 4; do
  set +e; out=$("$as" submit --root "$root" "$work/bad$b.json" 2>&1); rc=$?; set -e
  [[ $rc == 2 ]] || fail "bad spec $b: exit $rc, expected 2 ($out)"
  echo "refused as expected: $out"
done
grep -q "field 'bogus'" <<< "$("$as" submit --root "$root" "$work/bad1.json" 2>&1 || true)" || fail "unknown field not named"
grep -q "field 'batch'" <<< "$("$as" submit --root "$root" "$work/bad2.json" 2>&1 || true)" || fail "indivisible batch not named"
[[ -z "$(ls -A "$root/inbox" 2>/dev/null)" ]] || fail "a refused spec left something in the inbox"

# ---- the scenario ----
serve serve1.log
spec a > "$work/a.json"; spec b > "$work/b.json"; spec c > "$work/c.json"
echo '{"name": "crash", "command": ["'"$cnn"'", "--no-such-flag"], "min_batch": 64, "max_restarts": 0}' > "$work/crash.json"
ida=$("$as" submit --root "$root" "$work/a.json")
idx=$("$as" submit --root "$root" "$work/crash.json")
# Events, not time: B arrives once A has trained a little, the controller dies once B trains too.
step_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("step", 0))' "$root/jobs/$1/status.json" 2>/dev/null || echo 0; }
wait_for 120 "job A's first steps" eval '(( $(step_of "$ida") >= 5 ))'
idb=$("$as" submit --root "$root" "$work/b.json")
wait_for 120 "job B's first steps" eval '(( $(step_of "$idb") >= 1 ))'
# The controller dies hard mid-run; its jobs keep running.
kill -9 "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=""
echo "controller killed; jobs: $(states)"
idc=$("$as" submit --root "$root" "$work/c.json")   # queued while no controller runs
serve serve2.log
wait_for 60 "the restarted controller to re-adopt the running jobs" grep -q "re-adopted" "$work/serve2.log"
# A fourth job, cancelled before it can start? The cluster may have room; cancel at once.
idd=$("$as" submit --root "$root" "$work/c.json")
"$as" cancel --root "$root" "$idd" > /dev/null
for i in $(seq 1 300); do
  s=$(states)
  if ! grep -qE ":(queued|running|submitted)" <<< "$s"; then break; fi
  kill -0 "$serve_pid" || fail "the controller died"
  sleep 1
done
echo "final: $s"
"$as" status --root "$root"
kill "$serve_pid"; wait "$serve_pid" || true; serve_pid=""

python3 - "$root" "$ida" "$idb" "$idc" "$idx" "$idd" <<'PY'
import json, os, re, sys
root, a, b, c, x, d = sys.argv[1:]
jobs = {j["id"]: j for j in json.load(open(os.path.join(root, "jobs.json")))["jobs"]}
assert sorted(jobs) == sorted([a, b, c, x, d]), f"jobs lost or duplicated: {sorted(jobs)}"
for i in (a, b, c):
    j = jobs[i]
    assert j["state"] == "done", f"{i}: {j['state']} {j['error']}"
    ev = [json.loads(l) for l in open(os.path.join(root, "jobs", i, "events.jsonl"))]
    starts = sum(e["event"] == "start" for e in ev) - sum(e["event"] == "rescale" and e["mode"] == "restart" for e in ev)
    assert starts == j["starts"], f"{i}: {starts} process starts in its events, the controller made {j['starts']}"
    log = open(os.path.join(root, "jobs", i, "log"), errors="replace").read()
    acc = [float(v) for v in re.findall(r'"test_acc": ([0-9.]+)', log)]
    assert acc and acc[-1] >= 0.70, f"{i}: test accuracy {acc}"
    st = json.load(open(os.path.join(root, "jobs", i, "status.json")))
    assert st["state"] == "done" and st["samples_done"] == st["samples_total"] == 12000, f"{i}: status {st}"
resc = [e for i in (a, b, c) for e in map(json.loads, open(os.path.join(root, "jobs", i, "events.jsonl")))
        if e["event"] == "rescale"]
rescales = len(resc)
batches = sorted({e["global_batch"] for e in resc})
assert rescales >= 1, "no job was rescaled"
assert jobs[x]["state"] == "failed" and "no-such-flag" in jobs[x]["error"], f"crash job: {jobs[x]['state']} {jobs[x]['error']}"
assert jobs[d]["state"] == "cancelled", f"cancelled job: {jobs[d]['state']}"
plans = [json.loads(l) for l in open(os.path.join(root, "decisions.jsonl"))]
sizes = {tuple(sorted((p["job"], p["workers"]) for p in pl["jobs"] if p["action"] != "wait")) for pl in plans}
assert len(sizes) >= 3, f"the plan hardly changed: {sizes}"
print(f"ok: 3 jobs done, {rescales} rescale(s) in place (global batches after them: {batches}), {len(plans)} plans")
PY
sleep 1
left=$(pgrep -f "$root/jobs" || true)
[[ -z "$left" ]] || fail "processes left running: $(ps -o pid,args -p ${left//$'\n'/,})"
[[ -z "$(ls -A "$TMPDIR" | grep edprun || true)" ]] || fail "edprun job directories left in $TMPDIR: $(ls "$TMPDIR")"
echo "PASS"
