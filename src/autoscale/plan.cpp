// The one valuation and decision of the autoscaler (plan.h), and the v1 table form of the request.
#include "edp/autoscale/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "edp/core/error.h"

namespace edp::autoscale {

const char* objective_name(Objective o) {
  switch (o) {
    case Objective::Throughput: return "throughput";
    case Objective::Remaining: return "remaining";
    case Objective::RestartAware: return "restart-aware";
    case Objective::Fifo: return "fifo";
  }
  return "?";
}

Objective parse_objective(const std::string& name) {
  for (Objective o : {Objective::Throughput, Objective::Remaining, Objective::RestartAware, Objective::Fifo})
    if (name == objective_name(o)) return o;
  throw DataError("unknown policy '" + name + "' (known: throughput, remaining, restart-aware, fifo)");
}

bool is_current(const PlanJob& job, const Config& o) {
  return job.current.gpus > 0 && o.gpus == job.current.gpus && o.batch == job.current.batch &&
         o.ranks_per_gpu == job.current.ranks_per_gpu;
}

double option_value(const PlanRequest& req, const PlanJob& job, const Config& o) {
  const bool running = job.current.gpus > 0;
  const bool current = is_current(job, o);
  double v = 0;
  switch (req.objective) {
    case Objective::Throughput:
      v = job.weight * (o.samples_per_s / job.own.samples_per_s) * o.efficiency;
      break;
    case Objective::Remaining:
      v = job.weight * (o.samples_per_s * o.efficiency) / job.remaining;
      break;
    case Objective::RestartAware: {
      const double pause = current ? 0.0 : running ? (job.pause_s >= 0 ? job.pause_s : req.pause_s)
                                                   : (job.start_s >= 0 ? job.start_s : req.start_s);
      v = job.weight / (job.remaining / (o.samples_per_s * o.efficiency) + pause);
      break;
    }
    case Objective::Fifo:
      return 0.0;
  }
  if (running && !current) v *= 1.0 - req.hysteresis;
  return v;
}

namespace {

[[noreturn]] void bad_job(const PlanJob& j, size_t i, const std::string& field, const std::string& what) {
  throw DataError("job '" + j.id + "' (jobs[" + std::to_string(i) + "]): field '" + field + "': " + what);
}

bool finite_nonneg(double x) { return std::isfinite(x) && x >= 0; }

// What decide() needs to be meaningful; the JSON parser checks ranges before, the simulators and
// the controller build requests in code, so this is the check they all share.
void validate(const PlanRequest& req) {
  if (req.gpus < 0) throw DataError("field 'gpus': must be >= 0, got " + std::to_string(req.gpus));
  if (!(req.hysteresis >= 0 && req.hysteresis < 1)) throw DataError("field 'hysteresis': must be in [0, 1)");
  if (!finite_nonneg(req.pause_s)) throw DataError("field 'pause_s': must be a finite number >= 0");
  if (!finite_nonneg(req.start_s)) throw DataError("field 'start_s': must be a finite number >= 0");
  const bool fifo = req.objective == Objective::Fifo;
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    const PlanJob& j = req.jobs[i];
    if (!finite_nonneg(j.weight)) bad_job(j, i, "weight", "must be a finite number >= 0");
    if (!fifo && req.objective != Objective::Throughput && !(std::isfinite(j.remaining) && j.remaining > 0))
      bad_job(j, i, "remaining", "must be a finite number > 0 (a job with no work left has finished)");
    if (req.objective == Objective::Throughput && !(std::isfinite(j.own.samples_per_s) && j.own.samples_per_s > 0))
      bad_job(j, i, "own.samples_per_s", "must be > 0 (the throughput policy values options relative to it)");
    if (fifo && j.current.gpus == 0 && j.own.gpus < 1) bad_job(j, i, "own.gpus", "must be >= 1 (fifo starts the job there)");
    if (j.current.gpus < 0 || j.current.gpus > std::max(req.gpus, 0))
      bad_job(j, i, "current.gpus", "must be in [0, " + std::to_string(req.gpus) + "] (the cluster's size), got " +
                                        std::to_string(j.current.gpus));
    if (!std::isnan(j.pause_s) && j.pause_s >= 0 && !std::isfinite(j.pause_s)) bad_job(j, i, "pause_s", "must be finite");
    if (!std::isnan(j.start_s) && j.start_s >= 0 && !std::isfinite(j.start_s)) bad_job(j, i, "start_s", "must be finite");
    for (size_t k = 0; k < j.options.size(); ++k) {
      const Config& o = j.options[k];
      const std::string f = "options[" + std::to_string(k) + "]";
      if (o.gpus < 1) bad_job(j, i, f + ".gpus", "must be >= 1, got " + std::to_string(o.gpus));
      if (o.batch < 0) bad_job(j, i, f + ".batch", "must be >= 0, got " + std::to_string(o.batch));
      if (o.ranks_per_gpu < 1) bad_job(j, i, f + ".ranks_per_gpu", "must be >= 1");
      if (!finite_nonneg(o.samples_per_s)) bad_job(j, i, f + ".samples_per_s", "must be a finite number >= 0");
      if (!(std::isfinite(o.efficiency) && o.efficiency > 0)) bad_job(j, i, f + ".efficiency", "must be a finite number > 0");
    }
  }
}

// The jobs that must run need at least their smallest useful option each.
void check_must_run(const PlanRequest& req) {
  int need = 0;
  std::string who;
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    const PlanJob& j = req.jobs[i];
    if (j.may_wait) continue;
    int least = std::numeric_limits<int>::max();
    for (const Config& o : j.options)
      if (o.samples_per_s * o.efficiency > 0) least = std::min(least, o.gpus);
    if (least == std::numeric_limits<int>::max())
      bad_job(j, i, "options", "the job must run (may_wait false) but has no option with a throughput above 0");
    need += least;
    who += (who.empty() ? "" : ", ") + ("'" + j.id + "' needs " + std::to_string(least));
  }
  if (need > req.gpus)
    throw DataError("field 'gpus': the non-preemptible jobs need at least " + std::to_string(need) +
                    " GPUs but gpus = " + std::to_string(req.gpus) + " (" + who + ")");
}

