// The live autoscaler's pure part: job specs, the fit of a job's own step times, one planning
// round. The controller around it (processes, files) is tools/edp-autoscale/serve.cpp.
#include "edp/autoscale/live.h"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "edp/autoscale/optimizer.h"
#include "edp/core/error.h"

namespace edp::autoscale {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& field, const std::string& what) {
  throw DataError(where + ": field '" + field + "': " + what);
}

int64_t get_count(const json& j, const std::string& key, const std::string& where, int64_t def, int64_t lo,
                  int64_t hi) {
  if (!j.contains(key)) return def;
  const json& v = j.at(key);
  if (!v.is_number_integer()) bad(where, key, "must be an integer, got " + v.dump());
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : v.get<int64_t>();
  if (x < lo || x > hi)
    bad(where, key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  return x;
}

double get_real(const json& j, const std::string& key, const std::string& where, double def, double lo, double hi) {
  if (!j.contains(key)) return def;
  const json& v = j.at(key);
  if (!v.is_number()) bad(where, key, "must be a number, got " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(where, key, "must be a finite number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
  return x;
}

constexpr int64_t kMaxWorkers = 4096;
constexpr int64_t kMaxBatch = int64_t{1} << 31;

}  // namespace

JobSpec parse_job_spec(const std::string& text, const std::string& where) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw DataError(where + ": not valid JSON");
  if (!j.is_object()) throw DataError(where + ": must be a JSON object");
  static const std::set<std::string> allowed = {
      "name", "command", "cwd", "env", "min_workers", "max_workers", "workers", "min_batch", "max_batch", "batch",
      "max_worker_batch", "weight", "preemptible", "max_restarts", "samples", "grad_noise_scale", "gpu_busy"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      bad(where, it.key(), "unknown field (allowed: " + list + ")");
    }
  JobSpec s;
  if (!j.contains("name") || !j["name"].is_string()) bad(where, "name", "required, a string");
  s.name = j["name"].get<std::string>();
  if (s.name.empty() || s.name.size() > 40 ||
      !std::all_of(s.name.begin(), s.name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }))
    bad(where, "name", "1 to 40 characters of A-Z a-z 0-9 _ - . , got " + j["name"].dump());
  if (!j.contains("command") || !j["command"].is_array() || j["command"].empty())
    bad(where, "command", "required, a non-empty array of strings (the program, then its arguments)");
  for (const auto& a : j["command"]) {
    if (!a.is_string()) bad(where, "command", "every element must be a string, got " + a.dump());
    s.command.push_back(a.get<std::string>());
  }
  if (s.command[0].empty()) bad(where, "command", "the program is an empty string");
  if (j.contains("cwd")) {
    if (!j["cwd"].is_string() || j["cwd"].get<std::string>().empty() || j["cwd"].get<std::string>()[0] != '/')
      bad(where, "cwd", "must be an absolute path, got " + j["cwd"].dump());
    s.cwd = j["cwd"].get<std::string>();
  }
  if (j.contains("env")) {
    if (!j["env"].is_object()) bad(where, "env", "must be an object of strings");
    for (auto it = j["env"].begin(); it != j["env"].end(); ++it) {
      if (!it.value().is_string()) bad(where, "env", "value of '" + it.key() + "' must be a string");
      if (it.key().empty() || it.key().find('=') != std::string::npos) bad(where, "env", "bad variable name '" + it.key() + "'");
      s.env[it.key()] = it.value().get<std::string>();
    }
  }
  s.min_workers = static_cast<int>(get_count(j, "min_workers", where, 1, 1, kMaxWorkers));
  s.max_workers = static_cast<int>(get_count(j, "max_workers", where, s.min_workers, 1, kMaxWorkers));
  if (s.max_workers < s.min_workers) bad(where, "max_workers", "must be >= min_workers (" + std::to_string(s.min_workers) + ")");
  s.workers = static_cast<int>(get_count(j, "workers", where, s.min_workers, 1, kMaxWorkers));
  if (s.workers < s.min_workers || s.workers > s.max_workers)
    bad(where, "workers", "the start size must be in [min_workers, max_workers] = [" + std::to_string(s.min_workers) +
                              ", " + std::to_string(s.max_workers) + "]");
  if (!j.contains("min_batch")) bad(where, "min_batch", "required (the smallest global batch)");
  s.min_batch = get_count(j, "min_batch", where, 0, 1, kMaxBatch);
  s.max_batch = get_count(j, "max_batch", where, s.min_batch, 1, kMaxBatch);
  if (s.max_batch < s.min_batch) bad(where, "max_batch", "must be >= min_batch (" + std::to_string(s.min_batch) + ")");
  s.batch = get_count(j, "batch", where, s.min_batch, 1, kMaxBatch);
  if (s.batch < s.min_batch || s.batch > s.max_batch) bad(where, "batch", "the start batch must be in [min_batch, max_batch]");
  if (s.batch % s.workers != 0)
    bad(where, "batch", "the start batch " + std::to_string(s.batch) + " does not split evenly over " +
                            std::to_string(s.workers) + " worker(s)");
  s.max_worker_batch = get_count(j, "max_worker_batch", where, 0, 0, kMaxBatch);
  if (s.max_worker_batch > 0 && s.batch / s.workers > s.max_worker_batch)
    bad(where, "max_worker_batch", "the start batch gives " + std::to_string(s.batch / s.workers) +
                                       " samples per worker, above this limit");
  s.weight = get_real(j, "weight", where, 1.0, 1e-6, 1e6);
  if (j.contains("preemptible")) {
    if (!j["preemptible"].is_boolean()) bad(where, "preemptible", "must be true or false");
    s.preemptible = j["preemptible"].get<bool>();
  }
  s.max_restarts = static_cast<int>(get_count(j, "max_restarts", where, 1, 0, 100));
  s.samples = get_count(j, "samples", where, 0, 0, int64_t{1} << 50);
  s.grad_noise_scale = get_real(j, "grad_noise_scale", where, 0.0, 0.0, 1e12);
  s.gpu_busy = get_real(j, "gpu_busy", where, 1.0, 0.01, 1.0);
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
  return j.dump();
}

