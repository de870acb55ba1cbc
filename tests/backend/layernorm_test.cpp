// LayerNorm, one file for the op (llm.c's habit: an op found by its name):
//   test_backend_cpu  (EDP_OP_TEST_CPU=1, every build): the CPU oracle (src/backend/cpu/layernorm.cpp)
//                     against the formula in long double, its errors, and the layer's gradients by
//                     finite differences (support/gradcheck_util.h);
//   test_backend_cuda (CUDA builds): the GPU op (src/backend/cuda/layernorm.cpp,
//                     kernels/layernorm.cu) against the oracle. Both sum the row statistics in
//                     double; 1e-5 relative covers float32 rounding of x̂·γ and the summation trees.
// Shapes, tolerances and the helpers: op_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "op_test_util.h"
#include "edp/core/error.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "support/gradcheck_util.h"

namespace {
using namespace edp;
using namespace edp::test;

#if EDP_OP_TEST_CPU
// ---- the CPU oracle ---------------------------------------------------------------------------
// Against the formula evaluated in long double: float64 inputs, row sums over D ≤ 64 terms, so the
// op's error is a few ulp of the row's scale; 1e-12 relative leaves room and catches any slip.
TEST(LayerNorm, ForwardIsTheFormula) {
  const int64_t R = 7, D = 33;
  Rng rng(50);
  const Tensor x = random_input({R, D}, rng), g = random_input({D}, rng), b = random_input({D}, rng);
  Tensor mean, rstd;
  const Tensor y = ops::layernorm_forward(x, g, b, 1e-5, mean, rstd);
  for (int64_t r = 0; r < R; ++r) {
    const double* xr = x.data<double>() + r * D;
    long double s = 0, v = 0;
    for (int64_t d = 0; d < D; ++d) s += xr[d];
    const long double m = s / D;
    for (int64_t d = 0; d < D; ++d) v += (xr[d] - m) * (xr[d] - m);
    const long double inv = 1.0L / std::sqrt(v / D + 1e-5L);
    EXPECT_NEAR(mean.data<double>()[r], static_cast<double>(m), 1e-12 * std::max(1.0, std::fabs(double(m))));
    EXPECT_NEAR(rstd.data<double>()[r], static_cast<double>(inv), 1e-12 * double(inv));
    for (int64_t d = 0; d < D; ++d) {
      const double want = static_cast<double>((xr[d] - m) * inv * g.data<double>()[d] + b.data<double>()[d]);
      EXPECT_NEAR(y.data<double>()[r * D + d], want, 1e-12 * std::max(1.0, std::fabs(want))) << r << "," << d;
    }
  }
}

TEST(LayerNorm, AWrongWeightShapeIsNamed) {
  Tensor m, r;
  try {
    ops::layernorm_forward(Tensor::zeros({2, 4}), Tensor::zeros({3}), Tensor::zeros({3}), 1e-5, m, r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be [4]"), std::string::npos) << e.what();
  }
}

TEST(LayerNormGrad, LayerNorm) {
  nn::LayerNorm ln(6);
  Rng rng(42);
  ln.to(DType::F64);
  for (nn::Parameter* p : ln.parameters()) p->value = random_input(p->value.shape(), rng);
  gradcheck_module(ln, {3, 4, 6});
}

TEST(LayerNormGrad, LayerNormManyRowChunks) {
  // 150 rows: the parameter gradients are summed over chunks of 64 rows (64 + 64 + 22).
  nn::LayerNorm ln(3);
  Rng rng(43);
  ln.to(DType::F64);
  for (nn::Parameter* p : ln.parameters()) p->value = random_input(p->value.shape(), rng);
  gradcheck_module(ln, {150, 3});
}

#else  // the GPU against the CPU

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

#endif  // EDP_OP_TEST_CPU

}  // namespace
