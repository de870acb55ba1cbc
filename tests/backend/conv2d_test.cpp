// Conv2d against its oracle, the CPU backend's im2col + Eigen path (src/backend/cpu/conv2d.cpp):
//   test_backend_cuda (EDP_OP_TEST_CPU unset): the GPU path (src/backend/cuda/conv2d.cpp, cuDNN);
//   test_backend_cpu  (EDP_OP_TEST_CPU=1, every build): the CPU oneDNN path (EDP_DNNL), on the
//   example CNN's and CIFAR ResNet-18's shapes, forward and both backward passes, and its
//   run-to-run determinism; skipped with the reason where the build has no oneDNN.
// Shapes, tolerances and the helpers: op_test_util.h.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "op_test_util.h"
#include "edp/backend/ops.h"
#include "edp/core/random.h"
#include "edp/core/threads.h"
#include "edp/nn/gpt.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "support/gradcheck_util.h"

namespace {
using namespace edp;
using namespace edp::test;

#if !EDP_OP_TEST_CPU
// ---- Conv2d on the GPU -----------------------------------------------------------------------------
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

#else  // EDP_OP_TEST_CPU
// ---- Conv2d on the CPU: oneDNN against Eigen -----------------------------------------------------------
struct ConvShape {
  int64_t N, C, H, W, O, k, stride, pad;
  bool bias, relu;
};

// The example CNN's two convolutions at the training batch (64), the convolutions of CIFAR
// ResNet-18 (3x3 with and without stride 2, the 1x1 stride-2 shortcuts; no bias; batch 4 keeps
// the Eigen reference fast), and odd shapes: 5x5 kernels, stride 2 without padding, a 1x1
// stride-1 (the Eigen path's no-im2col case), a single output pixel, non-square inputs, channel
// counts that are not multiples of oneDNN's 16-channel blocks. Layers with fewer than 8 input
// channels (the first layers) run on Eigen under either setting; they are here so that the
// selection itself is covered.
const std::vector<ConvShape> kCpuShapes = {
    {64, 1, 28, 28, 32, 3, 1, 1, true, true},     {64, 32, 14, 14, 64, 3, 1, 1, true, true},
    {4, 3, 32, 32, 64, 3, 1, 1, false, false},    {4, 64, 32, 32, 64, 3, 1, 1, false, false},
    {4, 64, 32, 32, 128, 3, 2, 1, false, false},  {4, 64, 32, 32, 128, 1, 2, 0, false, false},
    {4, 128, 16, 16, 128, 3, 1, 1, false, false}, {4, 128, 16, 16, 256, 3, 2, 1, false, false},
    {4, 128, 16, 16, 256, 1, 2, 0, false, false}, {4, 256, 8, 8, 256, 3, 1, 1, false, false},
    {4, 256, 8, 8, 512, 3, 2, 1, false, false},   {4, 256, 8, 8, 512, 1, 2, 0, false, false},
    {4, 512, 4, 4, 512, 3, 1, 1, false, false},   {3, 5, 7, 9, 4, 3, 2, 0, true, false},
    {2, 4, 8, 8, 6, 5, 2, 2, true, true},         {1, 3, 5, 5, 2, 1, 1, 0, true, false},
    {1, 1, 3, 3, 1, 3, 1, 0, true, false},        {5, 7, 10, 10, 3, 3, 2, 0, true, false},
    {3, 20, 9, 11, 24, 3, 1, 1, true, true},      {2, 8, 6, 6, 5, 3, 2, 1, true, true}};

class CpuConv2d : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ops::cpu_conv_has_dnnl())
      GTEST_SKIP() << "this build has no oneDNN (EDP_DNNL=OFF or libdnnl-dev not found): the CPU "
                      "convolutions run on the Eigen path only";
  }
  void TearDown() override { ops::set_cpu_conv(ops::CpuConv::automatic); }
};

std::string describe(const ConvShape& s) {
  std::ostringstream o;
  o << "N=" << s.N << " C=" << s.C << " " << s.H << "x" << s.W << " O=" << s.O << " k=" << s.k
    << " stride=" << s.stride << " pad=" << s.pad << " bias=" << s.bias << " relu=" << s.relu;
  return o.str();
}

struct ConvResult {
  Tensor y, dx, dw, db;
};

