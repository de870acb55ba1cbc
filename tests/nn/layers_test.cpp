// Layer forward values against hand-computed results, the gradient contract (parameter grads
// accumulate, activation grads are fresh), shape errors that name both shapes, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "edp/backend/ops.h"
#include "edp/core/random.h"
#include "edp/core/threads.h"
#include "edp/nn/gpt.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"

using namespace edp;
using namespace edp::nn;

TEST(Layers, LinearForwardByHand) {
  Linear l(2, 2);
  float* w = l.weight().value.data<float>();
  w[0] = 1; w[1] = 2; w[2] = -1; w[3] = 0.5f;
  l.bias()->value.data<float>()[0] = 0.25f;
  l.bias()->value.data<float>()[1] = -1;
  Tensor x = Tensor::from_vector<float>({1, 2}, {3, 4});
  Tensor y = l.forward(x);
  EXPECT_FLOAT_EQ(y.item(0), 3 + 8 + 0.25f);
  EXPECT_FLOAT_EQ(y.item(1), -3 + 2 - 1);
}

TEST(Layers, Conv2dForwardByHand) {
  // 1 channel 3x3 input, 2x2 kernel of ones, no padding → sums of 2x2 windows.
  Conv2d c(1, 1, 2, 1, 0, false);
  c.weight().value.fill(1.0);
  Tensor x = Tensor::from_vector<float>({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor y = c.forward(x);
  ASSERT_EQ(y.shape(), Shape({1, 1, 2, 2}));
  EXPECT_FLOAT_EQ(y.item(0), 12);
  EXPECT_FLOAT_EQ(y.item(1), 16);
  EXPECT_FLOAT_EQ(y.item(2), 24);
  EXPECT_FLOAT_EQ(y.item(3), 28);
  // Padding 1: the corner output sees only x[0][0..1] and x[1][0..1].
  Conv2d p(1, 1, 2, 1, 1, false);
  p.weight().value.fill(1.0);
  Tensor yp = p.forward(x);
  ASSERT_EQ(yp.shape(), Shape({1, 1, 4, 4}));
  EXPECT_FLOAT_EQ(yp.item(0), 1);
  EXPECT_FLOAT_EQ(yp.item(5), 12);
  EXPECT_FLOAT_EQ(yp.item(15), 9);
}

// The arithmetic a model reports (benchmarks turn it into GFLOP/s): 2 FLOPs per multiply-add of
// its products, counted by hand here; the backward twice that, once for a layer that computes no
// input gradient (the first of a network; as its last backward ran). Exact: small integers in doubles.
TEST(Layers, ForwardAndBackwardFlopsCountTheProducts) {
  auto conv = std::make_shared<Conv2d>(2, 3, 3, 1, 1);  // [1, 2, 4, 4] -> [1, 3, 4, 4]
  auto fc = std::make_shared<Linear>(48, 5);
  Sequential net{conv, std::make_shared<Flatten>(), fc};
  net.set_input_grad(false);
  net.backward(net.forward(Tensor::zeros({1, 2, 4, 4})));  // the backward decides which layers need dx
  const double conv_f = 2.0 * (3 * 4 * 4) * (2 * 3 * 3), fc_f = 2.0 * 48 * 5;
  EXPECT_EQ(conv->forward_flops(), conv_f);
  EXPECT_EQ(fc->forward_flops(), fc_f);
  EXPECT_EQ(net.forward_flops(), conv_f + fc_f);
  EXPECT_EQ(net.backward_flops(), conv_f + 2 * fc_f) << "the first layer computes no input gradient";
  Linear rows(3, 4);
  rows.forward(Tensor::zeros({2, 5, 3}));  // 10 rows
  EXPECT_EQ(rows.forward_flops(), 2.0 * 10 * 3 * 4);
}

TEST(Layers, FusedReluConvEqualsConvThenRelu) {
  // Same weights; the fused layer's output and gradients equal Conv2d → ReLU bitwise (the
  // max/select is exact).
  manual_seed(31);
  Conv2d fused(2, 4, 3, 1, 1, true, true);
  manual_seed(31);
  Sequential plain{make<Conv2d>(2, 4, 3, 1, 1, true), make<ReLU>()};
  Rng rng(2);
  Tensor x({5, 2, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rng.normal());
  Tensor ya = fused.forward(x), yb = plain.forward(x);
  ASSERT_EQ(0, std::memcmp(ya.raw(), yb.raw(), ya.nbytes()));
  Tensor dy = ya.clone();
  Tensor dxa = fused.backward(dy), dxb = plain.backward(dy);
  EXPECT_EQ(0, std::memcmp(dxa.raw(), dxb.raw(), dxa.nbytes()));
  auto pa = fused.parameters(), pb = plain.parameters();
  for (size_t k = 0; k < pa.size(); ++k)
    EXPECT_EQ(0, std::memcmp(pa[k]->grad.raw(), pb[k]->grad.raw(), pa[k]->grad.nbytes()))
        << pa[k]->name;
}

TEST(Layers, MaxPoolAndAvgPool) {
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 4}, {1, 5, 2, 0, 3, 4, 8, 7});
  MaxPool2d mp(2);
  Tensor y = mp.forward(x);
  ASSERT_EQ(y.shape(), Shape({1, 1, 1, 2}));
  EXPECT_FLOAT_EQ(y.item(0), 5);
  EXPECT_FLOAT_EQ(y.item(1), 8);
  Tensor dx = mp.backward(Tensor::from_vector<float>({1, 1, 1, 2}, {10, 20}));
  EXPECT_FLOAT_EQ(dx.item(1), 10);
  EXPECT_FLOAT_EQ(dx.item(6), 20);
  EXPECT_FLOAT_EQ(ops::sum(dx), 30);
  GlobalAvgPool2d gap;
  EXPECT_FLOAT_EQ(gap.forward(x).item(0), 30.0f / 8);
}

TEST(Layers, ShapeErrorsNameBothShapes) {
  Linear l(4, 3);
  try {
    l.forward(Tensor::zeros({2, 5}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[2, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3, 4]"), std::string::npos) << m;
  }
  Conv2d c(3, 8, 3);
  EXPECT_THROW(c.forward(Tensor::zeros({1, 2, 8, 8})), ShapeError);
  EXPECT_THROW(c.forward(Tensor::zeros({1, 3, 2, 2})), ShapeError);
}

TEST(Layers, ParameterGradsAccumulateActivationGradsDoNot) {
  manual_seed(3);
  Linear l(3, 2);
  Tensor x = Tensor::full({4, 3}, 0.5);
  Tensor dy = Tensor::full({4, 2}, 1.0);
  l.forward(x);
  Tensor dx1 = l.backward(dy);
  Tensor g1 = l.weight().grad.clone();
  l.forward(x);
  Tensor dx2 = l.backward(dy);
  for (int64_t i = 0; i < g1.numel(); ++i)
    EXPECT_FLOAT_EQ(l.weight().grad.item(i), 2 * g1.item(i));
  EXPECT_FALSE(dx1.same_storage(dx2));
  for (int64_t i = 0; i < dx1.numel(); ++i) EXPECT_FLOAT_EQ(dx1.item(i), dx2.item(i));
}

TEST(Layers, GradReadyHooksFireOncePerParameter) {
  Sequential s{make<Linear>(3, 4), make<ReLU>(), make<Linear>(4, 2)};
  std::vector<std::string> order;
  for (Parameter* p : s.parameters())
    p->grad_ready_hooks.push_back([&](Parameter& q) { order.push_back(q.name); });
  s.forward(Tensor::full({2, 3}, 1.0));
  s.backward(Tensor::full({2, 2}, 1.0));
  // Reverse layer order: the last layer's parameters are ready first.
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], "2.weight");
  EXPECT_EQ(order[1], "2.bias");
  EXPECT_EQ(order[2], "0.weight");
  EXPECT_EQ(order[3], "0.bias");
}

TEST(Layers, DottedNamesAreStable) {
  Sequential s;
  s.add(make<ResidualBlock>(2, 4, 2), "block");
  s.add(make<Linear>(4, 2), "fc");
  auto names = [&] {
    std::vector<std::string> v;
    for (Parameter* p : s.parameters()) v.push_back(p->name);
    return v;
  };
  auto a = names();
  EXPECT_EQ(a, names());
  EXPECT_EQ(a.front(), "block.main.conv1.weight");
  EXPECT_EQ(a.back(), "fc.bias");
  auto bufs = s.buffers();
  ASSERT_FALSE(bufs.empty());
  EXPECT_EQ(bufs.front()->name, "block.main.bn1.running_mean");
}

TEST(Layers, NoInputGradForFirstLayer) {
  Sequential s{make<Conv2d>(1, 2, 3, 1, 1), make<Flatten>(), make<Linear>(2 * 4 * 4, 3)};
  s.set_input_grad(false);
  s.forward(Tensor::full({2, 1, 4, 4}, 1.0));
  Tensor dx = s.backward(Tensor::full({2, 3}, 1.0));
  EXPECT_FALSE(dx.defined());
  EXPECT_GT(ops::sum_squares(s.parameters()[0]->grad), 0.0);
}

TEST(Layers, BatchNormRunningStats) {
  BatchNorm2d bn(1, 1e-5, 0.5);
  Tensor x = Tensor::from_vector<float>({2, 1, 1, 2}, {1, 2, 3, 6});
  bn.forward(x);
  // mean 3, unbiased var ((4+1+0+9)/3) = 14/3; running = 0.5·init + 0.5·batch.
  EXPECT_FLOAT_EQ(bn.running_mean().value.item(0), 1.5f);
  EXPECT_FLOAT_EQ(bn.running_var().value.item(0), 0.5f + 0.5f * 14.0f / 3.0f);
}

TEST(Layers, DropoutEvalIsIdentityTrainScales) {
  Dropout d(0.25, 7);
  Tensor x = Tensor::full({1000}, 1.0);
  Tensor y = d.forward(x);
  int64_t kept = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double v = y.item(i);
    ASSERT_TRUE(v == 0.0 || std::abs(v - 1 / 0.75) < 1e-6);
    kept += v != 0.0;
  }
  // 1000 Bernoulli(0.75) draws: mean 750, sd ≈ 13.7; ±80 is > 5 sd.
  EXPECT_NEAR(kept, 750, 80);
  d.eval();
  EXPECT_TRUE(d.forward(x).same_storage(x));
}

