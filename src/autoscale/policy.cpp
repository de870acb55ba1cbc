// The policy registry (every caller's names) and the pool simulator's policies (policy.h): each
// active job becomes a job of plan.h's request, and decide() values and solves it as it does for
// every other caller.
#include "edp/autoscale/policy.h"

#include <algorithm>

#include "core/text.h"
#include "edp/core/error.h"

namespace edp::autoscale {

// ---- the registry --------------------------------------------------------------------------

const std::vector<PolicyInfo>& policy_table() {
  static const std::vector<PolicyInfo> table = {
      {PolicyKind::Static, "static",
       "FIFO, gang-scheduled at the requested GPUs and the job's own batch; never preempts or rescales; strictly in "
       "order (a job that does not fit blocks later ones)"},
      {PolicyKind::Baseline, "baseline",
       "the MASCOTS'20 paper's baseline: the GPU count chosen by the same DP as dp, the batch fixed at the job's own "
       "(so the per-GPU batch = batch / GPUs must fit in memory)"},
      {PolicyKind::Dp, "dp",
       "the paper's autoscaler: the DP picks GPUs and batch (node-level: the restart-aware throughput DP, the batch "
       "tuned inside the job at every epoch from the true tables)"},
      {PolicyKind::Goodput, "goodput",
       "like dp, but an option is worth its throughput x statistical efficiency (Pollux): progress in samples at the "
       "reference batch per second (node-level: each job's goodput learned online from what it reports)"},
      {PolicyKind::GoodputOracle, "goodput-oracle",
       "goodput from the true tables: the measured step times of the placement and the gradient statistics of every "
       "batch"},
      {PolicyKind::GoodputEager, "goodput-eager",
       "the goodput DP before restart awareness: value rate / remaining work, 5% hysteresis, no pause in the value, "
       "the batch tuned inside the job"},
      {PolicyKind::Tiresias, "tiresias",
       "Tiresias (NSDI'19) as the Pollux artifact runs it: discretised 2D-LAS, two queues, gang-scheduled at the "
       "job's own GPUs"},
      {PolicyKind::Optimus, "optimus",
       "Optimus (EuroSys'18) with oracle throughput as the Pollux artifact runs it: GPUs one at a time to the job "
       "whose remaining time drops most"},
  };
  return table;
}

const char* policy_name(PolicyKind kind) { return policy_table()[static_cast<size_t>(kind)].name; }

namespace {

struct ScopeInfo {
  const char* label;  // in "unknown <label> 'x'"
  std::vector<PolicyKind> kinds;  // in the order help and errors list them
};

const ScopeInfo& scope_info(PolicyScope scope) {
  using K = PolicyKind;
  static const ScopeInfo pool{"policy", {K::Static, K::Baseline, K::Dp, K::Goodput}};
  static const ScopeInfo cluster{"node-level policy",
                                 {K::Tiresias, K::Optimus, K::Goodput, K::GoodputOracle, K::Dp, K::GoodputEager}};
  static const ScopeInfo live{"live policy", {K::Static, K::Dp, K::Goodput}};
  return scope == PolicyScope::Pool ? pool : scope == PolicyScope::Cluster ? cluster : live;
}

}  // namespace

std::vector<std::string> policy_names(PolicyScope scope) {
  std::vector<std::string> out;
  for (PolicyKind k : scope_info(scope).kinds) out.emplace_back(policy_name(k));
  return out;
}

PolicyKind parse_policy(const std::string& name, PolicyScope scope) {
  const ScopeInfo& s = scope_info(scope);
  for (PolicyKind k : s.kinds)
    if (name == policy_name(k)) return k;
  throw Error(std::string("unknown ") + s.label + " '" + name + "' (known: " + text::join(policy_names(scope), ", ") +
              ")");
}

// ---- the pool simulator's policies -----------------------------------------------------------

namespace {

enum class Offer { Own, FixedBatch, Elastic, Goodput };

const std::vector<Config>* offered(const JobState& j, Offer offer) {
  return offer == Offer::FixedBatch ? j.fixed_batch : offer == Offer::Elastic ? j.elastic : j.elastic_goodput;
}

Offer offer_of(const std::string& name) {
  switch (parse_policy(name, PolicyScope::Pool)) {
    case PolicyKind::Static: return Offer::Own;
    case PolicyKind::Baseline: return Offer::FixedBatch;
    case PolicyKind::Dp: return Offer::Elastic;
    default: return Offer::Goodput;
  }
}

// The simulator's jobs as a request of plan.h (reusing `req`'s buffers). Work is counted in the
// simulator's units (samples, or reference-batch samples), floored at one second at the job's own
// rate so that a job about to finish keeps a finite value.
void fill_request(PlanRequest& req, const std::vector<JobState>& active, int capacity, Offer offer,
                  const PolicyConfig& cfg) {
  req.gpus = capacity;
  req.objective = offer == Offer::Own             ? Objective::Fifo
                  : cfg.restart_aware             ? Objective::RestartAware
                  : cfg.weighting == Weighting::Remaining ? Objective::Remaining
                                                          : Objective::Throughput;
  req.hysteresis = cfg.hysteresis;
  req.pause_s = cfg.pause_s;
  req.start_s = cfg.pause_s;
  req.jobs.resize(active.size());
  for (size_t i = 0; i < active.size(); ++i) {
    const JobState& j = active[i];
    PlanJob& pj = req.jobs[i];
    pj.weight = 1.0;
    pj.may_wait = true;
    pj.remaining = std::max(1.0, j.remaining_s) * j.ref_samples_per_s;
    pj.own = Config{j.req_gpus, j.ref_batch, 1, j.ref_samples_per_s, 1.0};
    pj.current = j.cur_gpus > 0 ? Config{j.cur_gpus, j.cur_batch, j.cur_ranks_per_gpu, 0, 1.0} : Config{};
    pj.pause_s = cfg.pause_s;
    pj.start_s = j.started ? cfg.pause_s : 0.0;  // the simulator charges a pause to restarts, not to first starts
    pj.options.clear();
    if (offer == Offer::Own) continue;
    const std::vector<Config>* cfgs = offered(j, offer);
    EDP_CHECK(cfgs != nullptr && j.ref_samples_per_s > 0, "policy: job #", j.index, " has no configurations");
    for (const Config& c : *cfgs) {
      pj.options.push_back(c);
      if (offer != Offer::Goodput) pj.options.back().efficiency = 1.0;
    }
  }
}

// Every policy of the pool simulator is one request to plan.h's decide(): static is its fifo, the
// elastic ones differ only in the configurations they offer and in the objective.
class PlanPolicy final : public Policy {
 public:
  PlanPolicy(std::string name, const PolicyConfig& cfg) : name_(std::move(name)), offer_(offer_of(name_)), cfg_(cfg) {}
  std::string name() const override { return name_; }
  std::vector<Assignment> plan(const std::vector<JobState>& active, int capacity, double) override {
    fill_request(req_, active, capacity, offer_, cfg_);
    const Plan& p = planner_.decide(req_);
    std::vector<Assignment> out(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      const Config& c = p.choices[i].config;
      if (c.gpus > 0) out[i] = Assignment{c.gpus, c.batch, c.ranks_per_gpu};
    }
    return out;
  }

