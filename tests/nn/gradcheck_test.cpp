// Finite-difference gradient checks for every layer and the loss, in float64 (the transformer
// ops' are in tests/backend/embedding_test.cpp, layernorm_test.cpp, attention_test.cpp).
//
// Method: L = Σ r ⊙ f(x) for a fixed random r, so dL/dy = r. Analytic gradients come from
// backward(r); numeric ones from central differences (L(θ+h) - L(θ-h)) / 2h with h = 1e-6.
// In double, truncation error is O(h²) ≈ 1e-12 and rounding error ≈ 1e-16·|L|/h ≈ 1e-10, so we
// require |analytic - numeric| ≤ 1e-6 · max(1, |analytic|, |numeric|): five orders of magnitude
// above the expected error and far below any real bug. Inputs of ReLU-like layers are kept at
// least 1e-3 from the kink so that ±h never crosses it.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "edp/backend/ops.h"
#include "edp/core/random.h"
#include "edp/core/threads.h"
#include "edp/nn/gpt.h"
#include "edp/nn/gradcheck.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "support/gradcheck_util.h"

using namespace edp;
using namespace edp::nn;

namespace {

using Mismatch = GradCheckResult;
using test::compare;
using test::dot;
using test::gradcheck_ids;
using test::gradcheck_module;
using test::random_input;

}  // namespace

TEST(GradCheck, Linear) {
  manual_seed(1);
  Linear l(7, 5);
  gradcheck_module(l, {4, 7});
}

TEST(GradCheck, LinearNoBias) {
  manual_seed(2);
  Linear l(3, 6, false);
  gradcheck_module(l, {5, 3});
}

TEST(GradCheck, LinearSplitAcrossThreads) {
  // The CPU linear splits each GEMM by output columns or rows into shares of 16 per thread
  // (parallel_ranges): 45 outputs and 37 inputs give shares 16/16/13 with 3 threads and 32/13
  // with 2, so y, dw (by output rows) and dx (by input columns) each cross share boundaries.
  for (int threads : {2, 3}) {
    SCOPED_TRACE(threads);
    set_num_threads(threads);
    manual_seed(30 + threads);
    Linear l(37, 45);
    gradcheck_module(l, {3, 37});
  }
  set_num_threads(2);
}

TEST(GradCheck, Conv2dPad1Stride1) {
  manual_seed(3);
  Conv2d c(2, 3, 3, 1, 1);
  gradcheck_module(c, {2, 2, 5, 6});
}

TEST(GradCheck, Conv2dStride2NoPad) {
  manual_seed(4);
  Conv2d c(3, 2, 3, 2, 0);
  gradcheck_module(c, {2, 3, 7, 7});
}

TEST(GradCheck, Conv2dStride2Pad1) {
  manual_seed(5);
  Conv2d c(2, 4, 3, 2, 1, false);
  gradcheck_module(c, {3, 2, 6, 5});
}

TEST(GradCheck, Conv2dSeveralSamplesPerGemm) {
  // One thread and 7 samples: the CPU conv groups up to 4 samples per GEMM (3 + 4 here), so the
  // scatter/gather between the grouped col matrix and NCHW is exercised.
  set_num_threads(1);
  manual_seed(16);
  Conv2d c(2, 3, 3, 1, 1);
  gradcheck_module(c, {7, 2, 4, 5});
  set_num_threads(2);
}

TEST(GradCheck, Conv2dFusedReluGrouped) {
  // Fused ReLU on the grouped im2col path (1 thread, 6 samples) and with stride 2.
  set_num_threads(1);
  manual_seed(17);
  Conv2d c(2, 3, 3, 1, 1, true, /*relu=*/true);
  gradcheck_module(c, {6, 2, 4, 4});
  Conv2d s(2, 2, 3, 2, 1, false, /*relu=*/true);
  gradcheck_module(s, {3, 2, 5, 5});
  set_num_threads(2);
}

TEST(GradCheck, Conv2dFusedReluPointwise) {
  manual_seed(18);
  Conv2d c(3, 4, 1, 1, 0, true, /*relu=*/true);
  gradcheck_module(c, {2, 3, 3, 3});
}

