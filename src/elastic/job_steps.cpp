// elastic::Job's epochs, events, divergence guard and step timing (job_impl.h).
#include "elastic/job_impl.h"

namespace edp::elastic {

void Job::Impl::restart_progress() {
  if (!in_epoch || !progress) return;
  progress_base = 0;
  progress_samples = 0;
  progress = std::make_unique<train::Progress>(epoch_label() + " at " + std::to_string(size()) + " worker(s)",
                                               loader->steps_remaining(), root() && o.progress);
}

std::string Job::Impl::epoch_label() const {
  return "epoch " + std::to_string(job.epoch_ + 1) + "/" + std::to_string(o.epochs);
}

void Job::Impl::finish_epoch() {
  if (o.checkpoint_every == 0) commit(nullptr, 0);
  const double secs = epoch_sw.seconds();
  world->allreduce(sums, sums, 2, DType::F64, comm::ReduceOp::Sum);
  job.summary_ = {job.epoch_, sums[0] / std::max(1.0, sums[1]), static_cast<int64_t>(sums[1]), secs};
  if (progress) progress->finish();
  progress.reset();
  in_epoch = false;
  epoch_finished = true;
}

MembershipEvent Job::Impl::event_now(const char* kind) const {
  MembershipEvent ev;
  ev.event = kind;
  ev.workers = size();
  ev.global_batch = job.global_batch_;
  ev.step = job.step_;
  ev.t = wall_time();
  ev.samples = samples_done();
  return ev;
}

int64_t Job::Impl::samples_done() const {
  const int64_t n = static_cast<int64_t>(train->size());
  return loader ? job.epoch_ * n + loader->position() : -1;
}

void Job::Impl::guard_check() {
  const std::array<double, 4> mine = guard.local();
  double v[2] = {mine[0], mine[1]};
  world->allreduce(v, v, 2, DType::F64, comm::ReduceOp::Sum);
  if (v[1] > 0)
    log::debug(o.name, ": divergence guard: mean loss ", v[0] / v[1], " over steps ", job.step_ - kGuardWindow + 1, "-",
               job.step_, ", running level ", guard.level());
  switch (guard.end_window(job.step_, v[0], v[1])) {
    case DivergenceGuard::Window::kDoubtBegins:
      if (ckpt) ckpt->hold(guard.good_step());  // rotation must not remove the last good state
      break;
    case DivergenceGuard::Window::kGood:
      if (ckpt) ckpt->hold(-1);
      break;
    case DivergenceGuard::Window::kDiverged:
      guard_diverged();
      break;
    default:
      break;
  }
}

void Job::Impl::guard_partial(const std::string& when) {
  if (o.divergence_factor <= 0 || !world) return;
  std::array<double, 4> v = guard.local();
  world->allreduce(v.data(), v.data(), 4, DType::F64, comm::ReduceOp::Sum);
  const std::string what = guard.judge_partial(job.step_, v, when);
  if (!what.empty()) diverged(what, guard_advice(), true);
}

void Job::Impl::guard_end() {
  if (guard_ended) return;
  guard_ended = true;
  guard_partial("the end of the training");
}

void Job::Impl::diverged(const std::string& what, const std::string& advice, bool collective) {
  std::string where;
  if (ckpt && root()) {
    const std::vector<std::string> moved = ckpt->set_aside_after(guard.good_step(), "diverged");
    const std::vector<std::string> left = ckpt->list();
    where = left.empty() ? " No checkpoint from before the divergence remains."
                         : " Started again, it resumes from " + left.front() + ", the last good state.";
    if (!moved.empty())
      where += " The " + std::to_string(moved.size()) + " checkpoint(s) written after step " +
               std::to_string(guard.good_step()) + " were set aside (renamed *.diverged).";
  }
  const std::string m = o.name + ": " + what + " The last change of size: " + last_change + "." + where + advice;
  if (!collective) throw Error(m);
  world->barrier();  // rank 0 has set them aside before any rank ends the job
  throw CollectiveError(m, world->rank(), world->size());
}

void Job::Impl::guard_diverged() { diverged(guard.diverged_what(job.step_), guard_advice(), true); }

std::string Job::Impl::guard_advice() const {
  const std::string scaling = o.lr_scaling == "none" || job.global_batch_ == o.lr_base_batch
                                  ? ""
                                  : " (" + o.lr_scaling + " scaling of " + detail::concat(o.lr) + " at global batch " +
                                        std::to_string(o.lr_base_batch) +
                                        "; sqrt scaling, the examples' --lr-scaling sqrt, gives less)";
  return " The peak learning rate is " + detail::concat(job.lr_) + " at global batch " +
         std::to_string(job.global_batch_) + scaling +
         ". Lower the learning rate or the largest global batch the job may be given (JobOptions::"
         "max_global_batch, the examples' --max-global-batch), or turn the guard off (divergence_factor 0)";
}

double Job::Impl::typical_step() const {
  if (step_times.empty()) return 0;
  std::vector<double> t = step_times;
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

void Job::Impl::time_step() {
  const double now = wall_time();
  if (last_step_t > 0 && !pending) {
    if (step_times.size() >= 32) step_times.erase(step_times.begin());
    step_times.push_back(now - last_step_t);
  }
  last_step_t = now;
}

void Job::Impl::rate_step() {
  if (!rate_armed) return;
  if (!rate_open) {
    rate_open = true;
    rate_from_step = job.step_;
    rate_from_t = wall_time();
    rate_samples = 0;
    return;
  }
  rate_samples += global_count;
  if (job.step_ - rate_from_step < kRateSteps) return;
  rate_armed = rate_open = false;
  if (!root()) return;
  MembershipEvent ev = event_now("rate");
  ev.steps = job.step_ - rate_from_step;
  ev.samples_per_s = static_cast<double>(rate_samples) / std::max(1e-9, ev.t - rate_from_t);
  append_event(ev);
}

void Job::Impl::first_step_done() {
  if (!pending) return;
  MembershipEvent ev = *pending;
  pending.reset();
  if (!root()) return;
  ev.t = wall_time();
  ev.step = job.step_;
  ev.samples = samples_done();
  ev.pause_s = ev.t - ev.requested_t;
  if (ev.mode == "in_place") {
    ev.phases.emplace_back("first_step_s", ev.t - entered_t);
    // What the training lost: from the stop for the change to the end of the first step at the
    // new size, less the step a typical step takes (the median of the steps before it).
    ev.visible_s = std::max(0.0, ev.t - change_begun - change_typical_s);
  } else {
    ev.visible_s = ev.pause_s;  // by restart, the whole pause stops the training
  }
  append_event(ev);
  log::info(o.name, ": first step at ", ev.workers, " worker(s) done, ", ev.pause_s, " s after the request (",
            ev.mode == "in_place" ? "in place" : "by restart", ")");
}

}  // namespace edp::elastic
