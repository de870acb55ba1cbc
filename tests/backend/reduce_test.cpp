// axpy / scale / add and the sums on the GPU (src/backend/cuda/reduce.cpp, kernels/reduce.cu)
// against the CPU backend (src/backend/cpu/reduce.cpp).
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

TEST_F(CudaOps, AxpyScaleAddMatchCpu) {
  uint64_t seed = 700;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const Tensor a = randn({n}, seed++), b = randn({n}, seed++);
    Tensor y_ref = a.clone(), y = G(a);
    ops::axpy_(y_ref, -0.37, b);
    ops::axpy_(y, -0.37, G(b));
    EXPECT_TRUE(close(y, y_ref, Tol{1e-6, 1e-6}, "axpy"));
    ops::scale_(y_ref, 1.7);
    ops::scale_(y, 1.7);
    EXPECT_TRUE(close(y, y_ref, Tol{1e-6, 1e-6}, "scale"));
    EXPECT_TRUE(same(ops::add(G(a), G(b)), ops::add(a, b), "add"));
  }
}

TEST_F(CudaOps, SumsMatchCpu) {
  uint64_t seed = 800;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{4097}, (int64_t{1} << 20) + 3}) {
    const Tensor x = randn({n}, seed++);
    const double s = ops::sum(x), ss = ops::sum_squares(x);
    EXPECT_NEAR(ops::sum(G(x)), s, 1e-9 * (std::fabs(s) + std::sqrt(double(n)))) << n;
    EXPECT_NEAR(ops::sum_squares(G(x)), ss, 1e-10 * ss + 1e-12) << n;
    // Deterministic: the same value on every call.
    EXPECT_EQ(ops::sum(G(x)), ops::sum(G(x)));
  }
}

}  // namespace