TEST(GradCheck, Conv2dPointwise) {
  manual_seed(6);
  Conv2d c(3, 4, 1);
  gradcheck_module(c, {2, 3, 4, 4});
}

TEST(GradCheck, MaxPool2d) {
  MaxPool2d p(2);
  gradcheck_module(p, {2, 3, 6, 4});
}

TEST(GradCheck, MaxPool2dOverlapping) {
  MaxPool2d p(3, 2);
  gradcheck_module(p, {2, 2, 7, 7});
}

TEST(GradCheck, GlobalAvgPool) {
  GlobalAvgPool2d p;
  gradcheck_module(p, {3, 4, 3, 5});
}

TEST(GradCheck, ReLU) {
  ReLU r;
  gradcheck_module(r, {4, 9});
}

TEST(GradCheck, GELU) {
  GELU g;
  gradcheck_module(g, {3, 11});
}

TEST(GradCheck, BatchNorm2dTrain) {
  BatchNorm2d bn(3);
  // Non-trivial γ, β so that their gradients are exercised away from the identity.
  Rng rng(9);
  bn.to(DType::F64);
  for (Parameter* p : bn.parameters()) p->value = random_input(p->value.shape(), rng);
  gradcheck_module(bn, {4, 3, 3, 2});
}

TEST(GradCheck, BatchNorm2dEval) {
  BatchNorm2d bn(2);
  bn.to(DType::F64);
  bn.running_mean().value.fill(0.3);
  bn.running_var().value.fill(2.0);
  bn.eval();
  // Eval-mode backward is not supported (the layer refuses it); check the eval forward against
  // the formula instead.
  Rng rng(10);
  Tensor x = random_input({2, 2, 2, 2}, rng);
  Tensor y = bn.forward(x);
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(y.item(i), (x.item(i) - 0.3) / std::sqrt(2.0 + 1e-5), 1e-12);
  EXPECT_THROW(bn.backward(y), Error);
}

TEST(GradCheck, Flatten) {
  Flatten f;
  gradcheck_module(f, {2, 3, 2, 2});
}

TEST(GradCheck, DropoutFixedMask) {
  // The layer draws a new mask per call; check the op with a fixed seed (mask fixed).
  Rng rng(11);
  Tensor x = random_input({4, 10}, rng);
  Tensor r = random_input({4, 10}, rng, false);
  Tensor mask;
  const double p = 0.3;
  ops::dropout_forward(x, p, 1234, mask);
  Tensor dx = ops::dropout_backward(r, mask, p);
  auto loss = [&] {
    Tensor m2;
    return dot(ops::dropout_forward(x, p, 1234, m2), r);
  };
  Mismatch mm;
  compare("dropout dx", x, dx, loss, mm);
  EXPECT_EQ(mm.mismatches, 0);
}

TEST(GradCheck, Sequential) {
  manual_seed(12);
  Sequential s{make<Conv2d>(1, 2, 3, 1, 1), make<ReLU>(), make<MaxPool2d>(2), make<Flatten>(),
               make<Linear>(2 * 3 * 3, 4), make<GELU>(), make<Linear>(4, 3)};
  gradcheck_module(s, {2, 1, 6, 6});
}

TEST(GradCheck, ResidualBlockIdentity) {
  manual_seed(13);
  ResidualBlock b(3, 3, 1);
  gradcheck_module(b, {2, 3, 4, 4});
}

TEST(GradCheck, ResidualBlockProjection) {
  manual_seed(14);
  ResidualBlock b(2, 4, 2);
  gradcheck_module(b, {3, 2, 5, 5});
}

TEST(GradCheck, SoftmaxCrossEntropy) {
  Rng rng(15);
  Tensor z = random_input({5, 7}, rng);
  Tensor labels = Tensor::from_vector<int32_t>({5}, {0, 6, 3, 3, 1});
  SoftmaxCrossEntropy ce;
  ce.forward(z, labels);
  Tensor dz = ce.backward();
  auto loss = [&] {
    SoftmaxCrossEntropy c2;
    return c2.forward(z, labels);
  };
  Mismatch mm;
  compare("softmax_ce dlogits", z, dz, loss, mm);
  EXPECT_EQ(mm.mismatches, 0) << "max relative error " << mm.max_rel_err;
}

