// The one valuation and decision of the autoscaler (plan.h), and the v1 table form of the request.
#include "edp/autoscale/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "autoscale/plan_types.h"
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
         o.ranks_per_gpu == job.current.ranks_per_gpu && o.type == job.current.type;
}

namespace {

// A running job's option at its GPUs and ranks per GPU with another batch: a rebatch.
bool is_rebatch(const PlanJob& job, const Config& o) {
  return job.current.gpus > 0 && o.gpus == job.current.gpus && o.ranks_per_gpu == job.current.ranks_per_gpu &&
         o.type == job.current.type && o.batch != job.current.batch;
}

}  // namespace

Valuation option_valuation(const PlanRequest& req, const PlanJob& job, const Config& o) {
  const bool running = job.current.gpus > 0;
  const bool current = is_current(job, o);
  const bool rebatch = is_rebatch(job, o);
  const bool free_change = rebatch && job.rebatch_s == 0;  // rebatches in place: no change at all
  Valuation val;
  val.rate = o.samples_per_s * o.efficiency;
  double& v = val.value;
  switch (req.objective) {
    case Objective::Throughput:
      v = job.weight * (o.samples_per_s / job.own.samples_per_s) * o.efficiency;
      break;
    case Objective::Remaining:
      v = job.weight * val.rate / job.remaining;
      break;
    case Objective::RestartAware: {
      const double held = 1.0 + req.pause_per_gpu * job.current.gpus;  // a restart idles every GPU it holds
      const double change_pause = (job.pause_s >= 0 ? job.pause_s : req.pause_s) * held;
      const double rebatch_pause = job.rebatch_s >= 0 ? job.rebatch_s * held : change_pause;
      val.pause_s = current ? 0.0
                    : rebatch ? rebatch_pause
                    : running ? change_pause
                              : (job.start_s >= 0 ? job.start_s : req.start_s);
      val.margin_s = running && !current && !free_change ? req.margin_s : 0.0;
      val.finish_s = job.remaining / val.rate + val.pause_s + val.margin_s;
      v = job.weight / val.finish_s;
      break;
    }
    case Objective::Fifo:
      v = 0.0;
      return val;
  }
  if (running && !current && !free_change) v *= 1.0 - req.hysteresis;
  return val;
}

double option_value(const PlanRequest& req, const PlanJob& job, const Config& o) {
  return option_valuation(req, job, o).value;
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
  if (!req.nodes.empty()) {
    int sum = 0;
    for (int n : req.nodes) {
      if (n < 0) throw DataError("field 'nodes': GPUs per node must be >= 0");
      sum += n;
    }
    if (sum != req.gpus)
      throw DataError("field 'nodes': the nodes hold " + std::to_string(sum) + " GPUs but gpus = " + std::to_string(req.gpus));
    std::vector<int> used(req.nodes.size(), 0);
    for (const PlanJob& j : req.jobs)
      for (int n : j.current_nodes)
        if (n >= 0 && n < static_cast<int>(used.size()) && ++used[size_t(n)] > req.nodes[size_t(n)])
          throw DataError("field 'nodes': the jobs' current nodes use more than the " + std::to_string(req.nodes[size_t(n)]) +
                          " GPUs of node " + std::to_string(n) + " (job '" + j.id + "')");
  }
  if (!(req.hysteresis >= 0 && req.hysteresis < 1)) throw DataError("field 'hysteresis': must be in [0, 1)");
  if (!finite_nonneg(req.pause_s)) throw DataError("field 'pause_s': must be a finite number >= 0");
  if (!finite_nonneg(req.start_s)) throw DataError("field 'start_s': must be a finite number >= 0");
  if (!finite_nonneg(req.margin_s)) throw DataError("field 'margin_s': must be a finite number >= 0");
  if (!finite_nonneg(req.pause_per_gpu)) throw DataError("field 'pause_per_gpu': must be a finite number >= 0");
  detail::validate_types(req);
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
    if (!std::isnan(j.rebatch_s) && j.rebatch_s >= 0 && !std::isfinite(j.rebatch_s)) bad_job(j, i, "rebatch_s", "must be finite");
    if (!req.nodes.empty() && j.current.gpus > 0 && j.current_nodes.empty())
      bad_job(j, i, "current.nodes", "required for a running job when the request gives nodes");
    if (!req.nodes.empty() && !j.current_nodes.empty()) {
      if (static_cast<int>(j.current_nodes.size()) != j.current.gpus)
        bad_job(j, i, "current.nodes", "must name one node per current GPU (" + std::to_string(j.current.gpus) + "), got " +
                                           std::to_string(j.current_nodes.size()));
      for (int n : j.current_nodes)
        if (n < 0 || n >= static_cast<int>(req.nodes.size()))
          bad_job(j, i, "current.nodes", "node " + std::to_string(n) + " is not in [0, " + std::to_string(req.nodes.size()) + ")");
    }
    if (j.learned) {
      const LearnSpec& l = j.learn;
      if (l.init_batch < 1 || l.max_batch < l.init_batch) bad_job(j, i, "learn", "needs 1 <= init_batch <= max_batch");
      if (l.min_local < 1 || l.max_local < l.min_local) bad_job(j, i, "learn", "needs 1 <= min_local <= max_local");
      if (!(l.explore >= 1)) bad_job(j, i, "learn.explore", "must be >= 1");
      if (!(l.fixed_share >= 0 && l.fixed_share < 1)) bad_job(j, i, "learn.fixed_share", "must be in [0, 1)");
      if (!(l.trust_half >= 0.01 && l.trust_half <= 100)) bad_job(j, i, "learn.trust_half", "must be in [0.01, 100]");
    }
    if (j.memory.model_bytes < 0 || j.memory.optimizer_state_bytes < 0 || j.memory.zero_stage < 0 || j.memory.zero_stage > 2)
      bad_job(j, i, "memory", "needs model_bytes and optimizer_state_bytes >= 0 and zero 0, 1 or 2");
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

// An option the job fits in (its current configuration always: it runs there).
bool usable(const PlanRequest& req, const PlanJob& j, const Config& o) {
  return fits(j.memory, detail::gpu_memory_of(req, o), o.gpus, o.ranks_per_gpu) || is_current(j, o);
}

}  // namespace

