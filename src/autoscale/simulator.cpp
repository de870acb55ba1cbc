// Discrete-event simulation of elastic jobs on a shared cluster (simulator.h). Between two
// events every job progresses linearly, so the state is advanced in closed form from event to
// event; events are arrivals, completions and periodic re-plans, and all events at the same
// instant are handled together before one re-plan.
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
#include "edp/core/error.h"
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
  // GPU sizes and their shares in the Philly week (shared/data/README.md), coarsened.
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

double efficiency(const ModelProfile& p, int ref_batch, int batch) {
  if (p.grad_noise_scale <= 0) return 1.0;
  return (p.grad_noise_scale + ref_batch) / (p.grad_noise_scale + batch);
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
      JobConfig best{g, jm.ref_batch, -1, 1.0};
      each_k(jm.ref_batch, [&](int k, double sps) {
        if (sps > best.samples_per_s) best.samples_per_s = sps, best.ranks_per_gpu = k;
      });
      jm.fixed_batch.push_back(best);
    }
    JobConfig best_t, best_g;
    double vt = -1, vg = -1;
    for (int B : batches) {
      const double eff = efficiency(p, jm.ref_batch, B);
      each_k(B, [&](int k, double sps) {
        if (sps > vt) {
          vt = sps;
          best_t = JobConfig{g, B, sps, eff, k};
        }
        if (sps * eff > vg) {
          vg = sps * eff;
          best_g = JobConfig{g, B, sps, eff, k};
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

SimResult simulate(const std::vector<TraceJob>& trace, const std::vector<ModelProfile>& profiles,
                   const SimConfig& cfg) {
  EDP_CHECK(cfg.gpus >= 1, "simulate: gpus must be >= 1, got ", cfg.gpus);
  EDP_CHECK(cfg.rescale_pause_s >= 0, "simulate: rescale pause must be >= 0");
  EDP_CHECK(cfg.replan_interval_s > 0, "simulate: replan interval must be > 0");
  EDP_CHECK(cfg.max_scale >= 1, "simulate: max_scale must be >= 1");
  const auto wall0 = std::chrono::steady_clock::now();
  PolicyConfig pc;
  pc.rescale_penalty = cfg.rescale_penalty;
  pc.weighting = cfg.weighting;
  pc.restart_aware = cfg.restart_aware;
  pc.pause_s = cfg.rescale_pause_s;
  std::unique_ptr<Policy> policy = make_policy(cfg.policy, pc);

  const size_t N = trace.size();
  std::vector<size_t> order(N);
  for (size_t i = 0; i < N; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return trace[a].submit_s < trace[b].submit_s; });

  struct Live {
    JobModel jm;
    double work = 0, remaining = 0;
    int g = 0, B = 0, k = 1;
    double rate = 0, pause_until = 0;
    bool started = false, done = false;
  };
  SimResult res;
  res.jobs.resize(N);
  std::vector<Live> live(N);
  for (size_t k = 0; k < N; ++k) {
    const size_t i = order[k];
    const TraceJob& tj = trace[i];
    const ModelProfile& p = profiles[job_model(tj, i, profiles, cfg.seed)];
    Live& L = live[k];
    L.jm = make_job_model(p, tj.gpus, cfg, tj.batch);
    L.work = tj.duration_s * L.jm.ref_samples_per_s;
    L.remaining = L.work;
    JobResult& jr = res.jobs[k];
    jr.id = tj.id;
    jr.model = p.name;
    jr.submit_s = tj.submit_s;
    jr.duration_s = tj.duration_s;
    jr.req_gpus = tj.gpus;
    jr.ref_batch = L.jm.ref_batch;
    jr.work = L.work;
  }

  auto rate_of = [&](const Live& L, int g, int B, int k) {
    const ModelProfile& p = *L.jm.profile;
    EDP_CHECK(g >= 1 && g <= std::max(L.jm.max_gpus, 1) && B % g == 0 && B / g >= p.min_local &&
                  B / g <= p.max_local && B <= std::max(p.max_batch, L.jm.ref_batch) && k >= 1 &&
                  k <= cfg.max_ranks_per_gpu && B % (g * k) == 0,
              "policy ", policy->name(), " gave an infeasible configuration (", g, " GPUs, batch ", B, ", ", k,
              " rank(s) per GPU) to model ", p.name);
    double r = p.model.colocated_samples_per_s(g, k, B, cfg.colocation_idle);
    if (cfg.statistical_efficiency) r *= efficiency(p, L.jm.ref_batch, B);
    return r;
  };

  const double inf = std::numeric_limits<double>::infinity();
  std::vector<size_t> active;  // in submission order
  size_t next_arrival = 0;
  double t = 0, last = 0;
  double next_periodic = cfg.replan_interval_s;
  double next_progress = cfg.progress_every_s;
  int finished = 0;
  double plan_ms_total = 0, colocated_gpu_s = 0;
  std::vector<JobState> states;
  const double eps_t = 1e-9;

  // Jobs this policy can never run on this cluster (e.g. a gang larger than the cluster) are left
  // out: they would wait forever and keep the simulation from ending. They count as not started.
  std::vector<bool> runnable(N);
  int to_finish = 0;
  for (size_t k = 0; k < N; ++k) {
    JobState s;
    s.req_gpus = res.jobs[k].req_gpus;
    s.ref_batch = live[k].jm.ref_batch;
    s.ref_samples_per_s = live[k].jm.ref_samples_per_s;
    s.elastic = &live[k].jm.elastic;
    s.elastic_goodput = &live[k].jm.elastic_goodput;
    s.fixed_batch = &live[k].jm.fixed_batch;
    runnable[k] = policy->can_run(s, cfg.gpus);
    to_finish += runnable[k];
  }

  while (finished < to_finish) {
    // Next event.
    double t_next = next_arrival < N ? res.jobs[next_arrival].submit_s : inf;
    for (size_t k : active) {
      const Live& L = live[k];
      if (L.g == 0) continue;
      const double tc = std::max(last, L.pause_until) + (L.rate > 0 ? L.remaining / L.rate : inf);
      t_next = std::min(t_next, tc);
    }
    if (!active.empty()) t_next = std::min(t_next, next_periodic);
    if (t_next == inf) break;  // nothing can ever run again (jobs that fit nowhere)
    t = std::max(t, t_next);

    // Advance every running job to t.
    for (size_t k : active) {
      Live& L = live[k];
      if (L.g == 0) continue;
      const double run = std::max(0.0, t - std::max(last, L.pause_until));
      const double dw = std::min(L.remaining, L.rate * run);
      L.remaining -= dw;
      res.jobs[k].done_work += dw;
      res.jobs[k].gpu_seconds += L.g * (t - last);
      if (L.k > 1) colocated_gpu_s += L.g * (t - last);
    }
    last = t;

    // Completions: a job is done when its completion time has come (within rounding).
    for (size_t idx = 0; idx < active.size();) {
      const size_t k = active[idx];
      Live& L = live[k];
      const bool due = L.g > 0 && t >= L.pause_until - eps_t &&
                       (L.remaining <= 1e-12 * std::max(1.0, L.work) ||
                        (L.rate > 0 && L.remaining / L.rate <= eps_t * std::max(1.0, t)));
      if (due) {
        res.jobs[k].done_work += L.remaining;  // the rounding residue of the last interval
        L.remaining = 0;
        L.done = true;
        L.g = 0;
        res.jobs[k].finish_s = t;
        ++finished;
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(idx));
      } else {
        ++idx;
      }
    }
    for (; next_arrival < N && res.jobs[next_arrival].submit_s <= t; ++next_arrival)
      if (runnable[next_arrival]) active.push_back(next_arrival);
    while (next_periodic <= t) next_periodic += cfg.replan_interval_s;

    if (!active.empty()) {
      states.clear();
      for (size_t k : active) {
        const Live& L = live[k];
        JobState s;
        s.index = static_cast<int>(k);
        s.submit_s = res.jobs[k].submit_s;
        s.req_gpus = res.jobs[k].req_gpus;
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
        states.push_back(s);
      }
      const auto p0 = std::chrono::steady_clock::now();
      const std::vector<Assignment> plan = policy->plan(states, cfg.gpus, t);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
      plan_ms_total += ms;
      res.summary.plan_ms_max = std::max(res.summary.plan_ms_max, ms);
      ++res.summary.replans;
      EDP_CHECK(plan.size() == active.size(), "policy ", policy->name(), " returned ", plan.size(),
                " assignments for ", active.size(), " jobs");
      int used = 0;
      for (const Assignment& a : plan) used += a.gpus;
      EDP_CHECK(used <= cfg.gpus, "policy ", policy->name(), " allocated ", used, " GPUs of ", cfg.gpus);
      for (size_t idx = 0; idx < active.size(); ++idx) {
        const size_t k = active[idx];
        Live& L = live[k];
        const Assignment& a = plan[idx];
        const int B = a.gpus > 0 ? a.batch : 0;
        const int kk = a.gpus > 0 ? a.ranks_per_gpu : 1;
        if (a.gpus == L.g && B == L.B && kk == L.k) continue;
        if (a.gpus > 0) {
          L.rate = rate_of(L, a.gpus, B, kk);
          if (L.started) {
            L.pause_until = t + cfg.rescale_pause_s;
            ++res.jobs[k].rescales;
            ++res.summary.rescales;
          } else {
            L.started = true;
            L.pause_until = t;
            res.jobs[k].start_s = t;
          }
        } else {
          L.rate = 0;
        }
        L.g = a.gpus;
        L.B = B;
        L.k = kk;
        if (cfg.record_allocations)
          res.allocations.push_back(AllocationEvent{t, static_cast<int>(k), L.g, L.B, L.g > 0 ? L.rate : 0.0, L.k});
      }
      res.summary.max_gpus_used = std::max(res.summary.max_gpus_used, used);
      if (cfg.record_timeline) {
        int running = 0;
        for (size_t k : active) running += live[k].g > 0;
        res.timeline.push_back(
            TimelinePoint{t, used, running, static_cast<int>(active.size()) - running});
      }
    } else if (cfg.record_timeline) {
      res.timeline.push_back(TimelinePoint{t, 0, 0, 0});
    }
    if (cfg.progress && t >= next_progress) {
      cfg.progress(t, finished, static_cast<int>(N));
      while (next_progress <= t) next_progress += cfg.progress_every_s;
    }
  }

  // Summary.
  SimSummary& s = res.summary;
  s.policy = cfg.policy;
  s.gpus = cfg.gpus;
  s.jobs = static_cast<int>(N);
  std::vector<double> jct;
  double queue_sum = 0, gpu_s = 0;
  int started = 0;
  for (const JobResult& j : res.jobs) {
    gpu_s += j.gpu_seconds;
    if (j.start_s >= 0) {
      ++started;
      queue_sum += j.start_s - j.submit_s;
    }
    if (j.finished()) {
      jct.push_back(j.finish_s - j.submit_s);
      s.makespan_s = std::max(s.makespan_s, j.finish_s);
      if (j.finish_s <= cfg.window_s) ++s.completed_in_window;
    }
  }
  s.completed = static_cast<int>(jct.size());
  s.never_started = static_cast<int>(N) - started;
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
  s.utilisation = s.makespan_s > 0 ? gpu_s / (static_cast<double>(cfg.gpus) * s.makespan_s) : 0.0;
  s.colocated_share = gpu_s > 0 ? colocated_gpu_s / gpu_s : 0.0;
  s.plan_ms_avg = s.replans ? plan_ms_total / s.replans : 0.0;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return res;
}

std::vector<JobBound> job_bounds(const std::vector<TraceJob>& trace, const std::vector<ModelProfile>& profiles,
                                 const SimConfig& cfg) {
  const std::string& pol = cfg.policy;
  EDP_CHECK(pol == "static" || pol == "baseline" || pol == "dp" || pol == "goodput", "job_bounds: unknown policy '",
            pol, "'");
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
    std::vector<JobConfig> own = {JobConfig{tj.gpus, jm.ref_batch, jm.ref_samples_per_s, 1.0}};
    const std::vector<JobConfig>& cfgs = pol == "static"     ? own
                                         : pol == "baseline" ? jm.fixed_batch
                                         : pol == "dp"       ? jm.elastic
                                                             : jm.elastic_goodput;
    b.min_time_s = b.min_gpu_s = std::numeric_limits<double>::infinity();
    for (const JobConfig& c : cfgs) {
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
  std::ofstream o(path);
  if (!o) throw Error("cannot write " + path);
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
  std::ofstream o(path);
  if (!o) throw Error("cannot write " + path);
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
}

void write_timeline_csv(const SimResult& r, const std::string& path) {
  std::ofstream o(path);
  if (!o) throw Error("cannot write " + path);
  o << "t_s,gpus_used,running,queued\n";
  for (const TimelinePoint& p : r.timeline) o << p.t << ',' << p.gpus_used << ',' << p.running << ',' << p.queued << '\n';
}

}  // namespace edp::autoscale
