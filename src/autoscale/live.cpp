// The live autoscaler's pure part: job specs, the fit of a job's own step times, one planning
// round. The controller around it (processes, files) is src/autoscale/controller.cpp.
#include "edp/autoscale/live.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "autoscale/memory_fields.h"
#include "autoscale/plan_types.h"
#include "core/json_fields.h"
#include "edp/autoscale/goodput.h"
#include "edp/autoscale/plan.h"
#include "edp/core/error.h"

namespace edp::autoscale {

namespace {

constexpr int64_t kMaxWorkers = 4096;
constexpr int64_t kMaxBatch = int64_t{1} << 31;

// What exec(2) can pass on: one argument or "NAME=value" string of at most MAX_ARG_STRLEN (32
// pages, 128 KiB) bytes, and all of them together well inside ARG_MAX (2 MiB with the default 8 MiB
// stack), which the job's command shares with the environment it inherits and with edprun's and
// mpirun's own arguments: half of it for the spec's. A spec beyond these can never start; it is
// refused when submitted instead of failing in the job's log.
constexpr size_t kMaxExecString = 131072;
constexpr size_t kMaxExecTotal = size_t{1} << 20;
constexpr size_t kMaxExecWords = 4096;

void check_launchable(const json_fields::Fields& f, const JobSpec& s) {
  if (s.command.size() > kMaxExecWords)
    f.fail("command", std::to_string(s.command.size()) + " arguments, more than the " + std::to_string(kMaxExecWords) +
                          " a job's command may have (it could never start)");
  if (s.env.size() > kMaxExecWords)
    f.fail("env", std::to_string(s.env.size()) + " variables, more than the " + std::to_string(kMaxExecWords) +
                      " a job may set (it could never start)");
  size_t total = 0;
  for (size_t i = 0; i < s.command.size(); ++i) {
    const size_t n = s.command[i].size() + 1;
    if (n > kMaxExecString)
      f.fail("command", "argument " + std::to_string(i) + " is " + std::to_string(n - 1) + " bytes, more than the " +
                            std::to_string(kMaxExecString - 1) + " exec(2) passes on (the job could never start)");
    total += n + sizeof(char*);
  }
  for (const auto& [k, v] : s.env) {
    const size_t n = k.size() + 1 + v.size() + 1;
    if (n > kMaxExecString)
      f.fail("env", "'" + k.substr(0, 40) + "' is " + std::to_string(n - 1) + " bytes as NAME=value, more than the " +
                        std::to_string(kMaxExecString - 1) + " exec(2) passes on (the job could never start)");
    total += n + sizeof(char*);
  }
  if (total > kMaxExecTotal)
    f.fail("command", "the command and env take " + std::to_string(total) + " bytes, more than the " +
                          std::to_string(kMaxExecTotal) + " a job's exec(2) can be given (it could never start)");
}

}  // namespace

JobSpec parse_job_spec(const std::string& text, const std::string& where) {
  const json_fields::Json doc = json_fields::parse(text, where);
  const json_fields::Fields f(doc, where);
  f.allow({"name", "command", "cwd", "env", "min_workers", "max_workers", "workers", "min_batch", "max_batch", "batch",
           "max_worker_batch", "weight", "preemptible", "max_restarts", "samples", "grad_noise_scale", "gpu_busy",
           "memory"});
  JobSpec s;
  s.name = f.text("name");
  if (s.name.empty() || s.name.size() > 40 ||
      !std::all_of(s.name.begin(), s.name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }))
    f.fail("name", "1 to 40 characters of A-Z a-z 0-9 _ - . , got " + doc["name"].dump());
  if (!f.has("command") || !doc["command"].is_array() || doc["command"].empty())
    f.fail("command", "required, a non-empty array of strings (the program, then its arguments)");
  for (const auto& a : doc["command"]) {
    if (!a.is_string()) f.fail("command", "every element must be a string, got " + a.dump());
    s.command.push_back(a.get<std::string>());
  }
  if (s.command[0].empty()) f.fail("command", "the program is an empty string");
  s.cwd = f.text("cwd", "");
  if (f.has("cwd") && (s.cwd.empty() || s.cwd[0] != '/')) f.fail("cwd", "must be an absolute path, got " + doc["cwd"].dump());
  if (f.has("env")) {
    if (!doc["env"].is_object()) f.fail("env", "must be an object of strings");
    for (auto it = doc["env"].begin(); it != doc["env"].end(); ++it) {
      if (!it.value().is_string()) f.fail("env", "value of '" + it.key() + "' must be a string");
      if (it.key().empty() || it.key().find('=') != std::string::npos) f.fail("env", "bad variable name '" + it.key() + "'");
      s.env[it.key()] = it.value().get<std::string>();
    }
  }
  check_launchable(f, s);
  s.min_workers = static_cast<int>(f.integer("min_workers", 1, kMaxWorkers, 1));
  s.max_workers = static_cast<int>(f.integer("max_workers", 1, kMaxWorkers, s.min_workers));
  if (s.max_workers < s.min_workers) f.fail("max_workers", "must be >= min_workers (" + std::to_string(s.min_workers) + ")");
  s.workers = static_cast<int>(f.integer("workers", 1, kMaxWorkers, s.min_workers));
  if (s.workers < s.min_workers || s.workers > s.max_workers)
    f.fail("workers", "the start size must be in [min_workers, max_workers] = [" + std::to_string(s.min_workers) + ", " +
                          std::to_string(s.max_workers) + "]");
  if (!f.has("min_batch")) f.fail("min_batch", "required (the smallest global batch)");
  s.min_batch = f.integer("min_batch", 1, kMaxBatch);
  s.max_batch = f.integer("max_batch", 1, kMaxBatch, s.min_batch);
  if (s.max_batch < s.min_batch) f.fail("max_batch", "must be >= min_batch (" + std::to_string(s.min_batch) + ")");
  s.batch = f.integer("batch", 1, kMaxBatch, s.min_batch);
  if (s.batch < s.min_batch || s.batch > s.max_batch) f.fail("batch", "the start batch must be in [min_batch, max_batch]");
  if (s.batch % s.workers != 0)
    f.fail("batch", "the start batch " + std::to_string(s.batch) + " does not split evenly over " +
                        std::to_string(s.workers) + " worker(s)");
  s.max_worker_batch = f.integer("max_worker_batch", 0, kMaxBatch, 0);
  if (s.max_worker_batch > 0 && s.batch / s.workers > s.max_worker_batch)
    f.fail("max_worker_batch", "the start batch gives " + std::to_string(s.batch / s.workers) +
                                   " samples per worker, above this limit");
  s.weight = f.number("weight", 1e-6, 1e6, 1.0);
  s.preemptible = f.boolean("preemptible", false);
  s.max_restarts = static_cast<int>(f.integer("max_restarts", 0, 100, 1));
  s.samples = f.integer("samples", 0, int64_t{1} << 50, 0);
  s.grad_noise_scale = f.number("grad_noise_scale", 0.0, 1e12, 0.0);
  s.gpu_busy = f.number("gpu_busy", 0.01, 1.0, 1.0);
  if (const auto m = f.object_if("memory")) s.memory = parse_memory(*m);
  return s;
}

