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
  double v[2] = {guard_sum, guard_n};
  world->allreduce(v, v, 2, DType::F64, comm::ReduceOp::Sum);
  guard_sum = guard_n = 0;
  guard_from = job.step_ + 1;
  if (v[1] <= 0) return;
  const double mean = v[0] / v[1];
  guard_last = mean;
  log::debug(o.name, ": divergence guard: mean loss ", mean, " over steps ", job.step_ - kGuardWindow + 1, "-",
             job.step_, ", running level ", guard_level);
  if (guard_level < 0) {
    guard_level = mean;
    guard_good_step = job.step_;
    return;
  }
  const double f = o.divergence_factor;
  const bool above = f > 0 && mean > f * guard_level;
  // Down from a blow-up (a window above factor² times the level) but not back to the level:
  // still in doubt. After a milder rise a slow recovery is normal (e.g. after a rescale).
  const bool not_back = guard_suspect > 0 && guard_peak > f * f * guard_level && mean > kGuardRecovered * guard_level;
  if (above || not_back) {
    if (guard_suspect++ == 0) {
      guard_first_bad = job.step_ - kGuardWindow + 1;
      guard_peak = 0;
      guard_came_down = false;
      if (ckpt) ckpt->hold(guard_good_step);  // rotation must not remove the last good state
    }
    guard_peak = std::max(guard_peak, mean);
    guard_came_down = guard_came_down || !above;
    if (guard_suspect >= kGuardPatience) guard_diverged(mean);
    return;
  }
  guard_suspect = 0;
  if (ckpt) ckpt->hold(-1);
  guard_level = 0.9 * guard_level + 0.1 * mean;
  guard_good_step = job.step_;
}

void Job::Impl::guard_partial(const std::string& when) {
  if (o.divergence_factor <= 0 || !world) return;
  double v[4] = {guard_sum, guard_n, guard_first[0], guard_first[1]};
  world->allreduce(v, v, 4, DType::F64, comm::ReduceOp::Sum);
  const bool partial = v[1] > 0;
  if (!partial && guard_suspect == 0) return;
  const double mean = partial ? v[0] / v[1] : guard_last;
  const bool have_level = guard_level >= 0;
  const double level = have_level ? guard_level : v[3] > 0 ? v[2] / v[3] : -1;
  if (level < 0 || !std::isfinite(mean)) return;  // nothing to compare with (a non-finite loss stops elsewhere)
  const double f = o.divergence_factor;
  const bool above = mean > f * level;
  const bool not_back = guard_suspect > 0 && guard_peak > f * f * level && mean > kGuardRecovered * level;
  if (!above && !not_back) return;
  // The steps judged: those since the last full window (windows end at multiples of kGuardWindow).
  const long long to = job.step_;
  const long long from = partial ? guard_from : std::max<long long>(1, to - kGuardWindow + 1);
  char m[640];
  std::snprintf(m, sizeof m,
                "the loss diverged: its mean over steps %lld-%lld, the last before %s, was %.4g, more than %g times "
                "%s %.4g; the guard's windows of %lld steps did not fill before %s.",
                from, to, when.c_str(), mean, above ? f : kGuardRecovered,
                have_level ? "its running level" : "the loss of the job's first step,", level,
                static_cast<long long>(kGuardWindow), when.c_str());
  diverged(m,
           " The peak learning rate is " + detail::concat(job.lr_) + " at global batch " +
               std::to_string(job.global_batch_) +
               ". Lower the learning rate or the largest global batch the job may be given (JobOptions::"
               "max_global_batch, the examples' --max-global-batch), or turn the guard off (divergence_factor 0)",
           true);
}

void Job::Impl::guard_end() {
  if (guard_ended) return;
  guard_ended = true;
  guard_partial("the end of the training");
}

void Job::Impl::diverged(const std::string& what, const std::string& advice, bool collective) {
  std::string where;
  if (ckpt && root()) {
    const std::vector<std::string> moved = ckpt->set_aside_after(guard_good_step, "diverged");
    const std::vector<std::string> left = ckpt->list();
    where = left.empty() ? " No checkpoint from before the divergence remains."
                         : " Started again, it resumes from " + left.front() + ", the last good state.";
    if (!moved.empty())
      where += " The " + std::to_string(moved.size()) + " checkpoint(s) written after step " +
               std::to_string(guard_good_step) + " were set aside (renamed *.diverged).";
  }
  const std::string m = o.name + ": " + what + " The last change of size: " + last_change + "." + where + advice;
  if (!collective) throw Error(m);
  world->barrier();  // rank 0 has set them aside before any rank ends the job
  throw CollectiveError(m, world->rank(), world->size());
}

void Job::Impl::guard_diverged(double mean) {
  char m[600];
  const long long from = job.step_ - kGuardWindow + 1, to = job.step_;
  if (!guard_came_down)
    std::snprintf(m, sizeof m,
                  "the loss diverged: its mean over steps %lld-%lld was %.4g, more than %g times its running level "
                  "%.4g, in %d windows of %lld steps in a row (since step %lld).",
                  from, to, mean, o.divergence_factor, guard_level, kGuardPatience,
                  static_cast<long long>(kGuardWindow), static_cast<long long>(guard_first_bad));
  else
    std::snprintf(m, sizeof m,
                  "the loss diverged: it rose to %.4g, more than %g times its running level %.4g (since step %lld), "
                  "and did not come back: its mean over steps %lld-%lld was %.4g, still more than %g times that "
                  "level, %d windows of %lld steps after the rise began.",
                  guard_peak, o.divergence_factor, guard_level, static_cast<long long>(guard_first_bad), from, to,
                  mean, kGuardRecovered, kGuardPatience, static_cast<long long>(kGuardWindow));
  std::string lr = o.lr_scaling == "none" || job.global_batch_ == o.lr_base_batch
                       ? ""
                       : " (" + o.lr_scaling + " scaling of " + detail::concat(o.lr) + " at global batch " +
                             std::to_string(o.lr_base_batch) + "; sqrt scaling, the examples' --lr-scaling sqrt, "
                             "gives less)";
  diverged(m,
           " The peak learning rate is " + detail::concat(job.lr_) + " at global batch " +
               std::to_string(job.global_batch_) + lr +
               ". Lower the learning rate or the largest global batch the job may be given (JobOptions::"
               "max_global_batch, the examples' --max-global-batch), or turn the guard off (divergence_factor 0)",
           true);
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
