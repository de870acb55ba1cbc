// Token + position embedding, one file for the op (llm.c's habit: an op found by its name):
//   test_backend_cpu  (EDP_OP_TEST_CPU=1, every build): the CPU oracle (src/backend/cpu/embedding.cpp)
//                     against the definition, exactly (integer-valued sums), its errors, and the
//                     layer's gradients by finite differences (support/gradcheck_util.h);
//   test_backend_cuda (CUDA builds): the GPU op (src/backend/cuda/embedding.cpp,
//                     kernels/embedding.cu) against the oracle: the forward exact, the backward's
//                     sums in position order on both (1e-6).
// Shapes, tolerances and the helpers: op_test_util.h.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
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
TEST(Embedding, ForwardAddsTheTokenAndPositionRows) {
  const int64_t B = 2, T = 3, V = 5, D = 4;
  const Tensor x = Tensor::from_vector<int32_t>({B, T}, {3, 0, 3, 4, 4, 1});
  const Tensor wte = randn({V, D}, 11), wpe = randn({T + 1, D}, 12);
  const Tensor y = ops::embedding_forward(x, wte, wpe);
  ASSERT_EQ(y.shape(), Shape({B, T, D}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        const int32_t v = x.data<int32_t>()[b * T + t];
        // One float32 addition: exact against the same addition here.
        EXPECT_EQ(y.data<float>()[(b * T + t) * D + d], wte.data<float>()[v * D + d] + wpe.data<float>()[t * D + d]);
      }
}

TEST(Embedding, BackwardSumsEachTokensPositionsIntoItsRow) {
  // Integer-valued gradients: every sum is exact in float32, so the rows compare with ==.
  const int64_t B = 2, T = 3, V = 5, D = 2;
  const Tensor x = Tensor::from_vector<int32_t>({B, T}, {3, 0, 3, 4, 4, 1});
  Tensor dy({B, T, D});
  for (int64_t i = 0; i < dy.numel(); ++i) dy.data<float>()[i] = static_cast<float>(i % 7 - 3);
  Tensor dwte = Tensor::full({V, D}, 1.0), dwpe = Tensor::full({T + 1, D}, 2.0);  // accumulated into
  ops::embedding_backward(x, dy, dwte, dwpe);
  auto g = [&](int64_t b, int64_t t, int64_t d) { return dy.data<float>()[(b * T + t) * D + d]; };
  for (int64_t d = 0; d < D; ++d) {
    EXPECT_EQ(dwte.data<float>()[3 * D + d], 1 + g(0, 0, d) + g(0, 2, d));  // token 3 at (0,0), (0,2)
    EXPECT_EQ(dwte.data<float>()[4 * D + d], 1 + g(1, 0, d) + g(1, 1, d));
    EXPECT_EQ(dwte.data<float>()[0 * D + d], 1 + g(0, 1, d));
    EXPECT_EQ(dwte.data<float>()[1 * D + d], 1 + g(1, 2, d));
    EXPECT_EQ(dwte.data<float>()[2 * D + d], 1.0f);  // absent token: untouched
    for (int64_t t = 0; t < T; ++t) EXPECT_EQ(dwpe.data<float>()[t * D + d], 2 + g(0, t, d) + g(1, t, d));
    EXPECT_EQ(dwpe.data<float>()[T * D + d], 2.0f);  // a position past the sequence: untouched
  }
}

TEST(Embedding, AnIdOutsideTheVocabularyIsNamed) {
  const Tensor x = Tensor::from_vector<int32_t>({1, 3}, {0, 7, 1});
  try {
    ops::embedding_forward(x, randn({5, 2}, 1), randn({3, 2}, 2));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary [0, 5)"), std::string::npos) << e.what();
  }
}

TEST(EmbeddingGrad, TokenPositionEmbedding) {
  // Token 3 appears three times, 0 twice: their rows sum several positions' gradients.
  manual_seed(40);
  nn::TokenPositionEmbedding e(5, 4, 3);
  gradcheck_ids(e, Tensor::from_vector<int32_t>({2, 4}, {3, 0, 3, 1, 0, 3, 4, 2}));
}

TEST(EmbeddingGrad, TokenPositionEmbeddingShorterThanContext) {
  manual_seed(41);
  nn::TokenPositionEmbedding e(6, 8, 2);
  gradcheck_ids(e, Tensor::from_vector<int32_t>({3, 2}, {5, 5, 0, 1, 5, 2}));
}

#else  // the GPU against the CPU

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

#endif  // EDP_OP_TEST_CPU

}  // namespace
