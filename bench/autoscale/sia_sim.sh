#!/usr/bin/env bash
# The scheduling policies of the Sia SOSP'23 artifact, in that artifact's own simulator, on its
# heterogeneous cluster (the groundwork for running edp's autoscaler there; not CI: it needs a
# checkout of the public artifact, which edp does not copy).
#
#   bench/autoscale/sia_sim.sh --artifact DIR [--python PY] [--policies sia,gavel,pollux]
#       [--traces philly,saturn,newtrace] [--workloads 1] [--first N] [--cluster aws:6,dgx-ext:2,rtx:3]
#       [--timeout S] [--out DIR] [--build build] [--calibrate] [-- EDP_ADAPTER_ARGS...]
#
# Each chosen workload (workloads/<trace>/workload-<n>.csv of the artifact's sia-simulator/; a
# trace is philly, saturn (Helios), newtrace or one of scale/rate_10 ... scale/rate_50) runs under
# each chosen policy, one run at a time, in the artifact's own simulator: its Cluster and Job
# classes, its GPU types' throughput tables, its restart delays. The policies are the artifact's:
#   sia     Sia (its MILP, solved by CBC): p = -0.5, lambda_a = 0.01, lambda_n = 1.1, 60-s rounds,
#           throughput projection across GPU types and max replicas shared across types (the
#           artifact's run_experiment.sh settings)
#   gavel   Gavel, max-sum-throughput, 360-s rounds, each job at its trace GPU count and batch
#   pollux  Pollux, unaware of GPU types (p = -1, 60-s rounds; 8-GPU nodes seen as two 4-GPU
#           nodes, a job spread over types cut back to one type by the artifact's heuristic)
#   edp     edp's autoscaler (`edp-autoscale plan` with GPU types, restart-aware, 60-s rounds;
#           oracle rates, or learning online with `-- --rates online`), through
#           bench/autoscale/sia_policy.py: `sia_policy.py --artifact DIR
#           --workload CSV --edp BIN [--first N] [--cluster SPEC] EDP_ADAPTER_ARGS...` prints one
#           JSON line with the fields below (EDP_ADAPTER_ARGS: sia_policy.py --help); BIN is
#           edp-autoscale under --build
# --calibrate (with policy edp) also runs edp's policy on the same workloads in edp's own node-level
# simulator with GPU types (`edp-autoscale simulate --sia`: the artifact's tables read by edp,
# `goodput` for `--rates online`, `goodput-oracle` otherwise, the adapter's margin, pause per GPU,
# hysteresis and interval) and prints both side by side: average JCT and restarts per job, the
# artifact's and edp's, and their difference.
# --first N keeps the first N jobs of each workload (a short smoke run; the paper uses them
# whole: 160 jobs in 8 h for philly/saturn, 960 in 48 h for newtrace). --cluster sets nodes per
# GPU type (default: the paper's heterogeneous 64 GPUs, 6 aws x 4 T4, 2 dgx-ext x 8 A100,
# 3 rtx x 8 RTX 2080Ti). --timeout stops a run after S seconds; its line then says how far it got
# (stopped, sim_time_s, submitted, finished, rounds, policy times).
# Prints a table (average JCT per workload and policy, restarts per job, the paper's average JCT
# per trace for reference: Table 3 of sia-sosp23.pdf, heterogeneous cluster, all workloads of the
# trace) and one JSON line; with --out, each run's JSON line in DIR/<policy>-<trace>-workload-N.json.
# A run's line: trace, workload, policy, jobs, finished, avg_jct_s, p99_jct_s, makespan_s,
# restarts_per_job, type_changes_per_job (restarts onto another GPU type), gpu_hours_per_job and
# gpu_hours_by_type (GPU time held, restarts included), by_app (jobs, avg_jct_s, gpu_hours_per_job
# of each model), rounds, policy_ms_avg, policy_ms_p50, policy_ms_p95, policy_ms_max (the policy's
# time per round), wall_s.
#
# The artifact and its Python: clone the GitHub repository siasosp23/artifacts (tested at aaf7a0d;
# its traces/helios_saturn.csv is not needed), then, with Python 3.11:
#   python3 -m venv sia-venv && sia-venv/bin/pip install numpy==1.23.5 pandas==1.5.3 scipy==1.10.1 \
#       pymoo==0.4.2.2 cvxpy==1.6.0 cylp==0.93.0 ecos==2.0.14 rich==15.0.0 psutil==7.2.2
# (numpy < 1.24: the artifact uses np.int; pandas < 2: it uses DataFrame.append; pymoo 0.4: Pollux;
# cylp is cvxpy's CBC, which Sia's MILP names; ecos is Gavel's LP solver; rich and psutil are
# imported by the artifact.) Then: bench/autoscale/sia_sim.sh --artifact artifacts --python sia-venv/bin/python
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
artifact="" python=python3 build="$here/build" policies=sia,gavel,pollux traces=philly,saturn,newtrace
workloads=1 first=0 cluster="aws:6,dgx-ext:2,rtx:3" timeout_s=0 out="" calibrate=0
adapter=()
need() { [[ $# -ge 2 && -n "$2" ]] || { echo "sia_sim.sh: $1 needs a value (--help)" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --artifact) need "$@"; artifact=$(cd "$2" 2>/dev/null && pwd) || { echo "sia_sim.sh: no directory '$2'" >&2; exit 2; }; shift 2 ;;
    --python) need "$@"; python=$2; shift 2 ;;
    --build) need "$@"; build=$(cd "$2" 2>/dev/null && pwd) || { echo "sia_sim.sh: no directory '$2'" >&2; exit 2; }; shift 2 ;;
    --policies) need "$@"; policies=$2; shift 2 ;;
    --traces) need "$@"; traces=$2; shift 2 ;;
    --workloads) need "$@"; workloads=$2; shift 2 ;;
    --first) need "$@"; first=$2; shift 2 ;;
    --cluster) need "$@"; cluster=$2; shift 2 ;;
    --timeout) need "$@"; timeout_s=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --calibrate) calibrate=1; shift ;;
    --) shift; adapter=("$@"); break ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "sia_sim.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
