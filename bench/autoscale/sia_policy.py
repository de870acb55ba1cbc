#!/usr/bin/env python3
"""edp's autoscaler as the scheduling policy of the Sia SOSP'23 artifact's simulator (GPU types).

  sia_policy.py --artifact DIR --workload CSV --edp BIN [--first N] [--cluster aws:6,dgx-ext:2,rtx:3]
      [--rates oracle|online] [--interval 60] [--hysteresis 0] [--margin 300] [--pause-per-gpu 1]
      [--fixed-share 0.75] [--trust-half 0.25]
      [--trace FILE]

DIR is a checkout of the public repository siasosp23/artifacts (its sia-simulator/ is imported
from there; no artifact code is part of edp); CSV one of its workloads; BIN edp-autoscale. Used by
bench/autoscale/sia_sim.sh (policy edp), which says how to get the artifact and its Python.

The artifact's own Cluster and Job classes run the workload on a cluster of several GPU types
(default: the paper's 64 GPUs, 6 aws nodes x 4 T4, 2 dgx-ext x 8 A100, 3 rtx x 8 RTX 2080Ti);
only the policy is replaced. Every interval this adapter sends the cluster state to
`edp-autoscale plan` (version 2 with "types", docs/plan.md) and applies the answer:
  types       one per GPU type in the cluster's order; node indices run across the types in order
  remaining   (declared progress of max_epochs - progress done) x the initial batch, in
              "samples x efficiency" (the simulator's progress is in iterations at that batch)
  current     its type, GPU count, the batch edp gave it, the global index of each GPU's node
  pause_s     the model's restart delay in the simulator (a type change costs the same);
              start_s the same (a first start pays it too); a job still restarting keeps its
              configuration (may_wait false, its current option only: Sia's rule)
  options     (--rates oracle, the default) oracle rates: per type, the GPU counts Sia's configurations allow there (1, 2, 4,
              (8) GPUs on one node, then whole nodes up to the profiled node limit), each at the
              global batch with the best true goodput on that type's tables (the split of a batch
              into micro-batch and accumulation steps as the simulator makes it), samples_per_s =
              true throughput x the model's calibration slowdown, efficiency = Pollux's gain at
              that batch from the job's true gradient statistics at its epoch
  learn       (--rates online) instead of options: what Sia's policy knows of the job, as edp's
              learned model takes it (docs/plan.md, "Several GPU types"): its batch limits, each
              step it ran per type (the simulator's profile: nodes, GPUs, micro-batch, step and
              sync time, slowed by the model's calibration factor, which Sia is told too), its
              latest gradient statistics, and per type its micro-batch limit and its 1-GPU
              throughput there (Sia's bootstrap: the largest 1-GPU micro-batch over its step time
              in that type's table); edp builds the options itself. A job still restarting keeps
              its configuration, valued from its step there (or its 1-GPU speed when it has none)
and the answer's type and nodes become the job's allocation; its batch becomes the job's batch
(bsz tuning off: the simulator splits edp's batch for its placement, at once where the GPUs stay).
Prints one JSON line with the fields sia_sim.sh reads (average/p99 JCT, restarts per job, ...).
"""
import argparse
import json
import math
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sia_run  # noqa: E402  (what this adapter shares with sia_driver.py)
from plan_client import PlanClient  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", required=True, help="checkout of siasosp23/artifacts (has sia-simulator/)")
    ap.add_argument("--workload", required=True, help="a workload CSV of the artifact (sia-simulator/workloads/...)")
    ap.add_argument("--edp", required=True, help="the edp-autoscale binary")
    ap.add_argument("--first", type=int, default=0, help="keep the first N jobs by submission time (0: all)")
    ap.add_argument("--cluster", default="aws:6,dgx-ext:2,rtx:3", help="nodes per GPU type, TYPE:NODES,...")
    ap.add_argument("--rates", choices=("oracle", "online"), default="oracle",
                    help="oracle: options from the simulator's true tables; online: edp learns from what the job reports")
    ap.add_argument("--interval", type=int, default=60, help="scheduling interval (s), Sia's")
    # edp's node-level policy: no relative hysteresis, a change must save 300 s beyond its pause, a
    # running job's pause counts (1 + 1 x its GPUs) times (pollux_policy.py: 150 s and 0.5; here the
    # restarts are 25-250 s, chosen on philly and saturn in edp's own simulator, docs/autoscaler.md §9).
    ap.add_argument("--hysteresis", type=float, default=0.0)
    ap.add_argument("--margin", type=float, default=300.0, help="seconds a change must save beyond its pause")
    ap.add_argument("--pause-per-gpu", type=float, default=1.0)
    # The learning priors (--rates online; docs/plan.md, "learn"): bolder than plan's defaults (0.25
    # and 1), chosen on philly and saturn in edp's own simulator (docs/autoscaler.md §9).
    ap.add_argument("--fixed-share", type=float, default=0.75,
                    help="share of a step's compute taken as fixed while one micro-batch was measured")
    ap.add_argument("--trust-half", type=float, default=0.25,
                    help="configurations measured at which a prediction away from them is believed half")
    ap.add_argument("--trace", help="write every request and answer here (JSON lines)")
    args = ap.parse_args()
    sim = os.path.join(args.artifact, "sia-simulator")
    if not os.path.isfile(os.path.join(sim, "cluster.py")):
        ap.error("--artifact %r has no sia-simulator/cluster.py (a checkout of siasosp23/artifacts)" % args.artifact)
    if not os.path.isfile(args.workload):
        ap.error("--workload %r: no such file" % args.workload)
    if not (os.path.isfile(args.edp) and os.access(args.edp, os.X_OK)):
        ap.error("--edp %r is not an executable file" % args.edp)
    if args.first < 0:
        ap.error("--first must be >= 0, got %d" % args.first)
    if args.interval <= 0:
        ap.error("--interval must be > 0, got %d" % args.interval)
    if not 0 <= args.hysteresis < 1:
        ap.error("--hysteresis must be in [0, 1), got %g" % args.hysteresis)
    if args.margin < 0 or args.pause_per_gpu < 0:
        ap.error("--margin and --pause-per-gpu must be >= 0")
    if not 0 <= args.fixed_share < 1 or not 0.01 <= args.trust_half <= 100:
        ap.error("--fixed-share must be in [0, 1) and --trust-half in [0.01, 100]")
    args.cluster_nodes = sia_run.parse_cluster(args.cluster)
    if args.cluster_nodes is None:
        ap.error("--cluster must be TYPE:NODES,... with distinct types and NODES >= 1, got %r" % args.cluster)
    return args


