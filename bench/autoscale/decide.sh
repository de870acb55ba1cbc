#!/usr/bin/env bash
# Decision latency of the live controller with about 100 queued jobs: 100 jobs (`sleep` under
# edprun, one worker each) submitted to SLOTS slots, so that SLOTS run and the rest wait; then,
# five times, an event — a submit — and the time until the controller's decision is written
# (decisions.jsonl), and finally a running job cancelled: the time from the cancel until the next
# job's control file is written. Prints a table and JSON.
#   bench/autoscale/decide.sh [--build build] [--slots 4]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build="$here/build" slots=4
while [[ $# -gt 0 ]]; do
  case "$1" in --build) build=$(cd "$2" && pwd); shift 2 ;; --slots) slots=$2; shift 2 ;; *) echo "unknown $1" >&2; exit 2 ;; esac
done
as="$build/tools/edp-autoscale/edp-autoscale"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
root=$(mktemp -d /tmp/edp-decide.XXXXXX)
pid=""
trap '[[ -n "$pid" ]] && kill $pid 2>/dev/null; sleep 0.5; pkill -f "$root/jobs" 2>/dev/null; [[ -n "${KEEP:-}" ]] || rm -rf "$root"' EXIT
"$as" serve --root "$root" --slots "$slots" --slot-kind cpu --policy goodput --quiet &
pid=$!
hold=$(echo '{"name": "q0", "command": ["/bin/sleep", "600"], "min_batch": 64}' | "$as" submit --root "$root" -)
for i in $(seq 1 99); do
  echo '{"name": "q'$i'", "command": ["/bin/sleep", "600"], "min_workers": 1, "max_workers": 4, "min_batch": 64, "max_batch": 256}' > "$root/q.json"
  "$as" submit --root "$root" "$root/q.json" > /dev/null
done
until [[ $(grep -c . "$root/decisions.jsonl" 2>/dev/null || echo 0) -ge 1 ]] && "$as" status --root "$root" --json | python3 -c '
import json,sys; j=json.load(sys.stdin)["jobs"]; sys.exit(0 if len(j)==100 and all(x["state"]!="submitted" for x in j) else 1)'; do sleep 0.2; done
sleep 1
for i in 1 2 3 4 5; do
  t=$(python3 -c 'import time; print(time.time())')
  id=$(echo '{"name": "probe", "command": ["/bin/sleep", "1"], "min_batch": 64}' | "$as" submit --root "$root" -)
  echo "$id $t" >> "$root/probes"
  sleep 0.5
done
# A running job to cancel.
hold=$("$as" status --root "$root" --json | python3 -c '
import json, sys; print(next(j["id"] for j in json.load(sys.stdin)["jobs"] if j["state"] == "running"))')
tcancel=$(python3 -c 'import time; print(time.time())')
"$as" cancel --root "$root" "$hold" > /dev/null
sleep 2
python3 - "$root" "$tcancel" "$hold" <<'PY'
import json, os, sys
root, tcancel, hold = sys.argv[1], float(sys.argv[2]), sys.argv[3]
plans = [json.loads(l) for l in open(os.path.join(root, "decisions.jsonl"))]
rows = []
for line in open(os.path.join(root, "probes")):
    pid, t = line.split(); t = float(t)
    d = next(p for p in plans if "submit " + pid in p["trigger"])
    rows.append({"event": "submit " + pid, "queued": len(d["jobs"]), "latency_ms": (d["t"] - t) * 1e3 + d["decide_ms"],
                 "decide_ms": d["decide_ms"], "solve_ms": d["solve_ms"]})
# The holding job's end: the next jobs' control files.
ctl = []
for j in json.load(open(os.path.join(root, "jobs.json")))["jobs"]:
    p = os.path.join(root, "jobs", j["id"], "control.json")
    if os.path.exists(p) and os.stat(p).st_mtime > tcancel:
        ctl.append(os.stat(p).st_mtime)
d = next(p for p in plans if "cancelled" in p["trigger"])
rows.append({"event": "cancel of a running job -> next job's control file", "queued": len(d["jobs"]),
             "latency_ms": (min(ctl) - tcancel) * 1e3 if ctl else float("nan"), "decide_ms": d["decide_ms"], "solve_ms": d["solve_ms"]})
# The controller's part of it: from the job's recorded end (exit.json, written by its keeper when
# edprun has stopped its ranks) to the next job's control file.
tend = os.stat(os.path.join(root, "jobs", hold, "exit.json")).st_mtime
rows.append({"event": "its end (exit.json) -> next job's control file", "queued": len(d["jobs"]),
             "latency_ms": (min(ctl) - tend) * 1e3 if ctl else float("nan"), "decide_ms": d["decide_ms"], "solve_ms": d["solve_ms"]})
print(f'{"event":55s} {"jobs in plan":>12s} {"latency ms":>11s} {"decide ms":>10s} {"solve ms":>9s}')
for r in rows:
    print(f'{r["event"]:55s} {r["queued"]:12d} {r["latency_ms"]:11.1f} {r["decide_ms"]:10.2f} {r["solve_ms"]:9.2f}')
print(json.dumps({"bench": "autoscale_decide", "rows": rows}))
PY
