// The node-level simulator's policies (cluster_sim.h): Tiresias and Optimus as the Pollux artifact
// runs them, and edp's restart-aware DP, learned online or on the oracle.
#include "edp/autoscale/cluster_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "csv.h"
#include "edp/autoscale/goodput.h"
#include "edp/autoscale/plan.h"
#include "edp/autoscale/policy.h"
#include "edp/core/error.h"

namespace edp::autoscale {

// ---- policies -----------------------------------------------------------------------------

namespace {

// Greedy "most free GPUs first" node choice (ties: lowest node id), the placement of the
// artifact's Tiresias and Optimus: fills the emptiest node, then the next.
std::vector<int> free_after(const std::vector<std::vector<int>>& allocs, int nodes, int gpn) {
  std::vector<int> free(size_t(nodes), gpn);
  for (const auto& a : allocs)
    for (int n : a) {
      EDP_CHECK(n >= 0 && n < nodes, "allocation names node ", n, " of ", nodes);
      --free[size_t(n)];
    }
  return free;
}

// Tiresias (Gu et al., NSDI'19), discretised 2D-LAS as the artifact runs it: two queues, a job
// moves from queue 0 to queue 1 once its executed time x its GPUs reaches the threshold (16
// GPU-hours); within a queue first come first served; jobs are gang-scheduled at their own GPU
// count, preempted when a job ahead needs the GPUs, and a job that does not fit is skipped
// (later, smaller ones may run). Starvation promotion is off, as in the artifact.
class TiresiasPolicy final : public ClusterPolicy {
 public:
  explicit TiresiasPolicy(const ClusterPolicyConfig& c) : cfg_(c) {}
  std::string name() const override { return "tiresias"; }
  bool fixed_replicas() const override { return true; }
  int queue_of(int id) const override {
    if (std::find(q0_.begin(), q0_.end(), id) != q0_.end()) return 0;
    if (std::find(q1_.begin(), q1_.end(), id) != q1_.end()) return 1;
    return -1;
  }
  std::vector<std::vector<int>> plan(const std::vector<ClusterJobView>& active, int nodes, int gpn,
                                     double now) override {
    const double t = std::floor(now);
    std::map<int, size_t> pos;
    for (size_t i = 0; i < active.size(); ++i) pos[active[i].id] = i;
    auto gone = [&](int id) { return !pos.count(id); };
    q0_.erase(std::remove_if(q0_.begin(), q0_.end(), gone), q0_.end());
    q1_.erase(std::remove_if(q1_.begin(), q1_.end(), gone), q1_.end());
    for (auto it = st_.begin(); it != st_.end();) it = gone(it->first) ? st_.erase(it) : std::next(it);
    std::vector<std::vector<int>> out(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      out[i] = active[i].alloc;
      if (!st_.count(active[i].id)) {
        st_[active[i].id] = State{};
        q0_.push_back(active[i].id);
      }
    }
    for (const ClusterJobView& j : active) {
      State& s = st_[j.id];
      if (s.running) {
        s.executed += t - s.last_check;
        if (s.executed * j.target_replicas >= cfg_.tiresias_threshold_gpu_s) {
          auto it = std::find(q0_.begin(), q0_.end(), j.id);
          if (it != q0_.end()) {
            q0_.erase(it);
            q1_.push_back(j.id);
          }
        }
      }
      s.last_check = t;
    }
    int left = nodes * gpn;
    for (const std::vector<int>* q : {&q0_, &q1_})
      for (int id : *q) {
        const size_t i = pos[id];
        State& s = st_[id];
        if (active[i].target_replicas <= left) {
          s.running = true;
          left -= active[i].target_replicas;
        } else {
          s.running = false;
          out[i].clear();
        }
      }
    std::vector<int> free = free_after(out, nodes, gpn);
    for (const std::vector<int>* q : {&q0_, &q1_})
      for (int id : *q) {
        const size_t i = pos[id];
        if (st_[id].running && out[i].empty()) out[i] = most_free_nodes(free, active[i].target_replicas);
      }
    return out;
  }

