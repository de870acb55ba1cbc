// Finite-difference gradient checks for layer authors: the checker edp's own layer tests use.
//
// Method: the module (converted to float64) maps a random input x to y; with a fixed random r,
// L = Σ r ⊙ y, so dL/dy = r. The analytic gradients come from backward(r); the numeric ones from
// central differences (L(θ + h) - L(θ - h)) / 2h, for every element of x and of every parameter.
// In float64 with h = 1e-6 the truncation error is O(h²) ≈ 1e-12 and the rounding error
// ≈ 1e-16·|L|/h ≈ 1e-10, so the default tolerance, |analytic - numeric| ≤ 1e-6 · max(1,
// |analytic|, |numeric|), is orders of magnitude above the method's error and far below a real
// bug. Inputs are kept at least 1e-3 from zero, so that ±h never crosses a kink there (ReLU).
//
//   nn::GradCheckResult r = nn::gradcheck(my_layer, Shape{4, 7});
//   if (!r.ok()) std::puts(r.str().c_str());   // the first mismatches and the largest error
//
// A layer that draws randomness per call (dropout) must be checked with its randomness fixed.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "edp/core/tensor.h"
#include "edp/nn/module.h"

namespace edp::nn {

struct GradCheckOptions {
  double step = 1e-6;       // h
  double tolerance = 1e-6;  // relative to max(1, |analytic|, |numeric|)
  uint64_t seed = 1;        // of the random input and of r
  int max_reports = 5;      // mismatches described in reports
};

struct GradCheckResult {
  int mismatches = 0;
  double max_rel_err = 0;            // the largest error seen, relative as the tolerance is
  std::vector<std::string> reports;  // "Linear dweight[3]: analytic 0.25 numeric 0.2501 (err 1e-4)"
  bool ok() const { return mismatches == 0; }
  std::string str() const;  // the reports, then "N mismatch(es), max relative error E"
};

// Checks dL/dx and dL/dθ of `m` at a random float64 input of shape `input`. Converts `m` to
// float64 (Module::to) and leaves it so.
GradCheckResult gradcheck(Module& m, const Shape& input, GradCheckOptions o = {});
// The same at a given input. An integer input (token ids) has no gradient: only dL/dθ is checked.
GradCheckResult gradcheck(Module& m, const Tensor& input, GradCheckOptions o = {});

// The comparison itself, for ops and losses outside a Module: perturbs each element of `target`
// (float64, CPU) by ±h, calls `loss` and compares (L+ - L-)/2h with `analytic` (target's shape).
// `what` names the tensor in reports. Accumulates into `r`.
void gradcheck_tensor(const std::string& what, Tensor& target, const Tensor& analytic,
                      const std::function<double()>& loss, GradCheckResult& r, const GradCheckOptions& o = {});

// A float64 tensor of uniform values in [-1, 1] (kept at least 1e-3 from zero unless
// away_from_zero is false), from `seed`: the inputs gradcheck() uses.
Tensor gradcheck_input(const Shape& s, uint64_t seed, bool away_from_zero = true);

}  // namespace edp::nn
