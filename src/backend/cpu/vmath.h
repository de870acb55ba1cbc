// Branch-free float32 exp and erf that the compiler vectorises (libm's expf/erff are calls, one
// element at a time: in the GPT example they took ~10 % of a step through GELU and the attention
// softmax). Private to src/backend/cpu/.
//
//   vexp(x)  e^x = 2^k · e^r, k = round(x·log2 e), r = x - k·ln 2 (two-part ln 2), e^r by its
//            degree-6 Taylor polynomial on |r| ≤ ln2/2 (remainder < 2e-8 relative): within 2 ulp of
//            expf. It saturates instead of under/overflowing: below -87.3 it gives e^-87.3 ≈ 1.2e-38
//            (expf: 0 or a denormal), above 88.7 ≈ 3.4e38 (expf: inf); NaN stays NaN.
//   verf(x)  Abramowitz & Stegun 7.1.26: 1 - (a1 t + ... + a5 t^5) e^{-x²}, t = 1/(1 + p|x|),
//            absolute error ≤ 1.5e-7 (then float rounding), odd in x.
// float64 callers keep libm (the gradient checks need the exact functions).
#pragma once
#include <cmath>
#include <cstdint>

namespace edp::ops::cpu {

inline float vexp(float x) {
  const float lo = x < -87.33654f ? -87.33654f : x;
  const float xc = lo > 88.72283f ? 88.72283f : lo;
  // Round to nearest by adding and subtracting 1.5·2^23 (exact in float32 for |v| < 2^22).
  const float k = (xc * 1.44269504f + 12582912.f) - 12582912.f;
  const float r = (xc - k * 0.693145752f) - k * 1.42860677e-6f;
  float p = 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  // 2^k through the exponent bits; k in [-126, 128]: split so that each factor is a normal float.
  const int32_t ki = static_cast<int32_t>(k);
  const int32_t k1 = ki >> 1, k2 = ki - k1;
  return p * __builtin_bit_cast(float, (k1 + 127) << 23) * __builtin_bit_cast(float, (k2 + 127) << 23);
}

inline float verf(float x) {
  const float a = std::fabs(x);
  const float t = 1.f / (1.f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.f - p * t * vexp(-a * a);
  return std::copysign(y, x);
}

}  // namespace edp::ops::cpu