sim="$artifact/sia-simulator"
if [[ -z "$artifact" || ! -f "$sim/multi_simulator.py" || ! -f "$sim/sia.py" ]]; then
  echo "sia_sim.sh: --artifact must be a checkout of siasosp23/artifacts (--help says how)" >&2
  exit 2
fi
[[ "$first" =~ ^[0-9]+$ ]] || { echo "sia_sim.sh: --first must be a count of jobs (0: all), got '$first'" >&2; exit 2; }
[[ "$timeout_s" =~ ^[0-9]+$ ]] || { echo "sia_sim.sh: --timeout must be seconds (0: none), got '$timeout_s'" >&2; exit 2; }
[[ "$policies" =~ ^[a-z]+(,[a-z]+)*$ ]] || { echo "sia_sim.sh: --policies must be names like sia,gavel, got '$policies'" >&2; exit 2; }
[[ "$traces" =~ ^[a-z0-9_]+(,[a-z0-9_]+)*$ ]] || { echo "sia_sim.sh: --traces must be names like philly,saturn, got '$traces'" >&2; exit 2; }
[[ "$workloads" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "sia_sim.sh: --workloads must be numbers like 1,2,3, got '$workloads'" >&2; exit 2; }
[[ "$cluster" =~ ^[a-z0-9-]+:[1-9][0-9]*(,[a-z0-9-]+:[1-9][0-9]*)*$ ]] || {
  echo "sia_sim.sh: --cluster must be TYPE:NODES,... (types: aws, azure, dgx, dgx-ext, quad, rtx), got '$cluster'" >&2; exit 2; }
for p in ${policies//,/ }; do
  case "$p" in
    sia|gavel|pollux) ;;
    edp)
      [[ -f "$here/bench/autoscale/sia_policy.py" ]] || {
        echo "sia_sim.sh: policy edp needs bench/autoscale/sia_policy.py, edp's adapter for this simulator" >&2; exit 2; }
      [[ -x "$build/tools/edp-autoscale/edp-autoscale" ]] || {
        echo "sia_sim.sh: no $build/tools/edp-autoscale/edp-autoscale (build edp first: scripts/build.sh)" >&2; exit 2; } ;;
    *) echo "sia_sim.sh: unknown policy '$p' (sia, gavel, pollux, edp)" >&2; exit 2 ;;
  esac