// Forward, then backward with dw and db starting from `dw0`, `db0` (the += contract is part of
// what is compared). With relu the backward is given `relu_out`, the same tensor for both
// implementations: an output within rounding of 0 would otherwise flip the mask on one side
// and turn a last-bit difference into a different gradient.
ConvResult run_conv(ops::CpuConv impl, const ConvShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                    const Tensor& dy, const Tensor& dw0, const Tensor& db0, const Tensor* relu_out) {
  ops::set_cpu_conv(impl);
  const ops::Conv2dGeometry g{s.stride, s.pad, s.relu};
  ConvResult r;
  Tensor kept;  // what a training layer passes: forward keeps, backward reuses
  r.y = ops::conv2d_forward(x, w, s.bias ? b : Tensor(), g, &kept);
  r.dw = dw0.clone();
  r.db = db0.clone();
  r.dx = ops::conv2d_backward(x, w, dy, r.dw, s.bias ? &r.db : nullptr, g, true, &kept,
                              s.relu ? (relu_out ? relu_out : &r.y) : nullptr);
  return r;
}

// Tolerances: both paths sum float32 products in different orders (Eigen's GEMM blocks vs
// oneDNN's register tiles), so each output may differ by O(√K·ε) of the size of its terms
// (dot_tol: 16·√K·ε of the rms, K the reduction length: Ci·k·k for y, Co·k·k for dx, N·Ho·Wo
// (+1 for the accumulated start value) for dw and db).
TEST_F(CpuConv2d, DnnlMatchesEigenForwardAndBackward) {
  uint64_t seed = 500;
  for (const ConvShape& s : kCpuShapes) {
    SCOPED_TRACE(describe(s));
    const Tensor x = randn({s.N, s.C, s.H, s.W}, seed++);
    const Tensor w = randn({s.O, s.C, s.k, s.k}, seed++, 1.0 / std::sqrt(double(s.C * s.k * s.k)));
    const Tensor b = randn({s.O}, seed++);
    const int64_t Ho = (s.H + 2 * s.pad - s.k) / s.stride + 1, Wo = (s.W + 2 * s.pad - s.k) / s.stride + 1;
    const Tensor dy = randn({s.N, s.O, Ho, Wo}, seed++);
    const Tensor dw0 = randn(w.shape(), seed++), db0 = randn({s.O}, seed++);
    const ConvResult e = run_conv(ops::CpuConv::eigen, s, x, w, b, dy, dw0, db0, nullptr);
    const ConvResult d = run_conv(ops::CpuConv::dnnl, s, x, w, b, dy, dw0, db0, &e.y);
    const int64_t P = e.y.dim(2) * e.y.dim(3);
    EXPECT_TRUE(close(d.y, e.y, dot_tol(s.C * s.k * s.k, e.y), "y"));
    EXPECT_TRUE(close(d.dx, e.dx, dot_tol(s.O * s.k * s.k, e.dx), "dx"));
    EXPECT_TRUE(close(d.dw, e.dw, dot_tol(s.N * P + 1, e.dw), "dw"));
    if (s.bias) {
      EXPECT_TRUE(close(d.db, e.db, dot_tol(s.N * P + 1, e.db), "db"));
    }
  }
}

// No input gradient (the first trained layer of a model) and a second batch size of the same
// layer (the last, smaller batch of an epoch): each gets its own cached primitives.
TEST_F(CpuConv2d, DnnlWithoutInputGradAndOtherBatch) {
  for (int64_t N : {64, 17}) {
    const ConvShape s{N, 32, 14, 14, 32, 3, 1, 1, true, true};
    SCOPED_TRACE(describe(s));
    const Tensor x = randn({s.N, s.C, s.H, s.W}, 900 + N), w = randn({32, 32, 3, 3}, 901, 1.0 / 17);
    const Tensor b = randn({32}, 902);
    const ops::Conv2dGeometry g{1, 1, true};
    ops::set_cpu_conv(ops::CpuConv::eigen);
    const Tensor y = ops::conv2d_forward(x, w, b, g);
    const Tensor dy = randn(y.shape(), 903);
    Tensor dw_e = Tensor::zeros(w.shape()), db_e = Tensor::zeros({32});
    EXPECT_FALSE(ops::conv2d_backward(x, w, dy, dw_e, &db_e, g, false, nullptr, &y).defined());
    ops::set_cpu_conv(ops::CpuConv::dnnl);
    Tensor dw_d = Tensor::zeros(w.shape()), db_d = Tensor::zeros({32});
    EXPECT_TRUE(close(ops::conv2d_forward(x, w, b, g), y, dot_tol(32 * 9, y), "y"));
    EXPECT_FALSE(ops::conv2d_backward(x, w, dy, dw_d, &db_d, g, false, nullptr, &y).defined());
    EXPECT_TRUE(close(dw_d, dw_e, dot_tol(N * 14 * 14, dw_e), "dw"));
    EXPECT_TRUE(close(db_d, db_e, dot_tol(N * 14 * 14, db_e), "db"));
  }
}

