#!/usr/bin/env python3
"""Plots for `edp-autoscale simulate` output (called by the tool; usable by hand):

    python3 plot_autoscale.py OUT_DIR

Reads OUT_DIR/summary.json and the per-run CSVs and writes
  sweep.png     avg JCT and jobs completed in the window vs cluster size, one line per policy
                (only when more than one cluster size was simulated);
  timeline.png  GPUs in use and queued jobs over time, one line per policy (largest-contention
                run, i.e. the smallest cluster);
  jct_cdf.png   CDF of job completion times per policy (same cluster size);
  ratio.png     baseline / dp average JCT vs cluster size, over all jobs and per model (when both
                policies ran at more than one size): where dp's gain comes from.
Needs matplotlib (Debian: python3-matplotlib). Standard library otherwise.
"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def mean_jct_by_model(path):
    tot, n = {}, {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if float(r["jct_s"]) < 0:
                continue
            for key in ("all jobs", r["model"]):
                tot[key] = tot.get(key, 0.0) + float(r["jct_s"])
                n[key] = n.get(key, 0) + 1
    return {k: tot[k] / n[k] for k in tot}


def ratio_plot(out, sizes, title):
    ratios = {}
    for g in sizes:
        b = os.path.join(out, "jobs_baseline_%d.csv" % g)
        d = os.path.join(out, "jobs_dp_%d.csv" % g)
        if not (os.path.exists(b) and os.path.exists(d)):
            continue
        mb, md = mean_jct_by_model(b), mean_jct_by_model(d)
        for k in mb:
            if k in md and md[k] > 0:
                ratios.setdefault(k, []).append((g, mb[k] / md[k]))
    if "all jobs" not in ratios:
        return
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for k, pts in sorted(ratios.items(), key=lambda kv: kv[0] != "all jobs"):
        allj = k == "all jobs"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", lw=2.5 if allj else 1,
                color="black" if allj else None, label=k, zorder=3 if allj else 2)
    ax.axhline(2.0, ls="--", color="grey", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("cluster GPUs (log)")
    ax.set_ylabel("baseline / dp mean JCT (log)")
    ax.set_title("dp's gain over baseline by model (%s)" % title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "ratio.png"), dpi=110)
    plt.close(fig)


def main(out):
    with open(os.path.join(out, "summary.json")) as f:
        meta = json.load(f)
    runs = meta["runs"]
    policies = []
    for r in runs:
        if r["policy"] not in policies:
            policies.append(r["policy"])
    sizes = sorted({r["gpus"] for r in runs})
    title = "%s, %d jobs" % (os.path.basename(meta["trace"]), meta["jobs"])

    if len(sizes) > 1:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
        for p in policies:
            rs = sorted((r for r in runs if r["policy"] == p), key=lambda r: r["gpus"])
            g = [r["gpus"] for r in rs]
            ax[0].plot(g, [r["avg_jct_s"] / 3600 for r in rs], marker="o", label=p)
            ax[1].plot(g, [r["completed_in_window"] for r in rs], marker="o", label=p)
        ax[0].set_yscale("log")
        ax[0].set_xlabel("cluster GPUs")
        ax[0].set_ylabel("average JCT (hours, log)")
        ax[0].set_title("average job completion time")
        ax[1].set_xlabel("cluster GPUs")
        ax[1].set_ylabel("jobs completed within the window")
        ax[1].set_title("jobs completed in %.0f days" % (7,))
        for a in ax:
            a.grid(True, alpha=0.3)
            a.legend()
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "sweep.png"), dpi=110)
        plt.close(fig)

    if len(sizes) > 1 and "baseline" in policies and "dp" in policies:
        ratio_plot(out, sizes, title)

    g0 = sizes[0]
    fig, ax = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for p in policies:
        path = os.path.join(out, "timeline_%s_%d.csv" % (p, g0))
        if not os.path.exists(path):
            continue
        t, used, queued = [], [], []
        with open(path) as f:
            for row in csv.DictReader(f):
                t.append(float(row["t_s"]) / 86400)
                used.append(int(row["gpus_used"]))
                queued.append(int(row["queued"]))
        ax[0].step(t, used, where="post", label=p, lw=0.8)
        ax[1].step(t, queued, where="post", label=p, lw=0.8)
    ax[0].set_ylabel("GPUs in use (of %d)" % g0)
    ax[1].set_ylabel("jobs waiting")
    ax[1].set_xlabel("days since trace start")
    for a in ax:
        a.grid(True, alpha=0.3)
        a.legend()
    fig.suptitle("%s, %d GPUs" % (title, g0))
    fig.tight_layout()
    fig.savefig(os.path.join(out, "timeline.png"), dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for p in policies:
        path = os.path.join(out, "jobs_%s_%d.csv" % (p, g0))
        if not os.path.exists(path):
            continue
        with open(path) as f:
            jct = sorted(float(r["jct_s"]) for r in csv.DictReader(f) if float(r["jct_s"]) >= 0)
        if jct:
            n = len(jct)
            ax.plot([max(x, 1.0) for x in jct], [(i + 1) / n for i in range(n)], label=p)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log)")
    ax.set_ylabel("fraction of finished jobs")
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("JCT CDF, %d GPUs" % g0)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "jct_cdf.png"), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: plot_autoscale.py OUT_DIR")
    main(sys.argv[1])
