// decide() on a cluster of several GPU types (plan_types.h).
#include "autoscale/plan_types.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "edp/autoscale/memory.h"
#include "edp/autoscale/online.h"
#include "edp/autoscale/typed_optimizer.h"
#include "edp/core/error.h"

namespace edp::autoscale::detail {

int type_index(const PlanRequest& req, const std::string& name) {
  for (size_t t = 0; t < req.types.size(); ++t)
    if (req.types[t].name == name) return static_cast<int>(t);
  return -1;
}

int64_t gpu_memory_of(const PlanRequest& req, const Config& c) {
  const int t = type_index(req, c.type);
  return t >= 0 && req.types[static_cast<size_t>(t)].gpu_memory_bytes > 0
             ? req.types[static_cast<size_t>(t)].gpu_memory_bytes
             : req.gpu_memory_bytes;
}

namespace {

std::string known_types(const PlanRequest& req) {
  std::string s;
  for (const GpuType& t : req.types) s += (s.empty() ? "" : ", ") + t.name;
  return s;
}

void check_type(const PlanRequest& req, const PlanJob& j, size_t i, const std::string& field, const Config& c) {
  auto bad = [&](const std::string& what) {
    throw DataError("job '" + j.id + "' (jobs[" + std::to_string(i) + "]): field '" + field + "': " + what);
  };
  if (req.types.empty()) {
    if (!c.type.empty()) bad("type '" + c.type + "' in a request without types");
    return;
  }
  if (type_index(req, c.type) < 0)
    bad(c.type.empty() ? "names no type (the request's types: " + known_types(req) + ")"
                       : "type '" + c.type + "' is not one of the request's types (" + known_types(req) + ")");
}

}  // namespace

void validate_types(const PlanRequest& req) {
  if (!req.types.empty()) {
    if (!req.nodes.empty())
      throw DataError("field 'nodes': a request with types gives each type's nodes (types[].nodes)");
    std::set<std::string> names;
    int64_t sum = 0;
    size_t with_nodes = 0;
    for (size_t t = 0; t < req.types.size(); ++t) {
      const GpuType& g = req.types[t];
      const std::string f = "field 'types[" + std::to_string(t) + "]";
      if (g.name.empty()) throw DataError(f + ".name': must be a non-empty string");
      if (!names.insert(g.name).second) throw DataError(f + ".name': '" + g.name + "' is listed twice");
      if (g.gpus < 0) throw DataError(f + ".gpus': must be >= 0");
      if (g.gpu_memory_bytes < 0) throw DataError(f + ".gpu_memory_bytes': must be >= 0");
      if (!g.nodes.empty()) {
        int64_t on = 0;
        for (int n : g.nodes) {
          if (n < 1) throw DataError(f + ".nodes': GPUs per node must be >= 1");
          on += n;
        }
        if (on != g.gpus)
          throw DataError(f + ".nodes': the nodes hold " + std::to_string(on) + " GPUs but gpus = " + std::to_string(g.gpus));
      }
      sum += g.gpus;
      with_nodes += g.nodes.empty() ? 0 : 1;
    }
    if (with_nodes != 0 && with_nodes != req.types.size())
      throw DataError("field 'types': either every type gives its nodes or none does");
    if (sum != req.gpus)
      throw DataError("field 'gpus': the types hold " + std::to_string(sum) + " GPUs but gpus = " + std::to_string(req.gpus));
  }
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    const PlanJob& j = req.jobs[i];
    if (j.learned) {
      const std::string at = "job '" + j.id + "' (jobs[" + std::to_string(i) + "]): field 'learn.";
      if (req.types.empty() && !j.learn.types.empty())
        throw DataError(at + "types': only in a request with types");
      for (const TypeLearn& t : j.learn.types)
        if (type_index(req, t.name) < 0)
          throw DataError(at + "types': type '" + t.name + "' is not one of the request's types (" + known_types(req) + ")");
      for (size_t k = 0; k < j.learn.observed.size(); ++k) {
        const std::string& t = j.learn.observed[k].type;
        if (req.types.empty() ? !t.empty() : type_index(req, t) < 0)
          throw DataError(at + "observed[" + std::to_string(k) + "].type': " +
                          (req.types.empty() ? "'" + t + "' in a request without types"
                                             : "'" + t + "' is not one of the request's types (" + known_types(req) + ")"));
      }
    }
    if (j.current.gpus > 0) check_type(req, j, i, "current.type", j.current);
    if (j.own.gpus > 0 && (req.objective == Objective::Fifo || !req.types.empty() || !j.own.type.empty()))
      check_type(req, j, i, "own.type", j.own);
    for (size_t k = 0; k < j.options.size(); ++k)
      check_type(req, j, i, "options[" + std::to_string(k) + "].type", j.options[k]);
    if (!req.types.empty() && j.current.gpus > 0) {
      const size_t ti = static_cast<size_t>(type_index(req, j.current.type));
      const GpuType& t = req.types[ti];
      const std::string at = "job '" + j.id + "' (jobs[" + std::to_string(i) + "]): field ";
      if (j.current.gpus > t.gpus)
        throw DataError(at + "'current.gpus': " + std::to_string(j.current.gpus) + " is more than type '" + t.name +
                        "' has (" + std::to_string(t.gpus) + ")");
      if (!t.nodes.empty()) {
        size_t first = 0;
        for (size_t u = 0; u < ti; ++u) first += req.types[u].nodes.size();
        if (static_cast<int>(j.current_nodes.size()) != j.current.gpus)
          throw DataError(at + "'current.nodes': must name one node per current GPU (" +
                          std::to_string(j.current.gpus) + "), got " + std::to_string(j.current_nodes.size()));
        for (int n : j.current_nodes)
          if (n < static_cast<int>(first) || n >= static_cast<int>(first + t.nodes.size()))
            throw DataError(at + "'current.nodes': node " + std::to_string(n) + " is not one of type '" + t.name +
                            "' (nodes " + std::to_string(first) + " to " + std::to_string(first + t.nodes.size() - 1) +
                            ")");
      }
    }
  }
}

