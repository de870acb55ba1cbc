// Optimizer updates against values computed by hand from the update rules in optimizer.h;
// schedules at their boundaries. Tolerance: float32 arithmetic on O(1) values, 1e-6 absolute.
#include <gtest/gtest.h>

#include <cmath>

#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"
#include "edp/optim/schedule.h"

using namespace edp;
using namespace edp::optim;

namespace {
nn::Parameter make_param(float v, float g) {
  nn::Parameter p{"p", {}, {}, {}};
  p.value = Tensor::full({1}, v);
  p.grad = Tensor::full({1}, g);
  return p;
}
}  // namespace

TEST(SGD, PlainStep) {
  auto p = make_param(1.0f, 0.5f);
  SGD opt({&p}, {.lr = 0.1});
  opt.step();
  EXPECT_NEAR(p.value.item(), 1.0 - 0.1 * 0.5, 1e-6);
}

TEST(SGD, MomentumWeightDecayTwoSteps) {
  auto p = make_param(1.0f, 0.5f);
  SGD opt({&p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  // step 1: d = 0.5 + 0.01·1 = 0.51; buf = 0.51; p = 1 - 0.051 = 0.949
  opt.step();
  EXPECT_NEAR(p.value.item(), 0.949, 1e-6);
  // step 2: d = 0.5 + 0.00949 = 0.50949; buf = 0.9·0.51 + 0.50949 = 0.96849; p = 0.949 - 0.096849
  opt.step();
  EXPECT_NEAR(p.value.item(), 0.949 - 0.096849, 1e-6);
}

TEST(SGD, Nesterov) {
  auto p = make_param(2.0f, 1.0f);
  SGD opt({&p}, {.lr = 0.1, .momentum = 0.5, .nesterov = true});
  // step 1: buf = 1; d = 1 + 0.5·1 = 1.5; p = 2 - 0.15
  opt.step();
  EXPECT_NEAR(p.value.item(), 1.85, 1e-6);
  // step 2: buf = 0.5 + 1 = 1.5; d = 1 + 0.75 = 1.75; p = 1.85 - 0.175
  opt.step();
  EXPECT_NEAR(p.value.item(), 1.675, 1e-6);
  EXPECT_THROW(SGD({&p}, {.lr = 0.1, .momentum = 0.0, .nesterov = true}), Error);
}

TEST(AdamW, TwoSteps) {
  auto p = make_param(1.0f, 0.2f);
  AdamW opt({&p}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
  // step 1: p = 1·(1 - 0.001) = 0.999; m = 0.02, v = 4e-5; m̂ = 0.2, v̂ = 4e-2 → step 0.01·0.2/0.2
  opt.step();
  const double p1 = 0.999 - 0.01 * 0.2 / (0.2 + 1e-8);
  EXPECT_NEAR(p.value.item(), p1, 1e-6);
  // step 2 (same grad): m = 0.038, v = 7.996e-5; m̂ = 0.038/0.19 = 0.2, v̂ = 7.996e-5/1.999e-3 = 0.04
  opt.step();
  const double p2 = p1 * (1 - 0.001) - 0.01 * 0.2 / (std::sqrt(0.04) + 1e-8);
  EXPECT_NEAR(p.value.item(), p2, 1e-6);
}

TEST(AdamW, DecayOnlyWhereTheParameterAsksForIt) {
  // Zero gradients: m and v stay 0, so a step is the decay alone. Biases and norms are not decayed.
  auto w = make_param(2.0f, 0.0f);
  auto b = make_param(2.0f, 0.0f);
  b.decay = false;
  AdamW opt({&w, &b}, {.lr = 0.1, .weight_decay = 0.5});
  opt.step();
  EXPECT_FLOAT_EQ(w.value.item(), 2.0f * (1 - 0.05f));
  EXPECT_FLOAT_EQ(b.value.item(), 2.0f);
  // The layers mark them: Linear's bias, LayerNorm's weight and bias do not decay.
  nn::Linear l(2, 3);
  nn::LayerNorm ln(3);
  EXPECT_TRUE(l.weight().decay);
  EXPECT_FALSE(l.bias()->decay);
  for (auto* p : ln.parameters()) EXPECT_FALSE(p->decay) << p->name;
}

TEST(ClipGradNorm, ScalesOnlyAboveMax) {
  auto a = make_param(0, 3.0f);
  auto b = make_param(0, 4.0f);
  EXPECT_NEAR(clip_grad_norm({&a, &b}, 10.0), 5.0, 1e-9);
  EXPECT_FLOAT_EQ(a.grad.item(), 3.0f);
  EXPECT_NEAR(clip_grad_norm({&a, &b}, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(std::hypot(a.grad.item(), b.grad.item()), 1.0, 1e-5);
}

TEST(Schedules, Boundaries) {
  StepLR s(0.1, 10, 0.5);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(9), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(10), 0.05);
  EXPECT_DOUBLE_EQ(s.lr(25), 0.025);
  CosineLR c(1.0, 100, 0.1);
  EXPECT_DOUBLE_EQ(c.lr(0), 1.0);
  EXPECT_NEAR(c.lr(50), 0.55, 1e-12);
  EXPECT_NEAR(c.lr(100), 0.1, 1e-12);
  EXPECT_NEAR(c.lr(1000), 0.1, 1e-12);
  WarmupLR w(std::make_shared<ConstantLR>(0.4), 4);
  EXPECT_DOUBLE_EQ(w.lr(0), 0.1);
  EXPECT_DOUBLE_EQ(w.lr(3), 0.4);
  EXPECT_DOUBLE_EQ(w.lr(4), 0.4);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 64, 256, "linear"), 0.4);
  EXPECT_DOUBLE_EQ(scale_lr(0.1, 64, 256, "sqrt"), 0.2);
  EXPECT_THROW(scale_lr(0.1, 64, 256, "cubic"), Error);
}