std::string job_spec_json(const JobSpec& s) {
  nlohmann::ordered_json j;
  j["name"] = s.name;
  j["command"] = s.command;
  if (!s.cwd.empty()) j["cwd"] = s.cwd;
  if (!s.env.empty()) j["env"] = s.env;
  j["min_workers"] = s.min_workers;
  j["max_workers"] = s.max_workers;
  j["workers"] = s.workers;
  j["min_batch"] = s.min_batch;
  j["max_batch"] = s.max_batch;
  j["batch"] = s.batch;
  j["max_worker_batch"] = s.max_worker_batch;
  j["weight"] = s.weight;
  j["preemptible"] = s.preemptible;
  j["max_restarts"] = s.max_restarts;
  if (s.samples > 0) j["samples"] = s.samples;
  if (s.grad_noise_scale > 0) j["grad_noise_scale"] = s.grad_noise_scale;
  if (s.gpu_busy != 1.0) j["gpu_busy"] = s.gpu_busy;
  if (s.memory.given())
    j["memory"] = {{"model_bytes", s.memory.model_bytes},
                   {"optimizer_state_bytes", s.memory.optimizer_state_bytes},
                   {"zero", s.memory.zero_stage}};
  return j.dump();
}

// ---- the fit ------------------------------------------------------------------------------------

