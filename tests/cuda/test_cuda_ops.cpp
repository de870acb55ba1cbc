// Every CUDA op against the CPU backend (the oracle), on fresh random inputs of several shapes,
// odd ones included (vector tails, single elements, non-multiples of the block size, views that
// are not 16-byte aligned). Device buffers are poisoned with NaN at allocation, so an unwritten
// output element fails. Ops are called through edp::ops, so the device dispatch is tested too.
//
// Tolerances (see gpu_test_util.h):
//   exact           ReLU, dropout (same counter-based RNG), max-pool forward and non-overlapping
//                   backward, average-pool backward, argmax, counts
//   1e-5..1e-6 rel  other elementwise ops, BatchNorm, softmax cross-entropy, optimizers (FMA
//                   contraction and erfc-vs-erf differ from the CPU in the last bits)
//   16·√K·ε         float32 GEMM / convolution with EDP_TF32 off (K = reduction length)
//   5e-3            TF32 tensor-core GEMM / convolution (the default)
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "edp/backend/ops.h"
#include "edp/backend/cuda_ops.h"
#include "edp/nn/module.h"
#include "edp/optim/optimizer.h"
#include "gpu_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

const auto* const g_env = ::testing::AddGlobalTestEnvironment(new PoisonEnvironment);

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override { EDP_REQUIRE_GPU(); }
  void TearDown() override { cuda::set_tf32(true); }
};

Tensor G(const Tensor& t) { return t.to(gpu()); }

// ---- Linear ----------------------------------------------------------------------------------------
TEST_F(CudaOps, LinearForwardBackwardMatchCpu) {
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1}, {7, 13, 5}, {33, 3136, 128}, {256, 128, 10}, {64, 784, 256}, {5, 3, 1000}};
  uint64_t seed = 1;
  for (bool tf32 : {false, true}) {
    cuda::set_tf32(tf32);
    for (auto [N, I, O] : shapes) {
      SCOPED_TRACE(testing::Message() << "N=" << N << " I=" << I << " O=" << O << " tf32=" << tf32);
      const Tensor x = randn({N, I}, seed++), w = randn({O, I}, seed++, 1.0 / std::sqrt(double(I)));
      const Tensor b = randn({O}, seed++), dy = randn({N, O}, seed++);
      const Tensor y_ref = ops::linear_forward(x, w, b);
      const Tensor y = ops::linear_forward(G(x), G(w), G(b));
      EXPECT_TRUE(close(y, y_ref, tf32 ? tf32_tol(y_ref) : dot_tol(I, y_ref), "y"));
      const Tensor y0_ref = ops::linear_forward(x, w, Tensor());
      EXPECT_TRUE(close(ops::linear_forward(G(x), G(w), Tensor()), y0_ref,
                        tf32 ? tf32_tol(y0_ref) : dot_tol(I, y0_ref), "y without bias"));

      // Gradients accumulate into random initial values (the += contract).
      Tensor dw_ref = randn({O, I}, seed++), db_ref = randn({O}, seed++);
      Tensor dw = G(dw_ref), db = G(db_ref);
      const Tensor dx_ref = ops::linear_backward(x, w, dy, dw_ref, &db_ref, true);
      const Tensor dx = ops::linear_backward(G(x), G(w), G(dy), dw, &db, true);
      EXPECT_TRUE(close(dx, dx_ref, tf32 ? tf32_tol(dx_ref) : dot_tol(O, dx_ref), "dx"));
      EXPECT_TRUE(close(dw, dw_ref, tf32 ? tf32_tol(dw_ref) : dot_tol(N + 1, dw_ref), "dw"));
      EXPECT_TRUE(close(db, db_ref, dot_tol(N + 1, db_ref), "db (float32 sum, never TF32)"));
      Tensor dw2 = G(dw_ref);
      EXPECT_FALSE(ops::linear_backward(G(x), G(w), G(dy), dw2, nullptr, false).defined());
    }
  }
}