  bool can_run(const JobState& j, int capacity) const override {
    if (offer_ == Offer::Own) return j.req_gpus <= capacity;
    const std::vector<Config>* cfgs = offered(j, offer_);
    if (!cfgs) return false;
    for (const Config& c : *cfgs)
      if (c.gpus <= capacity) return true;
    return false;
  }

 private:
  std::string name_;
  Offer offer_;
  PolicyConfig cfg_;
  PlanRequest req_;  // reused across plans to avoid reallocating
  Planner planner_;
};

}  // namespace

std::unique_ptr<Policy> make_policy(const std::string& name, const PolicyConfig& cfg) {
  EDP_CHECK(cfg.hysteresis >= 0 && cfg.hysteresis < 1, "hysteresis (rescale penalty) must be in [0, 1), got ",
            cfg.hysteresis);
  EDP_CHECK(cfg.pause_s >= 0, "restart pause must be >= 0, got ", cfg.pause_s);
  return std::make_unique<PlanPolicy>(name, cfg);
}

PlanRequest pool_request(const std::vector<JobState>& active, int capacity, const std::string& policy,
                         const PolicyConfig& cfg) {
  PlanRequest req;
  fill_request(req, active, capacity, offer_of(policy), cfg);
  return req;
}

}  // namespace edp::autoscale
