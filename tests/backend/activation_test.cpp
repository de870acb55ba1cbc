// ReLU, GELU and the fused bias + activation on the GPU (src/backend/cuda/activation.cpp,
// kernels/activation.cu) against the CPU backend (src/backend/cpu/activation.cpp).
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

TEST(ActivationGrad, ReLU) {
  ReLU r;
  gradcheck_module(r, {4, 9});
}

TEST(ActivationGrad, GELU) {
  GELU g;
  gradcheck_module(g, {3, 11});
}

#else  // the GPU against the CPU

// ---- activations ---------------------------------------------------------------------------------

TEST_F(CudaOps, ReluAndGeluMatchCpu) {
  uint64_t seed = 400;
  for (int64_t n : kSizes) {
    for (bool misaligned : {false, true}) {
      if (misaligned && n < 2) continue;
      SCOPED_TRACE(testing::Message() << "n=" << n << (misaligned ? " (view at +4 bytes)" : ""));
      Tensor base = randn({n}, seed++, 3.0);
      // A view starting one float in: not 16-byte aligned, so the scalar path runs.
      const Tensor x = misaligned ? base.narrow(1, n - 1) : base;
      const Tensor gx = misaligned ? G(base).narrow(1, n - 1) : G(base);
      const Tensor dy = randn(x.shape(), seed++);
      const Tensor y_ref = ops::relu_forward(x);
      const Tensor y = ops::relu_forward(gx);
      EXPECT_TRUE(same(y, y_ref, "relu y"));
      EXPECT_TRUE(same(ops::relu_backward(y, G(dy)), ops::relu_backward(y_ref, dy), "relu dx"));
      EXPECT_TRUE(close(ops::gelu_forward(gx), ops::gelu_forward(x), Tol{1e-5, 1e-6}, "gelu y"));
      EXPECT_TRUE(close(ops::gelu_backward(gx, G(dy)), ops::gelu_backward(x, dy), Tol{1e-5, 1e-6}, "gelu dx"));
    }
  }
}

TEST_F(CudaOps, FusedBiasActivationMatchesCpuComposition) {
  uint64_t seed = 500;
  for (auto shape : std::vector<Shape>{{5, 7}, {64, 128}, {2, 3, 5, 5}, {4, 16, 7, 9}, {1, 1}, {3000, 300}}) {
    for (cuda::Activation act : {cuda::Activation::Identity, cuda::Activation::ReLU, cuda::Activation::GELU}) {
      SCOPED_TRACE(testing::Message() << shape.str() << " act=" << static_cast<int>(act));
      const int64_t C = shape[1];
      int64_t inner = 1;
      for (int64_t d = 2; d < shape.ndim(); ++d) inner *= shape[d];
      const Tensor x = randn(shape, seed++), b = randn({C}, seed++), dy = randn(shape, seed++);
      Tensor z = x.clone();
      for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] += b.data<float>()[(i / inner) % C];
      Tensor y_ref = act == cuda::Activation::ReLU ? ops::relu_forward(z)
                     : act == cuda::Activation::GELU ? ops::gelu_forward(z) : z;
      Tensor dz_ref = act == cuda::Activation::ReLU ? ops::relu_backward(y_ref, dy)
                      : act == cuda::Activation::GELU ? ops::gelu_backward(z, dy) : dy;
      Tensor db_ref = randn({C}, seed++);
      Tensor db = G(db_ref);
      std::vector<double> col(C, 0.0);  // the reference sum in double, as the GPU's (3000 rows: float drifts ~1e-4)
      for (int64_t i = 0; i < dz_ref.numel(); ++i) col[(i / inner) % C] += dz_ref.data<float>()[i];
      for (int64_t c = 0; c < C; ++c) db_ref.data<float>()[c] += static_cast<float>(col[c]);
      const Tensor y = cuda::bias_act_forward(G(x), G(b), act);
      EXPECT_TRUE(close(y, y_ref, Tol{1e-5, 1e-6}, "y"));
      // ReLU may be given its output, the others need the pre-activation.
      const Tensor saved = act == cuda::Activation::ReLU ? y : G(z);
      const Tensor dz = cuda::bias_act_backward(saved, G(dy), &db, act);
      EXPECT_TRUE(close(dz, dz_ref, Tol{1e-5, 1e-6}, "dz"));
      EXPECT_TRUE(close(db, db_ref, Tol{1e-5, 1e-5}, "db"));
    }
  }
}

#endif  // EDP_OP_TEST_CPU

}  // namespace
