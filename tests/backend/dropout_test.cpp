// Dropout on the GPU (src/backend/cuda/dropout.cpp, kernels/dropout.cu) against the CPU backend
// (src/backend/cpu/dropout.cpp): the same mask bit for bit.
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

TEST(DropoutGrad, DropoutFixedMask) {
  // The layer draws a new mask per call; check the op with a fixed seed (mask fixed).
  Rng rng(11);
  Tensor x = random_input({4, 10}, rng);
  Tensor r = random_input({4, 10}, rng, false);
  Tensor mask;
  const double p = 0.3;
  ops::dropout_forward(x, p, 1234, mask);
  Tensor dx = ops::dropout_backward(r, mask, p);
  auto loss = [&] {
    Tensor m2;
    return dot(ops::dropout_forward(x, p, 1234, m2), r);
  };
  Mismatch mm;
  compare("dropout dx", x, dx, loss, mm);
  EXPECT_EQ(mm.mismatches, 0);
}

#else  // the GPU against the CPU

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

#endif  // EDP_OP_TEST_CPU

}  // namespace
