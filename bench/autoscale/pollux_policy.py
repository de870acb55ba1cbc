#!/usr/bin/env python3
"""edp's autoscaler as an outside scheduler inside the Pollux OSDI'21 artifact's simulator.

Runs one workload of the artifact (petuum/adaptdl, branch osdi21-artifact, simulator/) with its
own Cluster and Job classes, replacing only the scheduling policy: every interval this adapter
sends the cluster state to `edp-autoscale plan` (the version-2 JSON contract, docs/plan.md) and
applies the answer. It imports the artifact from the path given; no artifact code is part of edp.
Used by bench/autoscale/pollux_sim.sh, which says how to get the artifact and its Python.

What it tells edp about a job (per interval):
  remaining   the work left: (declared progress of max_epochs - progress done) x the initial batch,
              in "samples x efficiency"
  current     the GPUs it holds now (and the batch it runs, when edp chose it)
  options     --rates oracle: one per GPU count that packs onto nodes (1-4, whole nodes), with the
              true throughput and efficiency of the best batch there (the simulator's tables);
              --rates online: none; the job's reported profile (configurations it ran at and
              their step/sync times) and its reported gradient statistics, from which edp
              learns ("learn" in the request)
and it maps edp's GPU counts to nodes with edp's own placement (the answer's "nodes").
Prints one JSON line: average JCT, restarts per job, plan calls and times.
"""
import argparse
import json
import math
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plan_client import PlanClient  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", required=True, help="checkout of petuum/adaptdl at branch osdi21-artifact")
    ap.add_argument("--edp", help="the edp-autoscale binary (required unless --peer)")
    ap.add_argument("--peer", choices=["tiresias", "optimus", "pollux"],
                    help="run the artifact's own policy instead of edp (to count its restarts)")
    ap.add_argument("--workload", required=True, help="a workload CSV of the artifact (simulator/workloads*/...)")
    ap.add_argument("--rates", choices=["oracle", "online"], default="online",
                    help="oracle: the simulator's true tables; online: edp learns from what the job reports")
    ap.add_argument("--batch", choices=["job", "edp"], default="edp",
                    help="job: the artifact's own per-job batch tuning (Pollux's agent); edp: the batch edp chose")
    ap.add_argument("--interval", type=int, default=60, help="scheduling interval (s), the artifact's default")
    # edp's node-level policy (cluster_sim.h, ClusterPolicyConfig): no relative hysteresis, a change
    # must save 150 s beyond its pause, a running job's pause counts (1 + 0.5 x its GPUs) times.
    ap.add_argument("--hysteresis", type=float, default=0.0)
    ap.add_argument("--margin", type=float, default=150.0, help="seconds a change must save beyond its pause")
    ap.add_argument("--pause-per-gpu", type=float, default=0.5)
    ap.add_argument("--pause", type=float, default=30.0, help="the artifact's restart time (s)")
    ap.add_argument("--trace", help="write every request and answer here (JSON lines)")
    args = ap.parse_args()
    if not args.peer and not args.edp:
        ap.error("--edp is required (or --peer)")
    if args.rates == "online" and args.batch != "edp":
        ap.error("--rates online learns the goodput of the batch edp names: it needs --batch edp")
    return args


