// The finite-difference checks the op and layer tests share, on top of the public checker
// (edp/nn/gradcheck.h): float64, L = Σ r ⊙ f(x) for a fixed random r, central differences with
// h = 1e-6, |analytic - numeric| ≤ 1e-6 · max(1, |analytic|, |numeric|) (tests/nn/gradcheck_test.cpp
// says why that bound is five orders above the method's error and far below any real bug).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "edp/core/random.h"
#include "edp/nn/gradcheck.h"
#include "edp/nn/module.h"

namespace edp::test {

// A float64 input of shape s, from rng (kept ≥ 1e-3 from zero unless away_from_zero is false).
inline Tensor random_input(Shape s, Rng& rng, bool away_from_zero = true) {
  return nn::gradcheck_input(s, rng.next_u64(), away_from_zero);
}

// Σ a ⊙ b of two float64 tensors.
inline double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

// The analytic gradient of `target` against central differences of `loss`; each mismatch fails.
inline void compare(const std::string& what, Tensor& target, const Tensor& analytic,
                    const std::function<double()>& loss, nn::GradCheckResult& mm) {
  nn::gradcheck_tensor(what, target, analytic, loss, mm);
  for (const auto& r : mm.reports) ADD_FAILURE() << r;
  mm.reports.clear();
}

// dL/dx and dL/dθ of a module at input shape `in`.
inline void gradcheck_module(nn::Module& m, Shape in, uint64_t seed = 1) {
  const nn::GradCheckResult r = nn::gradcheck(m, in, {.seed = seed});
  EXPECT_TRUE(r.ok()) << r.str();
  ::testing::Test::RecordProperty("max_rel_err", std::to_string(r.max_rel_err));
}

// dL/dθ of a module whose input is token ids (no input gradient).
inline void gradcheck_ids(nn::Module& m, const Tensor& ids, uint64_t seed = 1) {
  const nn::GradCheckResult r = nn::gradcheck(m, ids, {.seed = seed});
  EXPECT_TRUE(r.ok()) << r.str();
}

}  // namespace edp::test
