#!/usr/bin/env python3
"""Plots for `edp-autoscale simulate` output (called by the tool; usable by hand):

    python3 plot_autoscale.py OUT_DIR

Reads OUT_DIR/summary.json and the per-run CSVs and writes
  sweep.png     avg JCT and jobs completed in the window vs cluster size, one line per policy
                (only when more than one cluster size was simulated);
  timeline.png  GPUs in use and queued jobs over time, one line per policy (largest-contention
                run, i.e. the smallest cluster), the submission window shaded;
  jct_cdf.png   CDF of job completion times per policy (same cluster size);
  ratio.png     baseline / dp average JCT vs cluster size, over all jobs and per model (when both
                policies ran at more than one size): where dp's gain comes from.
Each policy keeps one colour, line style and marker in every plot, so lines that coincide stay
visible, and a note under a panel names the policies whose lines coincide there.
Needs matplotlib (Debian: python3-matplotlib). Standard library otherwise.
"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, ScalarFormatter  # noqa: E402

# One look per policy: the later ones dashed with open markers, so a line drawn on top of an
# earlier one leaves it visible.
STYLE = {
    "static": dict(color="tab:blue", ls="-", marker="o"),
    "baseline": dict(color="tab:orange", ls="-", marker="s"),
    "dp": dict(color="tab:green", ls="-", marker="o", lw=3.2, alpha=0.6),
    "goodput": dict(color="tab:red", ls="--", marker="D", mfc="none"),
}
COINCIDE = 0.03  # relative difference under which lines are drawn on top of each other


def style(p, markers=True):
    s = dict(STYLE.get(p, dict(ls=":", marker="x")))
    if not markers:
        s.pop("marker", None)
        s.pop("mfc", None)
    return s


def coinciding(series):
    """Groups of policies whose lines agree within COINCIDE at every point: {name: [values]}."""
    names = list(series)

    def close(a, b):
        va, vb = series[a], series[b]
        return len(va) == len(vb) and all(abs(x - y) <= COINCIDE * max(abs(x), abs(y), 1e-12) for x, y in zip(va, vb))

    groups = []
    for n in names:
        for g in groups:
            if any(close(n, m) for m in g):
                g.append(n)
                break
        else:
            groups.append([n])
    return [g for g in groups if len(g) > 1]


def note_coincide(ax, series, y=-0.17):
    """A line under the panel naming the policies whose lines lie on top of each other."""
    groups = coinciding(series)
    if groups:
        text = "; ".join(", ".join(g) for g in groups)
        ax.text(0.0, y, "on top of each other (within %d %%): %s" % (COINCIDE * 100, text),
                transform=ax.transAxes, fontsize=8, va="top", style="italic", wrap=True)


def readable_log_axis(axis, lo, hi):
    """Log axis ticks at round numbers inside [lo, hi] (1-2-5 steps, denser for a narrow range),
    printed plainly ("500", "1.5"), no minor labels."""
    fine = (1, 1.5, 2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500, 1000)
    coarse = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
    cands = fine if hi / max(lo, 1e-12) < 60 else coarse
    ticks = [c for c in cands if lo / 1.05 <= c <= hi * 1.05]
    if len(ticks) < 2:
        ticks = sorted({round(lo, 2), round(hi, 2)})
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    axis.set_minor_locator(NullLocator())


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
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    markers = iter("sv^D<>pP*")
    for k, pts in sorted(ratios.items(), key=lambda kv: kv[0] != "all jobs"):
        allj = k == "all jobs"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if allj else next(markers, "x"),
                lw=2.8 if allj else 1.2, color="black" if allj else None, label=k, zorder=3 if allj else 2)
    ax.axhline(2.0, ls="--", color="grey", lw=1, label="2x (the goal: dp twice as fast)")
    ax.axhline(1.0, ls=":", color="grey", lw=1, label="1x (no gain)")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sizes))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")
    values = [v for pts in ratios.values() for _, v in pts] + [1.0, 2.0]
    readable_log_axis(ax.yaxis, min(values), max(values))
    ax.set_xlabel("cluster GPUs (log scale)")
    ax.set_ylabel("baseline / dp mean JCT (log scale)")
    ax.set_title("dp's gain over baseline by model (%s)" % title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
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
    window_d = meta.get("window_s", 7 * 86400) / 86400

    if len(sizes) > 1:
        fig, ax = plt.subplots(1, 2, figsize=(11, 5.0))
        jct, done = {}, {}
        for p in policies:
            rs = sorted((r for r in runs if r["policy"] == p), key=lambda r: r["gpus"])
            g = [r["gpus"] for r in rs]
            jct[p] = [r["avg_jct_s"] / 3600 for r in rs]
            done[p] = [r["completed_in_window"] for r in rs]
            ax[0].plot(g, jct[p], label=p, **style(p))
            ax[1].plot(g, done[p], label=p, **style(p))
        ax[0].set_yscale("log")
        allj = [v for vs in jct.values() for v in vs if v > 0]
        readable_log_axis(ax[0].yaxis, min(allj), max(allj))
        ax[0].set_xlabel("cluster GPUs")
        ax[0].set_ylabel("average JCT (hours, log scale)")
        ax[0].set_title("average job completion time")
        ax[1].set_xlabel("cluster GPUs")
        ax[1].set_ylabel("jobs completed within the window")
        ax[1].set_title("jobs completed in %g days" % round(window_d, 2) if window_d >= 1
                        else "jobs completed in %g hours" % round(window_d * 24, 2))
        note_coincide(ax[0], jct, y=-0.2)
        note_coincide(ax[1], done, y=-0.2)
        for a in ax:
            a.grid(True, alpha=0.3)
            a.legend()
        fig.suptitle(title)
        fig.tight_layout()
        fig.subplots_adjust(bottom=0.2)
        fig.savefig(os.path.join(out, "sweep.png"), dpi=110)
        plt.close(fig)

    if len(sizes) > 1 and "baseline" in policies and "dp" in policies:
        ratio_plot(out, sizes, title)

    # Timeline of the smallest cluster: the trace's submissions span the window (shaded); a
    # policy that cannot keep up drains its backlog long after, so the x axis runs until the
    # last job of any policy ends. Jobs waiting span 0 to thousands: a symmetric log scale keeps
    # the elastic policies' few hundred readable next to static FIFO's thousands.
    g0 = sizes[0]
    fig, ax = plt.subplots(2, 1, figsize=(11, 6.4), sharex=True)
    series = {}
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
        series[p] = (t, used, queued)
    for p, (t, used, queued) in series.items():
        s = style(p, markers=False)
        s["lw"] = min(s.get("lw", 1.0), 1.6)
        label = "%s (last job ends day %.0f)" % (p, t[-1]) if t else p
        ax[0].step(t, used, where="post", label=label, **s)
        ax[1].step(t, queued, where="post", label=label, **s)
    for a in ax:
        a.axvspan(0, window_d, color="grey", alpha=0.12, lw=0)
        a.grid(True, alpha=0.3)
    ax[0].text(window_d, 1.01, " end of the submissions (%g days)" % round(window_d, 2),
               transform=ax[0].get_xaxis_transform(), fontsize=8, va="bottom", ha="left")
    ax[0].set_ylabel("GPUs in use (of %d)" % g0)
    ax[1].set_yscale("symlog", linthresh=10)
    ax[1].set_ylim(bottom=0)
    ax[1].set_ylabel("jobs waiting (log above 10)")
    ax[1].set_xlabel("days since the first submission (shaded: the trace's submission window)")
    ax[0].set_xlim(left=0)
    ax[0].legend(fontsize=8, loc="lower left")
    ax[1].legend(fontsize=8, loc="upper right")
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
            ax.plot([max(x, 1.0) for x in jct], [(i + 1) / n for i in range(n)], label=p, **style(p, markers=False))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
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
