// The live controller (controller.h): the state transitions driven by what the jobs report. Its
// planning rounds and the acts that carry them out are controller_plan.cpp, its job table
// job_table.cpp, its resource backends resources.cpp and slurm.cpp.
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

// ---- the controller ------------------------------------------------------------------------------

Controller::Controller(ControllerConfig cfg, Resources& res, JobRunner& runner, Clock clock, Logger log,
                       DecisionLog decisions)
    : cfg_(std::move(cfg)), res_(res), runner_(runner), now_(std::move(clock)), log_(std::move(log)),
      decisions_(std::move(decisions)) {}

int Controller::slots_committed() const {
  int n = 0;
  for (const ManagedJob& j : jobs_)
    if (j.running() && !j.preempt_requested)  // a preempted job gives all back
      n += ((j.target_workers > 0 ? j.target_workers : j.workers) + j.ranks_per_slot - 1) / j.ranks_per_slot;
  return n;
}

int Controller::slots_held() const {
  int held = 0;
  for (const ManagedJob& j : jobs_)
    if (j.running()) held += j.slots_held();
  return held;
}

bool Controller::idle() const {
  return !jobs_.empty() && std::all_of(jobs_.begin(), jobs_.end(), [](const ManagedJob& j) { return finished(j.state); });
}

bool Controller::has(const std::string& id) const {
  return std::any_of(jobs_.begin(), jobs_.end(), [&](const ManagedJob& j) { return j.id == id; });
}

int Controller::adopt(std::vector<ManagedJob> jobs) {
  jobs_ = std::move(jobs);
  res_.refresh(jobs_);  // a scheduler's view of the jobs before they are judged
  int adopted = 0;
  for (ManagedJob& j : jobs_) {
    if (j.running()) {
      ++adopted;
      observe(j);  // ended while no controller ran? its exit record, its keeper, its edprun tell
    } else if (j.state == JobPhase::Failed && j.exit_code == -1) {
      // Recorded as lost by an earlier controller: if the job's own status file says it finished,
      // it did (its exit record could not be written, e.g. on a full disk).
      const auto st = runner_.status(j, true);
      if (st && st->state == "done") {
        j.state = JobPhase::Done;
        j.exit_code = 0;
        j.error = "recovered from its status file (no exit record)";
        j.metrics = runner_.final_metrics(j);
        log("job " + j.id + " done: " + j.error);
        changed_ = true;
      }
    }
  }
  res_.check_adopted(jobs_);
  if (adopted) note("controller restarted");
  else note("controller started");
  return adopted;
}

ManagedJob& Controller::submit(const std::string& id, const JobSpec& spec) {
  ManagedJob j;
  j.id = id;
  j.spec = spec;
  j.submit_t = now_();
  const int cap = res_.limit() * (res_.gpu() ? cfg_.max_ranks_per_gpu : 1);
  // What the job needs in a slot's memory: the fewest workers it fits on (a sharded job's state
  // spreads over its ranks).
  const int fit = min_gpus_for_memory(spec.memory, cfg_.slot_memory_bytes, std::min(cap, spec.max_workers));
  std::string raised;
  if (fit == 0) {
    j.state = JobPhase::Failed;
    j.error = "it does not fit in slots of " + std::to_string(cfg_.slot_memory_bytes >> 20) + " MiB at up to " +
              std::to_string(std::min(cap, spec.max_workers)) + " worker(s): " + describe(spec.memory) +
              (spec.memory.zero_stage >= 1 ? "" : "; with zero 1 the optimizer state would be spread over the workers");
    j.end_t = j.submit_t;
  } else if (fit > spec.min_workers) {
    raised = ", min_workers " + std::to_string(spec.min_workers) + " -> " + std::to_string(fit) + " (" +
             describe(spec.memory) + " fits slots of " + std::to_string(cfg_.slot_memory_bytes >> 20) + " MiB from " +
             std::to_string(fit) + " worker(s))";
    j.spec.min_workers = fit;
    j.spec.workers = std::max(j.spec.workers, fit);
    const int64_t w = j.spec.workers;
    int64_t b = (j.spec.batch + w - 1) / w * w;  // the start batch, split evenly over the workers
    if (b > j.spec.max_batch) b = j.spec.batch / w * w;
    if (b < j.spec.min_batch || b > j.spec.max_batch || b < w) {
      j.state = JobPhase::Failed;
      j.error = "it fits in the slots' memory from " + std::to_string(w) + " worker(s) (" + describe(spec.memory) +
                "), but no global batch in [" + std::to_string(j.spec.min_batch) + ", " + std::to_string(j.spec.max_batch) +
                "] splits evenly over them";
      j.end_t = j.submit_t;
    }
    j.spec.batch = b;
  }
  if (j.state != JobPhase::Failed && j.spec.min_workers > cap) {
    j.state = JobPhase::Failed;
    j.error = "min_workers " + std::to_string(j.spec.min_workers) + " exceeds the cluster (" + std::to_string(res_.limit()) +
              " slot(s))";
    j.end_t = j.submit_t;
  }
  jobs_.push_back(std::move(j));
  ManagedJob& k = jobs_.back();
  log("job " + id + " (" + spec.name + ") " + (k.state == JobPhase::Failed ? "refused: " + k.error : "queued" + raised));
  note("submit " + id);
  changed_ = true;
  return k;
}

