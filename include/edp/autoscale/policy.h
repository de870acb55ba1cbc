// The autoscaler's scheduling policies by name (one registry for the pool simulator, the
// node-level simulator, the live controller and serve), and the pool simulator's policies behind
// one interface so more can be added: a policy sees the active jobs (arrived, not finished, in
// submission order) and returns every job's (GPUs, global batch); 0 GPUs means the job waits or
// is preempted. What each policy does is its description in policy_table() (policy.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "edp/autoscale/plan.h"

namespace edp::autoscale {

// Every policy the autoscaler knows.
enum class PolicyKind { Static, Baseline, Dp, Goodput, GoodputOracle, GoodputEager, Tiresias, Optimus };

// The callers that take a policy by name; each implements some of the policies:
//   Pool     the pool simulator (simulate, workload): static, baseline, dp, goodput
//   Cluster  the node-level simulator (simulate --compare-published): tiresias, optimus, goodput,
//            goodput-oracle, dp, goodput-eager
//   Live     the live controller (serve, plan_live): static, dp, goodput
enum class PolicyScope { Pool, Cluster, Live };

struct PolicyInfo {
  PolicyKind kind;
  const char* name;         // as flags, files and logs write it
  const char* description;  // what it decides, for help and docs
};

// The registry: one entry per policy, in PolicyKind's order.
const std::vector<PolicyInfo>& policy_table();
const char* policy_name(PolicyKind kind);
// The names `scope` takes, in the order its help and errors list them.
std::vector<std::string> policy_names(PolicyScope scope = PolicyScope::Pool);
// `name` as a policy of `scope`. Anything else throws edp::Error listing the names `scope` takes:
// "unknown policy 'x' (known: static, baseline, dp, goodput)"; the node-level simulator's says
// "unknown node-level policy", the live controller's "unknown live policy".
PolicyKind parse_policy(const std::string& name, PolicyScope scope);

struct JobState {
  int index = 0;  // the simulator's job index (stable)
  double submit_s = 0;
  int req_gpus = 0;
  int ref_batch = 0;
  double ref_samples_per_s = 0;  // at (req_gpus, ref_batch)
  // Allowed configurations (plan.h's Config: efficiency relative to the job's own batch, ranks per
  // GPU for collocation), best batch per GPU count (dp/goodput use them)...
  const std::vector<Config>* elastic = nullptr;
  // ...best batch per GPU count by goodput (samples/s x efficiency; the goodput policy)...
  const std::vector<Config>* elastic_goodput = nullptr;
  // ...and those with batch == ref_batch (baseline).
  const std::vector<Config>* fixed_batch = nullptr;
  int cur_gpus = 0;
  int cur_batch = 0;
  int cur_ranks_per_gpu = 1;
  bool started = false;  // has run before (a restart costs the rescale pause)
  double remaining_s = 0;  // remaining work divided by ref_samples_per_s (time left at its own config)
};

struct Assignment {
  int gpus = 0;
  int batch = 0;
  int ranks_per_gpu = 1;
};

// How the elastic policies value an option (plan.h's objectives):
//   "equal":     the speedup over the job's own configuration (objective throughput);
//   "remaining": the fraction of its remaining work a job completes per second (objective
//                remaining), an SRPT-like priority that targets average completion time.
enum class Weighting { Equal, Remaining };

struct PolicyConfig {
  double hysteresis = 0.05;  // value fraction an option other than the current one loses (--rescale-penalty)
  Weighting weighting = Weighting::Remaining;  // the documented default (docs/autoscaler.md §3)
  // Restart-aware values (elastic policies): an option is worth 1 / (the time the job still needs
  // at it + `pause_s` if taking it restarts the job), so a change must pay for its pause over the
  // job's remaining time (docs/autoscaler.md §7). Replaces the weighting when on.
  bool restart_aware = false;
  double pause_s = 30;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  virtual std::vector<Assignment> plan(const std::vector<JobState>& active, int capacity, double now_s) = 0;
  // Whether the job could ever run on `capacity` GPUs under this policy.
  virtual bool can_run(const JobState& job, int capacity) const = 0;
};

// A policy of the pool simulator (parse_policy(name, PolicyScope::Pool)).
std::unique_ptr<Policy> make_policy(const std::string& name, const PolicyConfig& cfg = {});

// The request (plan.h) a policy of this simulator decides on for these jobs: static is objective
// fifo; the elastic ones restart-aware when cfg.restart_aware, else remaining or throughput by the
// weighting. Each job's remaining work is remaining_s x ref_samples_per_s, floored at one second's
// work; a restart (started before) costs pause_s, a first start nothing.
PlanRequest pool_request(const std::vector<JobState>& active, int capacity, const std::string& policy,
                         const PolicyConfig& cfg);

}  // namespace edp::autoscale
