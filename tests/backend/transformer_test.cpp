// The transformer's ops on the GPU against the CPU backend: embedding (src/backend/cuda/embedding.cpp,
// kernels/embedding.cu), layernorm (layernorm.cpp/.cu), attention (attention.cpp/.cu, cuBLAS
// strided-batched GEMMs) and the sequence form of softmax cross-entropy (ignore_index).
// Shapes, tolerances and the oracle: op_test_util.h; attention runs with EDP_TF32 off (float32
// GEMMs, tolerance 16·√K·ε of the reduction length) and on (5e-3).
#include <gtest/gtest.h>

#include <vector>

#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

Tensor ids(int64_t B, int64_t T, int64_t V, uint64_t seed) { return labels(B * T, V, seed).reshape(Shape{B, T}); }

TEST_F(CudaOps, EmbeddingMatchesCpu) {
  uint64_t seed = 3000;
  for (auto [B, T, V, D] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 1, 1, 1}, {2, 5, 3, 7}, {4, 64, 256, 96}, {3, 33, 1000, 5}}) {
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " V=" << V << " D=" << D);
    const Tensor x = ids(B, T, V, seed++), wte = randn({V, D}, seed++), wpe = randn({T + 2, D}, seed++);
    EXPECT_TRUE(close(ops::embedding_forward(G(x), G(wte), G(wpe)), ops::embedding_forward(x, wte, wpe),
                      Tol{0, 0}, "y"));
    const Tensor dy = randn({B, T, D}, seed++);
    Tensor dwte = randn({V, D}, seed), dwpe = randn({T + 2, D}, seed + 1);  // accumulate into non-zero grads
    Tensor gdwte = G(dwte), gdwpe = G(dwpe);
    ops::embedding_backward(x, dy, dwte, dwpe);
    ops::embedding_backward(G(x), G(dy), gdwte, gdwpe);
    EXPECT_TRUE(close(gdwte, dwte, Tol{1e-6, 1e-6}, "dwte"));
    EXPECT_TRUE(close(gdwpe, dwpe, Tol{1e-6, 1e-6}, "dwpe"));
  }
}

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

TEST_F(CudaOps, SequenceCrossEntropyIgnoresTheIgnoreIndex) {
  const Tensor z = randn({6, 5}, 3300, 2.0);
  const Tensor lab = Tensor::from_vector<int32_t>({6}, {4, -1, 0, 2, -1, 1});
  Tensor p_ref, p;
  int64_t n_ref = 0, n = 0;
  const double l_ref = ops::softmax_cross_entropy_forward(z, lab, p_ref, -1, &n_ref);
  const double l = ops::softmax_cross_entropy_forward(G(z), G(lab), p, -1, &n);
  EXPECT_EQ(n, n_ref);
  EXPECT_EQ(n, 4);
  EXPECT_NEAR(l, l_ref, 1e-6 * std::fabs(l_ref));
  EXPECT_TRUE(close(ops::softmax_cross_entropy_backward(p, G(lab), 0.25, -1),
                    ops::softmax_cross_entropy_backward(p_ref, lab, 0.25, -1), Tol{1e-6, 1e-9}, "dz"));
}

}  // namespace