void Controller::cancel(const std::string& id) {
  for (ManagedJob& j : jobs_) {
    if (j.id != id || finished(j.state)) continue;
    j.cancel_requested = true;
    if (j.state == JobPhase::Queued) {
      j.state = JobPhase::Cancelled;
      j.end_t = now_();
      log("job " + id + " cancelled while queued");
    } else {
      log("job " + id + ": cancelling (" + (j.sched.id.empty() ? std::string("SIGTERM to edprun") : "scancel of Slurm job " + j.sched.id) + ")");
      runner_.signal(j, SIGTERM);
    }
    note("cancel " + id);
    changed_ = true;
  }
}

bool Controller::tick() {
  const int slots = res_.slots();
  if (res_.refresh(jobs_)) changed_ = true;
  if (res_.slots() != slots) note("slots " + std::to_string(slots) + " -> " + std::to_string(res_.slots()));
  for (ManagedJob& j : jobs_)
    if (j.running()) observe(j);
  if (dirty_ || now_() - last_plan_ >= cfg_.replan_s) {
    replan(dirty_ ? trigger_ : "periodic");
    dirty_ = false;
    trigger_.clear();
  }
  const bool c = changed_;
  changed_ = false;
  return c;
}

// What the job's files say since the last look: measured step times, progress, rescales, its end.
void Controller::observe(ManagedJob& j) {
  if (const auto st = runner_.status(j)) take_status(j, *st);
  take_events(j);
  follow_grant(j);
  move_off_leaving(j);
  check_timeouts(j);
  check_end(j);
}

void Controller::take_status(ManagedJob& j, const elastic::JobStatus& st) {
  j.samples_done = st.samples_done;
  j.samples_total = st.samples_total;
  const int enough = live_policy().measured_steps();  // past its warm-up
  for (const elastic::ConfigMeasure& c : st.configs) {
    const int k = j.ranks_per_slot;
    // Taken on the type of the slots it runs on: the same size on another type is another row.
    auto it = std::find_if(j.measured.begin(), j.measured.end(), [&](const Measured& m) {
      return m.workers == c.workers && m.batch == c.global_batch && m.ranks_per_slot == k && m.type == j.gpu_type;
    });
    const bool fresh = it == j.measured.end();
    if (fresh) {
      j.measured.push_back({c.workers, k, c.global_batch, 0, 0, 0, j.gpu_type});
      it = j.measured.end() - 1;
    }
    // Where the job runs now, a reading counts once the warm-up of its present stay is diluted:
    // measured_steps() steps counted since it came (the median then no longer is a warm-up step).
    const bool here = c.workers == j.workers && c.global_batch == j.batch;
    if (here && c.steps < j.measure_from + enough) continue;
    double step_s = c.step_s;
    bool judged = false;
    if (here && j.hold_until > 0) {
      // After a rescale of the controller's: only the steps after the hold count, the newest
      // kRecentSteps of them (a slow start at the new size is not what the job runs at).
      if (now_() < j.hold_until) continue;
      if (j.judge_from < 0) j.judge_from = c.steps;
      if (c.steps < j.judge_from + elastic::kRecentSteps) continue;
      step_s = c.recent_step_s > 0 ? c.recent_step_s : c.step_s;
      judged = true;
    }
    // This process's window replaces what an earlier process measured once it has as many steps.
    if (c.steps >= it->steps || fresh || judged) {
      it->steps = c.steps;
      it->step_s = step_s;
      it->comm_s = c.comm_s;
    }
    if (here && j.samples_per_s == 0) {
      note("measured " + j.id + " at " + std::to_string(c.workers) + "x" + std::to_string(c.global_batch));
      j.samples_per_s = static_cast<double>(c.global_batch) / step_s;
    } else if (here) {
      j.samples_per_s = static_cast<double>(c.global_batch) / step_s;
    }
  }
}