class EdpPolicy:
    """The artifact calls optimize(jobs, nodes, prev_allocations, node_template) every interval."""

    def __init__(self, cluster, args):
        self.cluster = cluster
        self.args = args
        self.by_name = {job.name: job for job in cluster.jobs}
        self.plan = PlanClient(args.edp, args.trace, "pollux_policy.py")

    # ---- what the adapter knows of a job ----

    def remaining(self, job):
        app = job.application
        total = app.get_progress(app.max_epochs)  # the declared epochs, in scale-invariant iterations
        return max(1e-6, (total - job.progress)) * app.init_batch_size

    def oracle_options(self, job, gpn, capacity, cur_placement=None):
        app = job.application
        maxg = 1 if app.name == "ncf" else min(64, capacity, app.max_batch_size // app.min_local_bsz)
        grid = sorted(set(int(b) for b in app.placements.local_bsz.values
                          if app.min_local_bsz <= b <= app.max_local_bsz))
        opts = []
        for n in range(1, maxg + 1):
            if n > gpn and n % gpn:
                continue
            placement = tuple(min(gpn, n - k) for k in range(0, n, gpn))
            if cur_placement and sum(cur_placement) == n:
                placement = cur_placement
            best = None
            if app.name == "ncf":
                cands = [self.fixed_rule(app, n, 32768)]
            else:
                cands = set()
                for atomic in grid:
                    for accum in range(16):
                        m = n * atomic * (accum + 1)
                        if m > app.max_batch_size:
                            break
                        if m < app.init_batch_size and n * app.min_local_bsz <= app.init_batch_size:
                            continue
                        if self.args.batch == "edp":
                            cands.add(self.fixed_rule(app, n, m))
                        else:
                            cands.add((atomic, accum))
                cands = sorted(cands)
            for atomic, accum in cands:
                g = self.true_rate(job, placement, atomic, accum)
                if best is None or g[0] > best[0]:
                    best = (g[0], n * atomic * (accum + 1), g[1])
            if best is None:
                continue
            goodput, batch, sps = best
            opts.append({"gpus": n, "batch": batch if self.args.batch == "edp" else 0,
                         "samples_per_s": sps, "efficiency": goodput * app.init_batch_size / sps})
        return opts

    @staticmethod
    def fixed_rule(app, n, batch):
        local = math.ceil(batch / n - 1e-8)
        accum = math.ceil(local / app.max_local_bsz - 1e-8) - 1
        if n == 1 and batch > app.init_batch_size:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, int(app.max_batch_size / (n * (accum + 1))))
        return atomic, accum

    def true_rate(self, job, placement, atomic, accum):
        app = job.application
        step, sync = app.get_throughput(placement, atomic)
        total = step + accum * (step - sync)
        m = sum(placement) * atomic * (accum + 1)
        sqr, var = app.get_grad_stats(m, job.epoch)
        scale = m / app.init_batch_size
        gain = (var + sqr) / (var / scale + sqr)
        return gain / total, m / total

    # ---- one interval ----

    def optimize(self, jobs, nodes, prev_allocations, node_template):
        gpn = int(node_template.resources["nvidia.com/gpu"])
        node_ids = sorted(nodes)
        capacity = gpn * len(node_ids)
        req_jobs = []
        for name in jobs:
            job = self.by_name[name]
            alloc = prev_allocations.get(name, [])
            j = {"id": name, "remaining": self.remaining(job)}
            if alloc:
                j["current"] = {"gpus": len(alloc), "batch": self.current_batch(job),
                                "nodes": [node_ids.index(k) for k in alloc]}
            if self.args.batch == "edp":
                j["rebatch_s"] = 0  # the job takes a new batch at its next step
            if self.args.rates == "online":
                j["learn"] = self.learn_block(job)
            elif self.args.batch == "edp":  # the current count at the job's actual placement
                j["options"] = self.oracle_options(job, gpn, capacity, tuple(filter(None, job.placement)) or None)
            else:
                j["options"] = self.oracle_options(job, gpn, capacity)
                if alloc:  # the current configuration at its actual rate (its real placement and batch)
                    self.actual_current(job, j)
            req_jobs.append(j)
        req = {"version": 2, "gpus": capacity, "policy": "restart-aware", "hysteresis": self.args.hysteresis,
               "pause_s": self.args.pause, "start_s": self.args.pause, "margin_s": self.args.margin,
               "pause_per_gpu": self.args.pause_per_gpu,
               "nodes": [gpn] * len(node_ids), "jobs": req_jobs}
        ans = self.plan(req, self.cluster.current_time)
        allocations = {}
        for a in ans["allocations"]:
            if a["gpus"] == 0:
                continue
            allocations[a["id"]] = [node_ids[k] for k in a["nodes"]]
            job = self.by_name[a["id"]]
            if self.args.batch == "edp" and job.application.name != "ncf":
                job.target_batch_size = a["batch"]
                if allocations[a["id"]] == prev_allocations.get(a["id"]):
                    job.update_local_bsz(job.placement)  # a new batch where it runs: no restart
        return allocations, len(nodes)

    def current_batch(self, job):
        if self.args.batch == "edp" and job.target_batch_size:
            return job.target_batch_size
        return 0

    def actual_current(self, job, j):
        placement = tuple(filter(None, job.placement))
        if not placement or not job.atomic_bsz:
            return
        goodput, sps = self.true_rate(job, placement, job.atomic_bsz, job.accum_steps)
        for o in j["options"]:
            if o["gpus"] == j["current"]["gpus"]:
                o["samples_per_s"] = sps
                o["efficiency"] = goodput * job.application.init_batch_size / sps

    def learn_block(self, job):
        app = job.application
        learn = {"init_batch": int(app.init_batch_size), "max_batch": int(app.max_batch_size),
                 "min_local": int(app.min_local_bsz), "max_local": int(app.max_local_bsz),
                 "max_gpus": 1 if app.name == "ncf" else 64, "accumulate_on_one_gpu": True,
                 "observed": [{"nodes": int(k[0]), "gpus": int(k[1]), "local_batch": int(k[2]),
                               "step_s": float(v[0]), "sync_s": float(v[1])} for k, v in job.profile.items()]}
        if app.name == "ncf":
            learn["fixed_batch"] = 32768
        if job.grad_params is not None:
            sqr, var = job.grad_params
            learn["grad"] = {"sqr": float(sqr), "var": float(var)}
        return learn


