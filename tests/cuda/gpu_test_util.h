// Helpers of the GPU tests: skip without a device, random inputs, poisoned device allocations,
// and a comparison that reports the worst elements instead of just "FAILED".
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "edp/core/random.h"
#include "edp/core/tensor.h"
#include "edp/cuda/runtime.h"

#define EDP_REQUIRE_GPU()                                                   \
  do {                                                                      \
    if (!edp::cuda::available()) GTEST_SKIP() << edp::cuda::unavailable_reason(); \
  } while (0)

namespace edp::test {

inline Device gpu() { return Device::cuda(0); }

// Every device allocation of the test binary is filled with 0xFF bytes (NaN) first, so an
// element an op forgets to write shows up as NaN against a finite CPU reference.
class PoisonEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { cuda::set_alloc_poison(true); }
};

inline Tensor randn(const Shape& s, uint64_t seed, double scale = 1.0) {
  Tensor t(s, DType::F32);
  Rng rng(seed);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * rng.normal());
  return t;
}

inline Tensor labels(int64_t n, int64_t classes, uint64_t seed) {
  Tensor t({n}, DType::I32);
  Rng rng(seed);
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(classes)));
  return t;
}

inline double rms(const Tensor& cpu) {
  if (cpu.numel() == 0) return 0;
  double s = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) s += cpu.item(i) * cpu.item(i);
  return std::sqrt(s / static_cast<double>(cpu.numel()));
}

struct Tol {
  double rtol, atol;
};

// A float32 dot product of length K summed in another order: O(√K·ε) relative to the size of
// its terms. Allowed: 16·√K·ε relative to the output's rms (at least 1e-5), and as rtol.
inline Tol dot_tol(int64_t K, const Tensor& ref) {
  const double r = std::max(1e-5, 16 * 1.19e-7 * std::sqrt(static_cast<double>(std::max<int64_t>(K, 1))));
  return {r, r * rms(ref)};
}
// TF32 keeps 10 mantissa bits of each product's inputs (relative rounding 2^-11 ≈ 4.9e-4 each),
// so outputs differ by ~5e-4 of their rms on average; 5e-3 bounds the worst of a few 10^5.
inline Tol tf32_tol(const Tensor& ref) { return {5e-3, 5e-3 * rms(ref)}; }

// |gpu - ref| <= atol + rtol·|ref| for every element; NaN where ref is finite fails (an element
// left unwritten in a poisoned buffer), NaN where ref is NaN passes.
inline ::testing::AssertionResult close(const Tensor& result, const Tensor& ref, Tol tol,
                                        const std::string& what) {
  const Tensor a = result.to(Device::cpu());
  if (a.shape() != ref.shape())
    return ::testing::AssertionFailure() << what << ": shape " << a.shape().str() << " vs reference "
                                         << ref.shape().str();
  int64_t bad = 0, worst = -1;
  double worst_excess = 0, max_abs = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double x = a.item(i), r = ref.item(i);
    if (std::isnan(r) && std::isnan(x)) continue;
    const double err = std::fabs(x - r);
    const double allowed = tol.atol + tol.rtol * std::fabs(r);
    if (!(err <= allowed)) {  // also catches NaN
      if (bad < 5) first << "\n  [" << i << "] gpu " << x << " cpu " << r << " |diff| " << err << " allowed " << allowed;
      ++bad;
      const double excess = std::isnan(err) ? INFINITY : err - allowed;
      if (worst < 0 || excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
    if (!std::isnan(err)) max_abs = std::max(max_abs, err);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << ref.numel()
                                       << " elements outside rtol " << tol.rtol << " atol " << tol.atol
                                       << " (max |diff| " << max_abs << ", worst at " << worst << ")"
                                       << first.str();
}

inline ::testing::AssertionResult same(const Tensor& result, const Tensor& ref, const std::string& what) {
  return close(result, ref, Tol{0, 0}, what);
}

}  // namespace edp::test
