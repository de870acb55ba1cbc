// The pointwise losses (MSE, L1, Huber, BCE with logits): their gradients by finite differences
// (test_backend_cpu, every build), and on the GPU (src/backend/cuda/loss.cpp, kernels/loss.cu)
// against the CPU backend (src/backend/cpu/loss.cpp): MSE, L1 and Huber exact, BCE within 1e-5
// relative (the GPU's log1pf/expf differ from the CPU's in the last bits; op_test_util.h).
#include <gtest/gtest.h>

#include <vector>

#include "op_test_util.h"
#include "edp/backend/ops.h"
#include "edp/core/random.h"
#include "edp/core/threads.h"
#include "edp/nn/gpt.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "support/gradcheck_util.h"

namespace {
using namespace edp;
using namespace edp::test;

#if EDP_OP_TEST_CPU
// ---- gradients by finite differences (every build, test_backend_cpu; support/gradcheck_util.h) ----
using namespace edp::nn;
using Mismatch = GradCheckResult;

TEST(LossGrad, PointwiseLosses) {
  Tensor p = gradcheck_input({6, 2}, 61);
  Tensor t = gradcheck_input({6, 2}, 62, false);
  for (int k = 0; k < 4; ++k) {
    std::unique_ptr<PointwiseLoss> loss;
    switch (k) {
      case 0: loss = std::make_unique<MSELoss>(); break;
      case 1: loss = std::make_unique<L1Loss>(); break;
      case 2: loss = std::make_unique<HuberLoss>(0.3); break;  // both branches: |d| spans [0, 2]
      default: loss = std::make_unique<BCEWithLogitsLoss>(); break;
    }
    SCOPED_TRACE(ops::point_loss_name(loss->kind()));
    Tensor target = k == 3 ? Tensor::from_vector<double>({6, 2}, {0, 1, 1, 0, 0.25, 1, 0, 0, 1, 1, 0.5, 0}) : t;
    loss->forward(p, target);
    Tensor dp = loss->backward().clone();
    auto again = [&] {
      PointwiseLoss l2(loss->kind(), 0.3);
      return l2.forward(p, target);
    };
    Mismatch mm;
    compare("dpred", p, dp, again, mm);
    EXPECT_EQ(mm.mismatches, 0) << mm.str();
  }
  // Values: mse of d = (1, -2) is 2.5; l1 1.5; huber(1) (0.5 + 1.5)/2 = 1; BCE of logit 0 is log 2.
  Tensor a = Tensor::from_vector<double>({2, 1}, {1, -2});
  Tensor z = Tensor::from_vector<double>({2}, {0, 0});  // [2] targets against [2, 1] predictions
  EXPECT_DOUBLE_EQ(MSELoss().forward(a, z), 2.5);
  EXPECT_DOUBLE_EQ(L1Loss().forward(a, z), 1.5);
  EXPECT_DOUBLE_EQ(HuberLoss(1.0).forward(a, z), 1.0);
  EXPECT_NEAR(BCEWithLogitsLoss().forward(z, Tensor::from_vector<double>({2}, {0, 1})), std::log(2.0), 1e-15);
  // A large logit: the loss of the wrong class is the logit itself, not inf.
  EXPECT_NEAR(BCEWithLogitsLoss().forward(Tensor::from_vector<double>({1}, {800}),
                                          Tensor::from_vector<double>({1}, {0})), 800.0, 1e-9);
  // int32 0/1 labels are converted; a count mismatch names both shapes.
  EXPECT_NEAR(BCEWithLogitsLoss().forward(Tensor::from_vector<float>({2}, {0, 0}),
                                          Tensor::from_vector<int32_t>({2}, {0, 1})), std::log(2.0), 1e-7);
  EXPECT_THROW(MSELoss().forward(a, Tensor::from_vector<double>({3}, {0, 0, 0})), ShapeError);
}

#else  // the GPU against the CPU

TEST_F(CudaOps, PointLossesMatchCpu) {
  uint64_t seed = 990;
  using ops::PointLoss;
  for (PointLoss k : {PointLoss::mse, PointLoss::l1, PointLoss::huber, PointLoss::bce_logits}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(testing::Message() << ops::point_loss_name(k) << " n=" << n);
      const Tensor p = randn({n}, seed++, 3.0);
      Tensor t = randn({n}, seed++, 3.0);
      if (k == PointLoss::bce_logits)  // targets in [0, 1]
        for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i % 3) / 2.0f;
      const bool smooth = k == PointLoss::bce_logits;
      const Tol tol = smooth ? Tol{1e-5, 1e-6} : Tol{0, 0};
      EXPECT_TRUE(close(ops::point_loss_forward(k, G(p), G(t), 1.5), ops::point_loss_forward(k, p, t, 1.5), tol, "loss"));
      EXPECT_TRUE(close(ops::point_loss_backward(k, G(p), G(t), 1.5, 0.25),
                        ops::point_loss_backward(k, p, t, 1.5, 0.25), smooth ? tol : Tol{1e-7, 0}, "dpred"));
    }
  }
}

#endif  // EDP_OP_TEST_CPU

}  // namespace