TEST_F(CudaOps, LinearRejectsBadOperands) {
  const Tensor x = randn({4, 3}, 1), w = randn({5, 3}, 2);
  try {
    ops::linear_forward(G(x), w, Tensor());
    FAIL() << "mixed devices accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight is on cpu but the other operands are on cuda:0"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::linear_forward(G(x), G(randn({5, 4}, 3)), Tensor()), ShapeError);
  EXPECT_THROW(ops::linear_forward(G(x.to(DType::F64)), G(w.to(DType::F64)), Tensor()), ShapeError);
}

// ---- Conv2d -------------------------------------------------------------------------------------------
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

// ---- pooling ------------------------------------------------------------------------------------------
TEST_F(CudaOps, MaxPoolMatchesCpu) {
  struct S {
    int64_t N, C, H, W, k, s;
  };
  uint64_t seed = 200;
  for (const S& s : std::vector<S>{{2, 3, 6, 6, 2, 2}, {4, 32, 28, 28, 2, 2}, {3, 2, 7, 9, 3, 2},
                                   {1, 1, 5, 5, 2, 1}, {2, 2, 7, 7, 2, 2}, {1, 1, 1, 1, 1, 1}}) {
    SCOPED_TRACE(testing::Message() << s.N << "x" << s.C << "x" << s.H << "x" << s.W << " k=" << s.k << " s=" << s.s);
    Tensor x = randn({s.N, s.C, s.H, s.W}, seed++);
    if (x.numel() > 3) x.data<float>()[3] = NAN;  // NaN wins its window, as on the CPU
    Tensor am_ref, am;
    const Tensor y_ref = ops::maxpool2d_forward(x, s.k, s.s, am_ref);
    const Tensor y = ops::maxpool2d_forward(G(x), s.k, s.s, am);
    EXPECT_TRUE(same(y, y_ref, "y"));
    EXPECT_TRUE(same(am, am_ref, "argmax"));
    const Tensor dy = randn(y_ref.shape(), seed++);
    const Tensor dx_ref = ops::maxpool2d_backward(dy, am_ref, x.shape());
    const Tensor dx = ops::maxpool2d_backward(G(dy), am, x.shape());
    // Non-overlapping windows: each input gets at most one gradient, so exact; overlapping:
    // the atomic additions may run in another order (last-bit differences).
    EXPECT_TRUE(close(dx, dx_ref, s.k <= s.s ? Tol{0, 0} : Tol{1e-6, 1e-6}, "dx"));
  }
}

TEST_F(CudaOps, GlobalAvgPoolMatchesCpu) {
  uint64_t seed = 300;
  for (auto shape : std::vector<Shape>{{3, 5, 7, 7}, {2, 3, 1, 1}, {4, 64, 14, 14}, {1, 1, 1, 33}}) {
    const Tensor x = randn(shape, seed++);
    const Tensor y_ref = ops::global_avgpool_forward(x);
    EXPECT_TRUE(close(ops::global_avgpool_forward(G(x)), y_ref, Tol{1e-6, 1e-7}, "y " + shape.str()));
    const Tensor dy = randn(y_ref.shape(), seed++);
    EXPECT_TRUE(same(ops::global_avgpool_backward(G(dy), shape), ops::global_avgpool_backward(dy, shape),
                     "dx " + shape.str()));
  }
}

// ---- activations ---------------------------------------------------------------------------------
const std::vector<int64_t> kSizes = {1, 3, 4, 5, 1023, 4096, 4097, 100003};

TEST_F(CudaOps, ReluAndGeluMatchCpu) {
  uint64_t seed = 400;
  for (int64_t n : kSizes) {
    for (bool misaligned : {false, true}) {
      if (misaligned && n < 2) continue;
      SCOPED_TRACE(testing::Message() << "n=" << n << (misaligned ? " (view at +4 bytes)" : ""));
      Tensor base = randn({n}, seed++, 3.0);
      // A view starting one float in: not 16-byte aligned, so the scalar path runs.
      const Tensor x = misaligned ? base.narrow(1, n - 1) : base;
      const Tensor gx = misaligned ? G(base).narrow(1, n - 1) : G(base);
      const Tensor dy = randn(x.shape(), seed++);
      const Tensor y_ref = ops::relu_forward(x);
      const Tensor y = ops::relu_forward(gx);
      EXPECT_TRUE(same(y, y_ref, "relu y"));
      EXPECT_TRUE(same(ops::relu_backward(y, G(dy)), ops::relu_backward(y_ref, dy), "relu dx"));
      EXPECT_TRUE(close(ops::gelu_forward(gx), ops::gelu_forward(x), Tol{1e-5, 1e-6}, "gelu y"));
      EXPECT_TRUE(close(ops::gelu_backward(gx, G(dy)), ops::gelu_backward(x, dy), Tol{1e-5, 1e-6}, "gelu dx"));
    }
  }
}