 private:
  struct State {
    bool running = false;
    double executed = 0, last_check = 0;
  };
  ClusterPolicyConfig cfg_;
  std::vector<int> q0_, q1_;
  std::map<int, State> st_;
};

// Optimus (Peng et al., EuroSys'18) with oracle throughput, as the artifact runs it: the batch
// is the workload's; every job first gets one GPU (in submission order while GPUs last), then
// GPUs go one at a time to the job whose predicted remaining time drops most (step time at n
// minus at n + 1, packed on nodes of 4, times its remaining optimizer steps). A job keeps its
// nodes while its GPU count stays; the others are placed smallest first, most-free node first.
class OptimusPolicy final : public ClusterPolicy {
 public:
  explicit OptimusPolicy(const ClusterPolicyConfig& c) : cfg_(c) {}
  std::string name() const override { return "optimus"; }
  std::vector<std::vector<int>> plan(const std::vector<ClusterJobView>& active, int nodes, int gpn,
                                     double) override {
    const size_t J = active.size();
    std::vector<double> remaining(J);
    std::vector<int> maxr(J), num(J, 0);
    std::vector<double> gain(J, 0);
    for (size_t i = 0; i < J; ++i) {
      const ClusterJobView& j = active[i];
      const int completion_epoch = j.app->max_epochs - 1;
      remaining[i] = completion_epoch <= j.epoch
                         ? 1.0
                         : j.app->iterations(j.target_batch, completion_epoch) - j.app->iterations(j.target_batch, j.epoch);
      maxr[i] = j.app->name == "ncf" ? 1 : std::max(1, j.target_batch / j.app->min_local);
    }
    int left = nodes * gpn;
    auto marginal = [&](size_t i) {
      if (num[i] + 1 > maxr[i] || left < 1) return 0.0;
      return (predict(active[i], num[i]) - predict(active[i], num[i] + 1)) * remaining[i];
    };
    for (size_t i = 0; i < J; ++i) {
      if (left < 1) break;
      num[i] = 1;
      --left;
      gain[i] = marginal(i);
    }
    while (left > 0) {
      size_t best = 0;
      for (size_t i = 1; i < J; ++i)
        if (gain[i] > gain[best]) best = i;
      if (!(gain[best] > 0)) break;
      ++num[best];
      --left;
      gain[best] = marginal(best);
    }
    last_num_ = num;
    std::vector<std::vector<int>> out(J);
    for (size_t i = 0; i < J; ++i)
      if (static_cast<int>(active[i].alloc.size()) == num[i]) out[i] = active[i].alloc;
    std::vector<int> free = free_after(out, nodes, gpn);
    std::vector<size_t> order(J);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return num[a] < num[b]; });
    for (size_t i : order)
      if (num[i] > 0 && out[i].empty()) out[i] = most_free_nodes(free, num[i]);
    return out;
  }

  // Step time of one optimizer step at n GPUs packed 4 per node (accumulation included).
  double predict(const ClusterJobView& j, int n) {
    const auto key = std::make_tuple(j.app, j.target_batch, n);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    std::vector<int> pl;
    for (int left = n; left > 0; left -= 4) pl.push_back(std::min(left, 4));
    const BatchConfig c = fixed_batch_config(*j.app, n, j.target_batch, true);
    const auto [step, sync] = j.app->step_sync(pl, c.atomic);
    const double v = accumulated_step_s(step, sync, c.accum);
    cache_[key] = v;
    return v;
  }
  std::vector<int> last_num_;

 private:
  ClusterPolicyConfig cfg_;
  std::map<std::tuple<const ClusterApp*, int, int>, double> cache_;
};

