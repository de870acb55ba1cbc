// decide() on a cluster of several GPU types (plan_types.h).
#include "autoscale/plan_types.h"

#include <cmath>
#include <set>

#include "edp/autoscale/memory.h"
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
    if (!req.types.empty() && j.learned)
      throw DataError("job '" + j.id + "' (jobs[" + std::to_string(i) +
                      "]): field 'learn': learned options need a request of one GPU type (a job's speed is learned "
                      "per job, not per type, yet): give its options per type");
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
    std::vector<double>& vals = plan.values[i];
    vals.resize(j.options.size());
    for (size_t k = 0; k < j.options.size(); ++k) {
      const Config& o = j.options[k];
      const double v = option_value(req, j, o);
      vals[k] = v;
      if (!(o.samples_per_s * o.efficiency > 0)) continue;  // never useful
      if (!fits(j.memory, gpu_memory_of(req, o), o.gpus, o.ranks_per_gpu) && !is_current(j, o)) continue;
      if (!std::isfinite(v))
        throw DataError("job '" + j.id + "' (jobs[" + std::to_string(i) + "]): field 'options[" + std::to_string(k) +
                        "]': its value is not a finite number");
      TypedOption to;
      to.gpus.assign(K, 0);
      to.gpus[static_cast<size_t>(type_index(req, o.type))] = o.gpus;
      to.batch = o.batch;
      to.value = v;
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

}  // namespace edp::autoscale::detail