void decide_typed(const PlanRequest& req, Plan& plan) {
  const size_t J = req.jobs.size(), K = req.types.size();
  std::vector<TypedJob> jobs(J);
  std::vector<int> capacity(K);
  for (size_t t = 0; t < K; ++t) capacity[t] = req.types[t].gpus;
  for (size_t i = 0; i < J; ++i) {
    const PlanJob& j = req.jobs[i];
    TypedJob& tj = jobs[i];
    tj.may_wait = j.may_wait;
    for (size_t k : choosable_options(req, i, plan.values[i])) {
      const Config& o = j.options[k];
      TypedOption to;
      to.gpus.assign(K, 0);
      to.gpus[static_cast<size_t>(type_index(req, o.type))] = o.gpus;
      to.batch = o.batch;
      to.value = plan.values[i][k];
      to.tag = static_cast<int>(k);
      to.current = is_current(j, o);
      tj.options.push_back(std::move(to));
    }
  }
  const TypedSolution s = solve_typed(jobs, capacity);
  plan.objective = s.objective;
  plan.gpus_used = 0;
  for (int g : s.gpus_used) plan.gpus_used += g;
  for (size_t i = 0; i < J; ++i) {
    const TypedChoice& ch = s.choices[i];
    if (ch.option < 0) continue;
    PlanChoice& c = plan.choices[i];
    c.option = ch.tag;
    c.config = req.jobs[i].options[static_cast<size_t>(ch.tag)];
    c.value = ch.value;
    c.valuation = option_valuation(req, req.jobs[i], c.config);
  }
}

std::vector<std::vector<int>> place_typed(const PlanRequest& req, const Plan& plan) {
  if (req.types.empty() || req.types[0].nodes.empty()) return {};  // every type gives nodes, or none
  std::vector<std::vector<int>> out(req.jobs.size());
  int first = 0;  // the first node of this type in the request's numbering
  for (size_t t = 0; t < req.types.size(); ++t) {
    const GpuType& type = req.types[t];
    const std::vector<int>& nodes = type.nodes;
    const int n = static_cast<int>(nodes.size());
    std::vector<std::vector<int>> current(req.jobs.size());
    std::vector<int> counts(req.jobs.size(), 0);
    for (size_t i = 0; i < req.jobs.size(); ++i) {
      const PlanJob& j = req.jobs[i];
      if (j.current.gpus > 0 && j.current.type == type.name)
        for (int x : j.current_nodes)
          if (x >= first && x < first + n) current[i].push_back(x - first);
      const Config& c = plan.choices[i].config;
      if (c.gpus > 0 && c.type == type.name) counts[i] = c.gpus;
    }
    const std::vector<std::vector<int>> placed = place_on_nodes(nodes, current, counts);
    for (size_t i = 0; i < req.jobs.size(); ++i)
      for (int x : placed[i]) out[i].push_back(x + first);
    first += n;
  }
  return out;
}

namespace {

// The types a learned job may run on, with what it states about each (all, at speed 1, when it
// names none).
std::vector<TypeLearn> job_types(const PlanRequest& req, const PlanJob& j) {
  if (!j.learn.types.empty()) return j.learn.types;
  std::vector<TypeLearn> all;
  for (const GpuType& t : req.types) all.push_back(TypeLearn{t.name, 0, 1.0});
  return all;
}

LearnSpec on_type(const LearnSpec& spec, const TypeLearn& t, const std::string& observed_type) {
  LearnSpec s = spec;
  if (t.max_local > 0) s.max_local = std::max(t.max_local, s.min_local);
  s.observed.clear();
  for (const StepObservation& o : spec.observed)
    if (o.type == observed_type) s.observed.push_back(o);
  return s;
}

}  // namespace