// edp's DP in the node-level simulator. Each job's options are GPU counts that pack onto nodes
// (1-4 on one node, then whole nodes), valued restart-aware by decide() (plan.h): 1 / (the time the
// job would still need at an option, counting the pause every allocation change and every start
// costs here) — so a change must pay for its pause over the job's remaining time, and the sum
// favours short jobs (SRPT-like). The request carries the nodes, so decide() also places the jobs
// (a job whose count stays keeps its nodes; plan.h's place_on_nodes).
//
// Where the options' rates come from:
//   Learned  each job's reports (ClusterJobView::observed, its gradient statistics): the request
//            carries them (PlanJob::learned) and decide() builds the options (online.h); the
//            policy names the batch (the option's), a change of batch alone is free
//   Oracle   the true tables: per count the named batch with the best true goodput at the packed
//            placement, the current count at the job's actual placement; the policy names the batch
//   JobTuned the true tables with the batch the job tunes itself at every epoch (best_adaptive):
//            options of batch 0 (fill_cluster_request); goodput or raw throughput, restart-aware
//            or eager (rate / remaining work)
class EdpDpPolicy final : public ClusterPolicy {
 public:
  enum class Mode { Learned, Oracle, JobTuned };
  EdpDpPolicy(std::string name, Mode mode, bool by_goodput, bool restart_aware, const ClusterPolicyConfig& c)
      : name_(std::move(name)), mode_(mode), by_goodput_(by_goodput), restart_aware_(restart_aware), cfg_(c) {}
  std::string name() const override { return name_; }
  bool adaptive_batch() const override { return true; }
  bool chooses_batch() const override { return mode_ != Mode::JobTuned; }
  const std::vector<int>& batches() const override { return batches_; }

  std::vector<std::vector<int>> plan(const std::vector<ClusterJobView>& active, int nodes, int gpn,
                                     double) override {
    const size_t J = active.size();
    const int capacity = nodes * gpn;
    if (mode_ == Mode::JobTuned) {
      jobs_.resize(J);
      for (size_t i = 0; i < J; ++i) {
        const ClusterJobView& j = active[i];
        ClusterDpJob& d = jobs_[i];
        const int cur = static_cast<int>(j.alloc.size());
        d.current_gpus = cur;
        d.remaining = std::max(1e-9, j.app->total_progress() - j.progress);
        d.rates.clear();
        for (const Rate& r : rates(*j.app, j.epoch, gpn)) {
          double rate = r.rate;
          if (r.gpus == cur && j.goodput > 0 && by_goodput_) rate = j.goodput;  // actual placement
          d.rates.emplace_back(r.gpus, rate);
        }
      }
      fill_cluster_request(req_, jobs_, capacity, cfg_, restart_aware_);
    } else {
      named_request(active, capacity, gpn);
    }
    req_.nodes.assign(size_t(nodes), gpn);
    for (size_t i = 0; i < J; ++i) req_.jobs[i].current_nodes = active[i].alloc;
    const Plan& s = planner_.decide(req_);
    batches_.assign(J, 0);
    for (size_t i = 0; i < J; ++i) batches_[i] = s.choices[i].config.batch;
    return s.nodes;
  }

  // With GPU types: the request the Sia adapter (bench/autoscale/sia_policy.py) sends, built from
  // the simulator's state — the types with their nodes, each job's remaining work, its model's
  // restart delay as its pause and start, a change of batch alone free; a job still restarting
  // keeps its configuration (its one option, valued from its step there); every other job learned
  // (its batch limits, its steps per type, its gradient statistics, each type's 1-GPU speed) or,
  // on the oracle, given each type's counts at the batch with the best true goodput.
  std::vector<std::vector<int>> plan_typed(const std::vector<ClusterJobView>& active,
                                           const std::vector<ClusterNodeType>& types, double) override {
    EDP_CHECK(mode_ != Mode::JobTuned, "policy ", name_, " does not take GPU types (goodput or goodput-oracle do)");
    typed_request(active, types);
    const Plan& s = planner_.decide(req_);
    const size_t J = active.size();
    batches_.assign(J, 0);
    std::vector<std::vector<int>> out = s.nodes;
    for (size_t i = 0; i < J; ++i) {
      batches_[i] = s.choices[i].config.batch;
      std::sort(out[i].begin(), out[i].end());  // the job's placement: GPUs per node in node order
    }
    return out;
  }

