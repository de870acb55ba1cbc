#!/usr/bin/env python3
"""Explains an `edp-autoscale simulate` result: where the average JCT comes from and what the
policies gave individual jobs. Standard library only.

  analyse_autoscale.py jct  OUT [OUT2 ...]          avg-JCT contribution by model, per policy and size
  analyse_autoscale.py summary OUT [OUT2 ...]       several runs (e.g. the 8 Pollux workloads) side by
                                                     side: mean avg JCT per policy and size, jobs
                                                     completed in the window, avg-JCT gain over baseline
  analyse_autoscale.py jobs OUT GPUS [--ids a,b] [--top N] [--model M]
                                                     per-job allocation history, baseline vs dp
                                                     (needs a run with --allocations)

`jct` splits avg JCT = sum_j JCT_j / N by model, so one sees which jobs the average is made of.
`jobs` prints, for each chosen job and policy, its queueing, JCT, time-weighted mean GPUs and
speedup over its own configuration while it ran, and its allocation history compressed to the
distinct (GPUs, batch) steps."""
import csv
import glob
import json
import os
import re
import sys
from collections import defaultdict

MODELS = ["cifar10", "ncf", "deepspeech2", "bert", "yolov3", "imagenet"]


def read_jobs(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cmd_jct(dirs):
    runs = []
    for d in dirs:
        for p in glob.glob(os.path.join(d, "jobs_*_*.csv")):
            m = re.match(r"jobs_(.+)_(\d+)\.csv$", os.path.basename(p))
            if m:
                runs.append((int(m.group(2)), m.group(1), p))
    runs.sort()
    models = list(MODELS)
    print("avg JCT (h) split by model: sum over the model's jobs of JCT / all jobs")
    print(f"{'gpus':>5} {'policy':9}" + "".join(f"{m:>12}" for m in models) + f"{'total':>10}")
    for g, pol, p in runs:
        rows = read_jobs(p)
        n = len(rows)
        c = defaultdict(float)
        for r in rows:
            if float(r["finish_s"]) >= 0:
                c[r["model"]] += float(r["jct_s"]) / 3600.0 / n
                if r["model"] not in models:
                    models.append(r["model"])
        print(f"{g:>5} {pol:9}" + "".join(f"{c[m]:12.3f}" for m in models) + f"{sum(c.values()):10.3f}")


def cmd_summary(dirs):
    """Per (GPUs, policy) over the runs in `dirs`: the mean of their avg JCTs, the sum of jobs
    completed in the window and never started, and baseline's mean avg JCT over this policy's
    (with the smallest and largest per-run ratio)."""
    runs = defaultdict(dict)  # (gpus, policy) -> dir -> summary
    for d in dirs:
        for p in glob.glob(os.path.join(d, "summary_*_*.json")):
            m = re.match(r"summary_(.+)_(\d+)\.json$", os.path.basename(p))
            if m:
                with open(p) as f:
                    runs[(int(m.group(2)), m.group(1))][d] = json.load(f)
    if not runs:
        sys.exit("no summary_<policy>_<gpus>.json under " + " ".join(dirs))
    print(f"{len(dirs)} run folder(s); avg JCT = mean over the runs of each run's average")
    print(f"{'gpus':>5} {'policy':9} {'runs':>4} {'avg_jct_h':>10} {'completed_in_window':>20} {'never_started':>14}"
          f" {'gain_vs_baseline':>17} {'per-run min..max':>17}")
    out = []
    for (g, pol) in sorted(runs, key=lambda k: (k[0], ["static", "baseline", "dp", "goodput"].index(k[1])
                                                if k[1] in ("static", "baseline", "dp", "goodput") else 9)):
        r = runs[(g, pol)]
        avg = sum(s["avg_jct_s"] for s in r.values()) / len(r) / 3600
        done = sum(s["completed_in_window"] for s in r.values())
        never = sum(s["never_started"] for s in r.values())
        base = runs.get((g, "baseline"), {})
        gain, rng = "", ""
        if base and set(base) == set(r):
            b = sum(s["avg_jct_s"] for s in base.values()) / len(base) / 3600
            per = [base[d]["avg_jct_s"] / r[d]["avg_jct_s"] for d in r if r[d]["avg_jct_s"] > 0]
            gain = f"{b / avg:.2f}x" if avg > 0 else ""
            rng = f"{min(per):.2f}..{max(per):.2f}" if per else ""
        print(f"{g:>5} {pol:9} {len(r):>4} {avg:10.3f} {done:>20} {never:>14} {gain:>17} {rng:>17}")
        out.append({"gpus": g, "policy": pol, "runs": len(r), "avg_jct_h": avg, "completed_in_window": done,
                    "never_started": never, "gain_vs_baseline": (float(gain[:-1]) if gain else None)})
    print(json.dumps({"summary": out}))


def history(events, finish):
    """(t, gpus, batch, speedup) steps of one job -> (time-weighted mean GPUs, mean speedup, steps)."""
    steps, gs, ss, tt = [], 0.0, 0.0, 0.0
    for i, e in enumerate(events):
        t0 = e[0]
        t1 = events[i + 1][0] if i + 1 < len(events) else finish
        dt = max(0.0, t1 - t0)
        gs += e[1] * dt
        ss += e[3] * dt
        tt += dt
        if not steps or steps[-1][1:3] != e[1:3]:
            steps.append(e)
    return (gs / tt if tt else 0.0, ss / tt if tt else 0.0, steps)


def cmd_jobs(out, gpus, ids, top, model):
    pols = ["baseline", "dp"]
    jobs = {p: {r["id"]: r for r in read_jobs(os.path.join(out, f"jobs_{p}_{gpus}.csv"))} for p in pols}
    if not ids:
        cand = [r for r in jobs["baseline"].values() if not model or r["model"] == model]
        cand.sort(key=lambda r: -float(r["req_gpus"]) * float(r["duration_s"]))
        ids = [r["id"] for r in cand[:top]]
    want = set(ids)
    ev = {p: defaultdict(list) for p in pols}
    for p in pols:
        path = os.path.join(out, f"allocations_{p}_{gpus}.csv")
        if not os.path.exists(path):
            sys.exit(f"{path} missing: run simulate with --allocations")
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r["id"] in want:
                    ev[p][r["id"]].append((float(r["t_s"]), int(r["gpus"]), int(r["batch"]), float(r["speedup"])))
    for i in ids:
        j = jobs["baseline"][i]
        print(f"\n{i}: {j['model']}, {j['req_gpus']} GPUs requested, own batch {j['ref_batch']}, "
              f"trace duration {float(j['duration_s']) / 3600:.1f} h, submitted at {float(j['submit_s']) / 3600:.1f} h")
        for p in pols:
            r = jobs[p][i]
            fin = float(r["finish_s"])
            g, s, steps = history(ev[p][i], fin)
            shown = " ".join(f"{e[0] / 3600:.1f}h:{e[1]}x{e[2] // max(e[1], 1) if e[1] else 0}" for e in steps[:12])
            more = f" ... (+{len(steps) - 12})" if len(steps) > 12 else ""
            print(f"  {p:8} queue {float(r['queue_s']) / 3600:7.2f} h  JCT {float(r['jct_s']) / 3600:8.2f} h  "
                  f"mean GPUs {g:5.1f}  mean speedup {s:5.2f}  rescales {r['rescales']:>4}")
            print(f"           steps (time:GPUs x per-GPU batch): {shown}{more}")


def main(argv):
    if len(argv) < 3 or argv[1] not in ("jct", "jobs", "summary"):
        sys.exit(__doc__)
    if argv[1] == "jct":
        return cmd_jct(argv[2:])
    if argv[1] == "summary":
        return cmd_summary(argv[2:])
    out, gpus = argv[2], argv[3]
    ids, top, model = [], 5, None
    k = 4
    while k < len(argv):
        if argv[k] == "--ids":
            ids = argv[k + 1].split(",")
        elif argv[k] == "--top":
            top = int(argv[k + 1])
        elif argv[k] == "--model":
            model = argv[k + 1]
        else:
            sys.exit(f"unknown option {argv[k]}\n{__doc__}")
        k += 2
    cmd_jobs(out, gpus, ids, top, model)


if __name__ == "__main__":
    main(sys.argv)