// ---- transformer layers ------------------------------------------------------------------------


TEST(GradCheck, Residual) {
  manual_seed(47);
  Residual r(make<Linear>(4, 4));
  gradcheck_module(r, {3, 2, 4});
}

TEST(GradCheck, TiedOutputSharesTheTokenTable) {
  // The table's gradient gets the embedding's rows and the output projection's product.
  manual_seed(48);
  auto e = make<TokenPositionEmbedding>(7, 3, 4);
  Sequential s;
  s.add(e, "embed");
  s.add(make<TiedOutput>(e->token_table()), "head");
  EXPECT_EQ(s.parameters().size(), 2u);
  gradcheck_ids(s, Tensor::from_vector<int32_t>({2, 3}, {6, 1, 1, 0, 2, 6}));
}

TEST(GradCheck, TinyGPT) {
  manual_seed(49);
  GPT g({.vocab = 11, .context = 6, .layers = 2, .dim = 8, .heads = 2, .mlp_ratio = 2});
  gradcheck_ids(g, Tensor::from_vector<int32_t>({2, 5}, {1, 4, 10, 4, 0, 7, 7, 3, 2, 9}));
}

TEST(GradCheck, SequenceCrossEntropyIgnoreIndex) {
  Rng rng(50);
  Tensor z = random_input({2, 3, 5}, rng);
  Tensor t = Tensor::from_vector<int32_t>({2, 3}, {4, -1, 0, 2, 2, -1});
  SequenceCrossEntropy ce(-1);
  const double l = ce.forward(z, t);
  EXPECT_EQ(ce.counted(), 4);
  Tensor dz = ce.backward();
  ASSERT_EQ(dz.shape(), z.shape());
  for (int64_t c = 0; c < 5; ++c) {  // ignored positions: no gradient
    EXPECT_EQ(dz.item(1 * 5 + c), 0.0);
    EXPECT_EQ(dz.item(5 * 5 + c), 0.0);
  }
  // The mean over the 4 counted rows, from the definition.
  double want = 0;
  for (int64_t row : {0, 2, 3, 4}) {
    const int64_t lab = static_cast<int64_t>(t.item(row));
    double s = 0;
    for (int64_t c = 0; c < 5; ++c) s += std::exp(z.item(row * 5 + c));
    want += std::log(s) - z.item(row * 5 + lab);
  }
  EXPECT_NEAR(l, want / 4, 1e-12);
  auto loss = [&] {
    SequenceCrossEntropy c2(-1);
    return c2.forward(z, t);
  };
  Mismatch mm;
  compare("sequence_ce dlogits", z, dz, loss, mm);
  EXPECT_EQ(mm.mismatches, 0) << "max relative error " << mm.max_rel_err;
  EXPECT_THROW(ce.forward(z, Tensor::from_vector<int32_t>({2, 3}, {4, -2, 0, 2, 2, -1})), ShapeError);
}

// ---- smooth activations, pointwise losses, construction ------------------------------------------

TEST(GradCheck, SigmoidTanhSiLU) {
  // Inputs in [-1, 1] and, scaled by 8, far into the tails, where a wrong σ form would overflow
  // or cancel.
  for (double scale : {1.0, 8.0}) {
    SCOPED_TRACE(scale);
    Sigmoid s;
    Tanh t;
    SiLU u;
    for (Module* m : std::initializer_list<Module*>{&s, &t, &u}) {
      Tensor x = gradcheck_input({3, 7}, 60);
      ops::scale_(x, scale);
      const GradCheckResult r = gradcheck(*m, x);
      EXPECT_TRUE(r.ok()) << m->type_name() << ": " << r.str();
    }
  }
  // Values from the definitions.
  Sigmoid s;
  Tensor y = s.forward(Tensor::from_vector<double>({3}, {0.0, 2.0, -40.0}));
  EXPECT_DOUBLE_EQ(y.item(0), 0.5);
  EXPECT_NEAR(y.item(1), 1.0 / (1.0 + std::exp(-2.0)), 1e-15);
  EXPECT_GT(y.item(2), 0.0);  // e^-40/(1+e^-40), not 0 from 1/(1+e^40) overflowing nothing
  EXPECT_NEAR(y.item(2), std::exp(-40.0), 1e-30);
}

