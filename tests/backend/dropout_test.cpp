// Dropout on the GPU (src/backend/cuda/dropout.cpp, kernels/dropout.cu) against the CPU backend
// (src/backend/cpu/dropout.cpp): the same mask bit for bit.
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

TEST_F(CudaOps, DropoutMaskIsTheCpuMaskBitForBit) {
  uint64_t seed = 600;
  for (double p : {0.0, 0.1, 0.5, 0.9}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " n=" << n);
      const Tensor x = randn({n}, seed++);
      Tensor m_ref, m;
      const Tensor y_ref = ops::dropout_forward(x, p, 12345 + static_cast<uint64_t>(n), m_ref);
      const Tensor y = ops::dropout_forward(G(x), p, 12345 + static_cast<uint64_t>(n), m);
      EXPECT_TRUE(same(m, m_ref, "mask"));
      EXPECT_TRUE(same(y, y_ref, "y"));
      const Tensor dy = randn({n}, seed++);
      EXPECT_TRUE(same(ops::dropout_backward(G(dy), m, p), ops::dropout_backward(dy, m_ref, p), "dx"));
    }
  }
  // A view at +4 bytes (scalar path) gives the same values as the aligned path for its elements.
  const Tensor base = randn({1001}, 7);
  Tensor m1, m2;
  const Tensor y1 = ops::dropout_forward(G(base).narrow(1, 1000), 0.3, 9, m1);
  const Tensor y2 = ops::dropout_forward(base.narrow(1, 1000), 0.3, 9, m2);
  EXPECT_TRUE(same(m1, m2, "mask of a misaligned view"));
  EXPECT_TRUE(same(y1, y2, "y of a misaligned view"));
}

}  // namespace