done
for t in ${traces//,/ }; do
  case "$t" in philly|saturn|newtrace) dir="$sim/workloads/$t" ;; rate_*) dir="$sim/workloads/scale/$t" ;;
    *) echo "sia_sim.sh: unknown trace '$t' (philly, saturn, newtrace, rate_10 ... rate_50)" >&2; exit 2 ;; esac
  for w in ${workloads//,/ }; do
    [[ -f "$dir/workload-$w.csv" ]] || { echo "sia_sim.sh: no $dir/workload-$w.csv" >&2; exit 2; }
  done
done
modules="cvxpy, pandas, numpy, rich, psutil"
[[ ",$policies," != *,pollux,* ]] || modules+=", pymoo"
"$python" -c "import $modules" 2>/dev/null || {
  echo "sia_sim.sh: $python lacks the artifact's packages (--help says which)" >&2; exit 2; }
[[ -z "$out" ]] || mkdir -p "$out"
results=$(mktemp /tmp/edp-sia-sim.XXXXXX)
edpsim=$(mktemp -d /tmp/edp-sia-cal.XXXXXX)
trap 'rm -rf "$results" "$edpsim"' EXIT
if [[ $calibrate == 1 && ",$policies," != *,edp,* ]]; then
  echo "sia_sim.sh: --calibrate compares policy edp in both simulators (add edp to --policies)" >&2; exit 2
fi
driver="$here/bench/autoscale/sia_driver.py"  # the artifact's own policies (sia_run.py: what both share)

run() {  # policy trace workload-number
  local p=$1 t=$2 w=$3 dir csv line t0=$SECONDS rc=0
  case "$t" in rate_*) dir="$sim/workloads/scale/$t" ;; *) dir="$sim/workloads/$t" ;; esac
  csv="$dir/workload-$w.csv"
  local cmd=()
  [[ "$timeout_s" == 0 ]] || cmd=(timeout -k 60 "$timeout_s")
  if [[ "$p" == edp ]]; then
    cmd+=("$python" -W ignore "$here/bench/autoscale/sia_policy.py" --artifact "$artifact" --workload "$csv"
          --edp "$build/tools/edp-autoscale/edp-autoscale" --first "$first" --cluster "$cluster" "${adapter[@]}")
  else
    cmd+=("$python" -W ignore "$driver" "$artifact" "$p" "$csv" "$first" "$cluster")
  fi
  line=$("${cmd[@]}" | tail -n 1) || rc=$?
  if [[ $rc -eq 124 && "$line" == *'"stopped": true'* ]]; then
    echo "sia_sim.sh: $p on $t workload-$w stopped after ${timeout_s} s (--timeout)" >&2
  elif [[ $rc -ne 0 || -z "$line" ]]; then
    [[ $rc -eq 124 ]] && echo "sia_sim.sh: $p on $t workload-$w stopped after ${timeout_s} s (--timeout)" >&2 \
      || echo "sia_sim.sh: $p on $t workload-$w failed (exit $rc)" >&2
    line="{\"policy\": \"$p\", \"workload\": \"workload-$w.csv\", \"failed\": $rc, \"wall_s\": $((SECONDS - t0))}"
  fi
  line=$(printf '%s' "$line" | "$python" -c 'import json,sys; d=json.loads(sys.stdin.read()); d["trace"]=sys.argv[1]; d["first"]=int(sys.argv[2]); print(json.dumps(d))' "$t" "$first")
  echo "$line" >> "$results"
  [[ -z "$out" ]] || echo "$line" > "$out/$p-$t-workload-$w.json"
  printf '%s' "$line" | "$python" -c 'import json,sys
d = json.load(sys.stdin)
if "failed" in d:
    sys.exit(0)
if d.get("stopped"):
    print("%-7s %-9s workload-%-3s stopped at %.1f h simulated: %d of %d jobs submitted, %d finished (%d rounds, %.0f ms/round, %.0f s)" % (
        d["policy"], d["trace"], d["workload"][9:-4], d["sim_time_s"] / 3600, d["submitted"], d["jobs"], d["finished"],
        d["rounds"], d["policy_ms_avg"], d["wall_s"]), file=sys.stderr)
    sys.exit(0)
print("%-7s %-9s workload-%-3s avg JCT %7.0f s, %5.2f restarts/job, %5.1f GPU-h/job (%d rounds, %.0f ms/round, %.0f s)" % (
    d["policy"], d["trace"], d["workload"][9:-4], d["avg_jct_s"], d["restarts_per_job"],
    d["gpu_hours_per_job"], d["rounds"], d["policy_ms_avg"], d["wall_s"]), file=sys.stderr)'
}
for t in ${traces//,/ }; do
  for w in ${workloads//,/ }; do
    for p in ${policies//,/ }; do run "$p" "$t" "$w"; done
  done
done

if [[ $calibrate == 1 ]]; then
  # The adapter's policy settings, as edp's simulator takes them.
  sim_args=(--policy goodput-oracle) i=0
  while [[ $i -lt ${#adapter[@]} ]]; do
    a=${adapter[$i]} v=${adapter[$((i + 1))]:-}
    case "$a" in
      --rates) [[ "$v" == online ]] && sim_args[1]=goodput; i=$((i + 1)) ;;
      --margin) sim_args+=(--change-margin "$v"); i=$((i + 1)) ;;
      --pause-per-gpu) sim_args+=(--pause-per-gpu "$v"); i=$((i + 1)) ;;
      --hysteresis) sim_args+=(--rescale-penalty "$v"); i=$((i + 1)) ;;
      --interval) sim_args+=(--interval "$v"); i=$((i + 1)) ;;
      --fixed-share) sim_args+=(--learn-fixed-share "$v"); i=$((i + 1)) ;;
      --trust-half) sim_args+=(--learn-trust-half "$v"); i=$((i + 1)) ;;
      --trace) i=$((i + 1)) ;;
    esac
    i=$((i + 1))
  done
  [[ "$first" == 0 ]] || sim_args+=(--limit "$first")
  t0=$SECONDS
  "$build/tools/edp-autoscale/edp-autoscale" simulate --sia "$artifact" --sia-traces "$traces" --sia-workloads "$workloads" \
    --cluster "$cluster" --threads "$(nproc)" --quiet --out "$edpsim" "${sim_args[@]}" > /dev/null
  echo "edp's node-level simulator (${sim_args[1]}): $((SECONDS - t0)) s" >&2
