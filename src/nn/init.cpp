// Seeded initialisers (He/Kaiming, Glorot/Xavier, uniform, normal), computed in double and
// stored in the tensor's dtype.
#include "edp/nn/init.h"

#include <cmath>

#include "edp/core/error.h"

namespace edp {
void manual_seed(uint64_t seed) { nn::init::generator().reseed(seed); }
}  // namespace edp

namespace edp::nn::init {

Rng& generator() {
  static Rng rng(0);
  return rng;
}

namespace {
int64_t receptive(const Tensor& w) {
  int64_t r = 1;
  for (int64_t i = 2; i < w.ndim(); ++i) r *= w.dim(i);
  return r;
}
template <typename F>
void fill_each(Tensor& t, F&& f) {
  EDP_CHECK(t.device().is_cpu(), "initialise parameters on the CPU, then move the module");
  const int64_t n = t.numel();
  if (t.dtype() == DType::F32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(f());
  } else if (t.dtype() == DType::F64) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = f();
  } else {
    throw Error("initialisers fill float32/float64 tensors, not " + t.str());
  }
}
}  // namespace

int64_t fan_in(const Tensor& w) {
  EDP_CHECK(w.ndim() >= 2, "fan_in needs a weight of >= 2 dims, got ", w.shape().str());
  return w.dim(1) * receptive(w);
}
int64_t fan_out(const Tensor& w) {
  EDP_CHECK(w.ndim() >= 2, "fan_out needs a weight of >= 2 dims, got ", w.shape().str());
  return w.dim(0) * receptive(w);
}

void uniform_(Tensor& t, double lo, double hi, Rng& rng) {
  fill_each(t, [&] { return rng.uniform(lo, hi); });
}
void normal_(Tensor& t, double mean, double std, Rng& rng) {
  fill_each(t, [&] { return mean + std * rng.normal(); });
}
void kaiming_normal_(Tensor& w, double gain, Rng& rng) {
  normal_(w, 0.0, gain / std::sqrt(static_cast<double>(fan_in(w))), rng);
}
void kaiming_uniform_(Tensor& w, double gain, Rng& rng) {
  const double bound = std::sqrt(3.0) * gain / std::sqrt(static_cast<double>(fan_in(w)));
  uniform_(w, -bound, bound, rng);
}
void xavier_uniform_(Tensor& w, double gain, Rng& rng) {
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in(w) + fan_out(w)));
  uniform_(w, -bound, bound, rng);
}
void xavier_normal_(Tensor& w, double gain, Rng& rng) {
  normal_(w, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in(w) + fan_out(w))), rng);
}

}  // namespace edp::nn::init
