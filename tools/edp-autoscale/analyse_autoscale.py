#!/usr/bin/env python3
"""Explains an `edp-autoscale simulate` result: where the average JCT comes from and what the
policies gave individual jobs. Standard library only.

  analyse_autoscale.py jct  OUT [OUT2 ...]          avg-JCT contribution by model, per policy and size
  analyse_autoscale.py jobs OUT GPUS [--ids a,b] [--top N] [--model M]
                                                     per-job allocation history, baseline vs dp
                                                     (needs a run with --allocations)

`jct` splits avg JCT = sum_j JCT_j / N by model, so one sees which jobs the average is made of.
`jobs` prints, for each chosen job and policy, its queueing, JCT, time-weighted mean GPUs and
speedup over its own configuration while it ran, and its allocation history compressed to the
distinct (GPUs, batch) steps."""
import csv
import glob
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
    if len(argv) < 3 or argv[1] not in ("jct", "jobs"):
        sys.exit(__doc__)
    if argv[1] == "jct":
        return cmd_jct(argv[2:])
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
