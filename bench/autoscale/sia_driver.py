#!/usr/bin/env python3
"""One workload under one of the Sia artifact's own policies, in its simulator; prints one JSON line
(sia_run.summary). Used by sia_sim.sh (policies sia, gavel, pollux), which says how to get the
artifact and its Python:

  sia_driver.py ARTIFACT POLICY WORKLOAD_CSV FIRST CLUSTER_SPEC

It builds what the artifact's multi_simulator.py / multi_simulator_unaware.py build, with the solver
on one thread and the simulator's per-round printing sent to /dev/null. Exit 124 when SIGTERM (the
--timeout of sia_sim.sh) stopped the run; its line then says how far it got.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sia_run  # noqa: E402


def main():
    artifact, policy, workload, first, spec = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    nodes = sia_run.parse_cluster(spec)
    if nodes is None:
        sys.exit("sia_driver.py: the cluster must be TYPE:NODES,... with distinct types, got %r" % spec)
    cfg, gpn, out = sia_run.open_artifact(artifact, nodes)
    cfg.sia_solver_num_threads = 1
    cfg.sia_solver_verbose = False
    frame = sia_run.read_workload(workload, first)
    interval = 360 if policy == "gavel" else 60
    if policy in ("sia", "gavel"):
        from cluster import Cluster
        from gavel import GavelPolicy
        from sia import SiaPolicy
        if policy == "sia":
            pol = SiaPolicy(p_fairness=-0.5, restart_penalty=30, lambda_a=0.01, lambda_n=1.1,
                            project_throughputs=True, share_max_replicas=True, enable_bsz_tuning=True)
        else:
            pol = GavelPolicy(interval, policy=cfg.gavel_default_policy)
        pol.populate_valid_configs(cfg.cluster_nnodes, gpn, cfg.cluster_max_physical_nnodes)
        cluster = Cluster(frame, pol, cfg.cluster_nnodes, gpn, max_physical_nodes=cfg.cluster_max_physical_nnodes)
        if policy == "gavel":
            cluster.disable_bsz_tuning()
        else:
            for job in cluster.jobs:
                if job.category == "rigid":
                    job.seed_profiles_rigid(gpn)
    elif policy == "pollux":
        from cluster_unaware import ClusterUnaware
        from pollux_unaware import PolluxPolicyUnaware
        max_replicas = min(min(gpn[k] * cfg.cluster_nnodes[k], gpn[k] * cfg.cluster_max_physical_nnodes[k]) for k in gpn)
        pol = PolluxPolicyUnaware(-1)
        cluster = ClusterUnaware(frame, pol, cfg.cluster_nnodes, cfg.cluster_ngpus_per_node,
                                 max_num_replicas=max_replicas, max_physical_nodes=cfg.cluster_max_physical_nnodes)
    else:
        sys.exit("sia_driver.py: the driver runs the artifact's policies (sia, gavel, pollux) only, not %r" % policy)
    optimize, spent = pol.optimize, []

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return optimize(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t)

    pol.optimize = timed
    r = sia_run.run(cluster, interval)
    out.write(json.dumps(sia_run.summary(cluster, r, workload, policy, interval, cfg.cluster_nnodes, spent)) + "\n")
    out.flush()
    sys.exit(124 if r.stopped else 0)


if __name__ == "__main__":
    main()