// The steps the job's window holds at its current configuration (it just came there).
static int64_t steps_at(const ManagedJob& j) {
  for (const Measured& m : j.measured)
    if (m.workers == j.workers && m.batch == j.batch && m.ranks_per_slot == j.ranks_per_slot) return m.steps;
  return 0;
}

void Controller::take_events(ManagedJob& j) {
  const std::vector<elastic::MembershipEvent>& events = runner_.events(j);
  for (size_t i = j.events_seen; i < events.size(); ++i) {
    const elastic::MembershipEvent& e = events[i];
    if (e.event == "rescale") {
      ++j.rescales;
      // What the change cost the training: a grow in the background trains on while its new ranks
      // start, so only the visible part counts (events without it: the whole pause).
      const double cost = e.visible_s >= 0 ? e.visible_s : e.pause_s;
      j.pauses.push_back(cost);
      log("job " + j.id + ": rescaled " + e.mode + " " + std::to_string(e.from_workers) + " -> " +
          std::to_string(e.workers) + " worker(s), global batch " + std::to_string(e.global_batch) + ", pause " +
          std::to_string(e.pause_s) + " s (" + std::to_string(cost) + " s lost to training)");
    }
    if (e.workers > 0) j.workers = e.workers;
    if (e.global_batch > 0) j.batch = e.global_batch;
    if (e.event == "start" || e.event == "rescale") {  // a new stay: a change of the controller's is held below
      j.hold_until = 0;
      j.judge_from = -1;
    }
    if (e.event == "start") j.measure_from = 0;  // a new process (a restart after a crash)
    if (e.event == "rescale") {  // a new stay: a restart's process counts from 0, an in-place one goes on
      j.measure_from = e.mode == "restart" ? 0 : steps_at(j);
      j.samples_per_s = 0;
    }
    if (j.target_workers > 0 && j.workers == j.target_workers && j.batch == j.target_batch) {
      j.target_workers = 0;
      j.target_batch = 0;
      res_.landed(j);
      j.samples_per_s = 0;
      hold(j, j.pauses.empty() ? cfg_.pause_s : j.pauses.back());
      note("rescaled " + j.id);
    }
    changed_ = true;
  }
  j.events_seen = events.size();
  // Crash restarts edprun made: starts beyond the controller's own and those of rescales by restart.
  int n_start = 0, n_restart_rescale = 0;
  for (const auto& e : events) {
    n_start += e.event == "start";
    n_restart_rescale += e.event == "rescale" && e.mode == "restart";
  }
  j.restarts = std::max(0, n_start - j.starts - n_restart_rescale);
}

static std::string fmt_seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

// A rescale of the controller's has landed: the job stays at its new size until the change could
// have paid for itself — its pause and that of undoing it, at the speedup predicted when it was
// asked for — and for at least settle_s; then its speed there counts from the newest steps only.
void Controller::hold(ManagedJob& j, double cost) {
  const double gain = std::max(0.01, j.change_gain);
  const double pays_off_s = 2 * std::max(0.0, cost) / gain;
  const double hold_s = std::max(cfg_.settle_s, pays_off_s);
  j.hold_until = now_() + hold_s;
  j.judge_from = -1;
  log("job " + j.id + ": keeps " + std::to_string(j.workers) + " worker(s) for " + fmt_seconds(hold_s) +
      " before its speed there is judged (the change pays for its pause and an undo's after " + fmt_seconds(pays_off_s) +
      " at the predicted speedup of " + std::to_string(static_cast<int>(std::lround(gain * 100))) + " %; settling time " +
      fmt_seconds(cfg_.settle_s) + ")");
}