 private:
  struct Rate {
    int gpus;
    double rate;  // progress per second (goodput) or init-batch samples per second (dp)
  };
  // The counts a job may take: 1..node size, then whole nodes, up to max_batch / min_local (ncf 1).
  int max_count(const ClusterApp& app) const {
    return app.name == "ncf" ? 1 : std::min({cfg_.max_gpus_per_job, 4096, std::max(1, app.max_batch / app.min_local)});
  }
  static std::vector<int> packed(int n, int gpn) {
    std::vector<int> pl;
    for (int left = n; left > 0; left -= gpn) pl.push_back(std::min(left, gpn));
    return pl;
  }
  const std::vector<Rate>& rates(const ClusterApp& app, int epoch, int gpn) {
    const auto key = std::make_pair(&app, by_goodput_ ? epoch : 0);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    std::vector<Rate> v;
    // Counts above the cluster are never chosen (solve() drops them), so the cache does not
    // depend on the capacity.
    for (int n = 1; n <= max_count(app); ++n) {
      if (n > gpn && n % gpn != 0) continue;  // only counts that pack onto whole nodes
      const AdaptiveChoice c = best_adaptive(app, packed(n, gpn), epoch, by_goodput_);
      v.push_back(Rate{n, by_goodput_ ? c.goodput : c.samples_per_s / app.init_batch});
    }
    return cache_.emplace(key, std::move(v)).first->second;
  }
  // An option at the batch the policy names, valued by the true goodput (progress per second x
  // init_batch = samples_per_s x efficiency).
  static Config named_option(const ClusterApp& app, int n, const NamedBatch& nb) {
    const double sps = nb.run.samples_per_s;
    return Config{n, nb.batch, 1, sps, nb.run.goodput * app.init_batch / sps};
  }
  const NamedBatch& oracle_packed(const ClusterApp& app, int epoch, int n, int gpn) {
    const auto key = std::make_tuple(&app, epoch, n);
    auto it = named_cache_.find(key);
    if (it != named_cache_.end()) return it->second;
    return named_cache_.emplace(key, best_named_batch(app, packed(n, gpn), epoch)).first->second;
  }
  // The request of the Learned and Oracle modes: remaining work in init-batch samples, a change of
  // batch alone free (the job rebatches at its next step), the current batch the one it runs.
  void named_request(const std::vector<ClusterJobView>& active, int capacity, int gpn) {
    req_.gpus = capacity;
    req_.objective = Objective::RestartAware;
    req_.hysteresis = cfg_.hysteresis;
    req_.margin_s = cfg_.margin_s;
    req_.pause_per_gpu = cfg_.pause_per_gpu;
    req_.pause_s = req_.start_s = cfg_.restart_s;
    req_.jobs.resize(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      const ClusterJobView& j = active[i];
      const ClusterApp& app = *j.app;
      PlanJob& pj = req_.jobs[i];
      pj = PlanJob{};
      pj.id = std::to_string(j.id);
      pj.remaining = std::max(1e-9, app.total_progress() - j.progress) * app.init_batch;
      const int cur = static_cast<int>(j.alloc.size());
      if (cur > 0) pj.current = Config{cur, j.batch, 1, 0, 1.0};
      pj.rebatch_s = 0;
      if (mode_ == Mode::Learned) {
        pj.learned = true;
        pj.learn = learned_spec(j, app, cfg_.max_gpus_per_job);
        continue;
      }
      for (int n = 1; n <= std::max(max_count(app), cur); ++n) {
        if (n > gpn && n % gpn != 0 && n != cur) continue;
        if (n == cur) pj.options.push_back(named_option(app, n, best_named_batch(app, placement_of(j.alloc), j.epoch)));
        else pj.options.push_back(named_option(app, n, oracle_packed(app, j.epoch, n, gpn)));
      }
    }
  }

