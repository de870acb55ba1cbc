// The live controller's planning rounds (controller.h): the policy's decision over the jobs that
// can be moved, and the acts that carry it out (start, resize, tell, preempt).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cmath>

#include "autoscale/controller.h"
#include "core/json_fields.h"
#include "edp/autoscale/simulator.h"
#include "edp/core/error.h"
#include "edp/elastic/elastic.h"

namespace edp::autoscale {

using json = nlohmann::json;

LivePolicy Controller::live_policy() const {
  LivePolicy p;
  p.name = cfg_.policy;
  // A scheduler may give fewer slots than the running jobs must keep (a drained node, another
  // user's job waiting): the plan then frees what it can, never fails for want of slots.
  p.slots = std::max({1, res_.slots(), must_hold()});
  p.gpu_slots = res_.gpu();
  p.max_ranks_per_slot = res_.gpu() ? cfg_.max_ranks_per_gpu : 1;
  p.slot_memory_bytes = cfg_.slot_memory_bytes;
  p.hysteresis = cfg_.hysteresis;
  p.default_pause_s = cfg_.pause_s >= 0 ? cfg_.pause_s : res_.gpu() ? 30.0 : kMeasuredCpuRescalePauseS;
  p.start_s = cfg_.start_s;
  p.warmup_steps = cfg_.warmup_steps;
  p.types = res_.types();  // one type or none: the slots are alike
  for (SlotType& t : p.types)
    if (const auto it = cfg_.gpu_speeds.find(t.name); it != cfg_.gpu_speeds.end()) {
      t.speed = it->second;
      t.given = true;
    }
  if (p.types.size() > 1) {
    // As p.slots above, per type: a type has at least what its running jobs must keep there.
    int sum = 0;
    for (SlotType& t : p.types) {
      int hold = 0;
      for (const ManagedJob& j : jobs_)
        if (j.running() && j.gpu_type == t.name) {
          const bool settled = j.samples_per_s > 0 && j.target_workers == 0 && !j.moving;
          if (!settled) hold += j.slots();
          else if (!j.spec.preemptible) hold += (j.spec.min_workers + j.ranks_per_slot - 1) / j.ranks_per_slot;
        }
      t.slots = std::max(t.slots, hold);
      sum += t.slots;
    }
    if (sum >= 1) p.slots = sum;
    else p.types.clear();  // nothing to be had of any type: as untyped (nothing starts)
  }
  return p;
}

std::vector<LiveJob> Controller::live_jobs(std::vector<ManagedJob*>& refs) {
  std::vector<LiveJob> live;
  for (ManagedJob& j : jobs_) {
    if (j.state != JobPhase::Queued && !j.running()) continue;
    if (j.cancel_requested || j.preempt_requested) continue;
    LiveJob l;
    l.id = j.id;
    l.spec = j.spec;
    l.running = j.running();
    l.workers = j.workers;
    l.ranks_per_slot = j.ranks_per_slot;
    l.batch = j.batch;
    l.type = j.gpu_type;
    // GPU jobs keep their GPUs while they run (rescale across GPUs: not yet, docs/autoscaler.md §8).
    l.settled = l.running && j.samples_per_s > 0 && j.target_workers == 0 && !j.moving && !res_.gpu();
    l.measured = j.measured;
    l.samples_done = j.samples_done;
    l.samples_total = j.samples_total;
    if (!j.pauses.empty()) {
      double s = 0;
      for (double p : j.pauses) s += p;
      l.pause_s = s / static_cast<double>(j.pauses.size());
    }
    live.push_back(std::move(l));
    refs.push_back(&j);
  }
  return live;
}

void Controller::replan(const std::string& trigger) {
  const double t0 = now_();
  std::vector<ManagedJob*> refs;
  const std::vector<LiveJob> live = live_jobs(refs);
  LivePlan plan;
  try {
    plan = plan_live(live, live_policy());
  } catch (const std::exception& e) {
    log(std::string("planning failed, nothing changed: ") + e.what());
    return;
  }
  json decisions = json::array();
  // Shrinks and stops first; then grows and starts while the slots they need are free (the others
  // wait for the next round, when the shrinks have landed).
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < live.size(); ++i) {
      const LiveChoice& c = plan.choices[i];
      const bool frees = c.action == Action::Shrink || c.action == Action::Stop || c.action == Action::Rebatch;
      if ((pass == 0) == frees) decisions.push_back(act(*refs[i], c));
    }
  json line = {{"t", t0}, {"trigger", trigger}, {"policy", cfg_.policy}, {"slots", res_.slots()},
               {"slots_used", plan.slots_used}, {"objective", plan.objective}, {"solve_ms", plan.solve_ms},
               {"decide_ms", (now_() - t0) * 1e3}, {"jobs", decisions}};
  const json hosts = res_.usage(jobs_);
  if (!hosts.empty()) line["hosts"] = hosts;
  if (decisions_) decisions_(line);
  last_plan_ = now_();
  changed_ = true;
}

