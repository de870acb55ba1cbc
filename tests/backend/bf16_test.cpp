// bfloat16 products on the GPU (ops::set_matmul_bf16: the cuBLASLt plans of
// src/backend/cuda/linear.cpp with bfloat16 operands, the strided-batched GEMMs of attention.cpp)
// against oracles that need no bfloat16 hardware on the CPU.
//
// Linear: the CPU backend's float32 product of the operands rounded here to bfloat16
// (to_bfloat16: round to nearest, ties to even — the rule of kernels/bf16.cu). A product of two
// bfloat16 values (8 significant bits each) is exact in float32, so the GPU and the oracle differ
// only in how the float32 sums are ordered (and in the tensor cores' adder tree): 64·√K·ε of the
// output's rms allows that, four times the float32 GEMM tolerance; operands left unrounded move
// the largest element 19 to 1100 times that allowance on these shapes (checked on the same data,
// so the test can tell them apart; TF32 rounding moves it a quarter as much, still beyond it).
//
// Attention rounds q, k, v, the probabilities and the incoming gradients before each product; the
// softmax in between (exp of rounded scores) has no exact CPU counterpart, so it is checked within
// bfloat16's error of the float32 CPU op (2 % of the rms: 8-bit operands through two products and
// a softmax), as really rounded (farther from float32 than the float32 GPU op), and bitwise the
// same on a second call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

Tensor rounded(const Tensor& t) { return t.to(DType::BF16).to(DType::F32); }

double max_diff(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::fabs(x.item(i) - y.item(i)));
  return m;
}

Tol bf16_product_tol(int64_t K, const Tensor& ref) {
  const double r = 64 * 1.19e-7 * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1)));
  return {r, r * rms(ref)};
}

class CudaBf16 : public CudaOps {
 protected:
  void TearDown() override {
    ops::set_matmul_bf16(false);
    CudaOps::TearDown();
  }
};

TEST_F(CudaBf16, LinearMatchesTheFloat32ProductOfRoundedOperands) {
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1}, {7, 13, 5}, {33, 3136, 128}, {256, 128, 10}, {64, 784, 256}, {5, 3, 1000}, {512, 512, 1536}};
  uint64_t seed = 4100;
  for (bool tf32 : {false, true}) {  // the bfloat16 products ignore TF32
    for (auto [N, I, O] : shapes) {
      SCOPED_TRACE(testing::Message() << "N=" << N << " I=" << I << " O=" << O << " tf32=" << tf32);
      const Tensor x = randn({N, I}, seed++), w = randn({O, I}, seed++, 1.0 / std::sqrt(double(I)));
      const Tensor b = randn({O}, seed++), dy = randn({N, O}, seed++);
      const Tensor xr = rounded(x), wr = rounded(w), dyr = rounded(dy);

      // The oracles: float32 on the CPU (matmul_bf16 off there).
      ops::set_matmul_bf16(false);
      const Tensor y_ref = ops::linear_forward(xr, wr, b);
      Tensor dw_ref = randn({O, I}, seed), db_ref = randn({O}, seed + 1);
      Tensor dw_unused = dw_ref.clone(), db_unrounded = db_ref.clone();
      const Tensor dx_ref = ops::linear_backward(xr, wr, dyr, dw_ref, nullptr, true);
      (void)ops::linear_backward(x, w, dy, dw_unused, &db_unrounded, false);  // the bias grad sums float32 dy

      cuda::set_tf32(tf32);
      ops::set_matmul_bf16(true);  // its result speaks of the CPU's products; the GPU's need sm_80
      const Tensor y = ops::linear_forward(G(x), G(w), G(b));
      Tensor dw = G(randn({O, I}, seed)), db = G(randn({O}, seed + 1));
      seed += 2;
      const Tensor dx = ops::linear_backward(G(x), G(w), G(dy), dw, &db, true);
      ops::set_matmul_bf16(false);

      const Tol ty = bf16_product_tol(I, y_ref), tx = bf16_product_tol(O, dx_ref), tw = bf16_product_tol(N + 1, dw_ref);
      EXPECT_TRUE(close(y, y_ref, ty, "y"));
      EXPECT_TRUE(close(dx, dx_ref, tx, "dx"));
      EXPECT_TRUE(close(dw, dw_ref, tw, "dw"));
      EXPECT_TRUE(close(db, db_unrounded, dot_tol(N + 1, db_unrounded), "db (float32 dy, not rounded)"));
      if (I >= 128)  // the tolerance tells rounded from unrounded operands on these data
        EXPECT_FALSE(close(ops::linear_forward(x, w, b), y_ref, ty, "y of unrounded operands"));
    }
  }
}

TEST_F(CudaBf16, AttentionIsWithinBfloat16OfFloat32AndDeterministic) {
  uint64_t seed = 4300;
  for (auto [B, T, H, hd] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 1, 1, 1}, {2, 7, 2, 4}, {2, 130, 4, 16}, {1, 65, 3, 8}, {2, 256, 8, 64}}) {
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " H=" << H << " hd=" << hd);
    cuda::set_tf32(false);
    const Tensor qkv = randn({B, T, 3 * H * hd}, seed++), dy = randn({B, T, H * hd}, seed++);
    Tensor lse, glse32, glse, glse2;
    const Tensor y = ops::attention_forward(qkv, H, lse);
    const Tensor dqkv = ops::attention_backward(qkv, y, dy, lse, H);
    const Tensor gy32 = ops::attention_forward(G(qkv), H, glse32);
    const Tensor gd32 = ops::attention_backward(G(qkv), gy32, G(dy), glse32, H);

    ops::set_matmul_bf16(true);
    const Tensor gy = ops::attention_forward(G(qkv), H, glse);
    const Tensor gd = ops::attention_backward(G(qkv), gy, G(dy), glse, H);
    const Tensor gy2 = ops::attention_forward(G(qkv), H, glse2);
    const Tensor gd2 = ops::attention_backward(G(qkv), gy2, G(dy), glse2, H);
    ops::set_matmul_bf16(false);

    // A bfloat16 logit q·k is off by about |q||k|·2^-9, which moves the probabilities by a few
    // percent where the logits are large (hd 64: |q·k| ~ 8): on an H200, 786k elements of dqkv
    // were at most 0.07 of its rms away from float32 (B 2, T 256, H 8, hd 64). Allowed: 0.15 of
    // the rms (a wrong index or a missed term is off by the rms itself) and 2 % of the value.
    EXPECT_TRUE(close(gy, y, Tol{2e-2, 0.15 * rms(y)}, "y"));
    EXPECT_TRUE(close(glse, lse, Tol{2e-2, 2e-2 * rms(lse)}, "lse"));
    EXPECT_TRUE(close(gd, dqkv, Tol{2e-2, 0.15 * rms(dqkv)}, "dqkv"));
    EXPECT_TRUE(same(gy2, gy.to(Device::cpu()), "y, second call"));
    EXPECT_TRUE(same(gd2, gd.to(Device::cpu()), "dqkv, second call"));
    if (T >= 64 && hd >= 8)  // products long enough that bfloat16 rounding shows
      EXPECT_GT(max_diff(gy, y), 4 * max_diff(gy32, y)) << "the bfloat16 products did not run";
  }
}

}  // namespace