  // What a learned job states: its model's limits, the policy's priors, what it reported.
  LearnSpec learned_spec(const ClusterJobView& j, const ClusterApp& app, int max_gpus) const {
    LearnSpec l = learn_spec_of(app, max_gpus);
    l.fixed_share = cfg_.fixed_share;
    l.trust_half = cfg_.trust_half;
    l.observed = j.observed;
    l.has_grad = j.has_grad;
    l.grad_sqr = j.grad_sqr;
    l.grad_var = j.grad_var;
    return l;
  }
  // Sia's configurations of a type: 1, 2, 4 (8) GPUs on one node, then whole nodes up to the
  // profiled node limit.
  static std::vector<int> type_counts(const ClusterNodeType& t) {
    std::set<int> c;
    for (int n : {1, 2, 4, 8})
      if (n <= t.gpus_per_node) c.insert(n);
    const int nodes = t.max_job_nodes > 0 ? std::min(t.nodes, t.max_job_nodes) : t.nodes;
    for (int m = 1; m <= nodes; ++m) c.insert(m * t.gpus_per_node);
    return {c.begin(), c.end()};
  }
  // A model's 1-GPU throughput on a type as Sia bootstraps it: its largest 1-GPU micro-batch over
  // the largest 1-GPU step time of the tables.
  static double one_gpu_speed(const ClusterApp& app) {
    auto it = app.placements.find("1");
    EDP_CHECK(it != app.placements.end() && !it->second.empty(), "model ", app.name, " has no 1-GPU rows");
    double b = 0, t = 0;
    for (const StepPoint& p : it->second) {
      b = std::max(b, p.local_bsz);
      t = std::max(t, p.step_s);
    }
    return b / t;
  }
  // A restarting job's one option where it is: its step there as it reported it (else its 1-GPU
  // speed times its GPUs); on the oracle, the true goodput of its batch there.
  Config kept_option(const ClusterJobView& j, const std::string& type) const {
    const ClusterApp& app = *j.app;
    const std::vector<int> pl = placement_of(j.alloc);
    const int n = static_cast<int>(j.alloc.size());
    const BatchSplit sp = app.split(pl, j.batch);
    if (mode_ == Mode::Oracle) {
      const NamedBatch nb = named_batch_at(app, pl, j.epoch, j.batch);
      return Config{n, j.batch, 1, nb.run.samples_per_s, nb.run.goodput * app.init_batch / nb.run.samples_per_s, type};
    }
    for (const StepObservation& o : j.observed)
      if (o.type == type && o.nodes == static_cast<int>(pl.size()) && o.gpus == n && o.local_batch == sp.atomic) {
        const double total = accumulated_step_s(o.step_s, o.sync_s, sp.accum);
        return Config{n, j.batch, 1, double(sp.batch(n)) / total, 1.0, type};
      }
    return Config{n, j.batch, 1, one_gpu_speed(app) * n / app.slowdown, 1.0, type};
  }
  void typed_request(const std::vector<ClusterJobView>& active, const std::vector<ClusterNodeType>& types) {
    req_ = PlanRequest{};
    req_.objective = Objective::RestartAware;
    req_.hysteresis = cfg_.hysteresis;
    req_.margin_s = cfg_.margin_s;
    req_.pause_per_gpu = cfg_.pause_per_gpu;
    req_.pause_s = req_.start_s = cfg_.restart_s;
    std::vector<std::vector<int>> counts;
    int max_gpus = 1;
    for (const ClusterNodeType& t : types) {
      req_.types.push_back(GpuType{t.name, t.nodes * t.gpus_per_node, std::vector<int>(size_t(t.nodes), t.gpus_per_node)});
      req_.gpus += t.nodes * t.gpus_per_node;
      counts.push_back(type_counts(t));
      max_gpus = std::max(max_gpus, counts.back().back());
    }
    req_.jobs.resize(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      const ClusterJobView& j = active[i];
      EDP_CHECK(j.apps.size() == types.size(), "job ", j.id, " has tables of ", j.apps.size(), " types, the cluster ",
                types.size());
      const ClusterApp& ref = *j.apps[0];
      PlanJob& pj = req_.jobs[i];
      pj.id = std::to_string(j.id);
      pj.remaining = std::max(1e-6, ref.total_progress() - j.progress) * ref.init_batch;
      pj.pause_s = pj.start_s = ref.pause_s > 0 ? ref.pause_s : cfg_.restart_s;
      pj.rebatch_s = 0;
      const int cur = static_cast<int>(j.alloc.size());
      if (cur > 0) {
        const std::string& tn = types[size_t(j.type)].name;
        pj.current = Config{cur, j.batch, 1, 0, 1.0, tn};
        pj.current_nodes = j.alloc;
        if (j.restarting) {
          pj.options.push_back(kept_option(j, tn));
          pj.may_wait = false;
          continue;
        }
      }
      if (mode_ == Mode::Learned) {
        pj.learned = true;
        LearnSpec& l = pj.learn;
        l = learned_spec(j, ref, max_gpus);
        l.max_local = std::max(l.min_local, l.max_batch);  // per type below
        for (size_t t = 0; t < types.size(); ++t)
          l.types.push_back(TypeLearn{types[t].name, j.apps[t]->max_local, one_gpu_speed(*j.apps[t])});
        continue;
      }
      for (size_t t = 0; t < types.size(); ++t) {
        const ClusterApp& app = *j.apps[t];
        for (int n : counts[t]) {
          if (n * app.min_local > app.max_batch) continue;
          const bool here = static_cast<int>(t) == j.type && n == cur;
          const NamedBatch nb = best_named_batch(app, here ? placement_of(j.alloc) : packed(n, types[t].gpus_per_node), j.epoch);
          if (nb.run.samples_per_s > 0)
            pj.options.push_back(Config{n, nb.batch, 1, nb.run.samples_per_s,
                                        nb.run.goodput * app.init_batch / nb.run.samples_per_s, types[t].name});
        }
      }
      EDP_CHECK(!pj.options.empty(), "job ", j.id, " has no configuration on any GPU type");
    }
  }

