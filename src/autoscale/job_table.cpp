// The live controller's job table (controller.h): the jobs' phases, and jobs.json written and read
// back.
#include "autoscale/controller.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cmath>

#include "core/json_fields.h"
#include "edp/autoscale/simulator.h"
#include "edp/core/error.h"
#include "edp/elastic/elastic.h"

namespace edp::autoscale {

using json = nlohmann::json;

// ---- states and the table -------------------------------------------------------------------------

namespace {
constexpr const char* kPhaseNames[] = {"queued", "running", "done", "failed", "cancelled"};  // JobPhase's order
}  // namespace

const char* phase_name(JobPhase s) { return kPhaseNames[static_cast<int>(s)]; }

JobPhase parse_phase(const std::string& s) {
  for (int i = 0; i < 5; ++i)
    if (s == kPhaseNames[i]) return static_cast<JobPhase>(i);
  throw DataError("unknown job state '" + s + "' (queued, running, done, failed, cancelled)");
}

json job_json(const ManagedJob& j) {
  json ms = json::array();
  for (const Measured& m : j.measured) {
    ms.push_back({{"workers", m.workers}, {"ranks_per_slot", m.ranks_per_slot}, {"batch", m.batch},
                  {"steps", m.steps}, {"step_s", m.step_s}, {"comm_s", m.comm_s}});
    if (!m.type.empty()) ms.back()["type"] = m.type;
  }
  json x = {{"id", j.id}, {"spec", json::parse(job_spec_json(j.spec))}, {"state", phase_name(j.state)},
            {"submit_t", j.submit_t}, {"start_t", j.start_t}, {"end_t", j.end_t},
            {"workers", j.workers}, {"ranks_per_slot", j.ranks_per_slot}, {"batch", j.batch},
            {"gpus", j.gpus}, {"hosts", j.hosts}, {"next_hosts", j.next_hosts},
            {"target_workers", j.target_workers}, {"target_batch", j.target_batch}, {"target_t", j.target_t},
            {"awaiting", j.awaiting}, {"moving", j.moving},
            {"keeper_pid", j.keeper_pid}, {"keeper_start", j.keeper_start}, {"keeper_lost", j.keeper_lost},
            {"starts", j.starts}, {"rescales", j.rescales}, {"restarts", j.restarts}, {"events_seen", j.events_seen},
            {"samples_done", j.samples_done}, {"samples_total", j.samples_total}, {"samples_per_s", j.samples_per_s},
            {"measure_from", j.measure_from}, {"change_gain", j.change_gain}, {"hold_until", j.hold_until},
            {"judge_from", j.judge_from},
            {"measured", ms}, {"pauses", j.pauses}, {"cancel_requested", j.cancel_requested},
            {"preempt_requested", j.preempt_requested}, {"preempt_t", j.preempt_t},
            {"preempt_signalled", j.preempt_signalled}, {"preemptions", j.preemptions},
            {"exit_code", j.exit_code}, {"error", j.error}};
  if (j.metrics.have) {
    json m = json::object();
    if (j.metrics.test_acc >= 0) m["test_acc"] = j.metrics.test_acc;
    if (j.metrics.final_loss >= 0) m["final_loss"] = j.metrics.final_loss;
    if (j.metrics.samples_per_s >= 0) m["samples_per_s"] = j.metrics.samples_per_s;
    x["metrics"] = m;
  }
  auto sched = [](const SchedJob& s) {
    return json{{"id", s.id}, {"state", s.state}, {"reason", s.reason}, {"resized", s.resized}};
  };
  if (!j.gpu_type.empty()) x["gpu_type"] = j.gpu_type;
  if (!j.sched.id.empty()) x["sched"] = sched(j.sched);
  if (!j.sched_grow.id.empty() || !j.sched_grow.state.empty()) x["sched_grow"] = sched(j.sched_grow);
  return x;
}

ManagedJob job_from_json(const json& x) {
  ManagedJob j;
  const json_fields::Fields f(x, "job " + (x.is_object() && x.contains("id") ? x.at("id").dump() : std::string("?")));
  constexpr int64_t kBig = int64_t{1} << 62;
  j.id = f.text("id");
  j.spec = parse_job_spec(f.object("spec").json().dump(), "job " + j.id);
  j.state = parse_phase(f.text("state"));
  auto count = [&](const char* k) { return f.integer(k, 0, kBig, 0); };
  auto seconds = [&](const char* k) { return f.number(k, 0, 1e18, 0.0); };
  j.submit_t = seconds("submit_t");
  j.start_t = seconds("start_t");
  j.end_t = seconds("end_t");
  j.target_t = seconds("target_t");
  j.preempt_t = seconds("preempt_t");
  j.samples_per_s = seconds("samples_per_s");
  j.workers = static_cast<int>(f.integer("workers", 0, 1 << 20, 0));
  j.ranks_per_slot = static_cast<int>(f.integer("ranks_per_slot", 1, 64, 1));
  j.target_workers = static_cast<int>(f.integer("target_workers", 0, 1 << 20, 0));
  j.batch = count("batch");
  j.target_batch = count("target_batch");
  j.keeper_pid = static_cast<long>(count("keeper_pid"));
  j.keeper_start = static_cast<unsigned long long>(count("keeper_start"));
  j.starts = static_cast<int>(count("starts"));
  j.rescales = static_cast<int>(count("rescales"));
  j.restarts = static_cast<int>(count("restarts"));
  j.preemptions = static_cast<int>(count("preemptions"));
  j.events_seen = static_cast<size_t>(count("events_seen"));
  j.samples_done = count("samples_done");
  j.samples_total = count("samples_total");
  j.measure_from = count("measure_from");
  j.change_gain = f.number("change_gain", -1, 1e9, 0.0);
  j.hold_until = seconds("hold_until");
  j.judge_from = f.integer("judge_from", -1, kBig, -1);
  j.exit_code = static_cast<int>(f.integer("exit_code", -1000, 1000, 0));
  j.keeper_lost = f.boolean("keeper_lost", false);
  j.cancel_requested = f.boolean("cancel_requested", false);
  j.preempt_requested = f.boolean("preempt_requested", false);
  j.preempt_signalled = f.boolean("preempt_signalled", false);
  j.awaiting = f.boolean("awaiting", false);
  j.moving = f.boolean("moving", false);
  using Sched = std::pair<const char*, SchedJob*>;
  for (const auto& [key, s] : {Sched{"sched", &j.sched}, Sched{"sched_grow", &j.sched_grow}})
    if (const auto o = f.object_if(key))
      *s = SchedJob{o->text("id", ""), o->text("state", ""), o->text("reason", ""),
                    static_cast<int>(o->integer("resized", 0, 1 << 20, 0))};
  j.error = f.text("error", "");
  j.gpu_type = f.text("gpu_type", "");
  try {  // lists: nlohmann's own conversions (their errors name the type)
    j.gpus = x.value("gpus", std::vector<int>{});
    j.hosts = x.value("hosts", std::vector<HostShare>{});
    j.next_hosts = x.value("next_hosts", std::vector<HostShare>{});
    j.pauses = x.value("pauses", std::vector<double>{});
  } catch (const json::exception& e) {
    throw DataError(f.where() + ": " + e.what());
  }
  if (f.has("measured"))
    for (size_t i = 0; i < f.array("measured").size(); ++i) {
      const json_fields::Fields m = f.element("measured", i);
      j.measured.push_back({static_cast<int>(m.integer("workers", 0, 1 << 20, 0)),
                            static_cast<int>(m.integer("ranks_per_slot", 1, 64, 1)), m.integer("batch", 0, kBig, 0),
                            m.integer("steps", 0, kBig, 0), m.number("step_s", 0, 1e9, 0.0), m.number("comm_s", 0, 1e9, 0.0),
                            m.text("type", "")});
    }
  if (const auto m = f.object_if("metrics"))
    j.metrics = FinalMetrics{true, m->number("test_acc", -1, 1e18, -1.0), m->number("final_loss", -1, 1e18, -1.0),
                             m->number("samples_per_s", -1, 1e18, -1.0)};
  return j;
}

std::string table_json(const std::vector<ManagedJob>& jobs) {
  json arr = json::array();
  for (const ManagedJob& j : jobs) arr.push_back(job_json(j));
  return json{{"version", 1}, {"jobs", arr}}.dump(1) + "\n";
}

std::vector<ManagedJob> parse_table(const std::string& text, const std::string& where) {
  json t;
  try {
    t = json_fields::parse(text, where);
  } catch (const DataError&) {
    t = nullptr;
  }
  if (!t.is_object() || !t.contains("jobs") || !t.at("jobs").is_array())
    throw DataError(where + " is damaged (not the job table edp-autoscale writes); move it away to start afresh");
  std::vector<ManagedJob> jobs;
  for (const auto& x : t.at("jobs")) jobs.push_back(job_from_json(x));
  return jobs;
}

}  // namespace edp::autoscale
