// Finite-difference gradient checks of composed modules, in float64: Flatten, Sequential, the
// residual blocks, the tied GPT output, a whole tiny GPT, and the checker itself. Each op's own
// checks (linear, conv2d, pool, activations, batchnorm, dropout, losses, embedding, layernorm,
// attention) are in its file, tests/backend/<op>_test.cpp (test_backend_cpu).
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

TEST(GradCheck, Flatten) {
  Flatten f;
  gradcheck_module(f, {2, 3, 2, 2});
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

// ---- construction -----------------------------------------------------------------------------------

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
