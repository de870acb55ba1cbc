// The node-level simulator (cluster_sim.h): job progress in scale-invariant iterations, 60-s
// scheduling intervals with a pause per allocation change. Its tables are cluster_tables.cpp, its
// policies (Tiresias, Optimus, edp's restart-aware DP) cluster_policies.cpp.
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

// ---- the simulation -----------------------------------------------------------------------

namespace {

// One run of the node-level simulator: the jobs' state, their progress over an interval, and the
// policy's allocations applied at the end of each interval.
class ClusterRunState {
 public:
  ClusterRunState(const std::vector<ClusterJob>& jobs, const std::vector<const ClusterProfiles*>& profiles,
                  const ClusterSimConfig& cfg);
  ClusterSimResult run();

 private:
  struct Run {
    const ClusterApp* app = nullptr;    // its tables on the type it runs on (or the first type's)
    std::vector<const ClusterApp*> apps;  // per type
    int type = -1;                      // the type it runs on (-1: none yet)
    std::vector<int> alloc, placement;
    int atomic = 0, accum = 0;
    int target = 0;  // the batch the policy named (chooses_batch policies)
    double pause_left = 0, progress = 0;
    int epoch = 0;
    bool done = false, started = false;
    // What the job reports: each configuration's first step and its gradient statistics.
    std::vector<StepObservation> observed;
    bool has_grad = false;
    double grad_sqr = 0, grad_var = 0;
  };
  void configure(size_t i);
  double goodput_of(const Run& r) const;
  void advance(size_t i, double t, double seconds);
  void report(Run& r);
  void plan_and_apply(double t, double& plan_ms);
  void summarise(double plan_ms);