StepTimeModel fit_measured(const std::vector<Measured>& all) {
  StepTimeModel m;
  m.gpus_per_node = 1 << 20;  // one node: no cross-node term
  std::vector<StepSample> rows;
  std::map<int, std::pair<double, int>> sync_by_w;  // workers -> (sum of comm_s, count)
  for (const Measured& r : all)
    if (r.ranks_per_slot == 1 && r.workers >= 1 && r.batch >= r.workers && r.step_s > 0 && r.steps > 0) {
      rows.push_back(StepSample{static_cast<double>(r.batch) / r.workers, r.step_s, r.comm_s});
      if (r.workers > 1) {
        sync_by_w[r.workers].first += r.comm_s;
        ++sync_by_w[r.workers].second;
      }
    }
  if (rows.empty()) return m;
  const ComputeLine line = fit_compute_line(rows, 0.9, 0.0);  // one batch measured: through the origin
  m.a = line.a;
  m.c = line.c;
  fit_sync_line(sync_by_w, OnePoint::Proportional, m.s0, m.s1);
  return m;
}

double colocation_speed(int k, double busy) {
  const double load = k * busy;
  return load <= 1.0 ? 1.0 : 1.0 / load;
}

// ---- one planning round ---------------------------------------------------------------------------

const char* action_name(Action a) {
  switch (a) {
    case Action::Start: return "start";
    case Action::Grow: return "grow";
    case Action::Shrink: return "shrink";
    case Action::Rebatch: return "rebatch";
    case Action::Stop: return "stop";
    case Action::Hold: return "hold";
    case Action::Wait: return "wait";
    case Action::Deferred: return "deferred";
  }
  return "?";
}

namespace {

// One option of a job: the configuration decide() values (plan.h's Config: slots, ranks per slot,
// throughput, efficiency) and what the decision log says of it.
struct Opt {
  Config config;
  int64_t batch = 0;  // the global batch (Config's is capped at INT32_MAX)
  bool measured = false, current = false;
  int workers() const { return config.gpus * config.ranks_per_gpu; }
};

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

std::string config_str(int workers, int k, int64_t batch) {
  std::string s = std::to_string(workers) + " worker(s)";
  if (k > 1) s += " (" + std::to_string(k) + " per slot)";
  return s + " x global batch " + std::to_string(batch);
}

int slots_of(int workers, int k) { return (workers + k - 1) / k; }

// What the jobs tell about those that have measured nothing yet: the median samples/s per rank over
// every job's measurements, and the mean size of the trainings that reported one.
struct Priors {
  double rank_sps = 1000;
  double total = 1e6;
};

Priors priors(const std::vector<LiveJob>& jobs, int min_steps) {
  std::vector<double> per_rank;
  double total_sum = 0;
  int total_n = 0;
  for (const LiveJob& j : jobs) {
    for (const Measured& m : j.measured)
      if (m.ranks_per_slot == 1 && m.step_s > 0 && m.steps >= min_steps)
        per_rank.push_back(static_cast<double>(m.batch) / m.step_s / m.workers);
    const int64_t total = j.samples_total > 0 ? j.samples_total : j.spec.samples;
    if (total > 0) {
      total_sum += static_cast<double>(total);
      ++total_n;
    }
  }
  Priors p;
  if (!per_rank.empty()) {
    std::nth_element(per_rank.begin(), per_rank.begin() + static_cast<std::ptrdiff_t>(per_rank.size() / 2), per_rank.end());
    p.rank_sps = per_rank[per_rank.size() / 2];
  }
  if (total_n) p.total = total_sum / total_n;
  return p;
}

}  // namespace

// One job's throughput where it ran and where it might run (live.h: Predictor).
Predictor::Predictor(const LiveJob& job, const LivePolicy& policy, double prior_rank_sps)
    : job_(job), policy_(policy), prior_rank_sps_(prior_rank_sps) {
  for (const Measured& m : job.measured)
    if (m.steps >= policy.measured_steps() && m.step_s > 0) {
      usable_.push_back(m);
      if (m.ranks_per_slot == 1) ++anchors_;
    }
  model_ = fit_measured(usable_);
}

const Measured* Predictor::measured(int workers, int k, int64_t batch) const {
  for (const Measured& m : usable_)
    if (m.workers == workers && m.ranks_per_slot == k && m.batch == batch) return &m;
  return nullptr;
}

