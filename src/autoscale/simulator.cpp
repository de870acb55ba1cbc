// Discrete-event simulation of elastic jobs on a shared cluster (simulator.h). Between two
// events every job progresses linearly, so the state is advanced in closed form from event to
// event; events are arrivals, completions and periodic re-plans, and all events at the same
// instant are handled together before one re-plan. Past 600 lines on purpose: the event loop and
// the job state it advances in closed form are one piece of logic.
#include "edp/autoscale/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "csv.h"
#include "edp/autoscale/goodput.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/core/random.h"

namespace edp::autoscale {

namespace {
// Times in a trace: at most ten years. A larger one (a submit time of 1e19 s) is a broken file,
// and simulating it would spin through its re-plans or exhaust memory instead of failing.
constexpr double kMaxTraceSeconds = 10 * 365 * 86400.0;
const char* const kTraceSecondsRange = "must be in [0, 315360000] seconds (ten years): the trace is damaged";
}  // namespace


std::vector<TraceJob> load_philly_trace(const std::string& path) {
  detail::CsvFile f(path);
  const size_t cs = f.column("submit_time_s"), cg = f.column("gpus_requested"), cd = f.column("duration_s");
  const size_t cv = f.has_column("vc") ? f.column("vc") : SIZE_MAX;
  std::vector<TraceJob> out;
  out.reserve(f.rows());
  double last = -std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < f.rows(); ++r) {
    TraceJob j;
    j.id = "philly-" + std::to_string(r);
    j.submit_s = f.num(r, cs);
    const int64_t g = f.integer(r, cg);
    j.duration_s = f.num(r, cd);
    if (j.submit_s < 0 || j.submit_s > kMaxTraceSeconds) f.fail(r, cs, kTraceSecondsRange);
    if (g < 1 || g > 64) f.fail(r, cg, "must be in [1, 64] (the model profiles reach 64 GPUs)");
    if (j.duration_s < 0 || j.duration_s > kMaxTraceSeconds) f.fail(r, cd, kTraceSecondsRange);
    if (j.submit_s < last) f.fail(r, cs, "rows must be sorted by submission time");
    last = j.submit_s;
    j.gpus = static_cast<int>(g);
    if (cv != SIZE_MAX) j.vc = f.str(r, cv);
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<TraceJob> poisson_trace(const PoissonOptions& opt) {
  EDP_CHECK(opt.jobs >= 0 && opt.arrivals_per_hour > 0 && opt.median_duration_s > 0,
            "poisson_trace: jobs >= 0, arrivals_per_hour > 0 and median_duration_s > 0 required");
  Rng rng(opt.seed);
  std::vector<TraceJob> out;
  double t = 0;
  // GPU sizes and their shares in the Philly week (data/README.md), coarsened.
  const int sizes[] = {1, 2, 4, 8, 16};
  const double cum[] = {0.915, 0.937, 0.978, 0.996, 1.0};
  for (int i = 0; i < opt.jobs; ++i) {
    double u;
    do u = rng.uniform(); while (u <= 0.0);
    t += -std::log(u) * 3600.0 / opt.arrivals_per_hour;
    const double s = rng.uniform();
    int g = sizes[4];
    for (int k = 0; k < 5; ++k)
      if (s < cum[k]) {
        g = sizes[k];
        break;
      }
    TraceJob j;
    j.id = "poisson-" + std::to_string(i);
    j.submit_s = std::floor(t);
    j.gpus = g;
    j.duration_s = std::max(1.0, std::round(opt.median_duration_s * std::exp(opt.duration_sigma * rng.normal())));
    out.push_back(std::move(j));
  }
  return out;
}

bool is_pollux_workload(const std::string& path) {
  detail::CsvFile f(path);
  return f.has_column("application") && f.has_column("num_replicas");
}

std::vector<TraceJob> load_pollux_workload(const std::string& path, const std::vector<ModelProfile>& profiles) {
  detail::CsvFile f(path);
  const size_t cn = f.column("name"), ct = f.column("time"), ca = f.column("application"),
               cr = f.column("num_replicas"), cb = f.column("batch_size");
  std::vector<TraceJob> out;
  out.reserve(f.rows());
  for (size_t r = 0; r < f.rows(); ++r) {
    TraceJob j;
    j.id = f.str(r, cn);
    if (j.id.empty()) f.fail(r, cn, "empty job name");
    j.submit_s = f.num(r, ct);
    if (j.submit_s < 0 || j.submit_s > kMaxTraceSeconds) f.fail(r, ct, kTraceSecondsRange);
    j.model = f.str(r, ca);
    const ModelProfile* p = nullptr;
    for (const ModelProfile& m : profiles)
      if (m.name == j.model) p = &m;
    if (!p) {
      std::string known;
      for (const ModelProfile& m : profiles) known += (known.empty() ? "" : ", ") + m.name;
      f.fail(r, ca, "model '" + j.model + "' has no profile (known: " + known + ")");
    }
    if (!(p->total_samples > 0))
      f.fail(r, ca, "model '" + j.model + "' has no total_progress in model_limits.csv: its work is unknown");
    const int64_t g = f.integer(r, cr);
    if (g < 1 || g > 64) f.fail(r, cr, "must be in [1, 64] (the model profiles reach 64 GPUs)");
    const int64_t b = f.integer(r, cb);
    if (b < 1 || b > std::numeric_limits<int>::max()) f.fail(r, cb, "must be a positive int");
    j.gpus = static_cast<int>(g);
    j.batch = own_batch(*p, j.gpus, static_cast<int>(b));
    j.duration_s = p->total_samples / p->model.samples_per_s(j.gpus, j.batch);
    out.push_back(std::move(j));
  }
  return out;
}

namespace {

// The model's statistical efficiency at `batch` relative to the job's own (goodput.h); 1 when its
// gradient noise scale is unknown.
double efficiency(const ModelProfile& p, int ref_batch, int batch) {
  if (p.grad_noise_scale <= 0) return 1.0;
  return statistical_efficiency(grad_stats_of_noise_scale(p.grad_noise_scale, ref_batch), batch, ref_batch);
}

}  // namespace

int own_batch(const ModelProfile& p, int gpus, int requested, OwnBatch rule) {
  EDP_CHECK(gpus >= 1, "own_batch: gpus must be >= 1, got ", gpus);
  EDP_CHECK(requested >= 0, "own_batch: requested batch must be >= 0, got ", requested);
  int64_t b0;
  if (requested > 0) {
    b0 = requested - requested % gpus;
  } else if (rule == OwnBatch::Model) {
    // The model's default global batch, the smallest multiple of `gpus` not below it.
    b0 = (int64_t{p.init_batch} + gpus - 1) / gpus * gpus;
  } else {
    // The model's initial batch per GPU (weak scaling), within the validated range.
    b0 = std::min<int64_t>(p.max_batch, int64_t{p.init_batch} * gpus);
    b0 -= b0 % gpus;
  }
  b0 = std::clamp<int64_t>(b0, int64_t{p.min_local} * gpus, int64_t{p.max_local} * gpus);
  return static_cast<int>(b0);
}

JobModel make_job_model(const ModelProfile& p, int req_gpus, const SimConfig& cfg, int batch) {
  EDP_CHECK(req_gpus >= 1 && req_gpus <= 64, "make_job_model: requested GPUs must be in [1, 64], got ", req_gpus);
  EDP_CHECK(cfg.max_ranks_per_gpu >= 1 && cfg.max_ranks_per_gpu <= 8 && cfg.colocation_idle >= 0 &&
                cfg.colocation_idle <= 1,
            "ranks per GPU must be in [1, 8] and the collocation idle share in [0, 1], got ", cfg.max_ranks_per_gpu,
            " and ", cfg.colocation_idle);
  JobModel jm;
  jm.profile = &p;
  jm.ref_batch = own_batch(p, req_gpus, batch, cfg.own_batch);
  jm.ref_samples_per_s = p.model.samples_per_s(req_gpus, jm.ref_batch);
  EDP_CHECK(jm.ref_samples_per_s > 0, "model ", p.name, ": non-positive throughput at its own configuration");
  jm.max_gpus = std::min(64, std::max({req_gpus, p.model.gpus_per_node, cfg.max_scale * req_gpus}));
  const int min_batch = std::min(p.init_batch, jm.ref_batch);
  for (int g = 1; g <= jm.max_gpus; ++g) {
    std::vector<int> batches = candidate_batches(p, g, min_batch, p.max_batch);
    const bool ref_fits = jm.ref_batch % g == 0 && jm.ref_batch / g >= p.min_local && jm.ref_batch / g <= p.max_local;
    // k ranks per GPU (k = 1 first: a tie keeps one rank per GPU); each rank needs a sample.
    auto each_k = [&](int B, auto&& take) {
      for (int k = 1; k <= cfg.max_ranks_per_gpu; k *= 2)
        if (B % (g * k) == 0) take(k, p.model.colocated_samples_per_s(g, k, B, cfg.colocation_idle));
    };
    if (ref_fits) {
      batches.push_back(jm.ref_batch);
      Config best{g, jm.ref_batch, 1, -1, 1.0};
      each_k(jm.ref_batch, [&](int k, double sps) {
        if (sps > best.samples_per_s) best.samples_per_s = sps, best.ranks_per_gpu = k;
      });
      jm.fixed_batch.push_back(best);
    }
    Config best_t, best_g;
    double vt = -1, vg = -1;
    for (int B : batches) {
      const double eff = efficiency(p, jm.ref_batch, B);
      each_k(B, [&](int k, double sps) {
        if (sps > vt) {
          vt = sps;
          best_t = Config{g, B, k, sps, eff};
        }
        if (sps * eff > vg) {
          vg = sps * eff;
          best_g = Config{g, B, k, sps, eff};
        }
      });
    }
    if (vt > 0) jm.elastic.push_back(best_t);
    if (vg > 0) jm.elastic_goodput.push_back(best_g);
  }
  return jm;
}

size_t assign_model(const TraceJob& job, size_t job_index, const std::vector<ModelProfile>& profiles, uint64_t seed) {
  EDP_CHECK(!profiles.empty(), "assign_model: no model profiles");
  Rng rng(derive_seed(seed, job_index, 0x6d6f64656cull));
  const bool coin = rng.uniform() < 0.5;
  const double gpu_hours = job.gpus * job.duration_s / 3600.0;
  // The Pollux workload generator's rule (pollux_workloads/README.md).
  const char* name;
  int cat;
  if (gpu_hours < 1) {
    name = coin ? "cifar10" : "ncf";
    cat = 0;
  } else if (gpu_hours < 10) {
    name = coin ? "deepspeech2" : "bert";
    cat = 1;
  } else if (gpu_hours < 100) {
    name = "yolov3";
    cat = 2;
  } else {
    name = "imagenet";
    cat = 3;
  }
  for (size_t i = 0; i < profiles.size(); ++i)
    if (profiles[i].name == name) return i;
  // Profiles without those names (synthetic): the category picks by position.
  return std::min<size_t>(static_cast<size_t>(cat), profiles.size() - 1);
}

size_t job_model(const TraceJob& job, size_t job_index, const std::vector<ModelProfile>& profiles, uint64_t seed) {
  if (job.model.empty()) return assign_model(job, job_index, profiles, seed);
  for (size_t i = 0; i < profiles.size(); ++i)
    if (profiles[i].name == job.model) return i;
  throw Error("job " + job.id + ": no model profile named '" + job.model + "'");
}

namespace {

// One run of the pool simulator (simulate()): the jobs' state between events, and the steps of the
// event loop.
class PoolSim {
 public:
  PoolSim(const std::vector<TraceJob>& trace, const std::vector<ModelProfile>& profiles, const SimConfig& cfg);
  SimResult run();

 private:
  struct Live {
    JobModel jm;
    double work = 0, remaining = 0;
    int g = 0, B = 0, k = 1;
    double rate = 0, pause_until = 0;
    bool started = false, done = false;
  };
  double rate_of(const Live& L, int g, int B, int k) const;
  double next_event() const;
  void advance_to(double t);
  void complete_due(double t);
  void replan(double t);
  void apply(size_t k, const Assignment& a, double t);
  void summarise();
  JobState state_of(size_t k) const;

  const SimConfig& cfg_;
  std::unique_ptr<Policy> policy_;
  size_t N_ = 0;
  SimResult res_;
  std::vector<Live> live_;
  std::vector<size_t> active_;  // in submission order
  std::vector<bool> runnable_;
  size_t next_arrival_ = 0;
  double last_ = 0, next_periodic_ = 0, plan_ms_total_ = 0, colocated_gpu_s_ = 0;
  int finished_ = 0, to_finish_ = 0;
  std::vector<JobState> states_;
  static constexpr double kEpsT = 1e-9;
};

PoolSim::PoolSim(const std::vector<TraceJob>& trace, const std::vector<ModelProfile>& profiles, const SimConfig& cfg)
    : cfg_(cfg) {
  PolicyConfig pc;
  pc.hysteresis = cfg.hysteresis;
  pc.weighting = cfg.weighting;
  pc.restart_aware = cfg.restart_aware;
  pc.pause_s = cfg.rescale_pause_s;
  policy_ = make_policy(cfg.policy, pc);
  N_ = trace.size();
  std::vector<size_t> order(N_);
  for (size_t i = 0; i < N_; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return trace[a].submit_s < trace[b].submit_s; });
  res_.jobs.resize(N_);
  live_.resize(N_);
  for (size_t k = 0; k < N_; ++k) {
    const size_t i = order[k];
    const TraceJob& tj = trace[i];
    const ModelProfile& p = profiles[job_model(tj, i, profiles, cfg.seed)];
    Live& L = live_[k];
    L.jm = make_job_model(p, tj.gpus, cfg, tj.batch);
    L.work = tj.duration_s * L.jm.ref_samples_per_s;
    L.remaining = L.work;
    JobResult& jr = res_.jobs[k];
    jr.id = tj.id;
    jr.model = p.name;
    jr.submit_s = tj.submit_s;
    jr.duration_s = tj.duration_s;
    jr.req_gpus = tj.gpus;
    jr.ref_batch = L.jm.ref_batch;
    jr.work = L.work;
  }
  // Jobs this policy can never run on this cluster (e.g. a gang larger than the cluster) are left
  // out: they would wait forever and keep the simulation from ending. They count as not started.
  runnable_.resize(N_);
  for (size_t k = 0; k < N_; ++k) {
    runnable_[k] = policy_->can_run(state_of(k), cfg.gpus);
    to_finish_ += runnable_[k];
  }
  next_periodic_ = cfg.replan_interval_s;
}

JobState PoolSim::state_of(size_t k) const {
  const Live& L = live_[k];
  JobState s;
  s.index = static_cast<int>(k);
  s.submit_s = res_.jobs[k].submit_s;
  s.req_gpus = res_.jobs[k].req_gpus;
  s.ref_batch = L.jm.ref_batch;
  s.ref_samples_per_s = L.jm.ref_samples_per_s;
  s.elastic = &L.jm.elastic;
  s.elastic_goodput = &L.jm.elastic_goodput;
  s.fixed_batch = &L.jm.fixed_batch;
  s.cur_gpus = L.g;
  s.cur_batch = L.B;
  s.cur_ranks_per_gpu = L.k;
  s.started = L.started;
  s.remaining_s = L.remaining / L.jm.ref_samples_per_s;
  return s;
}

double PoolSim::rate_of(const Live& L, int g, int B, int k) const {
  const ModelProfile& p = *L.jm.profile;
  EDP_CHECK(g >= 1 && g <= std::max(L.jm.max_gpus, 1) && B % g == 0 && B / g >= p.min_local &&
                B / g <= p.max_local && B <= std::max(p.max_batch, L.jm.ref_batch) && k >= 1 &&
                k <= cfg_.max_ranks_per_gpu && B % (g * k) == 0,
            "policy ", policy_->name(), " gave an infeasible configuration (", g, " GPUs, batch ", B, ", ", k,
            " rank(s) per GPU) to model ", p.name);
  double r = p.model.colocated_samples_per_s(g, k, B, cfg_.colocation_idle);
  if (cfg_.statistical_efficiency) r *= efficiency(p, L.jm.ref_batch, B);
  return r;
}

double PoolSim::next_event() const {
  const double inf = std::numeric_limits<double>::infinity();
  double t_next = next_arrival_ < N_ ? res_.jobs[next_arrival_].submit_s : inf;
  for (size_t k : active_) {
    const Live& L = live_[k];
    if (L.g == 0) continue;
    const double tc = std::max(last_, L.pause_until) + (L.rate > 0 ? L.remaining / L.rate : inf);
    t_next = std::min(t_next, tc);
  }
  if (!active_.empty()) t_next = std::min(t_next, next_periodic_);
  return t_next;
}

// Every running job progresses linearly from the last event to t.
void PoolSim::advance_to(double t) {
  for (size_t k : active_) {
    Live& L = live_[k];
    if (L.g == 0) continue;
    const double run = std::max(0.0, t - std::max(last_, L.pause_until));
    const double dw = std::min(L.remaining, L.rate * run);
    L.remaining -= dw;
    res_.jobs[k].done_work += dw;
    res_.jobs[k].gpu_seconds += L.g * (t - last_);
    if (L.k > 1) colocated_gpu_s_ += L.g * (t - last_);
  }
  last_ = t;
}

// Completions: a job is done when its completion time has come (within rounding).
void PoolSim::complete_due(double t) {
  for (size_t idx = 0; idx < active_.size();) {
    const size_t k = active_[idx];
    Live& L = live_[k];
    const bool due = L.g > 0 && t >= L.pause_until - kEpsT &&
                     (L.remaining <= 1e-12 * std::max(1.0, L.work) ||
                      (L.rate > 0 && L.remaining / L.rate <= kEpsT * std::max(1.0, t)));
    if (due) {
      res_.jobs[k].done_work += L.remaining;  // the rounding residue of the last interval
      L.remaining = 0;
      L.done = true;
      L.g = 0;
      res_.jobs[k].finish_s = t;
      ++finished_;
      active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(idx));
    } else {
      ++idx;
    }
  }
}

void PoolSim::apply(size_t k, const Assignment& a, double t) {
  Live& L = live_[k];
  const int B = a.gpus > 0 ? a.batch : 0;
  const int kk = a.gpus > 0 ? a.ranks_per_gpu : 1;
  if (a.gpus == L.g && B == L.B && kk == L.k) return;
  if (a.gpus > 0) {
    L.rate = rate_of(L, a.gpus, B, kk);
    if (L.started) {
      L.pause_until = t + cfg_.rescale_pause_s;
      ++res_.jobs[k].rescales;
      ++res_.summary.rescales;
    } else {
      L.started = true;
      L.pause_until = t;
      res_.jobs[k].start_s = t;
    }
  } else {
    L.rate = 0;
  }
  L.g = a.gpus;
  L.B = B;
  L.k = kk;
  if (cfg_.record_allocations)
    res_.allocations.push_back(AllocationEvent{t, static_cast<int>(k), L.g, L.B, L.g > 0 ? L.rate : 0.0, L.k});
}

void PoolSim::replan(double t) {
  if (active_.empty()) {
    if (cfg_.record_timeline) res_.timeline.push_back(TimelinePoint{t, 0, 0, 0});
    return;
  }
  states_.clear();
  for (size_t k : active_) states_.push_back(state_of(k));
  const auto p0 = std::chrono::steady_clock::now();
  const std::vector<Assignment> plan = policy_->plan(states_, cfg_.gpus, t);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
  plan_ms_total_ += ms;
  res_.summary.plan_ms_max = std::max(res_.summary.plan_ms_max, ms);
  ++res_.summary.replans;
  EDP_CHECK(plan.size() == active_.size(), "policy ", policy_->name(), " returned ", plan.size(),
            " assignments for ", active_.size(), " jobs");
  int used = 0;
  for (const Assignment& a : plan) used += a.gpus;
  EDP_CHECK(used <= cfg_.gpus, "policy ", policy_->name(), " allocated ", used, " GPUs of ", cfg_.gpus);
  for (size_t idx = 0; idx < active_.size(); ++idx) apply(active_[idx], plan[idx], t);
  res_.summary.max_gpus_used = std::max(res_.summary.max_gpus_used, used);
  if (cfg_.record_timeline) {
    int running = 0;
    for (size_t k : active_) running += live_[k].g > 0;
    res_.timeline.push_back(TimelinePoint{t, used, running, static_cast<int>(active_.size()) - running});
  }
}

SimResult PoolSim::run() {
  const auto wall0 = std::chrono::steady_clock::now();
  double t = 0;
  double next_progress = cfg_.progress_every_s;
  while (finished_ < to_finish_) {
    const double t_next = next_event();
    if (t_next == std::numeric_limits<double>::infinity()) break;  // nothing can ever run again (jobs that fit nowhere)
    t = std::max(t, t_next);
    advance_to(t);
    complete_due(t);
    for (; next_arrival_ < N_ && res_.jobs[next_arrival_].submit_s <= t; ++next_arrival_)
      if (runnable_[next_arrival_]) active_.push_back(next_arrival_);
    while (next_periodic_ <= t) next_periodic_ += cfg_.replan_interval_s;
    replan(t);
    if (cfg_.progress && t >= next_progress) {
      cfg_.progress(t, finished_, static_cast<int>(N_));
      while (next_progress <= t) next_progress += cfg_.progress_every_s;
    }
  }
  summarise();
  res_.summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return std::move(res_);
}

void PoolSim::summarise() {
  SimSummary& s = res_.summary;
  s.policy = cfg_.policy;
  s.gpus = cfg_.gpus;
  s.jobs = static_cast<int>(N_);
  std::vector<double> jct;
  double queue_sum = 0, gpu_s = 0;
  int started = 0;
  for (const JobResult& j : res_.jobs) {
    gpu_s += j.gpu_seconds;
    if (j.start_s >= 0) {
      ++started;
      queue_sum += j.start_s - j.submit_s;
    }
    if (j.finished()) {
      jct.push_back(j.finish_s - j.submit_s);
      s.makespan_s = std::max(s.makespan_s, j.finish_s);
      if (j.finish_s <= cfg_.window_s) ++s.completed_in_window;
    }
  }
  s.completed = static_cast<int>(jct.size());
  s.never_started = static_cast<int>(N_) - started;
  if (!jct.empty()) {
    double sum = 0;
    for (double x : jct) sum += x;
    s.avg_jct_s = sum / static_cast<double>(jct.size());
    std::sort(jct.begin(), jct.end());
    auto q = [&](double f) { return jct[static_cast<size_t>(std::llround(f * static_cast<double>(jct.size() - 1)))]; };
    s.median_jct_s = q(0.5);
    s.p95_jct_s = q(0.95);
  }
  s.avg_queue_s = started ? queue_sum / started : 0.0;
  s.utilisation = s.makespan_s > 0 ? gpu_s / (static_cast<double>(cfg_.gpus) * s.makespan_s) : 0.0;
  s.colocated_share = gpu_s > 0 ? colocated_gpu_s_ / gpu_s : 0.0;
  s.plan_ms_avg = s.replans ? plan_ms_total_ / s.replans : 0.0;
}

}  // namespace