  const std::vector<ClusterJob>& jobs_;
  const ClusterSimConfig& cfg_;
  bool typed_ = false;
  std::vector<ClusterNodeType> types_;     // cfg.types, or the one type of cfg.nodes x cfg.gpus_per_node
  std::vector<int> node_type_, node_gpus_;  // per global node
  int gpus_ = 0;
  std::unique_ptr<ClusterPolicy> policy_;
  bool adaptive_ = false, names_batch_ = false;
  bool tune_goodput_ = false;  // a batch tuned inside the job: for goodput (else throughput; dp)
  std::vector<Run> run_;
  ClusterSimResult res_;
  std::vector<ClusterJobView> views_;
  std::vector<size_t> active_;
};

ClusterRunState::ClusterRunState(const std::vector<ClusterJob>& jobs, const std::vector<const ClusterProfiles*>& profiles,
                                 const ClusterSimConfig& cfg)
    : jobs_(jobs), cfg_(cfg), typed_(!cfg.types.empty()) {
  types_ = typed_ ? cfg.types : std::vector<ClusterNodeType>{ClusterNodeType{"", cfg.nodes, cfg.gpus_per_node, 0}};
  EDP_CHECK(profiles.size() == types_.size(), "simulate_cluster: ", profiles.size(), " profiles for ", types_.size(),
            " GPU types");
  for (size_t t = 0; t < types_.size(); ++t) {
    const ClusterNodeType& k = types_[t];
    EDP_CHECK(k.nodes >= 1 && k.gpus_per_node >= 1, "simulate_cluster: type '", k.name, "' needs nodes and GPUs per node >= 1");
    for (size_t u = 0; u < t; ++u) EDP_CHECK(types_[u].name != k.name, "simulate_cluster: type '", k.name, "' given twice");
    node_type_.insert(node_type_.end(), size_t(k.nodes), static_cast<int>(t));
    node_gpus_.insert(node_gpus_.end(), size_t(k.nodes), k.gpus_per_node);
    gpus_ += k.nodes * k.gpus_per_node;
  }
  ClusterPolicyConfig pc = cfg.policy_cfg;
  pc.restart_s = cfg.restart_s;
  policy_ = make_cluster_policy(cfg.policy, pc);
  adaptive_ = policy_->adaptive_batch();
  names_batch_ = policy_->chooses_batch();
  tune_goodput_ = parse_policy(cfg.policy, PolicyScope::Cluster) != PolicyKind::Dp;
  const size_t N = jobs.size();
  run_.resize(N);
  res_.policy = cfg.policy;
  res_.jobs.resize(N);
  for (size_t i = 0; i < N; ++i) {
    for (const ClusterProfiles* p : profiles) run_[i].apps.push_back(&p->app(jobs[i].app));
    run_[i].app = run_[i].apps[0];
    res_.jobs[i].name = jobs[i].name;
    res_.jobs[i].app = jobs[i].app;
    res_.jobs[i].submit_s = jobs[i].submit_s;
    EDP_CHECK(!policy_->fixed_replicas() || jobs[i].replicas <= gpus_, "job ", jobs[i].name, " needs ", jobs[i].replicas,
              " GPUs, the cluster has ", gpus_);
  }
}

void ClusterRunState::configure(size_t i) {
  Run& r = run_[i];
  if (r.alloc.empty()) return;
  if (names_batch_) {
    EDP_CHECK(r.target >= 1, "policy ", cfg_.policy, " named no batch for job ", jobs_[i].name);
    const BatchSplit c = r.app->split(r.placement, r.target);
    r.atomic = c.atomic;
    r.accum = c.accum;
  } else if (adaptive_) {
    const AdaptiveChoice c = best_adaptive(*r.app, r.placement, r.epoch, tune_goodput_);
    r.atomic = c.atomic;
    r.accum = c.accum;
  } else {
    const BatchSplit c = r.app->split(r.placement, jobs_[i].batch);
    r.atomic = c.atomic;
    r.accum = c.accum;
  }
}

double ClusterRunState::goodput_of(const Run& r) const {
  if (r.alloc.empty()) return 0.0;
  const auto [step, sync] = r.app->step_sync(r.placement, r.atomic);
  const double M = double(r.alloc.size()) * r.atomic * (r.accum + 1);
  return r.app->gain(M, r.epoch) / accumulated_step_s(step, sync, r.accum) / r.app->slowdown;
}

// One job over [t, t + seconds): the pause first, then epochs; the batch is re-tuned at every
// epoch boundary for adaptive jobs. Times of epoch ends are whole seconds (as in the artifact).
void ClusterRunState::advance(size_t i, double t, double seconds) {
  Run& r = run_[i];
  if (r.alloc.empty() || r.done) return;
  res_.jobs[i].gpu_seconds += double(r.alloc.size()) * seconds;
  const double delay = std::min(r.pause_left, seconds);
  r.pause_left -= delay;
  seconds -= delay;
  t += delay;
  while (seconds > 0 && !r.done) {
    const double g = goodput_of(r);
    EDP_CHECK(g > 0, "job ", jobs_[i].name, ": non-positive goodput");
    report(r);
    const double next = r.app->epoch_progress[size_t(r.epoch) + 1];
    if (r.progress + g * seconds < next) {
      r.progress += g * seconds;
      break;
    }
    ++r.epoch;
    const double delta = std::min(seconds, std::nearbyint((next - r.progress) / g));
    r.progress = next;
    t += delta;
    seconds -= delta;
    if (r.epoch >= r.app->max_epochs) {
      r.done = true;
      res_.jobs[i].finish_s = t;
    } else if (adaptive_ && !names_batch_) {
      configure(i);
    }
  }
}

// What the job reports at a step (the artifact's Job.update_params): the step and sync time of a
// configuration it has not run at before, and its gradient statistics now.
void ClusterRunState::report(Run& r) {
  const int nodes = static_cast<int>(r.placement.size()), gpus = static_cast<int>(r.alloc.size());
  const auto same = [&](const StepObservation& o) { return o.nodes == nodes && o.gpus == gpus && o.local_batch == r.atomic; };
  if (std::none_of(r.observed.begin(), r.observed.end(), same)) {
    const auto [step, sync] = r.app->step_sync(r.placement, r.atomic);
    const double slow = r.app->slowdown;  // what the job measures: the tables' step, slowed
    r.observed.push_back(StepObservation{nodes, gpus, double(r.atomic), step * slow, sync * slow,
                                         typed_ ? types_[size_t(r.type)].name : std::string()});
  }
  const double M = double(gpus) * r.atomic * (r.accum + 1);
  std::tie(r.grad_sqr, r.grad_var) = r.app->grad_stats(M, r.epoch);
  r.has_grad = true;
}

void ClusterRunState::plan_and_apply(double t, double& plan_ms) {
  const auto p0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int>> plan =
      typed_ ? policy_->plan_typed(views_, types_, t) : policy_->plan(views_, cfg_.nodes, cfg_.gpus_per_node, t);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
  plan_ms += ms;
  res_.plan_ms_max = std::max(res_.plan_ms_max, ms);
  ++res_.plans;
  EDP_CHECK(plan.size() == active_.size(), "policy ", cfg_.policy, " returned ", plan.size(), " allocations for ",
            active_.size(), " jobs");
  const int nodes = static_cast<int>(node_type_.size());
  std::vector<int> used(size_t(nodes), 0);
  for (const auto& a : plan)
    for (int n : a) {
      EDP_CHECK(n >= 0 && n < nodes, "policy ", cfg_.policy, " used node ", n, " of ", nodes);
      EDP_CHECK(++used[size_t(n)] <= node_gpus_[size_t(n)], "policy ", cfg_.policy, " over-allocated node ", n);
      EDP_CHECK(node_type_[size_t(n)] == node_type_[size_t(a[0])], "policy ", cfg_.policy,
                " placed a job on nodes of two GPU types");
    }
  const std::vector<int>& named = policy_->batches();
  EDP_CHECK(!names_batch_ || named.size() == active_.size(), "policy ", cfg_.policy, " named ", named.size(),
            " batches for ", active_.size(), " jobs");
  for (size_t k = 0; k < active_.size(); ++k) {
    const size_t i = active_[k];
    Run& r = run_[i];
    if (names_batch_ && !plan[k].empty()) {
      const bool rebatch = named[k] != r.target;
      r.target = named[k];
      if (rebatch && plan[k] == r.alloc) configure(i);  // in place, no pause
    }
    if (plan[k] == r.alloc) continue;
    EDP_CHECK(!policy_->fixed_replicas() || plan[k].empty() || static_cast<int>(plan[k].size()) == jobs_[i].replicas,
              "policy ", cfg_.policy, " changed the GPU count of a fixed job");
    r.alloc = plan[k];
    if (r.alloc.empty()) {
      r.placement.clear();
      r.pause_left = 0;
      continue;
    }
    const int type = node_type_[size_t(r.alloc[0])];
    r.placement = placement_of(r.alloc);
    r.app = r.apps[size_t(type)];
    r.pause_left = r.app->pause_s > 0 ? r.app->pause_s : cfg_.restart_s;
    if (r.started) {
      ++res_.jobs[i].restarts;
      if (type != r.type) ++res_.jobs[i].type_changes;
    } else {
      r.started = true;
      res_.jobs[i].start_s = t;
    }
    r.type = type;
    configure(i);
  }
}

ClusterSimResult ClusterRunState::run() {
  double t = 0, plan_ms = 0;
  size_t done = 0;
  while (done < jobs_.size() && t < cfg_.max_time_s) {
    for (size_t i = 0; i < jobs_.size(); ++i) advance(i, t, cfg_.interval_s);
    t += cfg_.interval_s;
    active_.clear();
    views_.clear();
    done = 0;
    for (size_t i = 0; i < jobs_.size(); ++i) {
      if (run_[i].done) {
        ++done;
        run_[i].alloc.clear();
        continue;
      }
      if (jobs_[i].submit_s > t) continue;
      active_.push_back(i);
      ClusterJobView v;
      v.id = static_cast<int>(i);
      v.app = run_[i].app;
      v.submit_s = jobs_[i].submit_s;
      v.target_replicas = jobs_[i].replicas;
      v.target_batch = jobs_[i].batch;
      v.epoch = run_[i].epoch;
      v.progress = run_[i].progress;
      v.alloc = run_[i].alloc;
      v.goodput = goodput_of(run_[i]);
      v.restarts = res_.jobs[i].restarts;
      v.observed = run_[i].observed;
      v.has_grad = run_[i].has_grad;
      v.grad_sqr = run_[i].grad_sqr;
      v.grad_var = run_[i].grad_var;
      v.batch = run_[i].alloc.empty() ? 0 : run_[i].target;
      v.apps = run_[i].apps;
      v.type = run_[i].alloc.empty() ? -1 : run_[i].type;
      v.restarting = !run_[i].alloc.empty() && run_[i].pause_left > 0;
      views_.push_back(std::move(v));
    }
    if (active_.empty()) continue;
    plan_and_apply(t, plan_ms);
  }
  summarise(plan_ms);
  return std::move(res_);
}

void ClusterRunState::summarise(double plan_ms) {
  double jct = 0, gpu_s = 0;
  for (const ClusterJobResult& j : res_.jobs) {
    res_.restarts += j.restarts;
    gpu_s += j.gpu_seconds;
    if (j.finished()) {
      ++res_.finished;
      jct += j.finish_s - j.submit_s;
      res_.makespan_s = std::max(res_.makespan_s, j.finish_s);
    }
  }
  res_.avg_jct_s = res_.finished ? jct / res_.finished : 0.0;
  res_.restarts_per_job = jobs_.empty() ? 0.0 : double(res_.restarts) / double(jobs_.size());
  res_.utilisation = res_.makespan_s > 0 ? gpu_s / (double(gpus_) * res_.makespan_s) : 0.0;
  res_.plan_ms_avg = res_.plans ? plan_ms / res_.plans : 0.0;
}

}  // namespace

ClusterSimResult simulate_cluster(const std::vector<ClusterJob>& jobs, const ClusterProfiles& profiles,
                                  const ClusterSimConfig& cfg) {
  EDP_CHECK(cfg.types.empty(), "simulate_cluster: a cluster with GPU types needs one profile per type");
  return simulate_cluster(jobs, std::vector<const ClusterProfiles*>{&profiles}, cfg);
}

ClusterSimResult simulate_cluster(const std::vector<ClusterJob>& jobs, const std::vector<const ClusterProfiles*>& profiles,
                                  const ClusterSimConfig& cfg) {
  EDP_CHECK(!cfg.types.empty() || (cfg.nodes >= 1 && cfg.gpus_per_node >= 1),
            "simulate_cluster: nodes and gpus_per_node must be >= 1");
  EDP_CHECK(cfg.interval_s > 0 && cfg.restart_s >= 0, "simulate_cluster: interval must be > 0, restart >= 0");
  return ClusterRunState(jobs, profiles, cfg).run();
}

}  // namespace edp::autoscale