TEST(Layers, ConvDeterministicForFixedThreads) {
  // Same inputs, same thread count → bitwise identical outputs and weight gradients.
  auto run = [] {
    manual_seed(21);
    Conv2d c(3, 5, 3, 1, 1);
    Rng rng(5);
    Tensor x({9, 3, 8, 8});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rng.normal());
    Tensor y = c.forward(x);
    c.backward(y);
    return std::make_pair(y, c.weight().grad.clone());
  };
  set_num_threads(2);
  auto a = run();
  auto b = run();
  EXPECT_EQ(0, std::memcmp(a.first.raw(), b.first.raw(), a.first.nbytes()));
  EXPECT_EQ(0, std::memcmp(a.second.raw(), b.second.raw(), a.second.nbytes()));
}

// ---- transformer layers ------------------------------------------------------------------------

namespace {
// One forward and backward of a tiny GPT at `threads` threads: the logits and every gradient.
std::vector<Tensor> gpt_step(int threads, int64_t T) {
  set_num_threads(threads);
  manual_seed(7);
  GPT g({.vocab = 37, .context = 80, .layers = 2, .dim = 16, .heads = 4, .mlp_ratio = 4});
  Rng rng(3);
  std::vector<int32_t> ids(static_cast<size_t>(3 * T));
  for (auto& v : ids) v = static_cast<int32_t>(rng.next_u64() % 37);
  Tensor x = Tensor::from_vector<int32_t>({3, T}, ids);
  Tensor logits = g.forward(x);
  SequenceCrossEntropy ce;
  ce.forward(logits, x);
  g.zero_grad();
  g.backward(ce.backward());
  std::vector<Tensor> out{logits};
  for (auto* p : g.parameters()) out.push_back(p->grad.clone());
  set_num_threads(2);
  return out;
}
}  // namespace

