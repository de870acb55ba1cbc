#!/usr/bin/env bash
# edp's autoscaler inside the Pollux OSDI'21 artifact's simulator, next to the artifact's published
# results (not CI: it needs a checkout of the public artifact, which edp does not copy).
#
#   bench/autoscale/pollux_sim.sh --artifact DIR [--python PY] [--build build] [--load 1.0]
#       [--workloads 1,2,...,8] [--out DIR] [--peers tiresias,optimus] [--calibrate] [-- ADAPTER_ARGS...]
#
# Each workload of the chosen job load (1.0: simulator/workloads/, 0.5: workloads-0.5/, ...) runs
# one after the other through bench/autoscale/pollux_policy.py, which drives the artifact's own
# Cluster and Job classes with edp's decision (`edp-autoscale plan`, JSON contract v2); ADAPTER_ARGS
# go to it (--rates online|oracle, --batch edp|job, --hysteresis, --interval, ...). --peers also
# runs the artifact's own policies through the same driver, for their restarts per job. --calibrate
# also runs the same policies in edp's node-level simulator (`edp-autoscale simulate
# --compare-published` on data/pollux_workloads: edp's `goodput` for --rates online, `goodput-oracle`
# for --rates oracle, tiresias and optimus for the peers) and prints both side by side. Prints a
# table (average JCT per workload, restarts per job, the artifact's published Pollux, Tiresias and
# Optimus+Oracle JCTs from simulator/results-jobload/) and one JSON line; with --out, each run's
# JSON line in DIR/<policy>-<load>-workload-N.json.
#
# The artifact and its Python (docs/autoscaler.md §7, "In the artifact's own simulator"):
#   git clone -b osdi21-artifact https://github.com/petuum/adaptdl pollux-artifact   # tested at c793c70
#   python3 -m venv pollux-venv && pollux-venv/bin/pip install numpy==1.26.4 pandas==1.5.3 \
#       scipy==1.11.4 pymoo==0.4.2.2          # Python 3.11; pandas 2 and pymoo 0.5 break the artifact
# then: bench/autoscale/pollux_sim.sh --artifact pollux-artifact --python pollux-venv/bin/python
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
artifact="" python=python3 build="$here/build" load=1.0 workloads=1,2,3,4,5,6,7,8 out="" peers="" calibrate=0
adapter=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --artifact) artifact=$(cd "$2" && pwd); shift 2 ;;
    --python) python=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --load) load=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --calibrate) calibrate=1; shift ;;
    --) shift; adapter=("$@"); break ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "pollux_sim.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
if [[ -z "$artifact" || ! -f "$artifact/simulator/simulator.py" ]]; then
  echo "pollux_sim.sh: --artifact must be a checkout of petuum/adaptdl, branch osdi21-artifact (--help says how)" >&2
  exit 2