double Predictor::model(int workers, int k, int64_t batch) const {
  const double speed = policy_.gpu_slots ? colocation_speed(k, job_.spec.gpu_busy) : 1.0;
  if (anchors_ == 0) return prior_rank_sps_ * workers * speed;
  const double local = static_cast<double>(batch) / workers;
  const double step = model_.compute_s(local) / speed + (workers > 1 ? std::max(0.0, model_.s0 + model_.s1 * workers) : 0.0);
  return static_cast<double>(batch) / step;
}

double Predictor::samples_per_s(int workers, int k, int64_t batch, bool* was_measured) const {
  if (const Measured* m = measured(workers, k, batch)) {
    if (was_measured) *was_measured = true;
    return static_cast<double>(m->batch) / m->step_s;
  }
  if (was_measured) *was_measured = false;
  const double p = model(workers, k, batch);
  if (anchors_ == 0) return p;
  // Shrunk toward the nearest measured configuration: its measured throughput times the model's
  // ratio between there and here raised to trust = n / (n + 1) (n configurations measured), so a
  // model fitted to one point claims only the square root of the speedup it extrapolates.
  const Measured* near = nullptr;
  double best = 0;
  for (const Measured& m : usable_) {
    if (m.ranks_per_slot != 1) continue;
    const double d = log_distance(workers, m.workers) + log_distance(static_cast<double>(batch), static_cast<double>(m.batch));
    if (!near || d < best || (d == best && m.steps > near->steps)) near = &m, best = d;
  }
  const double at_near = static_cast<double>(near->batch) / near->step_s;
  return shrink_toward(at_near, model(near->workers, 1, near->batch), p, trust());
}

double Predictor::trust() const { return trust_of(anchors_); }