TEST_F(CudaOps, FusedBiasActivationMatchesCpuComposition) {
  uint64_t seed = 500;
  for (auto shape : std::vector<Shape>{{5, 7}, {64, 128}, {2, 3, 5, 5}, {4, 16, 7, 9}, {1, 1}}) {
    for (cuda::Activation act : {cuda::Activation::Identity, cuda::Activation::ReLU, cuda::Activation::GELU}) {
      SCOPED_TRACE(testing::Message() << shape.str() << " act=" << static_cast<int>(act));
      const int64_t C = shape[1];
      int64_t inner = 1;
      for (int64_t d = 2; d < shape.ndim(); ++d) inner *= shape[d];
      const Tensor x = randn(shape, seed++), b = randn({C}, seed++), dy = randn(shape, seed++);
      Tensor z = x.clone();
      for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] += b.data<float>()[(i / inner) % C];
      Tensor y_ref = act == cuda::Activation::ReLU ? ops::relu_forward(z)
                     : act == cuda::Activation::GELU ? ops::gelu_forward(z) : z;
      Tensor dz_ref = act == cuda::Activation::ReLU ? ops::relu_backward(y_ref, dy)
                      : act == cuda::Activation::GELU ? ops::gelu_backward(z, dy) : dy;
      Tensor db_ref = randn({C}, seed++);
      Tensor db = G(db_ref);
      for (int64_t i = 0; i < dz_ref.numel(); ++i) db_ref.data<float>()[(i / inner) % C] += dz_ref.data<float>()[i];
      const Tensor y = cuda::bias_act_forward(G(x), G(b), act);
      EXPECT_TRUE(close(y, y_ref, Tol{1e-5, 1e-6}, "y"));
      // ReLU may be given its output, the others need the pre-activation.
      const Tensor saved = act == cuda::Activation::ReLU ? y : G(z);
      const Tensor dz = cuda::bias_act_backward(saved, G(dy), &db, act);
      EXPECT_TRUE(close(dz, dz_ref, Tol{1e-5, 1e-6}, "dz"));
      EXPECT_TRUE(close(db, db_ref, Tol{1e-5, 1e-5}, "db"));
    }
  }
}

TEST_F(CudaOps, DropoutMaskIsTheCpuMaskBitForBit) {
  uint64_t seed = 600;
  for (double p : {0.0, 0.1, 0.5, 0.9}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " n=" << n);
      const Tensor x = randn({n}, seed++);
      Tensor m_ref, m;
      const Tensor y_ref = ops::dropout_forward(x, p, 12345 + static_cast<uint64_t>(n), m_ref);
      const Tensor y = ops::dropout_forward(G(x), p, 12345 + static_cast<uint64_t>(n), m);
      EXPECT_TRUE(same(m, m_ref, "mask"));
      EXPECT_TRUE(same(y, y_ref, "y"));
      const Tensor dy = randn({n}, seed++);
      EXPECT_TRUE(same(ops::dropout_backward(G(dy), m, p), ops::dropout_backward(dy, m_ref, p), "dx"));
    }
  }
  // A view at +4 bytes (scalar path) gives the same values as the aligned path for its elements.
  const Tensor base = randn({1001}, 7);
  Tensor m1, m2;
  const Tensor y1 = ops::dropout_forward(G(base).narrow(1, 1000), 0.3, 9, m1);
  const Tensor y2 = ops::dropout_forward(base.narrow(1, 1000), 0.3, 9, m2);
  EXPECT_TRUE(same(m1, m2, "mask of a misaligned view"));
  EXPECT_TRUE(same(y1, y2, "y of a misaligned view"));
}