void Controller::check_timeouts(ManagedJob& j) {
  if (j.target_workers > 0 && now_() - j.target_t > cfg_.rescale_timeout_s) {
    give_up_rescale(j, "did not happen within " + std::to_string(cfg_.rescale_timeout_s) + " s (see its log)");
  }
  if (j.preempt_requested && !j.preempt_signalled && now_() - j.preempt_t > cfg_.preempt_grace_s) {
    log("job " + j.id + ": did not stop within " + std::to_string(static_cast<int>(cfg_.preempt_grace_s)) +
        " s of the stop request; " + (j.sched.id.empty() ? std::string("SIGTERM to edprun") : "scancel of Slurm job " + j.sched.id) +
        " (it loses the steps since its last checkpoint)");
    runner_.signal(j, SIGTERM);
    j.preempt_signalled = true;
    changed_ = true;
  }
}

// A rescale that will not land: the job stays where it runs (a later restart too), its control
// file says so again, and what was asked of a scheduler is withdrawn.
void Controller::give_up_rescale(ManagedJob& j, const std::string& why) {
  log("job " + j.id + ": the rescale to " + std::to_string(j.target_workers) + " worker(s) " + why + "; it stays at " +
      std::to_string(j.workers));
  j.target_workers = 0;
  j.target_batch = 0;
  j.awaiting = j.moving = false;
  res_.give_up_rescale(j);
  tell(j, j.workers, j.batch);
  changed_ = true;
}

// A grow whose resources wait in the scheduler's queue: the job is told once they are its own.
void Controller::follow_grant(ManagedJob& j) {
  if (!j.awaiting) return;
  std::string why;
  const Grant g = res_.grant(j, &why);
  if (g == Grant::Waiting) return;
  if (g == Grant::Refused) return give_up_rescale(j, "cannot be granted: " + why);
  j.awaiting = false;
  j.target_t = now_();  // the rescale itself starts now
  tell(j, j.target_workers, j.target_batch);
  log("job " + j.id + ": the scheduler granted the grow to " + std::to_string(j.target_workers) + " worker(s)");
  changed_ = true;
}

// The largest global batch up to `batch` that `workers` workers can run within the spec (0: none).
static int64_t batch_for(const JobSpec& s, int workers, int64_t batch) {
  if (s.max_worker_batch > 0) batch = std::min(batch, s.max_worker_batch * workers);
  const int64_t b = batch / workers * workers;
  if (b < s.min_batch || b < workers || (s.max_worker_batch > 0 && b / workers > s.max_worker_batch)) return 0;
  return b;
}

// Slots the cluster takes away from a running job (a node drained under it): the job moves off
// them at the size the rest holds, as a job on a hostfile restarts without a lost host; one that
// cannot run without them keeps them until it ends (the drain waits for it).
void Controller::move_off_leaving(ManagedJob& j) {
  const int lost = res_.leaving(j);
  if (lost <= 0 || j.target_workers > 0 || j.moving || j.preempt_requested || j.cancel_requested || !j.running()) return;
  const int w = j.workers - lost * j.ranks_per_slot;
  const int64_t b = w >= j.spec.min_workers && w > 0 ? batch_for(j.spec, w, j.batch) : 0;
  if (b == 0) {
    if (!kept_leaving_[j.id])
      log("job " + j.id + ": " + std::to_string(lost) + " of its slot(s) are being taken away (drained), and it cannot run "
          "without them (min_workers " + std::to_string(j.spec.min_workers) + "); it keeps them until it ends");
    kept_leaving_[j.id] = true;
    return;
  }
  log("job " + j.id + ": " + std::to_string(lost) + " of its slot(s) are being taken away (drained); moving off them to " +
      std::to_string(w) + " worker(s), global batch " + std::to_string(b) + ", as off a lost host");
  try {
    request(j, w, b);
  } catch (const std::exception& e) {
    log("job " + j.id + ": cannot move off its drained slot(s): " + e.what());
  }
  note("drained slot(s) of " + j.id);
  changed_ = true;
}

