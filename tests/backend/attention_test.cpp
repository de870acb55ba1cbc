// Causal multi-head self-attention, one file for the op (llm.c's habit: an op found by its name):
//   test_backend_cpu  (EDP_OP_TEST_CPU=1, every build): the CPU oracle (src/backend/cpu/attention.cpp)
//                     against the definition in long double, causality, and the gradients of the
//                     op and the layer by finite differences (support/gradcheck_util.h);
//   test_backend_cuda (CUDA builds): the GPU op (src/backend/cuda/attention.cpp,
//                     kernels/attention.cu, cuBLAS strided-batched GEMMs) against the oracle, with
//                     EDP_TF32 off (float32 GEMMs, 16·√K·ε of the reduction length) and on (5e-3).
// Shapes, tolerances and the helpers: op_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "op_test_util.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "support/gradcheck_util.h"

namespace {
using namespace edp;
using namespace edp::test;

#if EDP_OP_TEST_CPU
// ---- the CPU oracle ---------------------------------------------------------------------------
// Against the definition evaluated in long double (scores, a softmax over s ≤ t, the weighted sum
// of v): float64 inputs and sums over T ≤ 9 terms, so 1e-12 relative is far above the op's error.
TEST(Attention, ForwardIsCausalSoftmaxAttention) {
  const int64_t B = 2, T = 9, H = 3, hd = 4, D = H * hd;
  Rng rng(60);
  const Tensor qkv = random_input({B, T, 3 * D}, rng, false);
  Tensor lse;
  const Tensor y = ops::attention_forward(qkv, H, lse);
  ASSERT_EQ(y.shape(), Shape({B, T, D}));
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) {
    return static_cast<long double>(qkv.data<double>()[(b * T + t) * 3 * D + part * D + h * hd + i]);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<long double> sc(static_cast<size_t>(t + 1));
        long double mx = -1e300L, z = 0;
        for (int64_t s = 0; s <= t; ++s) {
          long double dotqk = 0;
          for (int64_t i = 0; i < hd; ++i) dotqk += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          sc[static_cast<size_t>(s)] = dotqk / std::sqrt(static_cast<long double>(hd));
          mx = std::max(mx, sc[static_cast<size_t>(s)]);
        }
        for (long double& v : sc) z += std::exp(v - mx);
        EXPECT_NEAR(lse.data<double>()[(b * H + h) * T + t], static_cast<double>(mx + std::log(z)), 1e-12);
        for (int64_t i = 0; i < hd; ++i) {
          long double o = 0;
          for (int64_t s = 0; s <= t; ++s) o += std::exp(sc[static_cast<size_t>(s)] - mx) / z * at(b, s, 2, h, i);
          EXPECT_NEAR(y.data<double>()[(b * T + t) * D + h * hd + i], static_cast<double>(o),
                      1e-12 * std::max(1.0L, std::fabs(o)));
        }
      }
}

TEST(AttentionGrad, CausalSelfAttention) {
  manual_seed(44);
  nn::CausalSelfAttention a(8, 2, 2);
  gradcheck_module(a, {2, 5, 8});
}

TEST(AttentionGrad, AttentionCoreAcrossQueryBlocks) {
  // T = 67 > 64: the second query block (3 rows) sees keys of the first; 2 heads of width 2.
  Rng rng(45);
  Tensor qkv = random_input({1, 67, 12}, rng);
  Tensor lse;
  Tensor y = ops::attention_forward(qkv, 2, lse);
  Tensor r = random_input(y.shape(), rng, false);
  Tensor dqkv = ops::attention_backward(qkv, y, r, lse, 2);
  auto loss = [&] {
    Tensor l2;
    return dot(ops::attention_forward(qkv, 2, l2), r);
  };
  nn::GradCheckResult mm;
  compare("attention dqkv", qkv, dqkv, loss, mm);
  EXPECT_EQ(mm.mismatches, 0) << "max relative error " << mm.max_rel_err;
}

TEST(AttentionGrad, AttentionIsCausal) {
  // The output at position t must not depend on positions after t: perturbing the last token's
  // q, k, v changes only the last output row.
  Rng rng(46);
  Tensor qkv = random_input({1, 6, 6}, rng);
  Tensor lse;
  Tensor y0 = ops::attention_forward(qkv, 1, lse);
  for (int64_t c = 0; c < 6; ++c) qkv.data<double>()[5 * 6 + c] += 0.5;
  Tensor y1 = ops::attention_forward(qkv, 1, lse);
  for (int64_t i = 0; i < 5 * 2; ++i) EXPECT_EQ(y0.item(i), y1.item(i)) << "row " << i / 2;
  EXPECT_NE(y0.item(5 * 2), y1.item(5 * 2));
}

#else  // the GPU against the CPU

TEST_F(CudaOps, AttentionMatchesCpu) {
  uint64_t seed = 3200;
  for (bool tf32 : {false, true})
    for (auto [B, T, H, hd] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
             {1, 1, 1, 1}, {2, 7, 2, 4}, {2, 130, 4, 16}, {1, 65, 3, 8}}) {
      SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " H=" << H << " hd=" << hd << " tf32=" << tf32);
      cuda::set_tf32(tf32);
      const Tensor qkv = randn({B, T, 3 * H * hd}, seed++);
      Tensor lse, glse;
      const Tensor y = ops::attention_forward(qkv, H, lse);
      const Tensor gy = ops::attention_forward(G(qkv), H, glse);
      const Tol tol = tf32 ? tf32_tol(y) : dot_tol(std::max(T, hd), y);
      EXPECT_TRUE(close(gy, y, tol, "y"));
      EXPECT_TRUE(close(glse, lse, tf32 ? tf32_tol(lse) : dot_tol(hd, lse), "lse"));
      const Tensor dy = randn({B, T, H * hd}, seed++);
      const Tensor dqkv = ops::attention_backward(qkv, y, dy, lse, H);
      EXPECT_TRUE(close(ops::attention_backward(G(qkv), gy, G(dy), glse, H), dqkv,
                        tf32 ? tf32_tol(dqkv) : dot_tol(2 * T, dqkv), "dqkv"));
    }
}

#endif  // EDP_OP_TEST_CPU

}  // namespace