fi

"$python" - "$results" "$cluster" "$first" "${adapter[*]}" "$edpsim/simulate_sia.json" <<'PY'
import json, os, sys
results, cluster, first, adapter, cal_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
# Table 3 of the Sia paper (heterogeneous cluster; average JCT in hours over all of a trace's workloads)
paper = {"philly": {"sia": 0.6, "pollux": 1.0, "gavel": 1.9}, "saturn": {"sia": 0.7, "pollux": 1.0, "gavel": 2.5},
         "newtrace": {"sia": 0.7, "pollux": 1.5, "gavel": 11.3}}
runs = [json.loads(l) for l in open(results)]
pols = list(dict.fromkeys(r["policy"] for r in runs))
keys = list(dict.fromkeys((r["trace"], r["workload"]) for r in runs))
by = {(r["trace"], r["workload"], r["policy"]): r for r in runs}
print("Sia artifact simulator, cluster %s%s%s" % (cluster, ", first %d jobs of each workload" % first if first else "",
                                                 "; edp adapter: " + adapter if adapter and "edp" in pols else ""))
print("%-10s %-16s" % ("trace", "workload") + "".join("%22s" % p for p in pols) + "   paper avg JCT (h): " + ", ".join(pols))
for t, w in keys:
    row = "%-10s %-16s" % (t, w)
    for p in pols:
        r = by.get((t, w, p))
        if r is None or "failed" in r:
            row += "%22s" % ("-" if r is None else "failed")
        elif r.get("stopped"):
            row += "%22s" % ("stopped at %.1f h sim" % (r["sim_time_s"] / 3600))
        else:
            row += "%22s" % ("%.2f h %5.2f rst" % (r["avg_jct_s"] / 3600, r["restarts_per_job"]))
    pub = paper.get(t, {})
    row += "   " + ", ".join("%.1f" % pub[p] if p in pub else "-" for p in pols)
    print(row)
print("(each policy: average JCT in hours, restarts per job; the paper column is a mean over all workloads, full length)")
summary = {"cluster": cluster, "first": first, "adapter": adapter, "runs": runs}
if os.path.exists(cal_file):
    cal = {(r["trace"], "workload-%d.csv" % r["workload"]): r for r in json.load(open(cal_file))["runs"]}
    print("\ncalibration: edp's policy in the artifact's simulator (art) and in edp's node-level simulator (edp, %s)"
          % next(iter(cal.values()))["policy"])
    print("%-10s %-16s %9s %9s %7s %8s %8s %7s" % ("trace", "workload", "JCT art", "JCT edp", "diff", "rst art", "rst edp", "diff"))
    rows = []
    for t, w in keys:
        a, e = by.get((t, w, "edp")), cal.get((t, w))
        if a is None or e is None or "failed" in a or a.get("stopped"):
            continue
        dj = e["avg_jct_s"] / a["avg_jct_s"] - 1
        dr = e["restarts_per_job"] / a["restarts_per_job"] - 1 if a["restarts_per_job"] > 0 else float("nan")
        rows.append({"trace": t, "workload": w, "avg_jct_s_artifact": a["avg_jct_s"], "avg_jct_s_edp": e["avg_jct_s"],
                     "jct_diff": dj, "restarts_per_job_artifact": a["restarts_per_job"],
                     "restarts_per_job_edp": e["restarts_per_job"], "restarts_diff": dr, "wall_s_artifact": a["wall_s"],
                     "wall_s_edp": e["wall_s"]})
        print("%-10s %-16s %9.0f %9.0f %+6.1f%% %8.2f %8.2f %+6.0f%%" % (t, w, a["avg_jct_s"], e["avg_jct_s"], 100 * dj,
                                                                     a["restarts_per_job"], e["restarts_per_job"], 100 * dr))
    if rows:
        worst = max(rows, key=lambda r: abs(r["jct_diff"]))
        print("largest JCT difference: %+.1f %% (%s %s); mean %+.1f %%" % (
            100 * worst["jct_diff"], worst["trace"], worst["workload"], 100 * sum(r["jct_diff"] for r in rows) / len(rows)))
    summary["calibration"] = rows
print(json.dumps(summary))
PY