// ---- the fit ------------------------------------------------------------------------------------

StepTimeModel fit_measured(const std::vector<Measured>& all) {
  StepTimeModel m;
  m.gpus_per_node = 1 << 20;  // one node: no cross-node term
  std::vector<const Measured*> rows;
  for (const Measured& r : all)
    if (r.ranks_per_slot == 1 && r.workers >= 1 && r.batch >= r.workers && r.step_s > 0 && r.steps > 0) rows.push_back(&r);
  if (rows.empty()) return m;
  auto compute = [](const Measured& r) { return std::max(1e-9, r.step_s - std::min(r.comm_s, 0.9 * r.step_s)); };
  auto local = [](const Measured& r) { return static_cast<double>(r.batch) / r.workers; };
  std::set<double> locals;
  for (const Measured* r : rows) locals.insert(local(*r));
  bool fitted = false;
  if (locals.size() >= 2) {
    const Eigen::Index n = static_cast<Eigen::Index>(rows.size());
    Eigen::MatrixXd X(n, 2);
    Eigen::VectorXd y(n);
    for (Eigen::Index i = 0; i < n; ++i) {
      const Measured& r = *rows[static_cast<size_t>(i)];
      const double w = 1.0 / r.step_s;  // relative error of the step
      X(i, 0) = w;
      X(i, 1) = w * local(r);
      y(i) = w * compute(r);
    }
    const Eigen::VectorXd c = X.colPivHouseholderQr().solve(y);
    if (c(0) >= 0 && c(1) > 0) {
      m.a = c(0);
      m.c = c(1);
      fitted = true;
    }
  }
  if (!fitted) {  // through the origin: time per sample
    double num = 0, den = 0;
    for (const Measured* r : rows) {
      num += compute(*r) / r->step_s;
      den += local(*r) / r->step_s;
    }
    m.a = 0;
    m.c = num / den;
  }
  std::map<int, std::pair<double, double>> sync_by_w;  // workers -> (sum of comm_s, count)
  for (const Measured* r : rows)
    if (r->workers > 1) {
      sync_by_w[r->workers].first += r->comm_s;
      sync_by_w[r->workers].second += 1;
    }
  if (sync_by_w.size() >= 2) {
    const Eigen::Index n = static_cast<Eigen::Index>(sync_by_w.size());
    Eigen::MatrixXd X(n, 2);
    Eigen::VectorXd y(n);
    Eigen::Index i = 0;
    for (const auto& [w, sc] : sync_by_w) {
      X(i, 0) = 1;
      X(i, 1) = w;
      y(i) = sc.first / sc.second;
      ++i;
    }
    const Eigen::VectorXd c = X.colPivHouseholderQr().solve(y);
    m.s0 = c(0);
    m.s1 = c(1);
    if (m.s1 < 0) {  // noise: no growth with size measured
      m.s1 = 0;
      m.s0 = y.mean();
    }
  } else if (sync_by_w.size() == 1) {
    const auto& [w, sc] = *sync_by_w.begin();
    m.s0 = 0;
    m.s1 = sc.first / sc.second / w;
  }
  return m;
}

double colocation_speed(int k, double busy) {
  const double load = k * busy;
  return load <= 1.0 ? 1.0 : 1.0 / load;
}

// ---- one planning round ---------------------------------------------------------------------------