json Controller::act(ManagedJob& j, const LiveChoice& c) {
  json d = {{"job", j.id}, {"action", action_name(c.action)}, {"reason", c.reason}, {"workers", c.workers},
            {"ranks_per_slot", c.ranks_per_slot}, {"batch", c.batch}, {"samples_per_s", c.samples_per_s},
            {"measured", c.measured}, {"remaining_s", c.remaining_s}};
  if (!c.type.empty()) d["type"] = c.type;
  auto defer = [&](const std::string& why) {
    d["action"] = "deferred";
    d["reason"] = std::string(action_name(c.action)) + " deferred" + why + ": " + c.reason;
  };
  // Starts and grows wait until the slots they need are free. Under a scheduler they are asked for
  // once the slots will be free after the rescales in flight: its queue orders them behind the
  // shrinks that free the slots.
  if (c.action == Action::Grow || c.action == Action::Start) {
    const int need = c.slots - (j.running() ? j.slots() : 0);
    if ((res_.queues() ? slots_committed() : slots_held()) + need > res_.slots()) {
      defer(" until " + std::to_string(need) + " slot(s) are free");
      return d;
    }
  }
  try {
    if (c.action == Action::Start) {
      start(j, c);
    } else if (c.action == Action::Grow || c.action == Action::Shrink || c.action == Action::Rebatch) {
      j.change_gain = j.samples_per_s > 0 ? c.samples_per_s / j.samples_per_s - 1 : 0;
      request(j, c.workers, c.batch);
      log("job " + j.id + ": " + action_name(c.action) + ": " + c.reason);
    } else if (c.action == Action::Stop) {
      preempt(j, c.reason);
    }
  } catch (const std::exception& e) {
    if (c.action != Action::Start) {
      defer(std::string(" (") + e.what() + ")");
      return d;
    }
    res_.release(j);
    j.state = JobPhase::Failed;
    j.error = std::string("could not be started: ") + e.what();
    j.end_t = now_();
    log("job " + j.id + " failed: " + j.error);
  }
  return d;
}

void Controller::start(ManagedJob& j, const LiveChoice& c) {
  j.ranks_per_slot = c.ranks_per_slot;
  j.gpu_type = c.type;  // several types: assign() gives slots of this one
  res_.assign(j, c.workers, jobs_);
  // The size it starts at, for the ranks to refuse nothing: the control file names it. The
  // program's flags give its first global batch; the job adopts this one at its first look.
  tell(j, c.workers, c.batch);
  j.workers = c.workers;
  j.batch = c.batch;
  runner_.start(j, res_.launch_args(j, c.ranks_per_slot, runner_.dir(j)));
  j.state = JobPhase::Running;
  j.target_workers = 0;
  j.target_batch = 0;
  j.awaiting = j.moving = false;
  j.samples_per_s = 0;
  j.measure_from = 0;  // a new process
  j.keeper_lost = false;
  j.events_seen = runner_.events(j).size();
  if (j.start_t == 0) j.start_t = now_();
  ++j.starts;
  changed_ = true;
}

void Controller::request(ManagedJob& j, int workers, int64_t batch) {
  if (workers != j.workers && res_.moves(j, workers)) {
    // A new allocation: the job commits a checkpoint and stops; finish() starts it again there.
    j.moving = true;
    j.target_workers = workers;
    j.target_batch = batch;
    j.target_t = now_();
    runner_.write_control(j, j.workers, j.batch, true);
    return;
  }
  if (workers != j.workers) res_.assign(j, workers, jobs_);  // throws (nothing asked) when it does not fit
  j.target_workers = workers;
  j.target_batch = batch;
  j.target_t = now_();
  j.awaiting = res_.grant(j, nullptr) != Grant::Ready;  // a scheduler's queue: told once granted
  if (!j.awaiting) tell(j, workers, batch);
}

void Controller::tell(ManagedJob& j, int workers, int64_t batch) {
  if (const auto hs = res_.hostfile_of(j); !hs.empty()) runner_.write_hostfile(j, hs);
  runner_.write_control(j, workers, batch, false);
}

// A job stopped at a checkpoint for a rescale by a new allocation starts again at its target.
void Controller::start_moved(ManagedJob& j) {
  LiveChoice c;
  c.workers = j.target_workers;
  c.batch = j.target_batch;
  c.ranks_per_slot = j.ranks_per_slot;
  c.type = j.gpu_type;
  c.slots = (c.workers + c.ranks_per_slot - 1) / c.ranks_per_slot;
  const int from = j.workers;
  res_.release(j);
  j.moving = false;
  j.state = JobPhase::Queued;  // started again: start() takes it as a job to start
  changed_ = true;
  try {
    start(j, c);
    ++j.rescales;
    log("job " + j.id + ": stopped at a checkpoint at " + std::to_string(from) + " worker(s) and started again at " +
        std::to_string(c.workers) + " in a new allocation");
    note("moved " + j.id);
  } catch (const std::exception& e) {
    j.state = JobPhase::Failed;
    j.error = std::string("could not be started again after its rescale: ") + e.what();
    j.end_t = now_();
    log("job " + j.id + " failed: " + j.error);
    note("failed " + j.id);
  }
}

// The slots the plan must give the running jobs: those that cannot move now (not measured, or a
// rescale in flight) where they are (plan_live holds them there), the others their minimum unless
// they may be preempted.
int Controller::must_hold() const {
  int n = 0;
  for (const ManagedJob& j : jobs_) {
    if (!j.running()) continue;
    const bool settled = j.samples_per_s > 0 && j.target_workers == 0 && !j.moving;
    if (!settled) n += j.slots();
    else if (!j.spec.preemptible) n += (j.spec.min_workers + j.ranks_per_slot - 1) / j.ranks_per_slot;
  }
  return n;
}

// Asks the job to commit a checkpoint and stop (exit 78) at its next look at the control file;
// check_timeouts() sends SIGTERM if it has not stopped within the grace period.
void Controller::preempt(ManagedJob& j, const std::string& reason) {
  j.preempt_requested = true;
  j.preempt_t = now_();
  j.preempt_signalled = false;
  j.target_workers = 0;
  j.target_batch = 0;
  runner_.write_control(j, j.workers, j.batch, true);
  log("job " + j.id + ": preempted (asked to checkpoint and stop): " + reason);
}

}  // namespace edp::autoscale
