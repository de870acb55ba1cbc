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
// same on a second call (the cuBLAS path: EDP_FUSED_ATTENTION is off by default).
// FusedAttention* turn on cuDNN's fused kernels and check that path on its own against the CPU op
// on the same bfloat16-rounded q, k, v (see the tolerances there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "edp/config.h"
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

// ‖a − b‖ / ‖b‖ over all elements, in double.
double rel_err(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = x.item(i) - y.item(i);
    num += d * d;
    den += y.item(i) * y.item(i);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Sets an environment variable for a scope.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const char* v) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    setenv(n, v, 1);
  }
  ~ScopedEnv() { had ? setenv(name.c_str(), old.c_str(), 1) : unsetenv(name.c_str()); }
};

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

// cuDNN's fused attention (src/backend/cuda/attention_cudnn.cpp) against the CPU op on the same
// bfloat16-rounded qkv, so that what is left is the fused kernel's own rounding: the probabilities
// rounded to bfloat16 before P·v, the output rounded to bfloat16, and in the backward the rounded
// y and dy it reads and the rounded gradients it writes (a rounding moves a value by at most
// 2^-9 of itself). Allowed, as ‖gpu − cpu‖ / ‖cpu‖: 1e-2 for y (METHOD: bfloat16 operands land
// between 1e-3 and 1e-2), 1e-3 for lse (float32 statistics of the same rounded logits), 3e-2 for
// dqkv (three rounded inputs and a rounded output; a gradient of the wrong row, or one without
// the causal mask, is off by ~1). Every relative error is printed, so a run shows its margin.
TEST_F(CudaBf16, FusedAttentionMatchesTheCpuOpOnRoundedInputs) {
  if (!EDP_HAVE_CUDNN_FRONTEND) GTEST_SKIP() << "this build has no cudnn-frontend (scripts/setup.sh fetches it)";
  ScopedEnv on("EDP_FUSED_ATTENTION", "1");
  uint64_t seed = 4700;
  for (auto [B, T, H, hd] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 1, 1, 8}, {2, 7, 2, 16}, {2, 130, 4, 32}, {1, 65, 3, 64}, {2, 256, 8, 64}, {1, 100, 2, 128}}) {
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " H=" << H << " hd=" << hd);
    const Tensor qkv = rounded(randn({B, T, 3 * H * hd}, seed++)), dy = randn({B, T, H * hd}, seed++);
    Tensor lse, glse, glse2;
    const Tensor y = ops::attention_forward(qkv, H, lse);
    const Tensor dqkv = ops::attention_backward(qkv, y, dy, lse, H);
    ops::set_matmul_bf16(true);
    ASSERT_TRUE(cuda::fused_attention(G(qkv), H)) << "the fused path was not taken (see the log for cuDNN's reason)";
    const Tensor gy = ops::attention_forward(G(qkv), H, glse);
    const Tensor gd = ops::attention_backward(G(qkv), gy, G(dy), glse, H);
    const double ey = rel_err(gy, y), el = rel_err(glse, lse), ed = rel_err(gd, dqkv);
    std::printf("fused attention B %lld T %lld H %lld hd %lld: rel. error y %.2e, lse %.2e, dqkv %.2e\n",
                static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
                static_cast<long long>(hd), ey, el, ed);
    EXPECT_LE(ey, 1e-2);
    EXPECT_LE(el, 1e-3);
    EXPECT_LE(ed, 3e-2);
    // Deterministic: the same bits on a second call (cuDNN's deterministic backward).
    const Tensor gy2 = ops::attention_forward(G(qkv), H, glse2);
    EXPECT_TRUE(same(gy2, gy.to(Device::cpu()), "y, second call"));
    EXPECT_TRUE(same(ops::attention_backward(G(qkv), gy2, G(dy), glse2, H), gd.to(Device::cpu()), "dqkv, second call"));
    // Either path's backward takes the other's forward (lse means the same on both).
    {
      ScopedEnv off("EDP_FUSED_ATTENTION", "0");
      EXPECT_FALSE(cuda::fused_attention(G(qkv), H));
      const Tensor cross = ops::attention_backward(G(qkv), gy, G(dy), glse, H);
      EXPECT_LE(rel_err(cross, dqkv), 3e-2) << "cuBLAS backward from the fused forward";
    }
    ops::set_matmul_bf16(false);
  }
}

TEST_F(CudaBf16, FusedAttentionIsNotTakenWhereItDoesNotApply) {
  const Tensor qkv = G(randn({2, 9, 3 * 2 * 4}, 4800));
  {
    ScopedEnv unset("EDP_FUSED_ATTENTION", "0");
    ops::set_matmul_bf16(true);
    EXPECT_FALSE(cuda::fused_attention(G(randn({2, 9, 3 * 2 * 16}, 4802)), 2)) << "EDP_FUSED_ATTENTION=0";
  }
  ScopedEnv on("EDP_FUSED_ATTENTION", "1");
  ops::set_matmul_bf16(false);
  EXPECT_FALSE(cuda::fused_attention(G(randn({2, 9, 3 * 2 * 16}, 4801)), 2)) << "float32: the cuBLAS path";
  ops::set_matmul_bf16(true);
  EXPECT_FALSE(cuda::fused_attention(qkv, 2)) << "head size 4 is not a multiple of 8";
  Tensor lse;  // and the op still runs there, on the cuBLAS path
  EXPECT_EQ(ops::attention_forward(qkv, 2, lse).shape(), Shape({2, 9, 8}));
}

}  // namespace