namespace {

struct Opt {
  int slots = 0, k = 1, workers = 0;
  int64_t batch = 0;
  double sps = 0, eff = 1, remaining_s = 0, value = 0;
  bool measured = false, current = false;
};

const Measured* find_measured(const LiveJob& j, int workers, int k, int64_t batch) {
  for (const Measured& m : j.measured)
    if (m.workers == workers && m.ranks_per_slot == k && m.batch == batch && m.steps >= 3) return &m;
  return nullptr;
}

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

}  // namespace

LivePlan plan_live(const std::vector<LiveJob>& jobs, const LivePolicy& P) {
  const auto t0 = std::chrono::steady_clock::now();
  EDP_CHECK(P.slots >= 1, "plan_live: slots must be >= 1");
  LivePlan plan;
  plan.choices.resize(jobs.size());

  // Priors for what no job has measured yet: the median samples/s per rank over the jobs'
  // measurements, and the mean size of the trainings that reported one.
  std::vector<double> per_rank;
  double total_sum = 0;
  int total_n = 0;
  for (const LiveJob& j : jobs) {
    for (const Measured& m : j.measured)
      if (m.ranks_per_slot == 1 && m.step_s > 0) per_rank.push_back(static_cast<double>(m.batch) / m.step_s / m.workers);
    if (j.samples_total > 0) {
      total_sum += static_cast<double>(j.samples_total);
      ++total_n;
    } else if (j.spec.samples > 0) {
      total_sum += static_cast<double>(j.spec.samples);
      ++total_n;
    }
  }
  double prior_rank_sps = 1000;
  if (!per_rank.empty()) {
    std::nth_element(per_rank.begin(), per_rank.begin() + static_cast<std::ptrdiff_t>(per_rank.size() / 2), per_rank.end());
    prior_rank_sps = per_rank[per_rank.size() / 2];
  }
  const double prior_total = total_n ? total_sum / total_n : 1e6;

  if (P.name == "static") {  // FIFO at the requested size and batch; never rescales or preempts
    int free = P.slots;
    for (const LiveJob& j : jobs)
      if (j.running) free -= (j.workers + j.ranks_per_slot - 1) / j.ranks_per_slot;
    bool blocked = false;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const LiveJob& j = jobs[i];
      LiveChoice& c = plan.choices[i];
      if (j.running) {
        c.slots = (j.workers + j.ranks_per_slot - 1) / j.ranks_per_slot;
        c.ranks_per_slot = j.ranks_per_slot;
        c.workers = j.workers;
        c.batch = j.batch;
        c.action = "hold";
        c.reason = "static: a running job keeps its size";
      } else if (!blocked && j.spec.workers <= free) {
        c.slots = c.workers = j.spec.workers;
        c.batch = j.spec.batch;
        free -= j.spec.workers;
        c.action = "start";
        c.reason = "static: first in line, " + std::to_string(j.spec.workers) + " slot(s) free";
      } else {
        blocked = true;
        c.action = "wait";
        c.reason = "static: waits for " + std::to_string(j.spec.workers) + " free slot(s) in submission order";
      }
      plan.slots_used += c.slots;
    }
    plan.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return plan;
  }
  EDP_CHECK(P.name == "dp" || P.name == "goodput", "plan_live: unknown policy '", P.name, "' (static, dp, goodput)");

  std::vector<std::vector<Opt>> opts(jobs.size());
  std::vector<JobOptions> problem(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LiveJob& j = jobs[i];
    const JobSpec& s = j.spec;
    const StepTimeModel model = fit_measured(j.measured);
    const bool have_model = std::any_of(j.measured.begin(), j.measured.end(), [](const Measured& m) { return m.ranks_per_slot == 1; });
    int measured_max = 0;
    for (const Measured& m : j.measured) measured_max = std::max(measured_max, m.workers);
    double remaining = j.samples_total > 0 ? static_cast<double>(std::max<int64_t>(0, j.samples_total - j.samples_done))
                       : s.samples > 0   ? static_cast<double>(s.samples)
                                         : prior_total;
    remaining = std::max(remaining, 1.0);
    const double pause = j.pause_s >= 0 ? j.pause_s : P.default_pause_s;

    auto predict = [&](int workers, int k, int64_t batch, bool& measured) {
      measured = false;
      if (const Measured* m = find_measured(j, workers, k, batch)) {
        measured = true;
        return static_cast<double>(batch) / m->step_s;
      }
      const double speed = P.gpu_slots ? colocation_speed(k, s.gpu_busy) : 1.0;
      if (have_model) {
        const double local = static_cast<double>(batch) / workers;
        const double step = model.compute_s(local) / speed + (workers > 1 ? std::max(0.0, model.s0 + model.s1 * workers) : 0.0);
        return static_cast<double>(batch) / step;
      }
      return prior_rank_sps * workers * speed;
    };
    auto add = [&](int slots, int k, int64_t batch) {
      const int workers = slots * k;
      for (const Opt& o : opts[i])
        if (o.slots == slots && o.k == k && o.batch == batch) return;
      Opt o;
      o.slots = slots;
      o.k = k;
      o.workers = workers;
      o.batch = batch;
      o.sps = predict(workers, k, batch, o.measured);
      if (P.name == "goodput" && s.grad_noise_scale > 0)
        o.eff = (s.grad_noise_scale + static_cast<double>(s.min_batch)) / (s.grad_noise_scale + static_cast<double>(batch));
      o.current = j.running && workers == j.workers && k == j.ranks_per_slot && batch == j.batch;
      const double cost = o.current ? 0.0 : j.running ? pause : P.start_s;
      o.remaining_s = remaining / o.sps + cost;
      o.value = s.weight / (remaining / (o.sps * o.eff) + cost);
      if (j.running && !o.current) o.value *= 1.0 - P.hysteresis;
      opts[i].push_back(o);
    };

    JobOptions& jo = problem[i];
    jo.may_wait = !j.running || s.preemptible;
    if (j.running) {
      jo.current_gpus = (j.workers + j.ranks_per_slot - 1) / j.ranks_per_slot;
      jo.current_batch = static_cast<int>(std::min<int64_t>(j.batch, INT32_MAX));
    }
    if (j.running && !j.settled) {
      add(jo.current_gpus, j.ranks_per_slot, j.batch);  // measure first, or let the rescale land
    } else {
      // How far the job may be taken: its start size until it ran, then explore_factor times the
      // largest size it was measured at.
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
          for (int64_t b0 : batches) {
            const int64_t b = b0 / w * w;  // the nearest size below that splits evenly
            if (b < s.min_batch || b > s.max_batch || b < w) continue;
            if (s.max_worker_batch > 0 && b / w > s.max_worker_batch) continue;
            add(slots, k, b);
          }
        }
      }
      if (j.running && std::none_of(opts[i].begin(), opts[i].end(), [](const Opt& o) { return o.current; }))
        add(jo.current_gpus, j.ranks_per_slot, j.batch);
    }
    for (size_t t = 0; t < opts[i].size(); ++t) {
      const Opt& o = opts[i][t];
      jo.options.push_back(Option{o.slots, static_cast<int>(std::min<int64_t>(o.batch, INT32_MAX)), o.value, static_cast<int>(t)});
    }
  }

  const Solution sol = solve(problem, P.slots);
  plan.objective = sol.objective;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const LiveJob& j = jobs[i];
    LiveChoice& c = plan.choices[i];
    const Choice& ch = sol.choices[i];
    const Opt* stay = nullptr;
    for (const Opt& o : opts[i])
      if (o.current) stay = &o;
    if (stay) c.stay_remaining_s = stay->remaining_s;
    if (ch.gpus == 0) {
      c.action = j.running ? "stop" : "wait";
      c.reason = j.running ? "preempted: its slots are worth more to other jobs" : "no slots worth giving it now";
      continue;
    }
    const Opt& o = opts[i][static_cast<size_t>(ch.tag)];
    c.slots = o.slots;
    c.ranks_per_slot = o.k;
    c.workers = o.workers;
    c.batch = o.batch;
    c.samples_per_s = o.sps;
    c.measured = o.measured;
    c.remaining_s = o.remaining_s;
    plan.slots_used += o.slots;
    const std::string rate = fmt("%.0f samples/s", o.sps) + (o.measured ? " measured" : " predicted");
    if (!j.running) {
      c.action = "start";
      c.reason = "start at " + config_str(o.workers, o.k, o.batch) + ": " + rate + fmt(", about %.0f s to finish", o.remaining_s);
    } else if (o.current) {
      c.action = "hold";
      c.reason = j.settled ? "the best option is where it is (" + rate + ")" : "holds until it is measured at its size";
    } else {
      c.action = o.workers > j.workers ? "grow" : o.workers < j.workers ? "shrink" : "rebatch";
      const double pause = j.pause_s >= 0 ? j.pause_s : P.default_pause_s;
      c.reason = config_str(j.workers, j.ranks_per_slot, j.batch) + " -> " + config_str(o.workers, o.k, o.batch) + ": " +
                 rate + fmt(", finishes in %.1f s instead of %.1f s (%.1f s rescale cost included", o.remaining_s,
                            c.stay_remaining_s, pause) +
                 (j.pause_s >= 0 ? ", measured)" : ", default)");
    }
  }
  plan.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

}  // namespace edp::autoscale