namespace {

// The options of one job (live.h, plan_live), with their predicted or measured throughput. With
// several types: those on `type` (P.slots its slots), the predictor's throughput times `scale` (1
// where the predictor has the job's own measurements on this type, `projected` false).
std::vector<Opt> job_options(const LiveJob& j, const LivePolicy& P, const Predictor& pred, const std::string& type = "",
                             double scale = 1.0, bool projected = false) {
  const JobSpec& s = j.spec;
  const bool goodput = parse_policy(P.name, PolicyScope::Live) == PolicyKind::Goodput;
  std::vector<Opt> opts;
  const int cur_slots = slots_of(j.workers, j.ranks_per_slot);
  auto add = [&](int slots, int k, int64_t batch) {
    for (const Opt& o : opts)
      if (o.config.gpus == slots && o.config.ranks_per_gpu == k && o.batch == batch) return;
    Opt o;
    o.batch = batch;
    o.config.gpus = slots;
    o.config.ranks_per_gpu = k;
    o.config.batch = static_cast<int>(std::min<int64_t>(batch, INT32_MAX));
    o.config.samples_per_s = pred.samples_per_s(o.workers(), k, batch, &o.measured) * scale;
    o.measured = o.measured && !projected;
    o.config.type = type;
    if (goodput && s.grad_noise_scale > 0) {
      const double b0 = static_cast<double>(s.min_batch);
      o.config.efficiency =
          statistical_efficiency(grad_stats_of_noise_scale(s.grad_noise_scale, b0), static_cast<double>(batch), b0);
    }
    o.current = j.running && o.workers() == j.workers && k == j.ranks_per_slot && batch == j.batch;
    opts.push_back(o);
  };
  if (j.running && !j.settled) {
    add(cur_slots, j.ranks_per_slot, j.batch);  // measure first, or let the rescale land
    return opts;
  }
  // How far the job may be taken: its start size until it ran, then explore_factor times the
  // largest size it was measured at.
  int measured_max = 0;
  for (const Measured& m : j.measured) measured_max = std::max(measured_max, m.workers);
  int cap = s.workers;
  if (measured_max > 0) cap = std::max(cap, static_cast<int>(std::floor(P.explore_factor * measured_max)));
  cap = std::min(cap, s.max_workers);
  std::vector<int64_t> batches = {s.batch, s.min_batch, s.max_batch};
  for (int64_t b = s.min_batch; b <= s.max_batch; b *= 2) batches.push_back(b);
  if (j.running) batches.push_back(j.batch);
  if (!j.running && measured_max == 0) batches = {s.batch};  // never ran: its own batch
  const std::vector<int> ks = P.gpu_slots ? std::vector<int>{1, 2, 4, 8} : std::vector<int>{1};
  for (int k : ks) {
    if (k > P.max_ranks_per_slot) break;
    for (int slots = 1; slots <= P.slots; ++slots) {
      const int w = slots * k;
      if (w < s.min_workers || w > cap) continue;
      if (!fits(s.memory, P.slot_memory_bytes, slots, k)) continue;  // it does not fit the slots' memory there
      for (int64_t b0 : batches) {
        const int64_t b = b0 / w * w;  // the nearest size below that splits evenly
        if (b < s.min_batch || b > s.max_batch || b < w) continue;
        if (s.max_worker_batch > 0 && b / w > s.max_worker_batch) continue;
        add(slots, k, b);
      }
    }
  }
  if (j.running && std::none_of(opts.begin(), opts.end(), [](const Opt& o) { return o.current; }))
    add(cur_slots, j.ranks_per_slot, j.batch);
  return opts;
}

// The reason the decision log shows for a job's choice, from the valuation decide() made it on.
void explain(const LiveJob& j, const Opt& o, const Valuation& v, LiveChoice& c) {
  std::string rate = fmt("%.0f samples/s", o.config.samples_per_s) + (o.measured ? " measured" : " predicted");
  if (o.config.efficiency != 1.0) rate += fmt(" x efficiency %.2f", o.config.efficiency);
  if (!j.running) {
    c.action = Action::Start;
    c.reason = "start at " + config_str(o.workers(), o.config.ranks_per_gpu, o.batch) + ": " + rate +
               fmt(", about %.0f s to finish", v.finish_s);
  } else if (o.current) {
    c.action = Action::Hold;
    c.reason = j.settled ? "the best option is where it is (" + rate + ")" : "holds until it is measured at its size";
  } else {
    const int w = o.workers();
    c.action = w > j.workers ? Action::Grow : w < j.workers ? Action::Shrink : Action::Rebatch;
    c.reason = config_str(j.workers, j.ranks_per_slot, j.batch) + " -> " + config_str(w, o.config.ranks_per_gpu, o.batch) +
               ": " + rate +
               fmt(", finishes in %.1f s instead of %.1f s (%.1f s rescale cost included", v.finish_s,
                   c.stay_remaining_s, v.pause_s) +
               (j.pause_s >= 0 ? ", measured)" : ", default)");
  }
}

// static: a running job keeps its size (and type).
void hold_static(const LiveJob& j, LiveChoice& c) {
  c.slots = slots_of(j.workers, j.ranks_per_slot);
  c.ranks_per_slot = j.ranks_per_slot;
  c.workers = j.workers;
  c.batch = j.batch;
  c.type = j.type;
  c.action = Action::Hold;
  c.reason = "static: a running job keeps its size";
}

// static over several types: FIFO as decide_fifo's, a queued job starting on the first type (in
// the policy's order) where its requested size is free; one larger than every type is passed over.
LivePlan plan_static_typed(const std::vector<LiveJob>& jobs, const LivePolicy& P) {
  std::vector<int> free;
  for (const SlotType& t : P.types) free.push_back(t.slots);
  auto index = [&](const std::string& name) {
    for (size_t t = 0; t < P.types.size(); ++t)
      if (P.types[t].name == name) return t;
    return P.types.size();
  };
  for (const LiveJob& j : jobs)
    if (j.running && index(j.type) < P.types.size()) free[index(j.type)] -= slots_of(j.workers, j.ranks_per_slot);
  LivePlan plan;
  plan.choices.resize(jobs.size());
  bool blocked = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LiveJob& j = jobs[i];
    LiveChoice& c = plan.choices[i];
    if (j.running) {
      hold_static(j, c);
      plan.slots_used += c.slots;
      continue;
    }
    const bool ever = std::any_of(P.types.begin(), P.types.end(), [&](const SlotType& t) { return j.spec.workers <= t.slots; });
    size_t t = P.types.size();
    if (ever && !blocked)
      for (size_t u = 0; u < P.types.size() && t == P.types.size(); ++u)
        if (j.spec.workers <= free[u]) t = u;
    if (t < P.types.size()) {
      free[t] -= j.spec.workers;
      c.slots = c.workers = j.spec.workers;
      c.batch = j.spec.batch;
      c.type = P.types[t].name;
      c.action = Action::Start;
      c.reason = "static: first in line, " + std::to_string(j.spec.workers) + " slot(s) of type " + c.type + " free";
      plan.slots_used += c.slots;
    } else {
      blocked = blocked || ever;
      c.action = Action::Wait;
      c.reason = "static: waits for " + std::to_string(j.spec.workers) + " free slot(s) of one type in submission order";
    }
  }
  return plan;
}