TEST_F(CudaOps, AxpyScaleAddMatchCpu) {
  uint64_t seed = 700;
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const Tensor a = randn({n}, seed++), b = randn({n}, seed++);
    Tensor y_ref = a.clone(), y = G(a);
    ops::axpy_(y_ref, -0.37, b);
    ops::axpy_(y, -0.37, G(b));
    EXPECT_TRUE(close(y, y_ref, Tol{1e-6, 1e-6}, "axpy"));
    ops::scale_(y_ref, 1.7);
    ops::scale_(y, 1.7);
    EXPECT_TRUE(close(y, y_ref, Tol{1e-6, 1e-6}, "scale"));
    EXPECT_TRUE(same(ops::add(G(a), G(b)), ops::add(a, b), "add"));
  }
}

TEST_F(CudaOps, SumsMatchCpu) {
  uint64_t seed = 800;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{4097}, (int64_t{1} << 20) + 3}) {
    const Tensor x = randn({n}, seed++);
    const double s = ops::sum(x), ss = ops::sum_squares(x);
    EXPECT_NEAR(ops::sum(G(x)), s, 1e-9 * (std::fabs(s) + std::sqrt(double(n)))) << n;
    EXPECT_NEAR(ops::sum_squares(G(x)), ss, 1e-10 * ss + 1e-12) << n;
    // Deterministic: the same value on every call.
    EXPECT_EQ(ops::sum(G(x)), ops::sum(G(x)));
  }
}

// ---- BatchNorm -----------------------------------------------------------------------------------
TEST_F(CudaOps, BatchNormMatchesCpu) {
  uint64_t seed = 900;
  for (auto shape : std::vector<Shape>{{4, 3, 5, 5}, {2, 7, 3, 1}, {16, 32, 14, 14}, {1, 2, 1, 2}, {64, 8, 28, 28}}) {
    SCOPED_TRACE(shape.str());
    const int64_t C = shape[1];
    const Tensor x = randn(shape, seed++, 2.0);
    Tensor xs = x.clone();  // a shifted input: statistics must not cancel
    for (int64_t i = 0; i < xs.numel(); ++i) xs.data<float>()[i] += 50.0f;
    for (const Tensor* in : {&x, static_cast<const Tensor*>(&xs)}) {
      const Tensor gamma = randn({C}, seed++), beta = randn({C}, seed++);
      Tensor rm_ref = randn({C}, seed++), rv_ref = Tensor::full({C}, 1.5);
      Tensor rm = G(rm_ref), rv = G(rv_ref);
      Tensor sm_ref, si_ref, sm, si;
      const Tensor y_ref = ops::batchnorm2d_forward_train(*in, gamma, beta, rm_ref, rv_ref, 0.1, 1e-5, sm_ref, si_ref);
      const Tensor y = ops::batchnorm2d_forward_train(G(*in), G(gamma), G(beta), rm, rv, 0.1, 1e-5, sm, si);
      EXPECT_TRUE(close(y, y_ref, Tol{1e-5, 1e-5 * rms(y_ref)}, "y"));
      EXPECT_TRUE(close(sm, sm_ref, Tol{1e-6, 1e-6}, "saved mean"));
      EXPECT_TRUE(close(si, si_ref, Tol{1e-5, 0}, "saved inverse std"));
      EXPECT_TRUE(close(rm, rm_ref, Tol{1e-6, 1e-6}, "running mean"));
      EXPECT_TRUE(close(rv, rv_ref, Tol{1e-5, 1e-6}, "running var"));
      const Tensor ye_ref = ops::batchnorm2d_forward_eval(*in, gamma, beta, rm_ref, rv_ref, 1e-5);
      EXPECT_TRUE(close(ops::batchnorm2d_forward_eval(G(*in), G(gamma), G(beta), rm, rv, 1e-5), ye_ref,
                        Tol{1e-5, 1e-5 * rms(ye_ref)}, "eval y"));
      const Tensor dy = randn(shape, seed++);
      Tensor dg_ref = randn({C}, seed++), db_ref = randn({C}, seed++);
      Tensor dg = G(dg_ref), db = G(db_ref);
      const Tensor dx_ref = ops::batchnorm2d_backward(*in, dy, gamma, sm_ref, si_ref, dg_ref, db_ref);
      const Tensor dx = ops::batchnorm2d_backward(G(*in), G(dy), G(gamma), sm, si, dg, db);
      EXPECT_TRUE(close(dx, dx_ref, Tol{1e-4, 1e-5 * rms(dx_ref)}, "dx"));
      EXPECT_TRUE(close(dg, dg_ref, Tol{1e-5, 1e-5 * rms(dg_ref)}, "dgamma"));
      EXPECT_TRUE(close(db, db_ref, Tol{1e-5, 1e-5 * rms(db_ref)}, "dbeta"));
    }
  }
}

