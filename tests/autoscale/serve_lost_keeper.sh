#!/usr/bin/env bash
# A job whose keeper process is killed, with real processes: one CPU slot, job A (a CNN training)
# runs, job B waits for the slot. Checks:
#   - the keeper has a name and command line of its own ("keeper j0001", "edp-autoscale keeper
#     j0001 ..."), so that killing the controller by name (pgrep/pkill -x edp-autoscale) leaves it;
#   - the keeper killed (SIGKILL) and the controller killed and started again: while A's edprun runs,
#     A stays "running" (never "failed") and keeps its slot (B stays queued, no decision line uses
#     more than the one slot);
#   - once A's edprun ends, A is "done", recovered from its status file (no exit record was
#     written), with its final metrics; then B runs and ends "done"; nothing is left running.
# usage: serve_lost_keeper.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/serve_lib.sh" "$1" lost-keeper

serve() {  # log name
  "$as" serve --root "$root" --slots 1 --slot-kind cpu --policy dp --replan 2 --tick 0.1 > "$work/$1" 2>&1 &
  serve_pid=$!
}
spec() {  # name epochs
  cat <<JSON
{"name": "$1", "command": ["$cnn", "--limit", "6000", "--epochs", "$2", "--batch", "64", "--threads", "1",
  "--no-eval", "--checkpoint-dir", "{job_dir}/ckpt"],
 "min_workers": 1, "max_workers": 1, "min_batch": 64, "max_batch": 64, "max_restarts": 0}
JSON
}
state() { "$as" status --root "$root" --json | python3 -c '
import json, sys
print([j for j in json.load(sys.stdin)["jobs"] if j["id"] == sys.argv[1]][0]["state"])' "$1"; }
edprun_alive() {  # job id: edprun's pid and start time as the keeper recorded them
  python3 - "$root/jobs/$1/edprun.pid" <<'PY'
import sys
try:
    pid, start = open(sys.argv[1]).read().split()
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    sys.exit(0 if fields[19] == start and fields[0] != "Z" else 1)  # a zombie has ended
except (OSError, ValueError):
    sys.exit(1)
PY
}

mkdir -p "$root"
serve serve1.log
spec a 6 > "$work/a.json"; spec b 1 > "$work/b.json"
ida=$("$as" submit --root "$root" "$work/a.json")
idb=$("$as" submit --root "$root" "$work/b.json")
for _ in $(seq 1 200); do  # A's edprun started and A trains (its status file says so)
  [[ -s "$root/jobs/$ida/edprun.pid" && -s "$root/jobs/$ida/status.json" ]] && break
  sleep 0.1
done
edprun_alive "$ida" || fail "job A's edprun is not running"
keeper=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' "$root/jobs/$ida/keeper.json")
[[ "$(cat /proc/$keeper/comm)" == "keeper $ida" ]] || fail "the keeper's name is '$(cat /proc/$keeper/comm)'"
tr '\0' ' ' < /proc/$keeper/cmdline | grep -q "^edp-autoscale keeper $ida " || fail "keeper command line: $(tr '\0' ' ' < /proc/$keeper/cmdline)"
! pgrep -x edp-autoscale | grep -qx "$keeper" || fail "the keeper answers to the controller's name"
echo "keeper $keeper: comm '$(cat /proc/$keeper/comm)', not matched by pgrep -x edp-autoscale"

kill -9 "$keeper"
sleep 1
sa=$(state "$ida")
if edprun_alive "$ida"; then [[ "$sa" == running ]] || fail "A is '$sa' after its keeper was killed, while its edprun runs"; fi
kill -9 "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=""
serve serve2.log
wait_for 60 "the restarted controller to re-adopt A" grep -q "re-adopted" "$work/serve2.log"
# The states are read first; if A's edprun still runs after, it ran while they were read.
while edprun_alive "$ida"; do
  sa=$(state "$ida"); sb=$(state "$idb")
  edprun_alive "$ida" || break
  [[ "$sa" == running ]] || fail "A is '$sa' while its edprun runs"
  [[ "$sb" == queued ]] || fail "B is '$sb' while A holds the only slot"
  sleep 0.5
done
for _ in $(seq 1 300); do
  [[ "$(state "$idb")" == done || "$(state "$idb")" == failed ]] && break
  kill -0 "$serve_pid" || fail "the controller died"
  sleep 0.5
done
"$as" status --root "$root"
kill "$serve_pid"; wait "$serve_pid" || true; serve_pid=""
grep -q "stopping: got Terminated" "$work/serve2.log" || fail "the controller did not say why it stopped"

python3 - "$root" "$ida" "$idb" <<'PY'
import json, os, sys
root, a, b = sys.argv[1:]
jobs = {j["id"]: j for j in json.load(open(os.path.join(root, "jobs.json")))["jobs"]}
assert jobs[a]["state"] == "done", f"A: {jobs[a]['state']} {jobs[a]['error']}"
assert "recovered from its status file" in jobs[a]["error"], jobs[a]["error"]
assert not os.path.exists(os.path.join(root, "jobs", a, "exit.json")), "the killed keeper wrote an exit record?"
assert jobs[a].get("metrics", {}).get("final_loss", -1) > 0, f"A's final metrics: {jobs[a].get('metrics')}"
assert jobs[b]["state"] == "done", f"B: {jobs[b]['state']} {jobs[b]['error']}"
for line in open(os.path.join(root, "decisions.jsonl")):
    d = json.loads(line)
    assert d["slots_used"] <= 1, d
    running = [x["job"] for x in d["jobs"] if x["action"] in ("start", "hold", "grow")]
    assert not (a in running and b in running), f"A and B both on the one slot: {d}"
print(f"ok: A done ({jobs[a]['error']}), B done after it")
PY
sleep 1
left=$(pgrep -f "$root/jobs" || true)
[[ -z "$left" ]] || fail "processes left running: $(ps -o pid,args -p ${left//$'\n'/,})"
echo "PASS"
