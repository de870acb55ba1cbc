// LR schedules and batch-size scaling rules.
#include "edp/optim/schedule.h"

#include <cmath>

#include "edp/core/error.h"

namespace edp::optim {

StepLR::StepLR(double base, int64_t step_size, double gamma)
    : base_(base), step_size_(step_size), gamma_(gamma) {
  EDP_CHECK(step_size > 0, "StepLR: step_size ", step_size, " must be > 0");
}

double StepLR::lr(int64_t step) const {
  return base_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

CosineLR::CosineLR(double base, int64_t total_steps, double min_lr)
    : base_(base), total_(total_steps), min_(min_lr) {
  EDP_CHECK(total_steps > 0, "CosineLR: total_steps ", total_steps, " must be > 0");
}

double CosineLR::lr(int64_t step) const {
  const double t = static_cast<double>(std::min(step, total_)) / static_cast<double>(total_);
  return min_ + (base_ - min_) * 0.5 * (1.0 + std::cos(M_PI * t));
}

WarmupLR::WarmupLR(std::shared_ptr<LRSchedule> inner, int64_t warmup_steps)
    : inner_(std::move(inner)), warmup_(warmup_steps) {
  EDP_CHECK(inner_ != nullptr && warmup_steps >= 0, "WarmupLR: needs a schedule and steps >= 0");
}

double WarmupLR::lr(int64_t step) const {
  const double base = inner_->lr(step);
  if (step >= warmup_) return base;
  return base * static_cast<double>(step + 1) / static_cast<double>(warmup_);
}

double scale_lr(double lr, int64_t base_batch, int64_t batch, const std::string& rule) {
  EDP_CHECK(base_batch > 0 && batch > 0, "scale_lr: batch sizes must be positive");
  const double r = static_cast<double>(batch) / static_cast<double>(base_batch);
  if (rule == "none") return lr;
  if (rule == "linear") return lr * r;
  if (rule == "sqrt") return lr * std::sqrt(r);
  throw Error("unknown LR scaling rule '" + rule + "': expected none, linear or sqrt");
}

}  // namespace edp::optim