// ---- softmax cross-entropy ---------------------------------------------------------------------------
TEST_F(CudaOps, SoftmaxCrossEntropyMatchesCpu) {
  uint64_t seed = 1000;
  for (auto [N, C] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 10}, {256, 10}, {33, 1000}, {300, 3}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    const Tensor z = randn({N, C}, seed++, 4.0);
    const Tensor lab = labels(N, C, seed++);
    Tensor p_ref, p;
    const double l_ref = ops::softmax_cross_entropy_forward(z, lab, p_ref);
    const double l = ops::softmax_cross_entropy_forward(G(z), G(lab), p);
    EXPECT_NEAR(l, l_ref, 1e-6 * std::fabs(l_ref) + 1e-7);
    EXPECT_TRUE(close(p, p_ref, Tol{1e-6, 1e-7}, "probs"));
    Tensor p2;
    const Tensor dev_loss = cuda::softmax_cross_entropy_forward_async(G(z), G(lab), p2);
    EXPECT_NEAR(cuda::read_loss(dev_loss, G(lab)), l_ref, 1e-6 * std::fabs(l_ref) + 1e-7);
    const double scale = 1.0 / static_cast<double>(N);
    EXPECT_TRUE(close(ops::softmax_cross_entropy_backward(p, G(lab), scale),
                      ops::softmax_cross_entropy_backward(p_ref, lab, scale), Tol{1e-6, 1e-9}, "dz"));
    EXPECT_EQ(ops::count_correct(G(z), G(lab)), ops::count_correct(z, lab));
  }
}

TEST_F(CudaOps, InvalidLabelGivesTheCpuError) {
  const Tensor z = randn({4, 3}, 1);
  Tensor lab = labels(4, 3, 2);
  lab.data<int32_t>()[2] = 7;
  Tensor p;
  std::string cpu_msg, gpu_msg;
  try {
    ops::softmax_cross_entropy_forward(z, lab, p);
  } catch (const ShapeError& e) {
    cpu_msg = e.what();
  }
  try {
    ops::softmax_cross_entropy_forward(G(z), G(lab), p);
  } catch (const ShapeError& e) {
    gpu_msg = e.what();
  }
  EXPECT_FALSE(cpu_msg.empty());
  EXPECT_EQ(gpu_msg, cpu_msg);
}

// ---- optimizers (through edp::optim, i.e. the fused multi-tensor kernels) ---------------------------
struct ParamSet {
  std::vector<std::unique_ptr<nn::Parameter>> own;
  std::vector<nn::Parameter*> ptrs;
};

// 30 tensors (more than one launch holds) of odd sizes, one spanning several chunks.
ParamSet make_params(Device d, uint64_t seed) {
  ParamSet s;
  std::vector<int64_t> sizes = {3 * 65536 + 7, 1, 5, 1000, 65536, 65537};
  for (int i = 0; i < 24; ++i) sizes.push_back(17 * i + 3);
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto p = std::make_unique<nn::Parameter>();
    p->name = "p";
    p->name += std::to_string(i);
    p->value = randn({sizes[i]}, seed + i).to(d);
    p->grad = Tensor::zeros({sizes[i]}, DType::F32, d);
    s.ptrs.push_back(p.get());
    s.own.push_back(std::move(p));
  }
  return s;
}