  std::string name_;
  Mode mode_;
  bool by_goodput_, restart_aware_;
  ClusterPolicyConfig cfg_;
  std::vector<ClusterDpJob> jobs_;  // reused across plans
  PlanRequest req_;
  Planner planner_;
  std::vector<int> batches_;
  std::map<std::pair<const ClusterApp*, int>, std::vector<Rate>> cache_;
  std::map<std::tuple<const ClusterApp*, int, int>, NamedBatch> named_cache_;
};

}  // namespace

void fill_cluster_request(PlanRequest& req, const std::vector<ClusterDpJob>& jobs, int capacity,
                          const ClusterPolicyConfig& cfg, bool restart_aware) {
  req.gpus = capacity;
  req.objective = restart_aware ? Objective::RestartAware : Objective::Remaining;
  req.hysteresis = cfg.hysteresis;
  req.margin_s = restart_aware ? cfg.margin_s : 0.0;
  req.pause_per_gpu = restart_aware ? cfg.pause_per_gpu : 0.0;
  req.pause_s = cfg.restart_s;
  req.start_s = cfg.restart_s;  // this simulator charges the pause to every allocation change, a start too
  req.jobs.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ClusterDpJob& d = jobs[i];
    PlanJob& pj = req.jobs[i];
    pj.may_wait = true;
    pj.weight = 1.0;
    pj.remaining = d.remaining;
    pj.current = d.current_gpus > 0 ? Config{d.current_gpus, 0, 1, 0, 1.0} : Config{};
    pj.pause_s = pj.start_s = -1;
    pj.options.clear();
    for (const auto& [g, rate] : d.rates)
      if (rate > 0) pj.options.push_back(Config{g, 0, 1, rate, 1.0});
  }
}

std::vector<std::vector<int>> ClusterPolicy::plan_typed(const std::vector<ClusterJobView>&,
                                                       const std::vector<ClusterNodeType>&, double) {
  throw Error("policy " + name() + " does not take GPU types (goodput or goodput-oracle do)");
}

std::unique_ptr<ClusterPolicy> make_cluster_policy(const std::string& name, const ClusterPolicyConfig& cfg) {
  using Mode = EdpDpPolicy::Mode;
  switch (parse_policy(name, PolicyScope::Cluster)) {
    case PolicyKind::Tiresias: return std::make_unique<TiresiasPolicy>(cfg);
    case PolicyKind::Optimus: return std::make_unique<OptimusPolicy>(cfg);
    case PolicyKind::Goodput: return std::make_unique<EdpDpPolicy>(name, Mode::Learned, true, true, cfg);
    case PolicyKind::GoodputOracle: return std::make_unique<EdpDpPolicy>(name, Mode::Oracle, true, true, cfg);
    case PolicyKind::Dp: return std::make_unique<EdpDpPolicy>(name, Mode::JobTuned, false, cfg.restart_aware, cfg);
    case PolicyKind::GoodputEager: {
      // The formulation before restart awareness: value rate / remaining work, the pool
      // simulator's 5% hysteresis, no pause in the value.
      ClusterPolicyConfig c = cfg;
      c.hysteresis = 0.05;
      c.margin_s = c.pause_per_gpu = 0;
      return std::make_unique<EdpDpPolicy>(name, Mode::JobTuned, true, false, c);
    }
    default: break;
  }
  throw Error("make_cluster_policy: '" + name + "' is not a node-level policy");  // parse_policy refused it already
}

}  // namespace edp::autoscale