TypeProjection project_type(const std::map<std::string, int>& observed, const std::vector<TypeLearn>& types,
                            const std::string& target) {
  auto speed = [&](const std::string& name) {
    for (const TypeLearn& t : types)
      if (t.name == name) return t.speed;
    return 1.0;
  };
  TypeProjection p;
  const auto here = observed.find(target);
  if (here != observed.end() && here->second > 0) {
    p.source = target;
    return p;
  }
  int most = 0;
  for (const auto& [t, n] : observed)
    if (n > most) p.source = t, most = n;
  if (p.source.empty()) {  // observed nowhere: relative to the fastest type
    double fastest = 0;
    for (const TypeLearn& t : types) fastest = std::max(fastest, t.speed);
    p.scale = fastest > 0 ? speed(target) / fastest : 1.0;
  } else {
    p.scale = speed(target) / speed(p.source);
  }
  return p;
}

double add_learned_options(PlanJob& j, const GoodputModel& m, int node_size, int cap, int cur, double scale,
                           const std::string& type) {
  auto nodes_for = [&](int g) { return (g + node_size - 1) / node_size; };
  int cur_nodes = nodes_for(cur);
  if (cur > 0 && !j.current_nodes.empty()) {
    std::vector<int> distinct = j.current_nodes;
    std::sort(distinct.begin(), distinct.end());
    cur_nodes = static_cast<int>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  }
  double shortest = std::numeric_limits<double>::infinity();
  for (int g = 1; g <= std::max(cap, cur); ++g) {
    const bool packs = g <= node_size || g % node_size == 0;
    if (g != cur && (g > cap || !packs)) continue;
    const LearnedConfig c = m.best(g == cur ? cur_nodes : nodes_for(g), g);
    if (c.gpus == 0 || !(c.goodput() > 0)) continue;
    j.options.push_back(Config(g, c.batch, 1, c.samples_per_s * scale, c.efficiency, type));
    shortest = std::min(shortest, j.remaining / (c.goodput() * scale));
  }
  return shortest;
}

void expand_learned_typed(PlanRequest& req) {
  double shortest = std::numeric_limits<double>::infinity();  // fastest finish of a job that reported
  std::vector<size_t> unseen;
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    PlanJob& j = req.jobs[i];
    if (!j.learned) continue;
    if (j.learn.observed.empty()) {
      unseen.push_back(i);
      continue;
    }
    j.options.clear();
    std::map<std::string, int> count;
    for (const StepObservation& o : j.learn.observed) ++count[o.type];
    const std::vector<TypeLearn> types = job_types(req, j);
    const GoodputModel all(j.learn);  // exploration: explore x the most GPUs it ran at, on any type
    for (const TypeLearn& t : types) {
      const GpuType& type = req.types[static_cast<size_t>(type_index(req, t.name))];
      const int node_size = type.nodes.empty() ? std::max(1, type.gpus) : *std::max_element(type.nodes.begin(), type.nodes.end());
      // Its own observations here, else the type it ran on most, by their speeds.
      const TypeProjection from = project_type(count, types, t.name);
      const GoodputModel m(on_type(j.learn, t, from.source));
      const int cur = j.current.gpus > 0 && j.current.type == t.name ? j.current.gpus : 0;
      shortest = std::min(shortest, add_learned_options(j, m, node_size, std::min(all.max_gpus(node_size), type.gpus),
                                                        cur, from.scale, t.name));
    }
  }
  const double prior_s = std::isfinite(shortest) ? shortest : std::max(1.0, req.start_s);
  for (size_t i : unseen) {
    PlanJob& j = req.jobs[i];
    const LearnSpec& l = j.learn;
    const std::vector<TypeLearn> types = job_types(req, j);
    j.options.clear();
    for (const TypeLearn& t : types) {
      const GpuType& type = req.types[static_cast<size_t>(type_index(req, t.name))];
      const bool running_here = j.current.gpus > 0 && j.current.type == t.name;
      const int g = running_here ? j.current.gpus
                                 : std::max(1, min_gpus_for_memory(j.memory, gpu_memory_of(req, Config(1, 0, 1, 0, 1.0, t.name)),
                                                                   std::max(1, type.gpus)));
      const int max_local = t.max_local > 0 ? std::max(t.max_local, l.min_local) : l.max_local;
      const int batch = l.fixed_batch > 0 ? l.fixed_batch : std::max(l.init_batch, g * l.min_local);
      const BatchSplit sp = split_batch(g, batch, max_local, l.init_batch, l.max_batch, l.accumulate_on_one_gpu);
      const int b = g * sp.atomic * (sp.accum + 1);
      // Its rate is unknown: valued as if it finished in prior_s on its fastest type, slower by speed elsewhere.
      j.options.push_back(Config(g, b, 1, j.remaining / prior_s * project_type({}, types, t.name).scale, 1.0, t.name));
    }
  }
}

}  // namespace edp::autoscale::detail
