// The simulator's policies (policy.h). The three elastic ones share one code path: turn each
// active job's allowed configurations into DP options valued relative to the job's own
// reference throughput, then solve(). They differ only in which configurations they offer and
// in how an option is valued, which keeps the comparison between them fair.
#include "edp/autoscale/policy.h"

#include <algorithm>

#include "edp/core/error.h"

namespace edp::autoscale {
namespace {

class StaticPolicy final : public Policy {
 public:
  std::string name() const override { return "static"; }
  std::vector<Assignment> plan(const std::vector<JobState>& active, int capacity, double) override {
    std::vector<Assignment> out(active.size());
    int used = 0;
    for (size_t i = 0; i < active.size(); ++i)
      if (active[i].cur_gpus > 0) {
        out[i] = Assignment{active[i].cur_gpus, active[i].cur_batch, active[i].cur_ranks_per_gpu};
        used += active[i].cur_gpus;
      }
    int free = capacity - used;
    for (size_t i = 0; i < active.size(); ++i) {
      const JobState& j = active[i];
      if (j.cur_gpus > 0) continue;
      if (j.req_gpus > capacity) continue;  // can never run here; must not block the queue forever
      if (j.req_gpus > free) break;         // strict FIFO: the head waits, so do all behind it
      out[i] = Assignment{j.req_gpus, j.ref_batch};
      free -= j.req_gpus;
    }
    return out;
  }
  bool can_run(const JobState& j, int capacity) const override { return j.req_gpus <= capacity; }
};

enum class Offer { FixedBatch, Elastic, Goodput };

class DpPolicy final : public Policy {
 public:
  DpPolicy(std::string name, Offer offer, const PolicyConfig& cfg) : name_(std::move(name)), offer_(offer), cfg_(cfg) {}
  std::string name() const override { return name_; }
  std::vector<Assignment> plan(const std::vector<JobState>& active, int capacity, double) override {
    problem_.resize(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      const JobState& j = active[i];
      const std::vector<JobConfig>* cfgs = offered(j);
      EDP_CHECK(cfgs != nullptr && j.ref_samples_per_s > 0, "policy ", name_, ": job #", j.index,
                " has no configurations");
      JobOptions& jo = problem_[i];
      jo.options.clear();
      jo.may_wait = true;
      jo.current_gpus = j.cur_gpus;
      jo.current_batch = j.cur_batch;
      // A floor of one second keeps the weight finite for a job about to finish.
      const double w = cfg_.weighting == Weighting::Remaining ? 1.0 / std::max(1.0, j.remaining_s) : 1.0;
      for (size_t ci = 0; ci < cfgs->size(); ++ci) {
        const JobConfig& c = (*cfgs)[ci];
        double v = w * c.samples_per_s / j.ref_samples_per_s;
        if (offer_ == Offer::Goodput) v *= c.efficiency;
        const bool change = j.cur_gpus > 0 && !(c.gpus == j.cur_gpus && c.batch == j.cur_batch &&
                                                c.ranks_per_gpu == j.cur_ranks_per_gpu);
        if (cfg_.restart_aware && v > 0) {
          // v / w is the speedup over the job's own configuration, remaining_s its time there.
          const bool pays = change || (j.cur_gpus == 0 && j.started);
          v = 1.0 / (std::max(1.0, j.remaining_s) * w / v + (pays ? cfg_.pause_s : 0.0));
        }
        if (change) v *= 1.0 - cfg_.rescale_penalty;
        jo.options.push_back(Option{c.gpus, c.batch, v, static_cast<int>(ci)});
      }
    }
    const Solution s = solve(problem_, capacity);
    std::vector<Assignment> out(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      const Choice& c = s.choices[i];
      if (c.gpus > 0) out[i] = Assignment{c.gpus, c.batch, (*offered(active[i]))[static_cast<size_t>(c.tag)].ranks_per_gpu};
    }
    return out;
  }

  bool can_run(const JobState& j, int capacity) const override {
    const std::vector<JobConfig>* cfgs = offered(j);
    if (!cfgs) return false;
    for (const JobConfig& c : *cfgs)
      if (c.gpus <= capacity) return true;
    return false;
  }

 private:
  const std::vector<JobConfig>* offered(const JobState& j) const {
    return offer_ == Offer::FixedBatch ? j.fixed_batch : offer_ == Offer::Elastic ? j.elastic : j.elastic_goodput;
  }
  std::string name_;
  Offer offer_;
  PolicyConfig cfg_;
  std::vector<JobOptions> problem_;  // reused across plans to avoid reallocating
};

}  // namespace

std::vector<std::string> policy_names() { return {"static", "baseline", "dp", "goodput"}; }

std::unique_ptr<Policy> make_policy(const std::string& name, const PolicyConfig& cfg) {
  EDP_CHECK(cfg.rescale_penalty >= 0 && cfg.rescale_penalty < 1, "rescale penalty must be in [0, 1), got ",
            cfg.rescale_penalty);
  EDP_CHECK(cfg.pause_s >= 0, "restart pause must be >= 0, got ", cfg.pause_s);
  if (name == "static") return std::make_unique<StaticPolicy>();
  if (name == "baseline") return std::make_unique<DpPolicy>(name, Offer::FixedBatch, cfg);
  if (name == "dp") return std::make_unique<DpPolicy>(name, Offer::Elastic, cfg);
  if (name == "goodput") return std::make_unique<DpPolicy>(name, Offer::Goodput, cfg);
  std::string all;
  for (const auto& n : policy_names()) all += (all.empty() ? "" : ", ") + n;
  throw Error("unknown policy '" + name + "' (known: " + all + ")");
}

}  // namespace edp::autoscale
