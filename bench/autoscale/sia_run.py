"""One workload in the Sia SOSP'23 artifact's simulator, whatever the policy: what sia_policy.py
(edp's policy) and sia_driver.py (the artifact's own policies) share. Imported by both; not a
program.

  open_artifact(artifact, cluster_spec)   the artifact on sys.path, its per-round printing sent to
                                          /dev/null (returns the real stdout), its configuration
                                          set to the cluster ({type: nodes}); returns (cfg, gpn, out)
  read_workload(path, first)              the workload's jobs (the first N by submission time)
  run(cluster, interval, spent)           steps the cluster to the end, counting GPU time held per
                                          type and restarts onto another type; SIGTERM (the
                                          --timeout of sia_sim.sh) stops it, reported as such
  summary(...)                            the JSON line sia_sim.sh reads (average/p99 JCT, restarts
                                          per job, GPU-hours, per model, the policy's time per round)
"""
import os
import signal
import sys
import time


def open_artifact(artifact, cluster_nodes):
    sys.path.insert(0, os.path.join(os.path.abspath(artifact), "sia-simulator"))
    out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the artifact prints every round (and CBC writes to fd 1)
    import simulator_config as cfg
    unknown = set(cluster_nodes) - set(cfg.cluster_ngpus_per_node)
    if unknown:
        sys.exit("unknown GPU type(s) %s (the artifact has %s)" % (sorted(unknown), sorted(cfg.cluster_ngpus_per_node)))
    cfg.cluster_nnodes = dict(cluster_nodes)
    cfg.num_parallel_jobs = 1
    gpn = {k: cfg.cluster_ngpus_per_node[k] for k in cfg.cluster_nnodes}
    return cfg, gpn, out


def parse_cluster(spec):
    """'aws:6,dgx-ext:2,rtx:3' -> {type: nodes}; None when malformed (distinct types, nodes >= 1)."""
    nodes = {}
    for part in spec.split(","):
        name, _, count = part.partition(":")
        if not name or not count.isdigit() or int(count) == 0 or name in nodes:
            return None
        nodes[name] = int(count)
    return nodes


def read_workload(path, first):
    import pandas
    frame = pandas.read_csv(path)
    if first > 0:
        frame = frame.sort_values("time", kind="stable").head(first).reset_index(drop=True)
    return frame


class Stopped(BaseException):  # SIGTERM during a run
    pass


def _stop(signum, frame):
    raise Stopped()


class Run:
    """What run() measured: wall time, GPU-seconds held per type, restarts onto another type per job,
    and whether SIGTERM stopped it."""

    def __init__(self, cluster):
        self.type_changes = {job.name: 0 for job in cluster.jobs}
        self.held = {}
        self.wall_s = 0.0
        self.stopped = False


def run(cluster, interval):
    r = Run(cluster)
    last_type = {}
    signal.signal(signal.SIGTERM, _stop)
    t0 = time.perf_counter()
    try:
        while not cluster.all_complete():
            before = {job.name: (job.current_cluster, job.attained_service) for job in cluster.jobs}
            cluster.step(interval)
            for job in cluster.jobs:
                kind, service = before[job.name]
                if job.attained_service > service:  # GPU-seconds held in this round, on the type it ran on
                    r.held[kind] = r.held.get(kind, 0.0) + job.attained_service - service
                if job.current_cluster is not None:  # a suspended job has no type; count a restart elsewhere
                    if last_type.get(job.name, job.current_cluster) != job.current_cluster:
                        r.type_changes[job.name] += 1
                    last_type[job.name] = job.current_cluster
    except Stopped:
        r.stopped = True
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    r.wall_s = time.perf_counter() - t0
    return r


def _policy_times(spent):
    ordered = sorted(spent) or [0.0]
    return {"rounds": len(spent), "policy_ms_avg": 1000 * sum(spent) / max(1, len(spent)),
            "policy_ms_p50": 1000 * ordered[len(ordered) // 2], "policy_ms_p95": 1000 * ordered[int(0.95 * len(ordered))],
            "policy_ms_max": 1000 * ordered[-1]}


def summary(cluster, r, workload, policy, interval, cluster_nodes, spent):
    """The run's JSON line (a dict): see sia_sim.sh's header for the fields."""
    head = {"workload": os.path.basename(workload), "policy": policy, "interval_s": interval,
            "cluster": cluster_nodes, "jobs": len(cluster.jobs)}
    jcts = cluster.get_jcts()
    if r.stopped:
        return dict(head, stopped=True, sim_time_s=cluster.current_time, finished=len(jcts),
                    submitted=sum(job.submission_time <= cluster.current_time for job in cluster.jobs),
                    **_policy_times(spent), wall_s=r.wall_s)
    sub = {job.name: job.submission_time for job in cluster.jobs}
    vals = sorted(jcts.values())
    restarts = [job.num_restarts or 0 for job in cluster.jobs]
    apps = {}
    for job in cluster.jobs:
        apps.setdefault(job.app_name, []).append(job)
    n = len(cluster.jobs)
    return dict(head, finished=len(jcts),
                avg_jct_s=sum(vals) / len(vals), p99_jct_s=vals[int(0.99 * len(vals))],
                makespan_s=max(sub[k] + v for k, v in jcts.items()) - min(sub.values()),
                restarts_per_job=sum(restarts) / n, type_changes_per_job=sum(r.type_changes.values()) / n,
                gpu_hours_per_job=sum(r.held.values()) / 3600 / n,
                gpu_hours_by_type={k: v / 3600 for k, v in sorted(r.held.items())},
                by_app={a: {"jobs": len(js), "avg_jct_s": sum(jcts.get(j.name, 0) for j in js) / len(js),
                            "gpu_hours_per_job": sum(j.attained_service for j in js) / 3600 / len(js)}
                        for a, js in sorted(apps.items())},
                **_policy_times(spent), wall_s=r.wall_s)
