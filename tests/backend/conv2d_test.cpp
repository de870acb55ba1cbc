// Conv2d on the GPU (src/backend/cuda/conv2d.cpp, cuDNN) against the CPU backend (src/backend/cpu/conv2d.cpp).
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

// ---- Conv2d -------------------------------------------------------------------------------------------
TEST_F(CudaOps, Conv2dForwardBackwardMatchCpu) {
  struct S {
    int64_t N, C, H, W, O, k, stride, pad;
  };
  const std::vector<S> shapes = {{2, 1, 28, 28, 32, 3, 1, 1}, {3, 5, 7, 9, 4, 3, 2, 0},
                                 {4, 32, 14, 14, 64, 3, 1, 1}, {1, 3, 5, 5, 2, 1, 1, 0},
                                 {2, 4, 8, 8, 6, 5, 2, 2},     {1, 1, 3, 3, 1, 3, 1, 0}};
  uint64_t seed = 100;
  for (bool tf32 : {false, true}) {
    cuda::set_tf32(tf32);
    for (const S& s : shapes) {
      SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " " << s.H << "x" << s.W << " O=" << s.O
                                      << " k=" << s.k << " stride=" << s.stride << " pad=" << s.pad << " tf32=" << tf32);
      const ops::Conv2dGeometry g{s.stride, s.pad};
      const Tensor x = randn({s.N, s.C, s.H, s.W}, seed++);
      const Tensor w = randn({s.O, s.C, s.k, s.k}, seed++, 1.0 / std::sqrt(double(s.C * s.k * s.k)));
      const Tensor b = randn({s.O}, seed++);
      const Tensor y_ref = ops::conv2d_forward(x, w, b, g);
      const Tensor y = ops::conv2d_forward(G(x), G(w), G(b), g);
      const int64_t K = s.C * s.k * s.k;
      EXPECT_TRUE(close(y, y_ref, tf32 ? tf32_tol(y_ref) : dot_tol(K, y_ref), "y"));
      const Tensor dy = randn(y_ref.shape(), seed++);
      Tensor dw_ref = randn(w.shape(), seed++), db_ref = randn({s.O}, seed++);
      Tensor dw = G(dw_ref), db = G(db_ref);
      const Tensor dx_ref = ops::conv2d_backward(x, w, dy, dw_ref, &db_ref, g, true);
      const Tensor dx = ops::conv2d_backward(G(x), G(w), G(dy), dw, &db, g, true);
      const int64_t P = y_ref.dim(2) * y_ref.dim(3);
      EXPECT_TRUE(close(dx, dx_ref, tf32 ? tf32_tol(dx_ref) : dot_tol(s.O * s.k * s.k, dx_ref), "dx"));
      EXPECT_TRUE(close(dw, dw_ref, tf32 ? tf32_tol(dw_ref) : dot_tol(s.N * P + 1, dw_ref), "dw"));
      EXPECT_TRUE(close(db, db_ref, dot_tol(s.N * P + 1, db_ref), "db"));
      // Twice in a row: the cached plan and workspace are reused.
      Tensor dw2 = G(randn(w.shape(), seed));
      const Tensor dw2_start = dw2.to(Device::cpu());
      EXPECT_FALSE(ops::conv2d_backward(G(x), G(w), G(dy), dw2, nullptr, g, false).defined());
      Tensor dw2_ref = dw2_start.clone();
      ops::conv2d_backward(x, w, dy, dw2_ref, nullptr, g, false);
      EXPECT_TRUE(close(dw2, dw2_ref, tf32 ? tf32_tol(dw2_ref) : dot_tol(s.N * P + 1, dw2_ref), "dw (second call)"));
    }
  }
}

}  // namespace
