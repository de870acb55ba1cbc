// BatchNorm2d on the GPU (src/backend/cuda/batchnorm.cpp, kernels/batchnorm.cu) against the CPU
// backend (src/backend/cpu/batchnorm.cpp).
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
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

TEST(BatchNormGrad, BatchNorm2dTrain) {
  BatchNorm2d bn(3);
  // Non-trivial γ, β so that their gradients are exercised away from the identity.
  Rng rng(9);
  bn.to(DType::F64);
  for (Parameter* p : bn.parameters()) p->value = random_input(p->value.shape(), rng);
  gradcheck_module(bn, {4, 3, 3, 2});
}

TEST(BatchNormGrad, BatchNorm2dEval) {
  BatchNorm2d bn(2);
  bn.to(DType::F64);
  bn.running_mean().value.fill(0.3);
  bn.running_var().value.fill(2.0);
  bn.eval();
  // Eval-mode backward is not supported (the layer refuses it); check the eval forward against
  // the formula instead.
  Rng rng(10);
  Tensor x = random_input({2, 2, 2, 2}, rng);
  Tensor y = bn.forward(x);
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(y.item(i), (x.item(i) - 0.3) / std::sqrt(2.0 + 1e-5), 1e-12);
  EXPECT_THROW(bn.backward(y), Error);
}

#else  // the GPU against the CPU

// ---- BatchNorm -----------------------------------------------------------------------------------
TEST_F(CudaOps, BatchNormMatchesCpu) {
  uint64_t seed = 900;
  for (auto shape : std::vector<Shape>{{4, 3, 5, 5}, {2, 7, 3, 1}, {16, 32, 14, 14}, {1, 2, 1, 2}, {64, 8, 28, 28}}) {
    SCOPED_TRACE(shape.str());
    const int64_t C = shape[1];
    const Tensor x = randn(shape, seed++, 2.0);
    Tensor xs = x.clone();  // a shifted input: statistics must not cancel
    for (int64_t i = 0; i < xs.numel(); ++i) xs.data<float>()[i] += 50.0f;
    for (const Tensor* in : {&x, static_cast<const Tensor*>(&xs)}) {
      const Tensor gamma = randn({C}, seed++), beta = randn({C}, seed++);
      Tensor rm_ref = randn({C}, seed++), rv_ref = Tensor::full({C}, 1.5);
      Tensor rm = G(rm_ref), rv = G(rv_ref);
      Tensor sm_ref, si_ref, sm, si;
      const Tensor y_ref = ops::batchnorm2d_forward_train(*in, gamma, beta, rm_ref, rv_ref, 0.1, 1e-5, sm_ref, si_ref);
      const Tensor y = ops::batchnorm2d_forward_train(G(*in), G(gamma), G(beta), rm, rv, 0.1, 1e-5, sm, si);
      EXPECT_TRUE(close(y, y_ref, Tol{1e-5, 1e-5 * rms(y_ref)}, "y"));
      EXPECT_TRUE(close(sm, sm_ref, Tol{1e-6, 1e-6}, "saved mean"));
      EXPECT_TRUE(close(si, si_ref, Tol{1e-5, 0}, "saved inverse std"));
      EXPECT_TRUE(close(rm, rm_ref, Tol{1e-6, 1e-6}, "running mean"));
      EXPECT_TRUE(close(rv, rv_ref, Tol{1e-5, 1e-6}, "running var"));
      const Tensor ye_ref = ops::batchnorm2d_forward_eval(*in, gamma, beta, rm_ref, rv_ref, 1e-5);
      EXPECT_TRUE(close(ops::batchnorm2d_forward_eval(G(*in), G(gamma), G(beta), rm, rv, 1e-5), ye_ref,
                        Tol{1e-5, 1e-5 * rms(ye_ref)}, "eval y"));
      const Tensor dy = randn(shape, seed++);
      Tensor dg_ref = randn({C}, seed++), db_ref = randn({C}, seed++);
      Tensor dg = G(dg_ref), db = G(db_ref);
      const Tensor dx_ref = ops::batchnorm2d_backward(*in, dy, gamma, sm_ref, si_ref, dg_ref, db_ref);
      const Tensor dx = ops::batchnorm2d_backward(G(*in), G(dy), G(gamma), sm, si, dg, db);
      EXPECT_TRUE(close(dx, dx_ref, Tol{1e-4, 1e-5 * rms(dx_ref)}, "dx"));
      EXPECT_TRUE(close(dg, dg_ref, Tol{1e-5, 1e-5 * rms(dg_ref)}, "dgamma"));
      EXPECT_TRUE(close(db, db_ref, Tol{1e-5, 1e-5 * rms(db_ref)}, "dbeta"));
    }
  }
}

#endif  // EDP_OP_TEST_CPU

}  // namespace
