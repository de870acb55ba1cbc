// Linear on the GPU (src/backend/cuda/linear.cpp, cuBLASLt) against the CPU backend (src/backend/cpu/linear.cpp).
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

TEST(LinearGrad, Linear) {
  manual_seed(1);
  Linear l(7, 5);
  gradcheck_module(l, {4, 7});
}

TEST(LinearGrad, LinearNoBias) {
  manual_seed(2);
  Linear l(3, 6, false);
  gradcheck_module(l, {5, 3});
}

TEST(LinearGrad, LinearSplitAcrossThreads) {
  // The CPU linear splits each GEMM by output columns or rows into shares of 16 per thread
  // (parallel_ranges): 45 outputs and 37 inputs give shares 16/16/13 with 3 threads and 32/13
  // with 2, so y, dw (by output rows) and dx (by input columns) each cross share boundaries.
  for (int threads : {2, 3}) {
    SCOPED_TRACE(threads);
    set_num_threads(threads);
    manual_seed(30 + threads);
    Linear l(37, 45);
    gradcheck_module(l, {3, 37});
  }
  set_num_threads(2);
}

#else  // the GPU against the CPU

// ---- Linear ----------------------------------------------------------------------------------------
TEST_F(CudaOps, LinearForwardBackwardMatchCpu) {
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1}, {7, 13, 5}, {33, 3136, 128}, {256, 128, 10}, {64, 784, 256}, {5, 3, 1000},
      {4100, 16, 300}};  // the last: its bias gradient is a column sum split over 128 row ranges
  uint64_t seed = 1;
  for (bool tf32 : {false, true}) {
    cuda::set_tf32(tf32);
    for (auto [N, I, O] : shapes) {
      SCOPED_TRACE(testing::Message() << "N=" << N << " I=" << I << " O=" << O << " tf32=" << tf32);
      const Tensor x = randn({N, I}, seed++), w = randn({O, I}, seed++, 1.0 / std::sqrt(double(I)));
      const Tensor b = randn({O}, seed++), dy = randn({N, O}, seed++);
      const Tensor y_ref = ops::linear_forward(x, w, b);
      const Tensor y = ops::linear_forward(G(x), G(w), G(b));
      EXPECT_TRUE(close(y, y_ref, tf32 ? tf32_tol(y_ref) : dot_tol(I, y_ref), "y"));
      const Tensor y0_ref = ops::linear_forward(x, w, Tensor());
      EXPECT_TRUE(close(ops::linear_forward(G(x), G(w), Tensor()), y0_ref,
                        tf32 ? tf32_tol(y0_ref) : dot_tol(I, y0_ref), "y without bias"));

      // Gradients accumulate into random initial values (the += contract).
      Tensor dw_ref = randn({O, I}, seed++), db_ref = randn({O}, seed++);
      Tensor dw = G(dw_ref), db = G(db_ref);
      const Tensor dx_ref = ops::linear_backward(x, w, dy, dw_ref, &db_ref, true);
      const Tensor dx = ops::linear_backward(G(x), G(w), G(dy), dw, &db, true);
      EXPECT_TRUE(close(dx, dx_ref, tf32 ? tf32_tol(dx_ref) : dot_tol(O, dx_ref), "dx"));
      EXPECT_TRUE(close(dw, dw_ref, tf32 ? tf32_tol(dw_ref) : dot_tol(N + 1, dw_ref), "dw"));
      EXPECT_TRUE(close(db, db_ref, dot_tol(N + 1, db_ref), "db (float32 sum, never TF32)"));
      Tensor dw2 = G(dw_ref);
      EXPECT_FALSE(ops::linear_backward(G(x), G(w), G(dy), dw2, nullptr, false).defined());
    }
  }
}

TEST_F(CudaOps, LinearRejectsBadOperands) {
  const Tensor x = randn({4, 3}, 1), w = randn({5, 3}, 2);
  try {
    ops::linear_forward(G(x), w, Tensor());
    FAIL() << "mixed devices accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight is on cpu but the other operands are on cuda:0"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::linear_forward(G(x), G(randn({5, 4}, 3)), Tensor()), ShapeError);
  EXPECT_THROW(ops::linear_forward(G(x.to(DType::F64)), G(w.to(DType::F64)), Tensor()), ShapeError);
}

#endif  // EDP_OP_TEST_CPU

}  // namespace