TEST(Layers, GPTIsDeterministicAndCloseAcrossThreadCounts) {
  // T = 70 spans two attention query blocks; 3 batch × 4 heads = 12 items split over the
  // threads; LayerNorm's 210 rows span 4 chunks; the embedding's token rows have one owner each.
  // Bitwise run to run at a fixed thread count (the determinism contract); across thread counts
  // the GEMMs' blockings differ, so only close (float32 rounding of sums of ~100 terms).
  const auto a = gpt_step(2, 70), b = gpt_step(2, 70), c = gpt_step(1, 70);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes())) << "tensor " << i;
    double scale = 0, err = 0;
    for (int64_t k = 0; k < a[i].numel(); ++k) {
      scale = std::max(scale, std::abs(a[i].item(k)));
      err = std::max(err, std::abs(a[i].item(k) - c[i].item(k)));
    }
    EXPECT_LE(err, 1e-4 * scale + 1e-9) << "tensor " << i;
  }
}

TEST(Layers, EmbeddingRejectsIdsOutsideTheVocabulary) {
  TokenPositionEmbedding e(4, 3, 2);
  try {
    e.forward(Tensor::from_vector<int32_t>({1, 3}, {0, 4, 1}));
    FAIL() << "no error";
  } catch (const ShapeError& err) {
    EXPECT_NE(std::string(err.what()).find("token id 4 at [0, 1]"), std::string::npos) << err.what();
  }
  EXPECT_THROW(e.forward(Tensor::from_vector<int32_t>({1, 4}, {0, 1, 1, 1})), ShapeError);  // T > context
}

