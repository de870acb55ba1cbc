"""`edp-autoscale plan` as the artifacts' adapters call it (pollux_policy.py, sia_policy.py): one
process per round, the request on stdin, the answer on stdout. Keeps what the adapters report (calls,
seconds spent in plan, edp's own solve time) and, with a trace path, writes every request and answer
as a JSON line. Not a program."""
import json
import subprocess
import sys
import time


class PlanClient:
    def __init__(self, edp, trace_path=None, who="adapter"):
        self.edp, self.who = edp, who
        self.calls, self.plan_s, self.solve_ms = 0, 0.0, 0.0
        self.trace = open(trace_path, "w") if trace_path else None

    def __call__(self, req, now):
        """The answer to `req` (a dict) at simulated time `now`; exits naming the failure."""
        t0 = time.perf_counter()
        out = subprocess.run([self.edp, "plan", "--input", "-"], input=json.dumps(req), capture_output=True, text=True)
        self.plan_s += time.perf_counter() - t0
        self.calls += 1
        if out.returncode != 0:
            sys.exit("%s: edp-autoscale plan failed (exit %d) at t=%d: %s"
                     % (self.who, out.returncode, now, out.stderr.strip()))
        ans = json.loads(out.stdout)
        self.solve_ms += ans.get("solve_ms", 0.0)
        if self.trace:
            self.trace.write(json.dumps({"t": now, "request": req, "answer": ans}) + "\n")
        return ans

    def report(self):
        """The fields the adapters add to their JSON line."""
        n = max(1, self.calls)
        return {"plan_calls": self.calls, "plan_ms_avg": 1000 * self.plan_s / n, "solve_ms_avg": self.solve_ms / n}