TEST(GradCheck, PointwiseLosses) {
  Tensor p = gradcheck_input({6, 2}, 61);
  Tensor t = gradcheck_input({6, 2}, 62, false);
  for (int k = 0; k < 4; ++k) {
    std::unique_ptr<PointwiseLoss> loss;
    switch (k) {
      case 0: loss = std::make_unique<MSELoss>(); break;
      case 1: loss = std::make_unique<L1Loss>(); break;
      case 2: loss = std::make_unique<HuberLoss>(0.3); break;  // both branches: |d| spans [0, 2]
      default: loss = std::make_unique<BCEWithLogitsLoss>(); break;
    }
    SCOPED_TRACE(ops::point_loss_name(loss->kind()));
    Tensor target = k == 3 ? Tensor::from_vector<double>({6, 2}, {0, 1, 1, 0, 0.25, 1, 0, 0, 1, 1, 0.5, 0}) : t;
    loss->forward(p, target);
    Tensor dp = loss->backward().clone();
    auto again = [&] {
      PointwiseLoss l2(loss->kind(), 0.3);
      return l2.forward(p, target);
    };
    Mismatch mm;
    compare("dpred", p, dp, again, mm);
    EXPECT_EQ(mm.mismatches, 0) << mm.str();
  }
  // Values: mse of d = (1, -2) is 2.5; l1 1.5; huber(1) (0.5 + 1.5)/2 = 1; BCE of logit 0 is log 2.
  Tensor a = Tensor::from_vector<double>({2, 1}, {1, -2});
  Tensor z = Tensor::from_vector<double>({2}, {0, 0});  // [2] targets against [2, 1] predictions
  EXPECT_DOUBLE_EQ(MSELoss().forward(a, z), 2.5);
  EXPECT_DOUBLE_EQ(L1Loss().forward(a, z), 1.5);
  EXPECT_DOUBLE_EQ(HuberLoss(1.0).forward(a, z), 1.0);
  EXPECT_NEAR(BCEWithLogitsLoss().forward(z, Tensor::from_vector<double>({2}, {0, 1})), std::log(2.0), 1e-15);
  // A large logit: the loss of the wrong class is the logit itself, not inf.
  EXPECT_NEAR(BCEWithLogitsLoss().forward(Tensor::from_vector<double>({1}, {800}),
                                          Tensor::from_vector<double>({1}, {0})), 800.0, 1e-9);
  // int32 0/1 labels are converted; a count mismatch names both shapes.
  EXPECT_NEAR(BCEWithLogitsLoss().forward(Tensor::from_vector<float>({2}, {0, 0}),
                                          Tensor::from_vector<int32_t>({2}, {0, 1})), std::log(2.0), 1e-7);
  EXPECT_THROW(MSELoss().forward(a, Tensor::from_vector<double>({3}, {0, 0, 0})), ShapeError);
}

TEST(GradCheck, SequentialFromABracedList) {
  // make<Sequential>({...}) compiles and names the layers by index, like Sequential{...}.
  manual_seed(63);
  auto s = make<Sequential>({make<Linear>(3, 4), make<SiLU>(), make<Linear>(4, 2), make<Tanh>()});
  EXPECT_EQ(s->size(), 4u);
  EXPECT_EQ(s->parameters()[2]->name, "2.weight");
  gradcheck_module(*s, {5, 3});
}

TEST(GradCheck, TheCheckerFindsAWrongGradient) {
  // A layer whose backward is off by 1 % must fail the check (the checker cannot pass everything).
  struct Wrong : Module {
    Tensor forward(const Tensor& x) override { return x_ = x, ops::tanh_forward(x); }
    Tensor backward(const Tensor& dy) override {
      Tensor dx = ops::tanh_backward(x_, dy);
      ops::scale_(dx, 1.01);
      return dx;
    }
    std::string type_name() const override { return "Wrong"; }
    Tensor x_;
  } m;
  const GradCheckResult r = gradcheck(m, Shape{2, 5});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.mismatches, 10);
  ASSERT_FALSE(r.reports.empty());
  EXPECT_NE(r.reports[0].find("Wrong dx[0]"), std::string::npos) << r.reports[0];
}
