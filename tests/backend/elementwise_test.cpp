// Sigmoid, tanh, SiLU, sub and mul: their gradients by finite differences (test_backend_cpu, every
// build), and on the GPU (src/backend/cuda/elementwise.cpp, kernels/elementwise.cu) against the
// CPU backend (src/backend/cpu/elementwise.cpp). Tolerance 1e-5 relative, 1e-6 absolute: the
// GPU's expf/tanhf differ from the CPU's in the last bits (op_test_util.h); sub and mul are exact.
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

TEST(ElementwiseGrad, SigmoidTanhSiLU) {
  // Inputs in [-1, 1] and, scaled by 8, far into the tails, where a wrong σ form would overflow
  // or cancel.
  for (double scale : {1.0, 8.0}) {
    SCOPED_TRACE(scale);
    Sigmoid s;
    Tanh t;
    SiLU u;
    for (Module* m : std::initializer_list<Module*>{&s, &t, &u}) {
      Tensor x = gradcheck_input({3, 7}, 60);
      ops::scale_(x, scale);
      const GradCheckResult r = gradcheck(*m, x);
      EXPECT_TRUE(r.ok()) << m->type_name() << ": " << r.str();
    }
  }
  // Values from the definitions.
  Sigmoid s;
  Tensor y = s.forward(Tensor::from_vector<double>({3}, {0.0, 2.0, -40.0}));
  EXPECT_DOUBLE_EQ(y.item(0), 0.5);
  EXPECT_NEAR(y.item(1), 1.0 / (1.0 + std::exp(-2.0)), 1e-15);
  EXPECT_GT(y.item(2), 0.0);  // e^-40/(1+e^-40), not 0 from 1/(1+e^40) overflowing nothing
  EXPECT_NEAR(y.item(2), std::exp(-40.0), 1e-30);
}

#else  // the GPU against the CPU

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

#endif  // EDP_OP_TEST_CPU

}  // namespace