// The determinism contract (docs/architecture.md): the same inputs at the same thread count
// give the same bits, call after call — here with every thread the machine allows, where
// oneDNN splits the weight-gradient reduction across threads.
TEST_F(CpuConv2d, DnnlIsBitwiseReproducible) {
  ops::set_cpu_conv(ops::CpuConv::dnnl);
  for (const ConvShape& s : {kCpuShapes[1], kCpuShapes[4], kCpuShapes[5]}) {
    SCOPED_TRACE(describe(s));
    const Tensor x = randn({s.N, s.C, s.H, s.W}, 1), w = randn({s.O, s.C, s.k, s.k}, 2, 0.1);
    const Tensor b = randn({s.O}, 3);
    const ops::Conv2dGeometry g{s.stride, s.pad, s.relu};
    Tensor first_y, first_dx, first_dw;
    for (int rep = 0; rep < 3; ++rep) {
      const Tensor y = ops::conv2d_forward(x, w, s.bias ? b : Tensor(), g);
      const Tensor dy = randn(y.shape(), 4);
      Tensor dw = Tensor::zeros(w.shape()), db = Tensor::zeros({s.O});
      const Tensor dx = ops::conv2d_backward(x, w, dy, dw, s.bias ? &db : nullptr, g, true, nullptr,
                                             s.relu ? &y : nullptr);
      if (rep == 0) {
        first_y = y;
        first_dx = dx;
        first_dw = dw;
        continue;
      }
      EXPECT_TRUE(same(y, first_y, "y"));
      EXPECT_TRUE(same(dx, first_dx, "dx"));
      EXPECT_TRUE(same(dw, first_dw, "dw"));
    }
  }
}

// float64 has no oneDNN convolution: it stays on the Eigen path whatever is selected.
TEST_F(CpuConv2d, Float64UsesEigenUnderDnnl) {
  const Tensor x32 = randn({2, 3, 6, 6}, 7), w32 = randn({4, 3, 3, 3}, 8, 0.2);
  const Tensor x = x32.to(DType::F64), w = w32.to(DType::F64);
  ops::set_cpu_conv(ops::CpuConv::eigen);
  const Tensor ref = ops::conv2d_forward(x, w, Tensor(), {1, 1});
  ops::set_cpu_conv(ops::CpuConv::dnnl);
  EXPECT_TRUE(same(ops::conv2d_forward(x, w, Tensor(), {1, 1}), ref, "y (float64)"));
}
// ---- gradients by finite differences (every build, test_backend_cpu; support/gradcheck_util.h) ----
using namespace edp::nn;
using Mismatch = GradCheckResult;

TEST(Conv2dGrad, Conv2dPad1Stride1) {
  manual_seed(3);
  Conv2d c(2, 3, 3, 1, 1);
  gradcheck_module(c, {2, 2, 5, 6});
}

TEST(Conv2dGrad, Conv2dStride2NoPad) {
  manual_seed(4);
  Conv2d c(3, 2, 3, 2, 0);
  gradcheck_module(c, {2, 3, 7, 7});
}

TEST(Conv2dGrad, Conv2dStride2Pad1) {
  manual_seed(5);
  Conv2d c(2, 4, 3, 2, 1, false);
  gradcheck_module(c, {3, 2, 6, 5});
}

TEST(Conv2dGrad, Conv2dSeveralSamplesPerGemm) {
  // One thread and 7 samples: the CPU conv groups up to 4 samples per GEMM (3 + 4 here), so the
  // scatter/gather between the grouped col matrix and NCHW is exercised.
  set_num_threads(1);
  manual_seed(16);
  Conv2d c(2, 3, 3, 1, 1);
  gradcheck_module(c, {7, 2, 4, 5});
  set_num_threads(2);
}

TEST(Conv2dGrad, Conv2dFusedReluGrouped) {
  // Fused ReLU on the grouped im2col path (1 thread, 6 samples) and with stride 2.
  set_num_threads(1);
  manual_seed(17);
  Conv2d c(2, 3, 3, 1, 1, true, /*relu=*/true);
  gradcheck_module(c, {6, 2, 4, 4});
  Conv2d s(2, 2, 3, 2, 1, false, /*relu=*/true);
  gradcheck_module(s, {3, 2, 5, 5});
  set_num_threads(2);
}

TEST(Conv2dGrad, Conv2dFusedReluPointwise) {
  manual_seed(18);
  Conv2d c(3, 4, 1, 1, 0, true, /*relu=*/true);
  gradcheck_module(c, {2, 3, 3, 3});
}

TEST(Conv2dGrad, Conv2dPointwise) {
  manual_seed(6);
  Conv2d c(3, 4, 1);
  gradcheck_module(c, {2, 3, 4, 4});
}

#endif  // EDP_OP_TEST_CPU

}  // namespace
