#!/usr/bin/env python3
"""Where a training step's GPU time goes: sums the kernel durations that Nsight Compute measured
(`ncu --metrics gpu__time_duration.sum --csv --log-file F ...`, one row per kernel launch) per
kernel and per group of kernels, divided by the number of training steps of the profiled run.

  kernel_profile.py --steps N --label edp-fp32 edp.csv [--label torch-fp32 torch.csv ...]

Prints, for each file, the GPU milliseconds per step by group (attention, loss, matrix
products, normalisation, optimizer, copies and bf16 conversions, embedding, reductions, elementwise,
other) and the 15 kernels that take the most, then one JSON line per file. Launches outside the
steps (initialisation, the validation pass) are counted too: a kernel launched other than a
multiple of N times shows its count, so they can be told apart.
"""
import argparse
import csv
import json
import re
import sys
from collections import defaultdict

GROUPS = [  # first match wins; names from edp's kernels/*.cu, cuBLAS(Lt)/CUTLASS and PyTorch
    ("attention", r"flash|fmha|attention|regroup|causal_softmax"),
    ("loss", r"xent|cross_entropy|nll_loss|softmax|correct_rows"),
    ("matmul", r"gemm|cutlass|sm90_|sm80_|xmma|cublas|ampere_|hopper|nvjet"),
    ("norm", r"layer_?norm|ln_|bn_|batch_?norm|gammabeta"),
    ("optimizer", r"adam|sgd|optim|multi_tensor|foreach|scale_check|sumsq"),
    ("copy, bf16", r"bf16|bfloat16|copy_kernel"),
    ("embedding", r"embedding|index_?select"),
    ("reduction", r"reduce|sum_partial|sum_finalize|column_sum|plane_sum|partial_accumulate|divide"),
    ("elementwise", r"elementwise|vectorized|act_|gelu|relu|dropout|axpy|scale|fill|bias"),
]
SCALE_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def group_of(name):
    low = name.lower()
    for g, pat in GROUPS:
        if re.search(pat, low):
            return g
    return "other"


def read(path):
    """{kernel name: [launches, total ns]} from an ncu CSV log (ncu's own lines skipped)."""
    rows = [l for l in open(path, errors="replace") if l.startswith('"')]
    if not rows:
        raise SystemExit(f"{path}: no CSV rows from ncu (did the program run any kernel?)")
    per = defaultdict(lambda: [0, 0.0])
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "nsecond").strip()
        if unit not in SCALE_NS:
            raise SystemExit(f"{path}: unknown time unit {unit!r}")
        v = float(r["Metric Value"].replace(",", "")) * SCALE_NS[unit]
        k = per[r["Kernel Name"]]
        k[0] += 1
        k[1] += v
    return per


def short(name, width=70):
    name = re.sub(r"^void ", "", name.replace("(anonymous namespace)::", ""))
    name = re.sub(r"\(.*", "", name)  # drop the argument list
    return name if len(name) <= width else name[: width - 1] + "…"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, required=True, help="training steps in each profiled run")
    ap.add_argument("--label", action="append", required=True, help="a name for the next file")
    ap.add_argument("files", nargs="+")
    a = ap.parse_intermixed_args()
    if len(a.label) != len(a.files):
        ap.error("one --label per file")
    if a.steps < 1:
        ap.error("--steps must be >= 1")
    for label, path in zip(a.label, a.files):
        per = read(path)
        total = sum(v[1] for v in per.values())
        groups = defaultdict(float)
        for name, (n, ns) in per.items():
            groups[group_of(name)] += ns
        ms = lambda ns: ns / 1e6 / a.steps
        print(f"## {label}: {ms(total):.3f} GPU ms per step, {sum(v[0] for v in per.values())} launches "
              f"over {a.steps} step(s)")
        print(f"{'group':<14} {'ms/step':>9} {'share':>6}")
        for g, ns in sorted(groups.items(), key=lambda kv: -kv[1]):
            print(f"{g:<14} {ms(ns):9.3f} {100 * ns / total:5.1f}%")
        print(f"{'kernel':<72} {'launches':>8} {'ms/step':>9} {'share':>6}")
        top = sorted(per.items(), key=lambda kv: -kv[1][1])
        for name, (n, ns) in top[:15]:
            print(f"{short(name):<72} {n:8d} {ms(ns):9.3f} {100 * ns / total:5.1f}%")
        print(json.dumps({"bench": "kernel_profile", "label": label, "steps": a.steps,
                          "gpu_ms_per_step": round(ms(total), 4),
                          "groups_ms_per_step": {g: round(ms(ns), 4) for g, ns in groups.items()},
                          "top": [{"kernel": short(n, 200), "launches": c, "ms_per_step": round(ms(ns), 4)}
                                  for n, (c, ns) in top[:15]]}))
        print()


if __name__ == "__main__":
    sys.exit(main())