SimResult simulate(const std::vector<TraceJob>& trace, const std::vector<ModelProfile>& profiles,
                   const SimConfig& cfg) {
  EDP_CHECK(cfg.gpus >= 1, "simulate: gpus must be >= 1, got ", cfg.gpus);
  EDP_CHECK(cfg.rescale_pause_s >= 0, "simulate: rescale pause must be >= 0");
  EDP_CHECK(cfg.replan_interval_s > 0, "simulate: replan interval must be > 0");
  EDP_CHECK(cfg.max_scale >= 1, "simulate: max_scale must be >= 1");
  return PoolSim(trace, profiles, cfg).run();
}

std::vector<JobBound> job_bounds(const std::vector<TraceJob>& trace, const std::vector<ModelProfile>& profiles,
                                 const SimConfig& cfg) {
  const PolicyKind pol = parse_policy(cfg.policy, PolicyScope::Pool);
  std::vector<JobBound> out;
  out.reserve(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceJob& tj = trace[i];
    const ModelProfile& p = profiles[job_model(tj, i, profiles, cfg.seed)];
    const JobModel jm = make_job_model(p, tj.gpus, cfg, tj.batch);
    JobBound b;
    b.model = p.name;
    b.own_gpu_s = tj.gpus * tj.duration_s;
    // Work is defined by the own configuration, so ratios of rates give times directly.
    std::vector<Config> own = {Config{tj.gpus, jm.ref_batch, 1, jm.ref_samples_per_s, 1.0}};
    const std::vector<Config>& cfgs = pol == PolicyKind::Static     ? own
                                      : pol == PolicyKind::Baseline ? jm.fixed_batch
                                      : pol == PolicyKind::Dp       ? jm.elastic
                                                                    : jm.elastic_goodput;
    b.min_time_s = b.min_gpu_s = std::numeric_limits<double>::infinity();
    for (const Config& c : cfgs) {
      const double rate = c.samples_per_s * (cfg.statistical_efficiency ? c.efficiency : 1.0);
      if (!(rate > 0)) continue;
      const double t = tj.duration_s * jm.ref_samples_per_s / rate;
      b.min_time_s = std::min(b.min_time_s, t);
      b.min_gpu_s = std::min(b.min_gpu_s, t * c.gpus);
    }
    out.push_back(b);
  }
  return out;
}

