// The `plan` contract as JSON (docs/plan.md): requests of version 1 (throughput tables) and 2
// (the cluster state of plan.h), the answer, and the example request.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "autoscale/memory_fields.h"
#include "core/json_fields.h"
#include "edp/autoscale/goodput.h"
#include "edp/autoscale/plan.h"
#include "edp/core/error.h"

namespace edp::autoscale {

namespace {

using json_fields::Fields;
using json_fields::Json;
using ojson = nlohmann::ordered_json;

constexpr int64_t kMaxGpus = int64_t{1} << 20;
constexpr int64_t kMaxBatch = int64_t{1} << 31;
constexpr double kMaxRate = 1e12;   // samples/s: far above any cluster
constexpr double kMinRate = 1e-9;   // below this a throughput is a unit mistake (or a denormal)
constexpr double kMaxWork = 1e18;   // samples
constexpr double kMaxPause = 1e6;   // seconds (11 days)
constexpr int64_t kMaxBytes = int64_t{1} << 50;  // a GPU's memory: 1 PiB

std::string job_where(const Json& j, size_t i) {
  std::string w = "jobs[" + std::to_string(i) + "]";
  if (j.is_object() && j.contains("id") && j.at("id").is_string()) w = "job '" + j.at("id").get<std::string>() + "' (" + w + ")";
  return w;
}

// A rate-like number: 0, or in [kMinRate, hi]; required when def is NaN.
double rate(const Fields& f, std::string_view key, double hi, double def) {
  const double x = std::isnan(def) ? f.number(key, 0, hi) : f.number(key, 0, hi, def);
  if (x > 0 && x < kMinRate)
    f.fail(key, "must be 0 or at least 1e-9, got " + f.json().at(std::string(key)).dump() + " (a unit mistake?)");
  return x;
}

// ---- version 1: throughput tables ----

TableRequest parse_v1_header(const Json& in, const std::string& where) {
  const Fields req(in, where);
  req.allow({"gpus", "jobs", "rescale_penalty"});
  TableRequest r;
  r.gpus = static_cast<int>(req.integer("gpus", 0, kMaxGpus));
  r.hysteresis = req.number("rescale_penalty", 0, 0.999999, 0.05);
  (void)req.array("jobs");  // the elements come one by one (parse_v1_job)
  return r;
}

void parse_v1_job(TableRequest& r, const Json& job, size_t i, const std::string& where) {
  const Fields j(job, where + ": " + job_where(job, i));
  j.allow({"id", "min_gpus", "max_gpus", "max_batch_per_gpu", "weight", "ref", "throughput", "current"});
  TableJob t;
  t.id = j.text("id");
  t.min_gpus = static_cast<int>(j.integer("min_gpus", 0, kMaxGpus));
  t.max_gpus = static_cast<int>(j.integer("max_gpus", 0, kMaxGpus));
  t.max_batch_per_gpu = static_cast<int>(j.integer("max_batch_per_gpu", 0, kMaxBatch));
  t.weight = j.number("weight", 0, 1e6, 1.0);
  const Fields ref = j.object("ref");
  ref.allow({"gpus", "batch"});
  t.ref_gpus = static_cast<int>(ref.integer("gpus", 0, kMaxGpus));
  t.ref_batch = static_cast<int>(ref.integer("batch", 0, kMaxBatch));
  if (const auto cur = j.object_if("current")) {
    cur->allow({"gpus", "batch"});
    t.current_gpus = static_cast<int>(cur->integer("gpus", 0, kMaxGpus));
    t.current_batch = static_cast<int>(cur->integer("batch", 0, kMaxBatch));
  }
  const Json& tp = j.array("throughput");
  for (size_t k = 0; k < tp.size(); ++k) {
    const Fields p = j.element("throughput", k);
    p.allow({"gpus", "batch", "samples_per_s"});
    t.throughput.push_back({static_cast<int>(p.integer("gpus", 0, kMaxGpus)),
                            static_cast<int>(p.integer("batch", 0, kMaxBatch)), rate(p, "samples_per_s", kMaxRate, std::nan(""))});
  }
  r.jobs.push_back(std::move(t));
}

// ---- version 2: the cluster state ----

Config parse_config(const Fields& f, bool with_rate) {
  if (with_rate) f.allow({"gpus", "batch", "ranks_per_gpu", "samples_per_s", "efficiency", "type"});
  else f.allow({"gpus", "batch", "ranks_per_gpu", "type"});
  Config c;
  c.type = f.text("type", "");
  c.gpus = static_cast<int>(f.integer("gpus", 0, kMaxGpus));
  c.batch = static_cast<int>(f.integer("batch", 0, kMaxBatch, 0));
  c.ranks_per_gpu = static_cast<int>(f.integer("ranks_per_gpu", 1, 64, 1));
  if (with_rate) {
    c.samples_per_s = rate(f, "samples_per_s", kMaxRate, 0);
    c.efficiency = f.number("efficiency", 1e-6, 1e3, std::nan(""));
  }
  return c;
}

LearnSpec parse_learn(const Fields& f) {
  f.allow({"init_batch", "max_batch", "min_local", "max_local", "max_gpus", "fixed_batch", "accumulate_on_one_gpu",
           "explore", "fixed_share", "trust_half", "observed", "types", "grad"});
  LearnSpec l;
  l.init_batch = static_cast<int>(f.integer("init_batch", 1, kMaxBatch));
  l.max_batch = static_cast<int>(f.integer("max_batch", l.init_batch, kMaxBatch, l.init_batch));
  l.min_local = static_cast<int>(f.integer("min_local", 1, kMaxBatch, 1));
  l.max_local = static_cast<int>(f.integer("max_local", l.min_local, kMaxBatch, std::max(l.min_local, l.max_batch)));
  l.max_gpus = static_cast<int>(f.integer("max_gpus", 0, kMaxGpus, 0));
  l.fixed_batch = static_cast<int>(f.integer("fixed_batch", 0, kMaxBatch, 0));
  l.accumulate_on_one_gpu = f.boolean("accumulate_on_one_gpu", false);
  l.explore = f.number("explore", 1, 1e3, 4.0);
  l.fixed_share = f.number("fixed_share", 0, 0.999, 0.25);
  l.trust_half = f.number("trust_half", 0.01, 100, 1.0);
  if (f.has("observed")) {
    const Json& obs = f.array("observed");
    for (size_t k = 0; k < obs.size(); ++k) {
      const Fields o = f.element("observed", k);
      o.allow({"nodes", "gpus", "local_batch", "step_s", "sync_s", "type"});
      StepObservation x;
      x.nodes = static_cast<int>(o.integer("nodes", 1, kMaxGpus, 1));
      x.gpus = static_cast<int>(o.integer("gpus", x.nodes, kMaxGpus));
      x.local_batch = o.number("local_batch", 1e-9, 1e12);
      x.step_s = o.number("step_s", 1e-12, kMaxPause);
      x.sync_s = o.number("sync_s", 0, x.step_s, 0);
      x.type = o.text("type", "");
      l.observed.push_back(x);
    }
  }
  if (f.has("types")) {
    const Json& ts = f.array("types");
    for (size_t k = 0; k < ts.size(); ++k) {
      const Fields t = f.element("types", k);
      t.allow({"name", "max_local", "speed"});
      TypeLearn tl;
      tl.name = t.text("name");
      if (tl.name.empty()) t.fail("name", "must be a non-empty string");
      tl.max_local = static_cast<int>(t.integer("max_local", 0, kMaxBatch, 0));
      tl.speed = t.number("speed", 1e-6, 1e6, 1.0);
      l.types.push_back(tl);
    }
  }
  if (const auto g = f.object_if("grad")) {
    g->allow({"sqr", "var"});
    l.has_grad = true;
    l.grad_sqr = g->number("sqr", 0, 1e300);
    l.grad_var = g->number("var", 0, 1e300);
  }
  return l;
}

PlanJob parse_job(const Fields& j, const PlanRequest& r) {
  j.allow({"id", "weight", "may_wait", "remaining", "own", "current", "pause_s", "start_s", "rebatch_s", "efficiency",
           "options", "learn", "memory"});
  PlanJob p;
  p.id = j.text("id");
  if (p.id.empty()) j.fail("id", "must be a non-empty string");
  p.weight = j.number("weight", 0, 1e6, 1.0);
  p.may_wait = j.boolean("may_wait", true);
  const bool needs_work = r.objective == Objective::Remaining || r.objective == Objective::RestartAware;
  p.remaining = needs_work ? j.number("remaining", kMinRate, kMaxWork) : j.number("remaining", 0, kMaxWork, 0);
  if (needs_work && p.remaining < kMinRate) j.fail("remaining", "must be at least 1e-9");
  const bool needs_own = r.objective == Objective::Throughput || r.objective == Objective::Fifo;
  if (needs_own && !j.has("own"))
    j.fail("own", std::string("required by policy ") + objective_name(r.objective) + " (the job's own configuration)");
  if (const auto own = j.object_if("own")) p.own = parse_config(*own, true);
  if (r.objective == Objective::Throughput && !(p.own.samples_per_s > 0))
    j.fail("own", "samples_per_s must be > 0 (policy throughput values options relative to it)");
  if (const auto cur = j.object_if("current")) {
    const bool with_nodes = cur->has("nodes");
    size_t node_count = r.nodes.size();
    for (const GpuType& t : r.types) node_count += t.nodes.size();
    if (with_nodes && node_count == 0) cur->fail("nodes", "only in a request with \"nodes\"");
    Json plain = cur->json();
    plain.erase("nodes");
    p.current = parse_config(Fields(plain, cur->where()), false);
    if (p.current.gpus > r.gpus)
      cur->fail("gpus", std::to_string(p.current.gpus) + " is more than the cluster's " + std::to_string(r.gpus));
    if (with_nodes) {
      const Json& ns = cur->array("nodes");
      for (size_t k = 0; k < ns.size(); ++k) {
        if (!ns[k].is_number_integer() || ns[k].get<int64_t>() < 0 || ns[k].get<int64_t>() >= static_cast<int64_t>(node_count))
          cur->fail("nodes", "element " + std::to_string(k) + " must be a node index in [0, " + std::to_string(node_count) +
                                 "), got " + ns[k].dump());
        p.current_nodes.push_back(ns[k].get<int>());
      }
    }
  }
  p.pause_s = j.number("pause_s", 0, kMaxPause, -1);
  p.start_s = j.number("start_s", 0, kMaxPause, -1);
  p.rebatch_s = j.number("rebatch_s", 0, kMaxPause, -1);
  if (const auto mem = j.object_if("memory")) p.memory = parse_memory(*mem);
  if (const auto l = j.object_if("learn")) {
    if (j.has("options")) j.fail("learn", "a job gives either its options or what edp learns them from, not both");
    p.learned = true;
    p.learn = parse_learn(*l);
    return p;
  }
  // Efficiency inputs: Pollux's (B_noise + B0) / (B_noise + B) for options that give none.
  double noise = 0, ref_batch = 0;
  if (const auto eff = j.object_if("efficiency")) {
    eff->allow({"grad_noise_scale", "ref_batch"});
    noise = eff->number("grad_noise_scale", 0, 1e15);
    ref_batch = static_cast<double>(eff->integer("ref_batch", 1, kMaxBatch));
  }
  const Json& opts = j.array("options");
  std::set<std::tuple<int, int, int, std::string>> seen;
  for (size_t k = 0; k < opts.size(); ++k) {
    const Fields of = j.element("options", k);
    Config c = parse_config(of, true);
    if (!seen.insert({c.gpus, c.batch, c.ranks_per_gpu, c.type}).second)
      of.fail("gpus", "the configuration (gpus " + std::to_string(c.gpus) + ", batch " + std::to_string(c.batch) +
                          ", ranks_per_gpu " + std::to_string(c.ranks_per_gpu) +
                          (c.type.empty() ? "" : ", type " + c.type) + ") is listed twice");
    if (std::isnan(c.efficiency)) {
      if (ref_batch > 0 && c.batch == 0) of.fail("efficiency", "needed: batch 0 (adaptive) has no efficiency to compute");
      c.efficiency =
          ref_batch > 0 ? statistical_efficiency(grad_stats_of_noise_scale(noise, ref_batch), c.batch, ref_batch) : 1.0;
    }
    p.options.push_back(c);
  }
  return p;
}

PlanRequest parse_v2_header(const Json& in, const std::string& where, int gpus_override) {
  const Fields req(in, where);
  req.allow({"version", "gpus", "policy", "hysteresis", "pause_s", "start_s", "margin_s", "pause_per_gpu", "nodes",
             "gpu_memory_bytes", "types", "jobs"});
  PlanRequest r;
  int64_t node_sum = -1;
  if (req.has("types")) {
    // Several GPU types: gpus defaults to their sum; plan.cpp checks the rest (names, nodes).
    const Json& ts = req.array("types");
    if (ts.empty()) req.fail("types", "must name at least one type (or be left out)");
    node_sum = 0;
    for (size_t k = 0; k < ts.size(); ++k) {
      const Fields t = req.element("types", k);
      t.allow({"name", "gpus", "nodes", "gpu_memory_bytes"});
      GpuType g;
      g.name = t.text("name");
      if (g.name.empty()) t.fail("name", "must be a non-empty string");
      g.gpus = static_cast<int>(t.integer("gpus", 0, kMaxGpus));
      if (t.has("nodes")) {
        const Json& ns = t.array("nodes");
        for (size_t n = 0; n < ns.size(); ++n) {
          if (!ns[n].is_number_integer() || ns[n].get<int64_t>() < 1 || ns[n].get<int64_t>() > 4096)
            t.fail("nodes", "element " + std::to_string(n) + " must be the GPUs of a node, an integer in [1, 4096], got " +
                                ns[n].dump());
          g.nodes.push_back(ns[n].get<int>());
        }
      }
      g.gpu_memory_bytes = t.integer("gpu_memory_bytes", 0, kMaxBytes, 0);
      node_sum += g.gpus;
      r.types.push_back(std::move(g));
    }
    if (req.has("nodes")) req.fail("nodes", "a request with types gives each type's nodes (types[].nodes)");
  }
  if (req.has("nodes") && r.types.empty()) {
    const Json& ns = req.array("nodes");
    node_sum = 0;
    for (size_t k = 0; k < ns.size(); ++k) {
      if (!ns[k].is_number_integer() || ns[k].get<int64_t>() < 1 || ns[k].get<int64_t>() > 4096)
        req.fail("nodes", "element " + std::to_string(k) + " must be the GPUs of a node, an integer in [1, 4096], got " + ns[k].dump());
      r.nodes.push_back(ns[k].get<int>());
      node_sum += r.nodes.back();
    }
  }
  r.gpus = gpus_override >= 0 ? gpus_override
           : node_sum >= 0    ? static_cast<int>(req.integer("gpus", 0, kMaxGpus, node_sum))
                              : static_cast<int>(req.integer("gpus", 0, kMaxGpus));
  if (node_sum >= 0 && r.gpus != node_sum && !r.types.empty())
    req.fail("gpus", "the types hold " + std::to_string(node_sum) + " GPUs but gpus = " + std::to_string(r.gpus));
  if (node_sum >= 0 && r.gpus != node_sum)
    req.fail("nodes", "the nodes hold " + std::to_string(node_sum) + " GPUs but gpus = " + std::to_string(r.gpus));
  try {
    r.objective = parse_objective(req.text("policy", "restart-aware"));
  } catch (const DataError& e) {
    req.fail("policy", e.what());
  }
  r.hysteresis = req.number("hysteresis", 0, 0.999999, 0.15);
  r.pause_s = req.number("pause_s", 0, kMaxPause, 30);
  r.start_s = req.number("start_s", 0, kMaxPause, r.pause_s);
  r.margin_s = req.number("margin_s", 0, kMaxPause, 0);
  r.pause_per_gpu = req.number("pause_per_gpu", 0, 1e3, 0);
  r.gpu_memory_bytes = req.integer("gpu_memory_bytes", 0, kMaxBytes, 0);
  (void)req.array("jobs");  // the elements come one by one (parse_v2_job)
  return r;
}

void parse_v2_job(PlanRequest& r, const Json& job, size_t i, const std::string& where, std::set<std::string>& ids) {
  const Fields j(job, where + ": " + job_where(job, i));
  r.jobs.push_back(parse_job(j, r));
  if (!ids.insert(r.jobs.back().id).second) j.fail("id", "duplicate id");
}

ojson learn_json(const LearnSpec& l) {
  ojson x = {{"init_batch", l.init_batch}, {"max_batch", l.max_batch}, {"min_local", l.min_local},
             {"max_local", l.max_local}, {"max_gpus", l.max_gpus}, {"fixed_batch", l.fixed_batch},
             {"accumulate_on_one_gpu", l.accumulate_on_one_gpu}, {"explore", l.explore},
             {"fixed_share", l.fixed_share}, {"trust_half", l.trust_half}};
  ojson obs = ojson::array();
  for (const StepObservation& o : l.observed) {
    ojson e = {{"nodes", o.nodes}, {"gpus", o.gpus}, {"local_batch", o.local_batch}, {"step_s", o.step_s}, {"sync_s", o.sync_s}};
    if (!o.type.empty()) e["type"] = o.type;
    obs.push_back(e);
  }
  x["observed"] = obs;
  if (!l.types.empty()) {
    ojson ts = ojson::array();
    for (const TypeLearn& t : l.types) ts.push_back({{"name", t.name}, {"max_local", t.max_local}, {"speed", t.speed}});
    x["types"] = ts;
  }
  if (l.has_grad) x["grad"] = {{"sqr", l.grad_sqr}, {"var", l.grad_var}};
  return x;
}

ojson config_json(const Config& c, bool with_rate) {
  ojson o = {{"gpus", c.gpus}, {"batch", c.batch}, {"ranks_per_gpu", c.ranks_per_gpu}};
  if (with_rate) {
    o["samples_per_s"] = c.samples_per_s;
    o["efficiency"] = c.efficiency;
  }
  if (!c.type.empty()) o["type"] = c.type;
  return o;
}

const char* action(const PlanJob& j, const PlanChoice& c) {
  const bool running = j.current.gpus > 0;
  if (c.config.gpus == 0) return running ? "stop" : "wait";
  if (!running) return "start";
  if (c.config.type != j.current.type) return "move";  // to GPUs of another type
  const int now = j.current.gpus * j.current.ranks_per_gpu, next = c.config.gpus * c.config.ranks_per_gpu;
  if (c.option >= 0 ? is_current(j, c.config) : c.config.gpus == j.current.gpus) return "hold";
  return next > now ? "grow" : next < now ? "shrink" : "rebatch";
}

}  // namespace

PlanRequest parse_plan_request(const std::string& text, const std::string& where, int gpus_override) {
  // The jobs are read one at a time (json_fields::parse_each): a request of 10^5 jobs is never a
  // whole JSON tree in memory, only the PlanRequest it becomes.
  PlanRequest r;
  TableRequest t;
  bool v2 = false;
  std::set<std::string> ids;
  json_fields::parse_each(
      text, where, "jobs",
      [&](const Json& in) {
        const Fields top(in, where);
        v2 = top.integer("version", 1, 2, 1) == 2;
        if (v2) {
          r = parse_v2_header(in, where, gpus_override);
        } else {
          Json v1 = in;
          v1.erase("version");
          t = parse_v1_header(v1, where);
        }
      },
      [&](size_t i, const Json& job) {
        if (v2)
          parse_v2_job(r, job, i, where, ids);
        else
          parse_v1_job(t, job, i, where);
      });
  if (v2) return r;
  if (gpus_override >= 0) t.gpus = gpus_override;
  return from_v1(t);
}

std::string plan_request_json(const PlanRequest& r) {
  ojson jobs = ojson::array();
  for (const PlanJob& j : r.jobs) {
    ojson x = {{"id", j.id}, {"weight", j.weight}, {"may_wait", j.may_wait}, {"remaining", j.remaining}};
    if (j.own.gpus > 0) x["own"] = config_json(j.own, true);
    if (j.current.gpus > 0) {
      x["current"] = config_json(j.current, false);
      if (!j.current_nodes.empty()) x["current"]["nodes"] = j.current_nodes;
    }
    if (j.pause_s >= 0) x["pause_s"] = j.pause_s;
    if (j.start_s >= 0) x["start_s"] = j.start_s;
    if (j.rebatch_s >= 0) x["rebatch_s"] = j.rebatch_s;
    if (j.memory.given())
      x["memory"] = {{"model_bytes", j.memory.model_bytes},
                     {"optimizer_state_bytes", j.memory.optimizer_state_bytes},
                     {"zero", j.memory.zero_stage}};
    if (j.learned) {
      x["learn"] = learn_json(j.learn);
    } else {
      ojson opts = ojson::array();
      for (const Config& c : j.options) opts.push_back(config_json(c, true));
      x["options"] = opts;
    }
    jobs.push_back(x);
  }
  ojson out = {{"version", 2},         {"gpus", r.gpus},       {"policy", objective_name(r.objective)},
               {"hysteresis", r.hysteresis}, {"pause_s", r.pause_s}, {"start_s", r.start_s}};
  if (r.margin_s > 0) out["margin_s"] = r.margin_s;
  if (r.pause_per_gpu > 0) out["pause_per_gpu"] = r.pause_per_gpu;
  if (!r.nodes.empty()) out["nodes"] = r.nodes;
  if (r.gpu_memory_bytes > 0) out["gpu_memory_bytes"] = r.gpu_memory_bytes;
  if (!r.types.empty()) {
    ojson ts = ojson::array();
    for (const GpuType& t : r.types) {
      ojson x = {{"name", t.name}, {"gpus", t.gpus}};
      if (!t.nodes.empty()) x["nodes"] = t.nodes;
      if (t.gpu_memory_bytes > 0) x["gpu_memory_bytes"] = t.gpu_memory_bytes;
      ts.push_back(x);
    }
    out["types"] = ts;
  }
  out["jobs"] = jobs;
  return out.dump(2) + "\n";
}

namespace {

// The answer's text, as one document dumped with indent 2, handed to `put` piece by piece
// (allocation by allocation): the answer for 10^5 jobs is never a whole JSON tree in memory.
template <typename Put>
void answer_text(const PlanRequest& req, const Plan& plan, double solve_ms, int version, Put&& put) {
  ojson out;
  if (version == 2) {
    out["version"] = 2;
    out["policy"] = objective_name(req.objective);
    out["gpus"] = req.gpus;
    out["gpus_used"] = plan.gpus_used;
  }
  out["objective"] = plan.objective;
  out["allocations"] = nullptr;  // marks its place in the text
  out["solve_ms"] = solve_ms;
  const std::string frame = out.dump(2);
  const std::string marker = "\"allocations\": ";
  const size_t at = frame.find(marker) + marker.size();
  put(frame.substr(0, at));
  std::string piece;
  for (size_t i = 0; i < req.jobs.size(); ++i) {
    const PlanJob& j = req.jobs[i];
    const PlanChoice& c = plan.choices[i];
    ojson a;
    if (version == 1) {
      a = {{"id", j.id}, {"gpus", c.config.gpus}, {"batch", c.config.batch}, {"value", c.value}};
    } else {
      a = {{"id", j.id}, {"action", action(j, c)}, {"option", c.option}};
      const ojson cfg = config_json(c.config, true);
      for (const auto& [k, v] : cfg.items()) a[k] = v;
      a["value"] = c.value;
      a["option_values"] = i < plan.values.size() ? plan.values[i] : std::vector<double>{};
      if (i < plan.nodes.size()) a["nodes"] = plan.nodes[i];
    }
    piece = i == 0 ? "[\n    " : ",\n    ";
    for (const char ch : a.dump(2)) {  // one level deeper: the array is the value of a top-level key
      piece += ch;
      if (ch == '\n') piece += "    ";
    }
    put(piece);
  }
  put(req.jobs.empty() ? "[]" : "\n  ]");
  put(frame.substr(at + 4) + "\n");  // after "null"
}

}  // namespace

std::string plan_json(const PlanRequest& req, const Plan& plan, double solve_ms, int version) {
  std::string text;
  answer_text(req, plan, solve_ms, version, [&](const std::string& piece) { text += piece; });
  return text;
}

void print_plan_json(std::FILE* out, const PlanRequest& req, const Plan& plan, double solve_ms, int version) {
  answer_text(req, plan, solve_ms, version, [&](const std::string& piece) {
    if (std::fwrite(piece.data(), 1, piece.size(), out) != piece.size())
      throw Error(std::string("cannot write the plan: ") + std::strerror(errno));
  });
  if (std::fflush(out) != 0) throw Error(std::string("cannot write the plan: ") + std::strerror(errno));
}

std::string example_plan_request() {
  // Three jobs on 8 GPUs: a running job that could grow, a queued one, and a preemptible one that
  // runs; the numbers are those of a small CNN measured at a few sizes (samples/s).
  PlanRequest r;
  r.gpus = 8;
  r.objective = Objective::RestartAware;
  r.hysteresis = 0.15;
  r.pause_s = 30;
  r.start_s = 30;
  PlanJob a;
  a.id = "resnet-a";
  a.remaining = 2.4e6;
  a.own = Config{2, 256, 1, 1800, 1.0};
  a.current = Config{2, 256, 1, 0, 1.0};
  a.pause_s = 12.5;
  a.may_wait = false;
  a.options = {{1, 128, 1, 950, 1.0}, {2, 256, 1, 1800, 1.0}, {4, 512, 1, 3300, 0.93}, {8, 1024, 1, 5600, 0.81}};
  PlanJob b;
  b.id = "bert-b";
  b.weight = 2;
  b.remaining = 6.0e5;
  b.own = Config{4, 128, 1, 410, 1.0};
  b.options = {{1, 32, 1, 120, 1.0}, {2, 64, 1, 225, 1.0}, {4, 128, 1, 410, 1.0}};
  PlanJob c;
  c.id = "ncf-c";
  c.remaining = 3.0e6;
  c.own = Config{1, 4096, 1, 52000, 1.0};
  c.current = Config{1, 4096, 1, 0, 1.0};
  c.options = {{1, 4096, 1, 52000, 1.0}, {1, 4096, 2, 61000, 1.0}};
  r.jobs = {a, b, c};
  return plan_request_json(r);
}

}  // namespace edp::autoscale
