// LayerNorm on the GPU (src/backend/cuda/layernorm.cpp, kernels/layernorm.cu) against the CPU
// backend (src/backend/cpu/layernorm.cpp). Both sum the row statistics in double; the tolerance
// (1e-5 relative) covers float32 rounding of x̂·γ and the different summation trees.
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

TEST_F(CudaOps, LayerNormMatchesCpu) {
  uint64_t seed = 3100;
  for (auto [R, D] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 7}, {130, 256}, {1000, 33}}) {
    SCOPED_TRACE(testing::Message() << "R=" << R << " D=" << D);
    const Tensor x = randn({R, D}, seed++, 3.0), g = randn({D}, seed++), b = randn({D}, seed++);
    Tensor m, r, gm, gr;
    const Tensor y = ops::layernorm_forward(x, g, b, 1e-5, m, r);
    EXPECT_TRUE(close(ops::layernorm_forward(G(x), G(g), G(b), 1e-5, gm, gr), y, Tol{1e-5, 1e-6}, "y"));
    const Tensor dy = randn({R, D}, seed++);
    Tensor dg = Tensor::zeros({D}), db = Tensor::zeros({D}), gdg = G(dg), gdb = G(db);
    const Tensor dx = ops::layernorm_backward(x, dy, g, m, r, dg, db);
    EXPECT_TRUE(close(ops::layernorm_backward(G(x), G(dy), G(g), gm, gr, gdg, gdb), dx, Tol{1e-5, 1e-6}, "dx"));
    EXPECT_TRUE(close(gdg, dg, Tol{1e-5, 1e-5}, "dgamma"));
    EXPECT_TRUE(close(gdb, db, Tol{1e-5, 1e-5}, "dbeta"));
  }
}

}  // namespace