// Its end: the keeper's exit record; else, with the keeper gone, the job's own processes decide:
// while its edprun runs the job runs (and keeps its slots); once edprun is gone too, its status
// file tells whether it finished.
void Controller::check_end(ManagedJob& j) {
  if (const auto ex = runner_.exit_record(j)) return finish(j, *ex);
  if (runner_.keeper_alive(j)) return;
  if (const auto ex = runner_.exit_record(j)) return finish(j, *ex);  // written just before the keeper ended
  if (runner_.edprun_alive(j)) {
    if (!j.keeper_lost) {
      j.keeper_lost = true;
      log("job " + j.id + ": its keeper process is gone, its edprun still runs: followed through edprun, slots kept");
      changed_ = true;
    }
    return;
  }
  ExitRecord ex;
  ex.recovered = true;
  const auto st = runner_.status(j, true);
  if (st && st->state == "done") {
    ex.code = 0;
    ex.note = "recovered from its status file (no exit record)";
  } else if (st && st->state == "stopped") {
    ex.code = elastic::kStopExitCode;
    ex.note = "recovered from its status file: stopped (no exit record)";
  } else {
    ex.code = -1;
    ex.note = "its keeper process ended without recording an exit status and its edprun is gone" +
              (st ? "; its status file says " + st->state + " at step " + std::to_string(st->step) : std::string());
  }
  finish(j, ex);
}

void Controller::finish(ManagedJob& j, const ExitRecord& ex) {
  const int code = ex.code;
  // A rescale by a new allocation: the job stopped at a checkpoint as asked; it starts again.
  if (j.moving && code == elastic::kStopExitCode && !j.cancel_requested && !ex.cancelled) return start_moved(j);
  j.moving = j.awaiting = false;
  j.exit_code = code;
  res_.release(j);
  j.target_workers = 0;
  j.target_batch = 0;
  j.keeper_lost = false;
  changed_ = true;
  const bool signalled = j.preempt_signalled;
  j.preempt_signalled = false;
  // A preempted job that ended for another reason (it finished, or failed, before it saw the
  // stop) ends as that.
  if (j.preempt_requested && !j.cancel_requested && (code == elastic::kStopExitCode || (signalled && code != 0))) {
    j.preempt_requested = false;
    j.state = JobPhase::Queued;
    j.samples_per_s = 0;
    ++j.preemptions;
    log("job " + j.id + " preempted: " +
        (code == elastic::kStopExitCode ? "it committed a checkpoint and stopped; queued again (it resumes there)"
                                        : "stopped by SIGTERM; queued again (it resumes from its last checkpoint)"));
    note("preempted " + j.id);
    return;
  }
  j.preempt_requested = false;
  j.end_t = now_();
  if (j.cancel_requested || ex.cancelled) {
    j.state = JobPhase::Cancelled;
    if (!j.cancel_requested) j.error = ex.note;
  } else if (code == 0) {
    j.state = JobPhase::Done;
    if (const auto st = runner_.status(j, true)) j.samples_done = st->samples_done;
    if (ex.recovered) j.error = ex.note;
  } else {
    j.state = JobPhase::Failed;
    j.error = ex.recovered ? ex.note : "exit code " + std::to_string(code) + ": " + runner_.last_error(j);
  }
  j.metrics = runner_.final_metrics(j);
  log("job " + j.id + " " + phase_name(j.state) + (j.state != JobPhase::Done && !j.error.empty() ? " (" + j.error + ")" : "") + " after " +
      std::to_string(static_cast<int>(j.end_t - j.start_t)) + " s, " + std::to_string(j.rescales) + " rescale(s)" +
      (ex.recovered && j.state == JobPhase::Done ? " (" + ex.note + ")" : ""));
  note(std::string(phase_name(j.state)) + " " + j.id);
}

}  // namespace edp::autoscale
