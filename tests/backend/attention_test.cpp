// Causal multi-head attention on the GPU (src/backend/cuda/attention.cpp, kernels/attention.cu,
// cuBLAS strided-batched GEMMs) against the CPU backend (src/backend/cpu/attention.cpp), with
// EDP_TF32 off (float32 GEMMs, tolerance 16·√K·ε of the reduction length) and on (5e-3).
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

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

}  // namespace