class EdpPolicy:
    """Stands in for the artifact's policy: optimize(job_infos, node_infos, prev_allocations) every
    interval returns {job: (type, [type-local node index per GPU])}."""

    def __init__(self, cluster, args, max_physical_nodes):
        self.cluster = cluster
        self.args = args
        self.by_name = {job.name: job for job in cluster.jobs}
        self.types = list(cluster.clusters)  # the cluster's order: global node indices follow it
        self.gpn = {t: cluster.ngpus_per_node[t] for t in self.types}
        self.offset, k = {}, 0
        for t in self.types:
            self.offset[t] = k
            k += cluster.num_nodes[t]
        # Sia's configurations per type: 1, 2, 4 (8) GPUs on one node, then whole nodes
        self.counts = {}
        for t in self.types:
            g, n = self.gpn[t], min(cluster.num_nodes[t], max_physical_nodes[t])
            self.counts[t] = sorted({c for c in (1, 2, 4, 8) if c <= g} | {g * m for m in range(1, n + 1)})
        self.timings, self.batch_sets = {}, {}
        self.plan = PlanClient(args.edp, args.trace, "sia_policy.py")
        self.spent = []

    # ---- what the adapter knows of a job ----

    @staticmethod
    def remaining(job):
        app = job.applications[job.current_cluster] if job.current_cluster else job.reference_app
        total = app.get_progress(app.max_epochs)  # shared by all types (same validation tables)
        return max(1e-6, total - job.progress) * app.init_batch_size

    @staticmethod
    def split(app, placement, batch):
        """(micro-batch, accumulation steps) the simulator runs `batch` at on `placement`, with bsz
        tuning off (as Job.update_local_bsz splits a given batch)."""
        n = sum(placement)
        max_local = app.get_max_local_bsz(placement)
        local = math.ceil(batch / n - 1e-8)
        accum = math.ceil(local / max_local - 1e-8) - 1
        if n == 1 and batch > app.init_batch_size:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        rows = app.placements[app.placements.num_replicas == n]
        if len(rows):  # the simulator's memory correction for a profiled GPU count
            atomic = min(atomic, int(rows.local_bsz.max()))
        return min(atomic, int(app.max_batch_size / (n * (accum + 1)))), accum

    def timing(self, app, t, placement, m):
        """(micro-batch, accumulation steps, seconds per iteration) of global batch m on `placement`
        of type t (None where the tables have no entry); cached: it depends on the tables only."""
        key = (app.name, t, placement, m)
        if key not in self.timings:
            atomic, accum = self.split(app, placement, m)
            step, sync = app.get_throughput(placement, atomic) if atomic >= 1 else (-1, -1)
            self.timings[key] = (atomic, accum, step + accum * (step - sync)) if step > 0 else None
        return self.timings[key]

    def batches(self, app, t, placement):
        """Every global batch the tables' micro-batches and up to 16 accumulation steps make."""
        key = (app.name, t, placement)
        if key not in self.batch_sets:
            n = sum(placement)
            max_local = int(app.get_max_local_bsz(placement))
            grid = sorted({int(b) for b in app.placements.local_bsz.values if app.min_local_bsz <= b <= max_local})
            found = set()
            for atomic in grid:
                for accum in range(16):
                    m = n * atomic * (accum + 1)
                    if m > app.max_batch_size:
                        break
                    if m >= app.init_batch_size:
                        found.add(m)
            self.batch_sets[key] = sorted(found)
        return self.batch_sets[key]

    def option(self, job, t, placement, batches=None):
        """The best of `batches` (default: self.batches) for `job` on `placement` of type t, as an
        edp option: samples_per_s and goodput as Job.step computes them (calibration slowdown
        included), efficiency = goodput / samples_per_s at the initial batch (None: none valid)."""
        app = job.applications[t]
        n = sum(placement)
        if n * app.min_local_bsz > app.max_batch_size:
            return None
        best = None
        for m in (self.batches(app, t, placement) if batches is None else batches):
            timing = self.timing(app, t, placement, m)
            if timing is None:
                continue
            atomic, accum, total = timing
            real = n * atomic * (accum + 1)  # the batch the split really runs
            if not app.init_batch_size <= real <= app.max_batch_size:
                continue
            sqr, var = app.get_grad_stats(real, job.epoch)
            gain = (var + sqr) / (var / (real / app.init_batch_size) + sqr)
            goodput, sps = gain / total * job.calibration_factor, real / total * job.calibration_factor
            if best is None or goodput > best[0]:
                best = (goodput, m, sps)
        if best is None:
            return None
        goodput, batch, sps = best
        return {"type": t, "gpus": n, "batch": batch, "samples_per_s": sps,
                "efficiency": goodput * app.init_batch_size / sps}

    def packed(self, t, n):
        g = self.gpn[t]
        return (n,) if n <= g else (g,) * (n // g)

    def options(self, job):
        opts = []
        cur = tuple(filter(None, job.placement))
        for t in self.types:
            for n in self.counts[t]:
                # the current count on the current type at the job's actual placement
                placement = cur if (t == job.current_cluster and sum(cur) == n) else self.packed(t, n)
                o = self.option(job, t, placement)
                if o:
                    opts.append(o)
        return opts

    def speed(self, app):
        """Sia's bootstrap throughput of `app` (one type's application) on one GPU: its largest
        1-GPU micro-batch over that row's step time (the artifact's compute_throughputs)."""
        one = app.placements[app.placements.num_replicas == 1]
        return float(one.local_bsz.max() / one.step_time.max())

    def learn_block(self, job):
        ref = job.applications[self.types[0]]
        slow = 1.0 / job.calibration_factor  # real steps are this much slower than the tables
        learn = {"init_batch": int(ref.init_batch_size), "max_batch": int(ref.max_batch_size),
                 "min_local": int(ref.min_local_bsz),
                 "max_gpus": max(self.counts[t][-1] for t in self.types), "accumulate_on_one_gpu": True,
                 "fixed_share": self.args.fixed_share, "trust_half": self.args.trust_half,
                 "observed": [{"type": t, "nodes": int(k[0]), "gpus": int(k[1]), "local_batch": int(k[2]),
                               "step_s": float(v[0]) * slow, "sync_s": float(v[1]) * slow}
                              for t, prof in job.profiles.items() for k, v in prof.items()],
                 "types": [{"name": t, "max_local": int(job.applications[t].max_local_bsz),
                            "speed": self.speed(job.applications[t])} for t in self.types]}
        if job.grad_params is not None:
            sqr, var = job.grad_params
            learn["grad"] = {"sqr": float(sqr), "var": float(var)}
        return learn

    def kept_option(self, job, t, placement, batch):
        """A restarting job's one option where it is, valued from what it reported there (online)."""
        if self.args.rates == "oracle":
            return self.option(job, t, placement, [batch])
        atomic, accum = self.split(job.applications[t], placement, batch)
        n = sum(placement)
        prof = job.profiles.get(t, {}).get((len(placement), n, atomic))
        if prof:
            total = (prof[0] + accum * (prof[0] - prof[1])) / job.calibration_factor
            sps = n * atomic * (accum + 1) / total
        else:
            sps = self.speed(job.applications[t]) * n * job.calibration_factor
        return {"type": t, "gpus": n, "batch": batch, "samples_per_s": sps, "efficiency": 1.0}

    def current(self, job, alloc):
        t, nodes = alloc
        return {"type": t, "gpus": len(nodes), "batch": int(job.target_batch_size),
                "nodes": [self.offset[t] + k for k in nodes]}

    # ---- one interval ----

    def optimize(self, job_infos, node_infos, prev_allocations):
        t_start = time.perf_counter()
        req_jobs = []
        for name in job_infos:
            job = self.by_name[name]
            alloc = prev_allocations.get(name)
            app = job.applications[self.types[0]]
            j = {"id": name, "remaining": self.remaining(job),
                 "pause_s": float(app.rescale_time), "start_s": float(app.rescale_time),
                 "rebatch_s": 0}  # a new batch on the same GPUs: taken at the next step, no restart
            if alloc and alloc[0] is not None and len(alloc[1]):
                j["current"] = self.current(job, alloc)
                if job.rescale_time > 0:  # still restarting: it keeps its configuration (Sia's rule)
                    o = self.kept_option(job, alloc[0], tuple(filter(None, job.placement)), j["current"]["batch"])
                    if o is None:
                        sys.exit("sia_policy.py: job %s has no valid option at its current placement" % name)
                    j["options"], j["may_wait"] = [o], False
            if "options" not in j and self.args.rates == "online":
                j["learn"] = self.learn_block(job)
            elif "options" not in j:
                j["options"] = self.options(job)
                if not j["options"]:
                    sys.exit("sia_policy.py: job %s has no valid configuration on any type" % name)
            req_jobs.append(j)
        req = {"version": 2, "policy": "restart-aware", "hysteresis": self.args.hysteresis,
               "margin_s": self.args.margin, "pause_per_gpu": self.args.pause_per_gpu,
               "types": [{"name": t, "gpus": self.gpn[t] * self.cluster.num_nodes[t],
                          "nodes": [self.gpn[t]] * self.cluster.num_nodes[t]} for t in self.types],
               "jobs": req_jobs}
        ans = self.plan(req, self.cluster.current_time)
        allocations = {}
        for a in ans["allocations"]:
            if a["gpus"] == 0:
                continue
            t = a["type"]
            lo, hi = self.offset[t], self.offset[t] + self.cluster.num_nodes[t]
            if len(a["nodes"]) != a["gpus"] or not all(lo <= k < hi for k in a["nodes"]):
                sys.exit("sia_policy.py: edp placed %s (type %s) on nodes %s outside [%d, %d)" % (a["id"], t, a["nodes"], lo, hi))
            nodes = sorted(k - lo for k in a["nodes"])  # grouped: the simulator reads runs of equal indices
            prev = prev_allocations.get(a["id"])
            allocations[a["id"]] = (t, nodes)
            job = self.by_name[a["id"]]
            job.target_batch_size = int(a["batch"])
            if prev is not None and prev[0] == t and len(prev[1]) == len(nodes) and job.placement:
                job.update_local_bsz(job.placement)  # a new batch where it runs: no restart
        self.spent.append(time.perf_counter() - t_start)
        return allocations


def main():
    args = parse_args()
    try:
        cfg, gpn, out = sia_run.open_artifact(args.artifact, args.cluster_nodes)
    except SystemExit as e:
        sys.exit("sia_policy.py: %s" % e)
    from cluster import Cluster
    from sia import SiaPolicy

    frame = sia_run.read_workload(args.workload, args.first)
    if "category" in frame.columns and set(frame.category.dropna()) - {"adaptive"}:
        sys.exit("sia_policy.py: only adaptive jobs are supported; %s has categories %s"
                 % (args.workload, sorted(set(frame.category.dropna()))))
    # Built as for Sia (the Cluster accepts Sia's policy class only), then the policy is replaced.
    sia = SiaPolicy(enable_bsz_tuning=False)
    sia.populate_valid_configs(cfg.cluster_nnodes, gpn, cfg.cluster_max_physical_nnodes)
    cluster = Cluster(frame, sia, cfg.cluster_nnodes, gpn, max_physical_nodes=cfg.cluster_max_physical_nnodes)
    for job in cluster.jobs:
        if job.app_name == "ncf":
            sys.exit("sia_policy.py: ncf jobs (fixed batch, one GPU) are not supported")
        job.disable_bsz_tuning()  # each job runs the batch edp names
    policy = EdpPolicy(cluster, args, cfg.cluster_max_physical_nnodes)
    sia.optimize = policy.optimize
    # The artifact builds Sia's job infos each round (a goodput fit per job and type); edp reads
    # only which jobs are active, so a cheap stand-in saves that time without changing the run.
    cluster.get_sia_multi_job_info = lambda job: types.SimpleNamespace(name=job.name)

    r = sia_run.run(cluster, args.interval)
    line = sia_run.summary(cluster, r, args.workload, "edp", args.interval, cfg.cluster_nnodes, policy.spent)
    line.update({"rates": args.rates, "hysteresis": args.hysteresis, "margin_s": args.margin,
                 "pause_per_gpu": args.pause_per_gpu, "fixed_share": args.fixed_share, "trust_half": args.trust_half,
                 **policy.plan.report()})
    out.write(json.dumps(line) + "\n")
    out.flush()
    sys.exit(124 if r.stopped else 0)


if __name__ == "__main__":
    main()