LivePlan plan_static(const std::vector<LiveJob>& jobs, const LivePolicy& P) {
  if (P.typed()) return plan_static_typed(jobs, P);
  PlanRequest req;
  req.gpus = P.slots;
  req.objective = Objective::Fifo;
  for (const LiveJob& j : jobs) {
    PlanJob pj;
    pj.id = j.id;
    pj.own = Config{j.spec.workers, static_cast<int>(std::min<int64_t>(j.spec.batch, INT32_MAX)), 1, 0, 1.0};
    // A job holding more slots than the cluster now gives (a scheduler took some back) cannot stay.
    if (j.running && slots_of(j.workers, j.ranks_per_slot) <= P.slots)
      pj.current = Config{slots_of(j.workers, j.ranks_per_slot), static_cast<int>(std::min<int64_t>(j.batch, INT32_MAX)),
                          j.ranks_per_slot, 0, 1.0};
    req.jobs.push_back(pj);
  }
  const Plan p = decide(req);
  LivePlan plan;
  plan.choices.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LiveJob& j = jobs[i];
    LiveChoice& c = plan.choices[i];
    if (j.running) {
      hold_static(j, c);
    } else if (p.choices[i].config.gpus > 0) {
      c.slots = c.workers = j.spec.workers;
      c.batch = j.spec.batch;
      c.action = Action::Start;
      c.reason = "static: first in line, " + std::to_string(j.spec.workers) + " slot(s) free";
    } else {
      c.action = Action::Wait;
      c.reason = "static: waits for " + std::to_string(j.spec.workers) + " free slot(s) in submission order";
    }
    plan.slots_used += c.slots;
  }
  return plan;
}

}  // namespace

namespace {
PlanRequest build_request(const std::vector<LiveJob>& jobs, const LivePolicy& P, std::vector<std::vector<Opt>>* opts_out);

std::string type_names(const LivePolicy& P) {
  std::string s;
  for (const SlotType& t : P.types) s += (s.empty() ? "" : ", ") + t.name;
  return s;
}

bool has_type(const LivePolicy& P, const std::string& name) {
  return std::any_of(P.types.begin(), P.types.end(), [&](const SlotType& t) { return t.name == name; });
}

// The slots' types and the types the jobs name (edp::DataError naming what is wrong).
void check_types(const std::vector<LiveJob>& jobs, const LivePolicy& P) {
  if (!P.typed()) return;
  int64_t sum = 0;
  std::set<std::string> names;
  for (const SlotType& t : P.types) {
    if (t.name.empty()) throw DataError("slot types: a type has no name (types: " + type_names(P) + ")");
    if (!names.insert(t.name).second) throw DataError("slot types: type '" + t.name + "' is listed twice");
    if (t.slots < 0) throw DataError("slot types: type '" + t.name + "' has " + std::to_string(t.slots) + " slots");
    if (!(t.speed > 0) || !std::isfinite(t.speed))
      throw DataError("slot types: type '" + t.name + "': speed must be a positive number");
    sum += t.slots;
  }
  if (sum != P.slots)
    throw DataError("slot types: the types hold " + std::to_string(sum) + " slot(s) but the slots are " +
                    std::to_string(P.slots));
  for (const LiveJob& j : jobs) {
    if (j.running && !has_type(P, j.type))
      throw DataError("job " + j.id + " runs on GPU type '" + j.type + "', which is not one of the slots' types (" +
                      type_names(P) + ")");
    for (const Measured& m : j.measured)
      if (!has_type(P, m.type))
        throw DataError("job " + j.id + " was measured on GPU type '" + m.type + "', which is not one of the slots' types (" +
                        type_names(P) + ")");
  }
}
}  // namespace