void write_jobs_csv(const SimResult& r, const std::string& path) {
  std::ostringstream o;
  o << "id,model,submit_s,req_gpus,ref_batch,duration_s,start_s,finish_s,jct_s,queue_s,rescales,gpu_seconds,work,"
       "done_work\n";
  char buf[512];
  for (const JobResult& j : r.jobs) {
    const double jct = j.finished() ? j.finish_s - j.submit_s : -1;
    const double q = j.start_s >= 0 ? j.start_s - j.submit_s : -1;
    std::snprintf(buf, sizeof buf, "%s,%s,%.3f,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%d,%.1f,%.6g,%.6g\n", j.id.c_str(),
                  j.model.c_str(), j.submit_s, j.req_gpus, j.ref_batch, j.duration_s, j.start_s, j.finish_s, jct, q,
                  j.rescales, j.gpu_seconds, j.work, j.done_work);
    o << buf;
  }
  files::write_atomic(path, o.str());
}

std::string summary_json(const SimSummary& s) {
  // nlohmann::ordered_json keeps the keys in this order (the files are read by people too).
  const nlohmann::ordered_json j = {
      {"policy", s.policy},           {"gpus", s.gpus},
      {"jobs", s.jobs},               {"completed", s.completed},
      {"completed_in_window", s.completed_in_window}, {"never_started", s.never_started},
      {"avg_jct_s", s.avg_jct_s},     {"median_jct_s", s.median_jct_s},
      {"p95_jct_s", s.p95_jct_s},     {"avg_queue_s", s.avg_queue_s},
      {"makespan_s", s.makespan_s},   {"utilisation", s.utilisation},
      {"rescales", s.rescales},       {"replans", s.replans},
      {"plan_ms_avg", s.plan_ms_avg}, {"plan_ms_max", s.plan_ms_max},
      {"max_gpus_used", s.max_gpus_used}, {"colocated_share", s.colocated_share}, {"wall_s", s.wall_s}};
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void write_allocations_csv(const SimResult& r, const std::string& path) {
  std::ostringstream o;
  // speedup: progress rate over the rate at the job's own configuration (its trace duration).
  o << "t_s,id,model,req_gpus,ref_batch,gpus,batch,samples_per_s,speedup,ranks_per_gpu\n";
  char buf[256];
  for (const AllocationEvent& a : r.allocations) {
    const JobResult& j = r.jobs.at(static_cast<size_t>(a.job));
    const double ref_rate = j.duration_s > 0 ? j.work / j.duration_s : 0.0;
    std::snprintf(buf, sizeof buf, "%.3f,%s,%s,%d,%d,%d,%d,%.6g,%.4f,%d\n", a.t, j.id.c_str(), j.model.c_str(),
                  j.req_gpus, j.ref_batch, a.gpus, a.batch, a.samples_per_s,
                  ref_rate > 0 ? a.samples_per_s / ref_rate : 0.0, a.ranks_per_gpu);
    o << buf;
  }
  files::write_atomic(path, o.str());
}

void write_timeline_csv(const SimResult& r, const std::string& path) {
  std::ostringstream o;
  o << "t_s,gpus_used,running,queued\n";
  for (const TimelinePoint& p : r.timeline) o << p.t << ',' << p.gpus_used << ',' << p.running << ',' << p.queued << '\n';
  files::write_atomic(path, o.str());
}

}  // namespace edp::autoscale