void set_grads(ParamSet& s, uint64_t seed) {
  for (size_t i = 0; i < s.ptrs.size(); ++i)
    s.ptrs[i]->grad.copy_from(randn(s.ptrs[i]->grad.shape(), seed + 1000 * i).to(s.ptrs[i]->grad.device()));
}

template <typename Opt, typename Options>
void compare_optimizer(const Options& o, Tol tol, const char* what) {
  ParamSet cpu = make_params(Device::cpu(), 11), dev = make_params(gpu(), 11);
  Opt oc(cpu.ptrs, o), og(dev.ptrs, o);
  for (int step = 0; step < 5; ++step) {
    set_grads(cpu, 77 + step);
    set_grads(dev, 77 + step);
    oc.step();
    og.step();
  }
  for (size_t i = 0; i < cpu.ptrs.size(); ++i)
    EXPECT_TRUE(close(dev.ptrs[i]->value, cpu.ptrs[i]->value, tol, std::string(what) + " " + cpu.ptrs[i]->name));
  const auto sc = oc.state(), sg = og.state();
  ASSERT_EQ(sc.size(), sg.size());
  for (size_t i = 0; i < sc.size(); ++i) EXPECT_TRUE(close(*sg[i], *sc[i], tol, std::string(what) + " state"));
}

TEST_F(CudaOps, SgdMatchesCpu) {
  compare_optimizer<optim::SGD>(optim::SGDOptions{0.1, 0.0, 0.0, 0.0, false}, Tol{1e-6, 1e-7}, "plain");
  compare_optimizer<optim::SGD>(optim::SGDOptions{0.05, 0.9, 0.0, 5e-4, true}, Tol{1e-6, 1e-7}, "nesterov");
  compare_optimizer<optim::SGD>(optim::SGDOptions{0.05, 0.9, 0.1, 1e-2, false}, Tol{1e-6, 1e-7}, "dampened");
}

TEST_F(CudaOps, AdamWMatchesCpu) {
  compare_optimizer<optim::AdamW>(optim::AdamWOptions{1e-3, 0.9, 0.999, 1e-8, 1e-2}, Tol{1e-5, 1e-7}, "adamw");
}

TEST_F(CudaOps, GradientScalingAndNorm) {
  ParamSet dev = make_params(gpu(), 5);
  set_grads(dev, 9);
  std::vector<Tensor*> g;
  std::vector<const Tensor*> cg;
  double ss = 0;
  std::vector<Tensor> before;
  for (auto* p : dev.ptrs) {
    g.push_back(&p->grad);
    cg.push_back(&p->grad);
    before.push_back(p->grad.to(Device::cpu()));
    ss += ops::sum_squares(before.back());
  }
  EXPECT_NEAR(cuda::sum_squares_multi(cg), ss, 1e-10 * ss);
  EXPECT_FALSE(cuda::scale_and_check_finite(g, 0.5f));
  for (size_t i = 0; i < g.size(); ++i) {
    Tensor half = before[i].clone();
    ops::scale_(half, 0.5);
    EXPECT_TRUE(same(*g[i], half, "scaled by 1/2 (exact)"));
  }
  // An overflow anywhere is reported.
  Tensor big = Tensor::full({3}, 3e38, DType::F32, gpu());
  std::vector<Tensor*> with_big = g;
  with_big.push_back(&big);
  EXPECT_TRUE(cuda::scale_and_check_finite(with_big, 2.0f));
  // clip_grad_norm takes the fused path for device parameters.
  set_grads(dev, 9);
  const double norm = optim::clip_grad_norm(dev.ptrs, 1.0);
  EXPECT_NEAR(norm, std::sqrt(ss), 1e-6 * std::sqrt(ss));
  double after = 0;
  for (auto* p : dev.ptrs) after += ops::sum_squares(p->grad);
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-4);
}

}  // namespace
