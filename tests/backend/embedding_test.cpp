// Token + position embedding on the GPU (src/backend/cuda/embedding.cpp, kernels/embedding.cu)
// against the CPU backend (src/backend/cpu/embedding.cpp): the forward is a copy (exact), the
// backward's sums are in position order on both (1e-6).
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <tuple>
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

}  // namespace