std::vector<size_t> detail::choosable_options(const PlanRequest& req, size_t i, std::vector<double>& vals) {
  const PlanJob& j = req.jobs[i];
  std::vector<size_t> out;
  vals.resize(j.options.size());
  for (size_t k = 0; k < j.options.size(); ++k) {
    const Config& o = j.options[k];
    const double v = option_value(req, j, o);
    vals[k] = v;
    if (!(o.samples_per_s * o.efficiency > 0)) continue;  // an option without throughput is never useful
    if (!usable(req, j, o)) continue;                    // the job does not fit in the GPUs' memory there
    if (!std::isfinite(v))
      bad_job(j, i, "options[" + std::to_string(k) + "]",
              "its value is not a finite number (samples_per_s, efficiency, own.samples_per_s or remaining out of "
              "proportion to each other)");
    out.push_back(k);
  }
  return out;
}

namespace {

// The jobs that must run need at least their smallest useful option each.
void check_must_run(const PlanRequest& req) {
  int need = 0;
  std::string who;
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    const PlanJob& j = req.jobs[i];
    if (j.may_wait) continue;
    int least = std::numeric_limits<int>::max();
    bool any = false;
    for (const Config& o : j.options)
      if (o.samples_per_s * o.efficiency > 0) {
        any = true;
        if (usable(req, j, o)) least = std::min(least, o.gpus);
      }
    if (!any) bad_job(j, i, "options", "the job must run (may_wait false) but has no option with a throughput above 0");
    if (least == std::numeric_limits<int>::max())
      bad_job(j, i, "memory", "the job must run (may_wait false) but none of its options fits in the memory of its "
                              "GPUs (" + std::to_string(req.gpu_memory_bytes) + " bytes; " + describe(j.memory) + ")");
    need += least;
    who += (who.empty() ? "" : ", ") + ("'" + j.id + "' needs " + std::to_string(least));
  }
  if (need > req.gpus && req.types.empty())  // with types, solve_typed says which jobs do not fit
    throw DataError("field 'gpus': the non-preemptible jobs need at least " + std::to_string(need) +
                    " GPUs but gpus = " + std::to_string(req.gpus) + " (" + who + ")");
}

