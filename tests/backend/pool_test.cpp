// Pooling on the GPU (src/backend/cuda/pool.cpp, kernels/pool.cu) against the CPU backend (src/backend/cpu/pool.cpp).
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

TEST(PoolGrad, MaxPool2d) {
  MaxPool2d p(2);
  gradcheck_module(p, {2, 3, 6, 4});
}

TEST(PoolGrad, MaxPool2dOverlapping) {
  MaxPool2d p(3, 2);
  gradcheck_module(p, {2, 2, 7, 7});
}

TEST(PoolGrad, GlobalAvgPool) {
  GlobalAvgPool2d p;
  gradcheck_module(p, {3, 4, 3, 5});
}

#else  // the GPU against the CPU

// ---- pooling ------------------------------------------------------------------------------------------
TEST_F(CudaOps, MaxPoolMatchesCpu) {
  struct S {
    int64_t N, C, H, W, k, s;
  };
  uint64_t seed = 200;
  for (const S& s : std::vector<S>{{2, 3, 6, 6, 2, 2}, {4, 32, 28, 28, 2, 2}, {3, 2, 7, 9, 3, 2},
                                   {1, 1, 5, 5, 2, 1}, {2, 2, 7, 7, 2, 2}, {1, 1, 1, 1, 1, 1}}) {
    SCOPED_TRACE(testing::Message() << s.N << "x" << s.C << "x" << s.H << "x" << s.W << " k=" << s.k << " s=" << s.s);
    Tensor x = randn({s.N, s.C, s.H, s.W}, seed++);
    if (x.numel() > 3) x.data<float>()[3] = NAN;  // NaN wins its window, as on the CPU
    Tensor am_ref, am;
    const Tensor y_ref = ops::maxpool2d_forward(x, s.k, s.s, am_ref);
    const Tensor y = ops::maxpool2d_forward(G(x), s.k, s.s, am);
    EXPECT_TRUE(same(y, y_ref, "y"));
    EXPECT_TRUE(same(am, am_ref, "argmax"));
    const Tensor dy = randn(y_ref.shape(), seed++);
    const Tensor dx_ref = ops::maxpool2d_backward(dy, am_ref, x.shape());
    const Tensor dx = ops::maxpool2d_backward(G(dy), am, x.shape());
    // Non-overlapping windows: each input gets at most one gradient, so exact; overlapping:
    // the atomic additions may run in another order (last-bit differences).
    EXPECT_TRUE(close(dx, dx_ref, s.k <= s.s ? Tol{0, 0} : Tol{1e-6, 1e-6}, "dx"));
  }
}

TEST_F(CudaOps, GlobalAvgPoolMatchesCpu) {
  uint64_t seed = 300;
  for (auto shape : std::vector<Shape>{{3, 5, 7, 7}, {2, 3, 1, 1}, {4, 64, 14, 14}, {1, 1, 1, 33}}) {
    const Tensor x = randn(shape, seed++);
    const Tensor y_ref = ops::global_avgpool_forward(x);
    EXPECT_TRUE(close(ops::global_avgpool_forward(G(x)), y_ref, Tol{1e-6, 1e-7}, "y " + shape.str()));
    const Tensor dy = randn(y_ref.shape(), seed++);
    EXPECT_TRUE(same(ops::global_avgpool_backward(G(dy), shape), ops::global_avgpool_backward(dy, shape),
                     "dx " + shape.str()));
  }
}

#endif  // EDP_OP_TEST_CPU

}  // namespace