LivePlan plan_live(const std::vector<LiveJob>& jobs, const LivePolicy& P) {
  const auto t0 = std::chrono::steady_clock::now();
  EDP_CHECK(P.slots >= 1, "plan_live: slots must be >= 1");
  check_types(jobs, P);
  // static: FIFO at the requested size and batch; never rescales or preempts.
  if (parse_policy(P.name, PolicyScope::Live) == PolicyKind::Static) {
    LivePlan plan = plan_static(jobs, P);
    plan.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return plan;
  }
  std::vector<std::vector<Opt>> opts;
  const PlanRequest req = build_request(jobs, P, &opts);
  const Plan sol = decide(req);
  LivePlan plan;
  plan.choices.resize(jobs.size());
  plan.objective = sol.objective;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LiveJob& j = jobs[i];
    LiveChoice& c = plan.choices[i];
    // The times the log gives are decide()'s valuation: the chosen option's, and the current one's.
    for (size_t k = 0; k < opts[i].size(); ++k)
      if (opts[i][k].current) c.stay_remaining_s = option_valuation(req, req.jobs[i], req.jobs[i].options[k]).finish_s;
    const PlanChoice& ch = sol.choices[i];
    if (ch.config.gpus == 0) {
      c.action = j.running ? Action::Stop : Action::Wait;
      c.reason = j.running ? "preempted: its slots are worth more to other jobs" : "no slots worth giving it now";
      continue;
    }
    const Opt& o = opts[i][static_cast<size_t>(ch.option)];
    c.slots = o.config.gpus;
    c.ranks_per_slot = o.config.ranks_per_gpu;
    c.workers = o.workers();
    c.batch = o.batch;
    c.samples_per_s = o.config.samples_per_s;
    c.measured = o.measured;
    c.remaining_s = ch.valuation.finish_s;
    c.type = o.config.type;
    plan.slots_used += o.config.gpus;
    explain(j, o, ch.valuation, c);
    if (!c.type.empty() && c.action == Action::Start) c.reason += " (GPU type " + c.type + ")";
  }
  plan.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

