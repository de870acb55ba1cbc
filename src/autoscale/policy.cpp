// The simulator's policies (policy.h): each active job becomes a job of plan.h's request, and
// decide() values and solves it as it does for every other caller.
#include "edp/autoscale/policy.h"

#include <algorithm>

#include "edp/core/error.h"

namespace edp::autoscale {
namespace {

enum class Offer { Own, FixedBatch, Elastic, Goodput };

const std::vector<Config>* offered(const JobState& j, Offer offer) {
  return offer == Offer::FixedBatch ? j.fixed_batch : offer == Offer::Elastic ? j.elastic : j.elastic_goodput;
}

Offer offer_of(const std::string& name) {
  if (name == "static") return Offer::Own;
  if (name == "baseline") return Offer::FixedBatch;
  if (name == "dp") return Offer::Elastic;
  if (name == "goodput") return Offer::Goodput;
  std::string all;
  for (const auto& n : policy_names()) all += (all.empty() ? "" : ", ") + n;
  throw Error("unknown policy '" + name + "' (known: " + all + ")");
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

std::vector<std::string> policy_names() { return {"static", "baseline", "dp", "goodput"}; }

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
