// Learning-rate schedules as pure functions of the step (0-based), so that a restored run
// continues on exactly the same curve:
//   constant      lr(t) = base
//   step          lr(t) = base · γ^⌊t / step_size⌋
//   cosine        lr(t) = min + (base - min)(1 + cos(π · min(t, T)/T))/2
//   warmup(inner) lr(t) = inner(t) · (t + 1)/W for t < W, inner(t) after
// and the batch-size scaling rules used when the global batch changes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace edp::optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double lr(int64_t step) const = 0;
};

class ConstantLR : public LRSchedule {
 public:
  explicit ConstantLR(double base) : base_(base) {}
  double lr(int64_t) const override { return base_; }

 private:
  double base_;
};

class StepLR : public LRSchedule {
 public:
  StepLR(double base, int64_t step_size, double gamma);
  double lr(int64_t step) const override;

 private:
  double base_;
  int64_t step_size_;
  double gamma_;
};

class CosineLR : public LRSchedule {
 public:
  CosineLR(double base, int64_t total_steps, double min_lr = 0.0);
  double lr(int64_t step) const override;

 private:
  double base_;
  int64_t total_;
  double min_;
};

class WarmupLR : public LRSchedule {
 public:
  WarmupLR(std::shared_ptr<LRSchedule> inner, int64_t warmup_steps);
  double lr(int64_t step) const override;

 private:
  std::shared_ptr<LRSchedule> inner_;
  int64_t warmup_;
};

// "none": lr; "linear": lr·B/B0 (Goyal et al. 2017); "sqrt": lr·√(B/B0) (for Adam-type).
double scale_lr(double lr, int64_t base_batch, int64_t batch, const std::string& rule);

}  // namespace edp::optim