void decide_fifo(const PlanRequest& req, Plan& plan) {
  // The free GPUs of each type (one pool without types): a job starts when its own type has room.
  const size_t K = std::max<size_t>(1, req.types.size());
  auto slot = [&](const Config& c) {
    return req.types.empty() ? size_t{0} : static_cast<size_t>(detail::type_index(req, c.type));
  };
  std::vector<int> free(K);
  for (size_t t = 0; t < K; ++t) free[t] = req.types.empty() ? req.gpus : req.types[t].gpus;
  for (const PlanJob& j : req.jobs)
    if (j.current.gpus > 0) free[slot(j.current)] -= j.current.gpus;
  bool blocked = false;
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    const PlanJob& j = req.jobs[i];
    PlanChoice& c = plan.choices[i];
    if (j.current.gpus > 0) {  // running: keeps what it has
      c.config = j.current;
      for (size_t k = 0; k < j.options.size(); ++k)
        if (is_current(j, j.options[k])) c.option = static_cast<int>(k), c.config = j.options[k];
    } else if (j.own.gpus > (req.types.empty() ? req.gpus : req.types[slot(j.own)].gpus) ||
               !fits(j.memory, detail::gpu_memory_of(req, j.own), j.own.gpus, j.own.ranks_per_gpu)) {
      continue;  // can never run here; must not block the queue forever
    } else if (!blocked && j.own.gpus <= free[slot(j.own)]) {
      c.config = j.own;
      free[slot(j.own)] -= j.own.gpus;
    } else {
      blocked = true;  // strict FIFO: the head waits, so do all behind it
      continue;
    }
    plan.gpus_used += c.config.gpus;
  }
}

}  // namespace

const Plan& Planner::decide(const PlanRequest& in) {
  validate(in);
  const PlanRequest* rp = &in;
  if (std::any_of(in.jobs.begin(), in.jobs.end(), [](const PlanJob& j) { return j.learned; })) {
    expanded_ = in;
    expand_learned(expanded_);
    rp = &expanded_;
  }
  const PlanRequest& req = *rp;
  const size_t J = req.jobs.size();
  plan_.choices.assign(J, PlanChoice{});
  plan_.values.resize(J);
  plan_.objective = 0;
  plan_.gpus_used = 0;
  if (req.objective == Objective::Fifo) {
    for (auto& v : plan_.values) v.clear();
    decide_fifo(req, plan_);
    place(req);
    return plan_;
  }
  check_must_run(req);
  if (!req.types.empty()) {
    detail::decide_typed(req, plan_);
    place(req);
    return plan_;
  }
  problem_.resize(J);
  for (size_t i = 0; i < J; ++i) {
    const PlanJob& j = req.jobs[i];
    DpJob& jo = problem_[i];
    jo.options.clear();
    jo.may_wait = j.may_wait;
    jo.current_gpus = j.current.gpus;
    jo.current_batch = j.current.batch;
    for (size_t k : detail::choosable_options(req, i, plan_.values[i])) {
      const Config& o = j.options[k];
      jo.options.push_back(Option{o.gpus, o.batch, plan_.values[i][k], static_cast<int>(k)});
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
    c.valuation = option_valuation(req, req.jobs[i], c.config);
  }
  place(req);
  return plan_;
}

void Planner::place(const PlanRequest& req) {
  plan_.nodes.clear();
  if (!req.types.empty()) {
    plan_.nodes = detail::place_typed(req, plan_);
    return;
  }
  if (req.nodes.empty()) return;
  std::vector<std::vector<int>> current(req.jobs.size());
  std::vector<int> counts(req.jobs.size());
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    current[i] = req.jobs[i].current_nodes;
    counts[i] = plan_.choices[i].config.gpus;
  }
  plan_.nodes = place_on_nodes(req.nodes, current, counts);
}

Plan decide(const PlanRequest& req) {
  Planner p;
  return p.decide(req);
}

// ---- learned options and placement on nodes ------------------------------------------------------

void expand_learned(PlanRequest& req) {
  if (!req.types.empty()) {
    detail::expand_learned_typed(req);
    return;
  }
  const int node_size = req.nodes.empty() ? std::max(1, req.gpus) : *std::max_element(req.nodes.begin(), req.nodes.end());
  double shortest = std::numeric_limits<double>::infinity();  // fastest finish of a job that reported
  std::vector<size_t> unseen;
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    PlanJob& j = req.jobs[i];
    if (!j.learned) continue;
    const GoodputModel m(j.learn);
    if (!m.observed_any()) {
      unseen.push_back(i);
      continue;
    }
    j.options.clear();
    shortest = std::min(shortest, detail::add_learned_options(j, m, node_size, std::min(m.max_gpus(node_size), req.gpus),
                                                              j.current.gpus, 1.0, ""));
  }
  const double prior_s = std::isfinite(shortest) ? shortest : std::max(1.0, req.start_s);
  for (size_t i : unseen) {
    PlanJob& j = req.jobs[i];
    const LearnSpec& l = j.learn;
    // Where it first fits (a sharded job too large for one GPU starts on several).
    const int g = j.current.gpus > 0 ? j.current.gpus
                                     : std::max(1, min_gpus_for_memory(j.memory, req.gpu_memory_bytes, std::max(1, req.gpus)));
    const int batch = l.fixed_batch > 0 ? l.fixed_batch : std::max(l.init_batch, g * l.min_local);
    const BatchSplit sp = split_batch(g, batch, l.max_local, l.init_batch, l.max_batch, l.accumulate_on_one_gpu);
    const int b = g * sp.atomic * (sp.accum + 1);
    // Its rate is unknown: valued as if it finished in prior_s (samples_per_s x efficiency = remaining / prior_s).
    j.options.assign(1, Config{g, b, 1, j.remaining / prior_s, 1.0});
  }
}