TEST(Layers, LinearMapsTheLastDimension) {
  Linear l(3, 2);
  Tensor x = Tensor::full({2, 4, 3}, 0.5);
  Tensor y = l.forward(x);
  ASSERT_EQ(y.shape(), Shape({2, 4, 2}));
  EXPECT_EQ(l.backward(Tensor::full({2, 4, 2}, 1.0)).shape(), x.shape());
  Tensor y2 = l.forward(x.reshape(Shape{8, 3}));
  EXPECT_EQ(0, std::memcmp(y.raw(), y2.raw(), y.nbytes()));
}

TEST(Layers, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(to_bfloat16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(to_bfloat16(1.0f + 0x1.0p-8f).bits, 0x3f80);
  EXPECT_EQ(to_bfloat16(1.0f + 0x1.8p-8f).bits, 0x3f81);
  EXPECT_TRUE(std::isnan(from_bfloat16(to_bfloat16(std::nanf("")))));
  Tensor t = Tensor::from_vector<float>({3}, {1.5f, -2.25f, 3.0e-3f}).to(DType::BF16);
  EXPECT_EQ(t.dtype(), DType::BF16);
  EXPECT_EQ(t.nbytes(), 6u);
  EXPECT_FLOAT_EQ(static_cast<float>(t.item(1)), -2.25f);
  EXPECT_NEAR(t.to(DType::F32).item(2), 3.0e-3, 3.0e-3 / 128);
}

TEST(Layers, Bfloat16MatmulsStayCloseToFloat32AndAreDeterministic) {
  std::string why;
  if (!ops::cpu_bf16_available(&why)) GTEST_SKIP() << "no bfloat16 products here: " << why;
  auto run = [](bool bf16) {
    EXPECT_TRUE(ops::set_matmul_bf16(bf16));
    auto out = gpt_step(2, 70);
    ops::set_matmul_bf16(false);
    return out;
  };
  const auto f = run(false), b1 = run(true), b2 = run(true);
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(b1[i].raw(), b2[i].raw(), b1[i].nbytes())) << "tensor " << i << " differs run to run";
    // bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9 per operand); products of 16-80
    // terms accumulated in float32 stay within a few percent of the tensor's scale.
    double scale = 0, err = 0;
    for (int64_t k = 0; k < f[i].numel(); ++k) {
      scale = std::max(scale, std::abs(f[i].item(k)));
      err = std::max(err, std::abs(f[i].item(k) - b1[i].item(k)));
    }
    EXPECT_LE(err, 0.05 * scale + 1e-6) << "tensor " << i;
  }
  bool any_diff = false;  // the bf16 path really ran
  for (int64_t k = 0; k < f[0].numel() && !any_diff; ++k) any_diff = f[0].item(k) != b1[0].item(k);
  EXPECT_TRUE(any_diff);
}