fi
as="$build/tools/edp-autoscale/edp-autoscale"
[[ -x "$as" ]] || { echo "pollux_sim.sh: no $as (build edp first: scripts/build.sh)" >&2; exit 2; }
dir=workloads
[[ "$load" == 1.0 || "$load" == 1 ]] || dir="workloads-$load"
[[ -d "$artifact/simulator/$dir" ]] || { echo "pollux_sim.sh: no $artifact/simulator/$dir" >&2; exit 2; }
[[ -z "$out" ]] || mkdir -p "$out"
results=$(mktemp /tmp/edp-pollux-sim.XXXXXX)
edpsim=$(mktemp -d /tmp/edp-pollux-cal.XXXXXX)
trap 'rm -rf "$results" "$edpsim"' EXIT
run() {  # policy label, then the adapter's arguments
  local label=$1; shift
  local w
  for w in ${workloads//,/ }; do
    local t0=$SECONDS line
    line=$("$python" -W ignore "$here/bench/autoscale/pollux_policy.py" --artifact "$artifact" \
      --workload "$artifact/simulator/$dir/workload-$w.csv" "$@" | tail -n 1)
    line=$(printf '%s' "$line" | "$python" -c 'import json,sys; d=json.loads(sys.stdin.read()); d["label"]=sys.argv[1]; print(json.dumps(d))' "$label")
    echo "$line" >> "$results"
    [[ -z "$out" ]] || echo "$line" > "$out/$label-$load-workload-$w.json"
    printf '%-10s workload-%s: avg JCT %.0f s, %.2f restarts/job (%d s)\n' "$label" "$w" \
      "$(printf '%s' "$line" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["avg_jct_s"])')" \
      "$(printf '%s' "$line" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["restarts_per_job"])')" \
      $((SECONDS - t0)) >&2
  done
}
run edp --edp "$as" "${adapter[@]}"
for p in ${peers//,/ }; do run "$p" --peer "$p"; done
edp_policy=goodput
[[ " ${adapter[*]} " == *" --rates oracle "* ]] && edp_policy=goodput-oracle
if [[ $calibrate == 1 ]]; then
  t0=$SECONDS
  "$as" simulate --compare-published --workloads "$here/data/pollux_workloads" --job-loads "$load" \
    --policy "$(echo "$edp_policy${peers:+,$peers}")" --out "$edpsim" > /dev/null
  echo "edp's node-level simulator: $((SECONDS - t0)) s" >&2
fi
"$python" - "$artifact/simulator/results-jobload" "$load" "$results" "${adapter[*]}" "$edpsim/compare_published.json" "$edp_policy" <<'PY'
import json, os, sys
pub_dir, load, results, adapter_args = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
cal_file, edp_policy = sys.argv[5], sys.argv[6]
published = {}
for p in ("pollux", "tiresias", "optimus"):
    f = os.path.join(pub_dir, "%s-%.1f" % (p, load), "summary.json")
    if os.path.exists(f):
        published[p] = {int(k.split("-")[1]): v for k, v in json.load(open(f))["avgs"].items()}
runs = [json.loads(l) for l in open(results)]
labels = list(dict.fromkeys(r["label"] for r in runs))
ws = sorted({int(r["workload"].split("-")[1].split(".")[0]) for r in runs})
by = {(r["label"], int(r["workload"].split("-")[1].split(".")[0])): r for r in runs}
print("Pollux artifact simulator (16 nodes x 4 GPUs), job load %.1f; edp adapter: %s" % (load, adapter_args or "defaults"))
head = "%-9s" % "workload" + "".join("%16s" % l for l in labels) + "".join("%15s" % (p + "(pub)") for p in published)
print(head + "   edp vs pollux")
mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
for w in ws:
    row = "%-9s" % w + "".join("%10.0f %5.2f" % (by[(l, w)]["avg_jct_s"], by[(l, w)]["restarts_per_job"]) if (l, w) in by else "%16s" % "-" for l in labels)
    row += "".join("%15.0f" % published[p].get(w, float("nan")) for p in published)
    if "pollux" in published and ("edp", w) in by:
        row += "   %+6.1f%%" % (100 * (by[("edp", w)]["avg_jct_s"] / published["pollux"][w] - 1))
    print(row)
summary = {"load": load, "adapter": adapter_args, "workloads": ws, "policies": {}}
row = "%-9s" % "mean"
for l in labels:
    jct = mean([by[(l, w)]["avg_jct_s"] for w in ws if (l, w) in by])
    rpj = mean([by[(l, w)]["restarts_per_job"] for w in ws if (l, w) in by])
    wall = sum(by[(l, w)]["wall_s"] for w in ws if (l, w) in by)
    summary["policies"][l] = {"mean_avg_jct_s": jct, "restarts_per_job": rpj, "wall_s": wall,
                              "avg_jct_s": {w: by[(l, w)]["avg_jct_s"] for w in ws if (l, w) in by}}
    row += "%10.0f %5.2f" % (jct, rpj)
for p in published:
    pm = mean([published[p][w] for w in ws])
    summary["published_" + p] = pm
    row += "%15.0f" % pm
if "pollux" in published and "edp" in summary["policies"]:
    pm = summary["published_pollux"]
    row += "   %+6.1f%%" % (100 * (summary["policies"]["edp"]["mean_avg_jct_s"] / pm - 1))
    behind = [w for w in ws if by[("edp", w)]["avg_jct_s"] > published["pollux"][w]]
    summary["edp_vs_pollux"] = summary["policies"]["edp"]["mean_avg_jct_s"] / pm - 1
    summary["workloads_behind_pollux"] = behind
print(row)
print("(each policy: average JCT in s, restarts per job; published columns: the artifact's results-jobload summaries)")
if os.path.exists(cal_file):
    cal = json.load(open(cal_file))["loads"][0]
    print("\ncalibration: the same policy in edp's node-level simulator (edp) and in the artifact's (art)")
    print("%-9s" % "workload" + "".join("%44s" % ("%s (edp-sim: %s)" % (l, edp_policy if l == "edp" else l)) for l in labels))
    print("%-9s" % "" + "".join("%10s %7s %7s %6s %6s %5s" % ("JCT art", "edp", "diff", "rst art", "edp", "diff") for l in labels))
    summary["calibration"] = {}
    for w in ws:
        row = "%-9s" % w
        cw = next(x for x in cal["workloads"] if x["workload"] == w)
        for l in labels:
            key = edp_policy if l == "edp" else l
            a, e = by[(l, w)], cw[key]
            dj = e["avg_jct_s"] / a["avg_jct_s"] - 1
            dr = e["restarts_per_job"] / a["restarts_per_job"] - 1 if a["restarts_per_job"] > 0 else float("nan")
            summary["calibration"].setdefault(l, {})[w] = {"artifact_jct_s": a["avg_jct_s"], "edp_sim_jct_s": e["avg_jct_s"],
                "artifact_restarts_per_job": a["restarts_per_job"], "edp_sim_restarts_per_job": e["restarts_per_job"]}
            row += "%10.0f %7.0f %+6.1f%% %6.2f %6.2f %+5.0f%%" % (a["avg_jct_s"], e["avg_jct_s"], 100 * dj,
                                                            a["restarts_per_job"], e["restarts_per_job"], 100 * dr)
        print(row)
print(json.dumps(summary))
PY