std::vector<int> most_free_nodes(std::vector<int>& free, int need) {
  std::vector<int> a;
  while (static_cast<int>(a.size()) < need) {
    int best = 0;
    for (int i = 1; i < static_cast<int>(free.size()); ++i)
      if (free[size_t(i)] > free[size_t(best)]) best = i;
    EDP_CHECK(!free.empty() && free[size_t(best)] > 0, "most_free_nodes: not enough free GPUs");
    const int take = std::min(free[size_t(best)], need - static_cast<int>(a.size()));
    a.insert(a.end(), size_t(take), best);
    free[size_t(best)] -= take;
  }
  return a;
}

std::vector<std::vector<int>> place_on_nodes(const std::vector<int>& node_gpus, const std::vector<std::vector<int>>& current,
                                             const std::vector<int>& counts) {
  const size_t J = counts.size();
  EDP_CHECK(current.size() == J, "place_on_nodes: one current placement per job");
  const int nodes = static_cast<int>(node_gpus.size());
  const int node_size = nodes ? *std::max_element(node_gpus.begin(), node_gpus.end()) : 0;
  std::vector<std::vector<int>> out(J);
  std::vector<size_t> todo;
  for (size_t i = 0; i < J; ++i) {
    if (counts[i] > 0 && counts[i] == static_cast<int>(current[i].size())) out[i] = current[i];
    else if (counts[i] > 0) todo.push_back(i);
  }
  std::vector<int> free = node_gpus;
  for (const auto& a : out)
    for (int n : a) {
      EDP_CHECK(n >= 0 && n < nodes && free[size_t(n)] > 0, "place_on_nodes: node ", n, " is over-allocated");
      --free[size_t(n)];
    }
  std::stable_sort(todo.begin(), todo.end(), [&](size_t a, size_t b) { return counts[a] > counts[b]; });
  for (size_t i : todo) {
    const int n = counts[i];
    const std::set<int> had(current[i].begin(), current[i].end());
    std::vector<int>& a = out[i];
    if (n >= node_size) {
      std::vector<int> whole;
      for (int k = 0; k < nodes; ++k)
        if (free[size_t(k)] == node_gpus[size_t(k)] && free[size_t(k)] > 0) whole.push_back(k);
      std::stable_partition(whole.begin(), whole.end(), [&](int x) { return had.count(x) > 0; });
      for (int k : whole) {
        if (static_cast<int>(a.size()) + free[size_t(k)] > n) break;
        a.insert(a.end(), size_t(free[size_t(k)]), k);
        free[size_t(k)] = 0;
      }
    } else {
      int best = -1;
      for (int k = 0; k < nodes; ++k) {
        const int f = free[size_t(k)];
        if (f < n) continue;
        if (best < 0 || f < free[size_t(best)] || (f == free[size_t(best)] && had.count(k) && !had.count(best))) best = k;
      }
      if (best >= 0) {
        a.assign(size_t(n), best);
        free[size_t(best)] -= n;
      }
    }
    if (static_cast<int>(a.size()) < n) {
      const std::vector<int> rest = most_free_nodes(free, n - static_cast<int>(a.size()));
      a.insert(a.end(), rest.begin(), rest.end());
    }
  }
  return out;
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
  if (!(v1.hysteresis >= 0.0 && v1.hysteresis < 1.0))
    throw DataError("field 'rescale_penalty': must be in [0, 1)");
  PlanRequest r;
  r.version = 1;
  r.gpus = v1.gpus;
  r.objective = Objective::Throughput;
  r.hysteresis = v1.hysteresis;
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

std::vector<DpJob> make_problem(const TableRequest& v1) {
  const PlanRequest req = from_v1(v1);
  validate(req);
  check_must_run(req);
  std::vector<DpJob> out(req.jobs.size());
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
