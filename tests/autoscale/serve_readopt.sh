#!/usr/bin/env bash
# edp-autoscale serve restarted on a root whose running jobs hold hosts (serve --hostfile): the
# new controller re-adopts them only when its hostfile still has room for what they hold. The
# running job is a stand-in: a live keeper process (sleep) recorded in jobs.json the way serve
# records its keepers (pid and start time), holding 2 slots on host-a. Checks:
#   - a hostfile without host-a, one giving host-a 1 slot, and no --hostfile at all are each
#     refused (exit 1) with a message naming the job and the host, and leave serve.json alone;
#   - a hostfile with host-a slots=2 (and another host) is accepted: "re-adopted 1 job(s)",
#     and the job's slots on host-a count as used in the first decision line.
# usage: serve_readopt.sh BUILD_DIR
set -euo pipefail
as="$1/tools/edp-autoscale/edp-autoscale"
work=$(mktemp -d /tmp/edp-readopt-test.XXXXXX)
root="$work/root"
keeper="" serve_pid=""
cleanup() {
  local p
  for p in $serve_pid $keeper; do { kill -9 "$p" && wait "$p"; } 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

sleep 600 &
keeper=$!
start=$(python3 -c 'import sys; s = open(f"/proc/{sys.argv[1]}/stat").read(); print(s[s.rindex(")") + 2:].split()[19])' "$keeper")
mkdir -p "$root/jobs/j1" "$root/inbox"
python3 - "$root" "$keeper" "$start" <<'PY'
import json, sys
root, pid, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = {"name": "stand-in", "command": ["/bin/true"], "min_workers": 1, "max_workers": 2, "workers": 2,
        "min_batch": 64, "max_batch": 128, "batch": 128}
job = {"id": "j1", "spec": spec, "state": "running", "workers": 2, "batch": 128,
       "hosts": [["host-a", 2]], "next_hosts": [["host-a", 2]], "keeper_pid": pid, "keeper_start": start,
       "starts": 1, "start_t": 1.0, "submit_t": 1.0}
json.dump({"version": 1, "jobs": [job]}, open(f"{root}/jobs.json", "w"))
json.dump({"pid": 1, "slots": 3, "kind": "cpu", "hostfile": "before"}, open(f"{root}/serve.json", "w"))
PY

refused() {  # expected-message-part, serve args...
  local want=$1; shift
  local rc=0
  # Bounded: a serve that wrongly accepts runs on while the stand-in job lives.
  timeout 20 "$as" serve --root "$root" --exit-when-idle "$@" > "$work/out" 2>&1 || rc=$?
  [[ $rc == 1 ]] || { cat "$work/out" >&2; fail "serve $* exited $rc, expected 1 (refused; 124: it ran on)"; }
  grep -q -- "$want" "$work/out" || { cat "$work/out" >&2; fail "serve $*: no '$want' in its message"; }
  grep -q '"hostfile": *"before"' "$root/serve.json" || fail "a refused serve rewrote serve.json"
  kill -0 "$keeper" 2>/dev/null || fail "a refused serve stopped the running job"
  echo "refused as expected: $(grep -o 'error: .*' "$work/out")"
}
printf 'host-b slots=2\n' > "$work/no_a"
refused "hold 2 slot(s) on host host-a, which $work/no_a does not list" --hostfile "$work/no_a"
printf 'host-a slots=1\nhost-b slots=2\n' > "$work/small_a"
refused "job(s) j1 hold 2 slot(s) on host host-a, and $work/small_a gives it 1" --hostfile "$work/small_a"
refused "running job j1 holds slots on 1 host(s) (host-a first) under --hostfile, and this serve has none" --slots 4

printf 'host-a slots=2\nhost-b slots=1\n' > "$work/ok"
"$as" serve --root "$root" --hostfile "$work/ok" > "$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 1 100); do
  grep -q "re-adopted 1 job(s)" "$work/serve.log" && [[ -s "$root/decisions.jsonl" ]] && break
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log" >&2; fail "serve with a fitting hostfile exited"; }
  sleep 0.1
done
grep -q "re-adopted 1 job(s)" "$work/serve.log" || { cat "$work/serve.log" >&2; fail "no re-adoption logged"; }
python3 - "$root/decisions.jsonl" <<'PY' || { cat "$work/serve.log" >&2; fail "host use after re-adoption"; }
import json, sys
line = json.loads(open(sys.argv[1]).readline())
hosts = line["hosts"]
assert hosts["host-a"] == {"used": 2, "slots": 2}, hosts
assert hosts["host-b"]["slots"] == 1, hosts
print("re-adopted; first decision's hosts:", hosts)
PY
echo "PASS"
