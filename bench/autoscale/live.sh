#!/usr/bin/env bash
# The live autoscaler on real jobs: a controller with SLOTS CPU slots and three Fashion-MNIST jobs
# submitted at different times, run once per policy; prints per-job completion times, accuracy,
# rescales and restarts, and one JSON line per policy. docs/results/autoscaler.md shows a run.
#
#   bench/autoscale/live.sh [--policies static,dp,goodput] [--slots 4] [--root DIR] [--build build]
#                           [--gap 8] [--max-batch 256] [--keep]
# Slots default to 2, the cores of the project's CI VM (one slot = one core). The global batch is
# chosen by the policies between 64 and --max-batch (default 256; 64 fixes it, as the second
# table in docs/results/autoscaler.md does).
# Each job: the CNN on the first LIMIT training samples (EPOCHS epochs), started at 1 worker;
# B is submitted GAP seconds after A, C 2 x GAP after.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
policies=static,dp,goodput slots=2 build="$here/build" root="" gap=8 keep=0 max_batch=256 limit=${EDP_LIVE_LIMIT:-12000} epochs=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --policies) policies=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --root) root=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --gap) gap=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --max-batch) max_batch=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "live.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
as="$build/tools/edp-autoscale/edp-autoscale"
cnn="$build/examples/fashion_mnist_cnn"
[[ -x "$as" && -x "$cnn" ]] || { echo "live.sh: build edp first ($as, $cnn)" >&2; exit 2; }
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
base=${root:-$(mktemp -d /tmp/edp-live.XXXXXX)}
serve_pid=""
cleanup() {
  if [[ -n "$serve_pid" ]] && kill -0 "$serve_pid" 2>/dev/null; then kill "$serve_pid"; wait "$serve_pid" || true; fi
  # Jobs a killed run left behind: cancel them through the controller's own files.
  for r in "$base"/*/; do
    [[ -f "$r/jobs.json" ]] || continue
    python3 - "$r" <<'PY' || true
import json, os, signal, sys
t = json.load(open(os.path.join(sys.argv[1], "jobs.json")))
for j in t["jobs"]:
    if j["state"] == "running":
        p = os.path.join(sys.argv[1], "jobs", j["id"], "edprun.pid")
        try:
            os.kill(int(open(p).read().split()[0]), signal.SIGTERM)
        except Exception:
            pass
PY
  done
  [[ $keep == 1 || -n "$root" ]] || rm -rf "$base"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

spec() {  # name workers min max batch
  cat <<JSON
{"name": "$1", "command": ["$cnn", "--limit", "$limit", "--epochs", "$epochs", "--batch", "$(( $5 / $2 ))", "--threads", "1",
  "--no-eval", "--checkpoint-dir", "{job_dir}/ckpt", "--control-every", "4"],
 "min_workers": $3, "max_workers": $4, "workers": $2, "min_batch": 64, "max_batch": $max_batch, "batch": $5,
 "max_worker_batch": 128, "preemptible": false, "max_restarts": 1}
JSON
}

IFS=, read -ra pols <<< "$policies"
printf '%-8s %-6s %-6s %8s %8s %8s %6s %9s %9s\n' policy job name submit_s jct_s acc rescale restarts max_w
for pol in "${pols[@]}"; do
  r="$base/$pol"
  rm -rf "$r"; mkdir -p "$r"
  "$as" serve --root "$r" --slots "$slots" --slot-kind cpu --policy "$pol" --replan 5 > "$r/serve.log" 2>&1 &
  serve_pid=$!
  spec a 1 1 4 64 > "$r/a.json"; spec b 1 1 4 64 > "$r/b.json"; spec c 1 1 4 64 > "$r/c.json"
  "$as" submit --root "$r" "$r/a.json" > /dev/null
  sleep "$gap"; "$as" submit --root "$r" "$r/b.json" > /dev/null
  sleep "$gap"; "$as" submit --root "$r" "$r/c.json" > /dev/null
  # Until the three have ended (the controller keeps serving: stop it then).
  until "$as" status --root "$r" --json | python3 -c '
import json, sys
jobs = json.load(sys.stdin)["jobs"]
sys.exit(0 if len(jobs) == 3 and all(j["state"] in ("done", "failed", "cancelled") for j in jobs) else 1)'; do
    kill -0 "$serve_pid" || { echo "live.sh: the controller died (see $r/serve.log)" >&2; exit 1; }
    sleep 1
  done
  kill "$serve_pid"; wait "$serve_pid" || true
  serve_pid=""
  python3 - "$r" "$pol" <<'PY'
import json, os, re, sys
root, pol = sys.argv[1], sys.argv[2]
jobs = json.load(open(os.path.join(root, "jobs.json")))["jobs"]
t0 = min(j["submit_t"] for j in jobs)
out = []
for j in jobs:
    log = open(os.path.join(root, "jobs", j["id"], "log"), errors="replace").read()
    acc = re.findall(r'"test_acc": ([0-9.]+)', log)
    mw = max([m["workers"] for m in j["measured"]] or [0])
    jct = j["end_t"] - j["submit_t"]
    print(f'{pol:8s} {j["id"]:6s} {j["spec"]["name"]:6s} {j["submit_t"]-t0:8.1f} {jct:8.1f} {acc[-1] if acc else "-":>8s} '
          f'{j["rescales"]:6d} {j["restarts"]:9d} {mw:9d}')
    out.append({"id": j["id"], "state": j["state"], "jct_s": jct, "test_acc": float(acc[-1]) if acc else None,
                "rescales": j["rescales"], "max_workers": mw})
makespan = max(j["end_t"] for j in jobs) - t0
avg = sum(o["jct_s"] for o in out) / len(out)
dec = sum(1 for _ in open(os.path.join(root, "decisions.jsonl")))
lat = [json.loads(l)["decide_ms"] for l in open(os.path.join(root, "decisions.jsonl"))]
print(json.dumps({"policy": pol, "makespan_s": round(makespan, 2), "avg_jct_s": round(avg, 2),
                  "rescales": sum(o["rescales"] for o in out), "plans": dec,
                  "max_decide_ms": round(max(lat), 3), "jobs": out}))
PY
done
