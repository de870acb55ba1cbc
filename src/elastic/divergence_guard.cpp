// The divergence guard's rule (divergence_guard.h).
#include "elastic/divergence_guard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "edp/elastic/job.h"

namespace edp::elastic {

DivergenceGuard::DivergenceGuard(double factor) : factor_(factor) {}

void DivergenceGuard::add(double loss_sum, double samples) {
  sum_ += loss_sum;
  n_ += samples;
  if (!first_set_) {  // the level of a job shorter than one window (judge_partial)
    first_[0] = loss_sum;
    first_[1] = samples;
    first_set_ = true;
  }
}

std::array<double, 4> DivergenceGuard::local() const { return {sum_, n_, first_[0], first_[1]}; }

bool DivergenceGuard::not_back(double mean, double level) const {
  return suspect_ > 0 && peak_ > factor_ * factor_ * level && mean > kGuardRecovered * level;
}

DivergenceGuard::Window DivergenceGuard::end_window(int64_t step, double sum, double samples) {
  sum_ = n_ = 0;
  from_ = step + 1;
  if (samples <= 0) return Window::kEmpty;
  const double mean = sum / samples;
  last_ = mean;
  if (level_ < 0) {
    level_ = mean;
    good_step_ = step;
    return Window::kFirst;
  }
  const bool up = above(mean, level_);
  if (up || not_back(mean, level_)) {
    const bool begins = suspect_++ == 0;
    if (begins) {
      first_bad_ = step - kGuardWindow + 1;
      peak_ = 0;
      came_down_ = false;
    }
    peak_ = std::max(peak_, mean);
    came_down_ = came_down_ || !up;
    if (suspect_ >= kGuardPatience) return Window::kDiverged;
    return begins ? Window::kDoubtBegins : Window::kDoubt;
  }
  suspect_ = 0;
  level_ = 0.9 * level_ + 0.1 * mean;
  good_step_ = step;
  return Window::kGood;
}

std::string DivergenceGuard::judge_partial(int64_t step, const std::array<double, 4>& v,
                                           const std::string& when) const {
  if (factor_ <= 0) return "";
  const bool partial = v[1] > 0;
  if (!partial && suspect_ == 0) return "";
  const double mean = partial ? v[0] / v[1] : last_;
  const bool have_level = level_ >= 0;
  const double level = have_level ? level_ : v[3] > 0 ? v[2] / v[3] : -1;
  if (level < 0 || !std::isfinite(mean)) return "";  // nothing to compare with (a non-finite loss stops elsewhere)
  const bool up = mean > factor_ * level;
  if (!up && !not_back(mean, level)) return "";
  // The steps judged: those since the last full window (windows end at multiples of kGuardWindow).
  const long long to = step;
  const long long from = partial ? from_ : std::max<long long>(1, to - kGuardWindow + 1);
  char m[640];
  std::snprintf(m, sizeof m,
                "the loss diverged: its mean over steps %lld-%lld, the last before %s, was %.4g, more than %g times "
                "%s %.4g; the guard's windows of %lld steps did not fill before %s.",
                from, to, when.c_str(), mean, up ? factor_ : kGuardRecovered,
                have_level ? "its running level" : "the loss of the job's first step,", level,
                static_cast<long long>(kGuardWindow), when.c_str());
  return m;
}

std::string DivergenceGuard::diverged_what(int64_t step) const {
  char m[600];
  const long long from = step - kGuardWindow + 1, to = step;
  if (!came_down_)
    std::snprintf(m, sizeof m,
                  "the loss diverged: its mean over steps %lld-%lld was %.4g, more than %g times its running level "
                  "%.4g, in %d windows of %lld steps in a row (since step %lld).",
                  from, to, last_, factor_, level_, kGuardPatience, static_cast<long long>(kGuardWindow),
                  static_cast<long long>(first_bad_));
  else
    std::snprintf(m, sizeof m,
                  "the loss diverged: it rose to %.4g, more than %g times its running level %.4g (since step %lld), "
                  "and did not come back: its mean over steps %lld-%lld was %.4g, still more than %g times that "
                  "level, %d windows of %lld steps after the rise began.",
                  peak_, factor_, level_, static_cast<long long>(first_bad_), from, to, last_, kGuardRecovered,
                  kGuardPatience, static_cast<long long>(kGuardWindow));
  return m;
}

}  // namespace edp::elastic
