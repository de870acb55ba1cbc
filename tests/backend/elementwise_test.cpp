// Sigmoid, tanh, SiLU, sub, mul and the pointwise losses on the GPU (src/backend/cuda/
// elementwise.cpp and loss.cpp, kernels/elementwise.cu and loss.cu) against the CPU backend
// (src/backend/cpu/elementwise.cpp and loss.cpp). Tolerance 1e-5 relative, 1e-6 absolute: the
// GPU's expf/tanhf/log1pf differ from the CPU's in the last bits (op_test_util.h); sub, mul and
// the piecewise-polynomial losses (MSE, L1, Huber) are exact.
#include <gtest/gtest.h>

#include <vector>

#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

TEST_F(CudaOps, SmoothActivationsMatchCpu) {
  uint64_t seed = 900;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const Tensor x = randn({n}, seed++, 4.0), dy = randn({n}, seed++);
    const Tol tol{1e-5, 1e-6};
    EXPECT_TRUE(close(ops::sigmoid_forward(G(x)), ops::sigmoid_forward(x), tol, "sigmoid y"));
    EXPECT_TRUE(close(ops::sigmoid_backward(G(x), G(dy)), ops::sigmoid_backward(x, dy), tol, "sigmoid dx"));
    EXPECT_TRUE(close(ops::tanh_forward(G(x)), ops::tanh_forward(x), tol, "tanh y"));
    EXPECT_TRUE(close(ops::tanh_backward(G(x), G(dy)), ops::tanh_backward(x, dy), tol, "tanh dx"));
    EXPECT_TRUE(close(ops::silu_forward(G(x)), ops::silu_forward(x), tol, "silu y"));
    EXPECT_TRUE(close(ops::silu_backward(G(x), G(dy)), ops::silu_backward(x, dy), tol, "silu dx"));
  }
}

TEST_F(CudaOps, ArithmeticMatchesCpuExactly) {
  uint64_t seed = 950;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const Tensor a = randn({n}, seed++), b = randn({n}, seed++);
    EXPECT_TRUE(same(ops::sub(G(a), G(b)), ops::sub(a, b), "sub"));
    EXPECT_TRUE(same(ops::mul(G(a), G(b)), ops::mul(a, b), "mul"));
    Tensor ga = G(a), ca = a.clone();
    ops::mul_(ga, G(b));
    ops::mul_(ca, b);
    EXPECT_TRUE(same(ga, ca, "mul_"));
  }
  EXPECT_THROW(ops::sub(G(randn({3}, 1)), G(randn({4}, 2))), ShapeError);
}

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

}  // namespace