void decide_fifo(const PlanRequest& req, Plan& plan) {
  int free = req.gpus;
  for (const PlanJob& j : req.jobs) free -= j.current.gpus;
  bool blocked = false;
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    const PlanJob& j = req.jobs[i];
    PlanChoice& c = plan.choices[i];
    if (j.current.gpus > 0) {  // running: keeps what it has
      c.config = j.current;
      for (size_t k = 0; k < j.options.size(); ++k)
        if (is_current(j, j.options[k])) c.option = static_cast<int>(k), c.config = j.options[k];
    } else if (j.own.gpus > req.gpus) {
      continue;  // can never run here; must not block the queue forever
    } else if (!blocked && j.own.gpus <= free) {
      c.config = j.own;
      free -= j.own.gpus;
    } else {
      blocked = true;  // strict FIFO: the head waits, so do all behind it
      continue;
    }
    plan.gpus_used += c.config.gpus;
  }
}

}  // namespace

const Plan& Planner::decide(const PlanRequest& req) {
  validate(req);
  const size_t J = req.jobs.size();
  plan_.choices.assign(J, PlanChoice{});
  plan_.values.resize(J);
  plan_.objective = 0;
  plan_.gpus_used = 0;
  if (req.objective == Objective::Fifo) {
    for (auto& v : plan_.values) v.clear();
    decide_fifo(req, plan_);
    return plan_;
  }
  check_must_run(req);
  problem_.resize(J);
  for (size_t i = 0; i < J; ++i) {
    const PlanJob& j = req.jobs[i];
    JobOptions& jo = problem_[i];
    jo.options.clear();
    jo.may_wait = j.may_wait;
    jo.current_gpus = j.current.gpus;
    jo.current_batch = j.current.batch;
    std::vector<double>& vals = plan_.values[i];
    vals.resize(j.options.size());
    for (size_t k = 0; k < j.options.size(); ++k) {
      const Config& o = j.options[k];
      const double v = option_value(req, j, o);
      vals[k] = v;
      if (!(o.samples_per_s * o.efficiency > 0)) continue;  // an option without throughput is never useful
      if (!std::isfinite(v))
        bad_job(j, i, "options[" + std::to_string(k) + "]",
                "its value is not a finite number (samples_per_s, efficiency, own.samples_per_s or remaining out of "
                "proportion to each other)");
      jo.options.push_back(Option{o.gpus, o.batch, v, static_cast<int>(k)});
    }
  }
  const Solution s = solve(problem_, req.gpus);
  plan_.objective = s.objective;
  plan_.gpus_used = s.gpus_used;
  for (size_t i = 0; i < J; ++i) {
    const Choice& ch = s.choices[i];
    if (ch.gpus == 0) continue;
    PlanChoice& c = plan_.choices[i];
    c.option = ch.tag;
    c.config = req.jobs[i].options[static_cast<size_t>(ch.tag)];
    c.value = ch.value;
  }
  return plan_;
}

Plan decide(const PlanRequest& req) {
  Planner p;
  return p.decide(req);
}

// ---- the v1 table request -----------------------------------------------------------------------