namespace {

// The types' speeds: a given one as it is; the others measured where a job ran on two types at
// the same size (workers, ranks per slot, batch; rows of at least measured_steps steps): the ratio
// of its step times, the geometric mean over every such pair of rows of every job, chained from
// the types whose speed is known (given; none given: the type with the most such pairs, at its
// stated speed). A type no job links to a known one keeps its stated speed.
std::vector<SlotType> type_speeds(const std::vector<LiveJob>& jobs, const LivePolicy& P) {
  std::vector<SlotType> types = P.types;
  const size_t K = types.size();
  if (K < 2) return types;
  auto index = [&](const std::string& name) {
    size_t k = 0;
    while (k < K && types[k].name != name) ++k;
    return k;
  };
  // log(speed_u / speed_a) summed over pairs of rows, and their count, per pair of types (u, a).
  std::vector<double> log_sum(K * K, 0.0);
  std::vector<int> pairs(K * K, 0);
  for (const LiveJob& j : jobs)
    for (const Measured& u : j.measured)
      for (const Measured& a : j.measured) {
        const size_t ku = index(u.type), ka = index(a.type);
        if (ku == K || ka == K || ku == ka || u.workers != a.workers || u.ranks_per_slot != a.ranks_per_slot ||
            u.batch != a.batch || u.steps < P.measured_steps() || a.steps < P.measured_steps() || u.step_s <= 0 ||
            a.step_s <= 0)
          continue;
        log_sum[ku * K + ka] += std::log(a.step_s / u.step_s);
        ++pairs[ku * K + ka];
      }
  std::vector<bool> known(K);
  bool any = false;
  for (size_t k = 0; k < K; ++k) any = (known[k] = types[k].given) || any;
  if (!any) {
    size_t best = 0;
    int most = 0;
    for (size_t k = 0; k < K; ++k) {
      int n = 0;
      for (size_t a = 0; a < K; ++a) n += pairs[k * K + a];
      if (n > most) best = k, most = n;
    }
    if (most == 0) return types;  // nothing measured on two types
    known[best] = true;
  }
  for (bool grew = true; grew;) {
    grew = false;
    std::vector<double> sum(K, 0.0);
    std::vector<int> n(K, 0);
    for (size_t u = 0; u < K; ++u)
      for (size_t a = 0; a < K; ++a)
        if (!known[u] && known[a] && pairs[u * K + a] > 0) {
          sum[u] += log_sum[u * K + a] + pairs[u * K + a] * std::log(types[a].speed);
          n[u] += pairs[u * K + a];
        }
    for (size_t u = 0; u < K; ++u)
      if (n[u] > 0) {
        types[u].speed = std::exp(sum[u] / n[u]);
        known[u] = grew = true;
      }
  }
  return types;
}

// The jobs as a request of plan.h: restart-aware, each option's throughput measured or predicted
// (Predictor), the job's measured pause (else the policy's default) for a change, the start cost
// for a start. opts_out: the options with what the decision log says of them.
PlanRequest build_request(const std::vector<LiveJob>& jobs, const LivePolicy& P, std::vector<std::vector<Opt>>* opts_out) {
  const Priors prior = priors(jobs, P.measured_steps());
  PlanRequest req;
  req.gpus = P.slots;
  if (P.typed())
    for (const SlotType& t : P.types) req.types.push_back(GpuType{t.name, t.slots, {}, 0});
  std::vector<TypeLearn> speeds;
  for (const SlotType& t : type_speeds(jobs, P)) speeds.push_back(TypeLearn{t.name, 0, t.speed});
  req.objective = Objective::RestartAware;
  req.hysteresis = P.hysteresis;
  req.pause_s = P.default_pause_s;
  req.start_s = P.start_s;
  std::vector<std::vector<Opt>> opts(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LiveJob& j = jobs[i];
    const JobSpec& s = j.spec;
    const double remaining = std::max(1.0, j.samples_total > 0 ? static_cast<double>(std::max<int64_t>(0, j.samples_total - j.samples_done))
                                           : s.samples > 0     ? static_cast<double>(s.samples)
                                                               : prior.total);
    if (!P.typed()) {
      opts[i] = job_options(j, P, Predictor(j, P, prior.rank_sps));
    } else {
      // Per type: its own measurements there, else those of the type it was measured on most,
      // scaled by the types' speeds (plan_types.h project_type, the rule of plan's learned jobs).
      // A running job stays on its type.
      std::map<std::string, int> count;
      for (const Measured& m : j.measured)
        if (m.steps >= P.measured_steps() && m.step_s > 0) ++count[m.type];
      for (const SlotType& t : P.types) {
        if (j.running && t.name != j.type) continue;
        const detail::TypeProjection from = detail::project_type(count, speeds, t.name);
        LiveJob on = j;  // the job as the source type's measurements show it
        on.measured.clear();
        for (const Measured& m : j.measured)
          if (m.type == from.source) on.measured.push_back(m);
        LivePolicy here = P;
        here.slots = t.slots;
        const Predictor pred(on, here, prior.rank_sps);
        for (Opt& o : job_options(j, here, pred, t.name, from.scale, from.source != t.name)) opts[i].push_back(o);
      }
    }
    PlanJob pj;
    pj.id = j.id;
    pj.weight = s.weight;
    pj.may_wait = !j.running || s.preemptible;
    pj.remaining = remaining;
    const std::string type = !P.typed() ? "" : j.running ? j.type : P.types[0].name;
    pj.own = Config{s.workers, static_cast<int>(std::min<int64_t>(s.batch, INT32_MAX)), 1, 0, 1.0, type};
    // A job holding more slots than the cluster (its type) now gives (a scheduler took some back)
    // cannot stay.
    int room = P.slots;
    for (const SlotType& t : P.types)
      if (P.typed() && t.name == type) room = t.slots;
    if (j.running && slots_of(j.workers, j.ranks_per_slot) <= room)
      pj.current = Config{slots_of(j.workers, j.ranks_per_slot), static_cast<int>(std::min<int64_t>(j.batch, INT32_MAX)),
                          j.ranks_per_slot, 0, 1.0, type};
    pj.pause_s = j.pause_s >= 0 ? j.pause_s : -1;
    for (const Opt& o : opts[i]) pj.options.push_back(o.config);
    req.jobs.push_back(std::move(pj));
  }
  if (opts_out) *opts_out = std::move(opts);
  return req;
}

}  // namespace

PlanRequest live_request(const std::vector<LiveJob>& jobs, const LivePolicy& policy) {
  check_types(jobs, policy);
  return build_request(jobs, policy, nullptr);
}

}  // namespace edp::autoscale