def main():
    args = parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(args.artifact), "simulator"))
    import numpy
    import pandas
    import simulator as sim

    for alias, builtin in (("int", int), ("float", float), ("bool", bool)):
        if not hasattr(numpy, alias):  # numpy >= 1.24 dropped the aliases the artifact's Pollux policy uses
            setattr(numpy, alias, builtin)

    workload = pandas.read_csv(args.workload)
    if args.peer:
        policy = {"tiresias": lambda: sim.TiresiasPolicy(lambda: cluster.current_time),
                  "optimus": sim.OptimusPolicy, "pollux": sim.PolluxPolicy}[args.peer]()
        cluster = sim.Cluster(workload, policy, 16, num_gpus=4)
    else:
        # Built as for Pollux so that the jobs are the artifact's adaptive ones (ncf at 32768).
        cluster = sim.Cluster(workload, sim.PolluxPolicy(), 16, num_gpus=4)
        policy = EdpPolicy(cluster, args)
        cluster.policy = policy
        # The artifact hands a policy Pollux's job infos (fitting its goodput model each interval);
        # edp does not read them, so a cheap stand-in saves that time without changing the run.
        cluster.get_pollux_job_info = lambda job: types.SimpleNamespace(name=job.name)
    t0 = time.perf_counter()
    while not cluster.all_complete():
        cluster.step(args.interval)
    wall = time.perf_counter() - t0
    jcts = cluster.get_jcts()
    restarts = [job.num_restarts or 0 for job in cluster.jobs]
    out = {"workload": os.path.basename(args.workload), "policy": args.peer or "edp",
           "interval_s": args.interval, "jobs": len(cluster.jobs), "finished": len(jcts),
           "avg_jct_s": sum(jcts.values()) / len(jcts), "restarts_per_job": sum(restarts) / len(restarts),
           "wall_s": wall}
    if not args.peer:
        out.update({"rates": args.rates, "batch": args.batch, "hysteresis": args.hysteresis,
                    "margin_s": args.margin, "pause_per_gpu": args.pause_per_gpu, **policy.plan.report()})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