namespace {

[[noreturn]] void bad(const TableJob& j, size_t index, const std::string& field, const std::string& what) {
  throw DataError("job '" + j.id + "' (jobs[" + std::to_string(index) + "]): field '" + field + "': " + what);
}

// The ref row's throughput after every v1 check (the messages of the v1 contract).
double check_table_job(const TableJob& j, size_t i, std::set<std::string>& ids) {
  if (j.id.empty()) bad(j, i, "id", "must be a non-empty string");
  if (!ids.insert(j.id).second) bad(j, i, "id", "duplicate id");
  if (j.min_gpus < 0) bad(j, i, "min_gpus", "must be >= 0, got " + std::to_string(j.min_gpus));
  if (j.max_gpus < 1) bad(j, i, "max_gpus", "must be >= 1, got " + std::to_string(j.max_gpus));
  if (j.max_gpus < j.min_gpus) bad(j, i, "max_gpus", "is smaller than min_gpus");
  if (j.max_batch_per_gpu < 1) bad(j, i, "max_batch_per_gpu", "must be >= 1, got " + std::to_string(j.max_batch_per_gpu));
  if (!(std::isfinite(j.weight) && j.weight >= 0)) bad(j, i, "weight", "must be a finite number >= 0");
  if (j.ref_gpus < 1) bad(j, i, "ref.gpus", "must be >= 1");
  if (j.ref_batch < 1) bad(j, i, "ref.batch", "must be >= 1");
  if (j.current_gpus < 0) bad(j, i, "current.gpus", "must be >= 0");
  if (j.current_batch < 0) bad(j, i, "current.batch", "must be >= 0");
  if (j.current_gpus > j.max_gpus)
    bad(j, i, "current.gpus", std::to_string(j.current_gpus) + " is above max_gpus " + std::to_string(j.max_gpus) +
                                  " (a job cannot run on more GPUs than it may use)");
  double ref_sps = -1;
  std::set<std::pair<int, int>> seen;
  for (size_t r = 0; r < j.throughput.size(); ++r) {
    const ThroughputPoint& p = j.throughput[r];
    const std::string f = "throughput[" + std::to_string(r) + "]";
    if (p.gpus < 1) bad(j, i, f + ".gpus", "must be >= 1, got " + std::to_string(p.gpus));
    if (p.batch < 1) bad(j, i, f + ".batch", "must be >= 1, got " + std::to_string(p.batch));
    if (!(std::isfinite(p.samples_per_s) && p.samples_per_s >= 0))
      bad(j, i, f + ".samples_per_s", "must be a finite number >= 0");
    if (!seen.insert({p.gpus, p.batch}).second)
      bad(j, i, f, "duplicate row for gpus=" + std::to_string(p.gpus) + " batch=" + std::to_string(p.batch));
    if (p.gpus == j.ref_gpus && p.batch == j.ref_batch) ref_sps = p.samples_per_s;
  }
  if (ref_sps < 0)
    bad(j, i, "ref", "no throughput row with gpus=" + std::to_string(j.ref_gpus) + " batch=" + std::to_string(j.ref_batch));
  if (!(ref_sps > 0)) bad(j, i, "ref", "the reference row's samples_per_s must be > 0");
  return ref_sps;
}

}  // namespace

PlanRequest from_v1(const TableRequest& v1) {
  if (v1.gpus < 0) throw DataError("field 'gpus': must be >= 0, got " + std::to_string(v1.gpus));
  if (!(v1.rescale_penalty >= 0.0 && v1.rescale_penalty < 1.0))
    throw DataError("field 'rescale_penalty': must be in [0, 1)");
  PlanRequest r;
  r.version = 1;
  r.gpus = v1.gpus;
  r.objective = Objective::Throughput;
  r.hysteresis = v1.rescale_penalty;
  std::set<std::string> ids;
  for (size_t i = 0; i < v1.jobs.size(); ++i) {
    const TableJob& j = v1.jobs[i];
    const double ref_sps = check_table_job(j, i, ids);
    PlanJob pj;
    pj.id = j.id;
    pj.weight = j.weight;
    pj.may_wait = j.min_gpus == 0;
    pj.own = Config{j.ref_gpus, j.ref_batch, 1, ref_sps, 1.0};
    if (j.current_gpus > 0) pj.current = Config{j.current_gpus, j.current_batch, 1, 0, 1.0};
    for (const ThroughputPoint& p : j.throughput) {
      if (p.gpus < std::max(1, j.min_gpus) || p.gpus > j.max_gpus) continue;
      if (p.batch % p.gpus != 0 || p.batch / p.gpus > j.max_batch_per_gpu) continue;
      pj.options.push_back(Config{p.gpus, p.batch, 1, p.samples_per_s, 1.0});
    }
    if (!pj.may_wait && pj.options.empty())
      bad(j, i, "min_gpus",
          "the job must run (min_gpus >= 1) but no throughput row is feasible (needs min_gpus <= gpus <= "
          "max_gpus, batch divisible by gpus, batch/gpus <= max_batch_per_gpu)");
    r.jobs.push_back(std::move(pj));
  }
  return r;
}

std::vector<JobOptions> make_problem(const TableRequest& v1) {
  const PlanRequest req = from_v1(v1);
  validate(req);
  check_must_run(req);
  std::vector<JobOptions> out(req.jobs.size());
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    const PlanJob& j = req.jobs[i];
    out[i].may_wait = j.may_wait;
    out[i].current_gpus = j.current.gpus;
    out[i].current_batch = j.current.batch;
    for (const Config& o : j.options) out[i].options.push_back(Option{o.gpus, o.batch, option_value(req, j, o)});
  }
  return out;
}

}  // namespace edp::autoscale
