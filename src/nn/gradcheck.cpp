// The finite-difference gradient checker (edp/nn/gradcheck.h).
#include "edp/nn/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "edp/core/random.h"

namespace edp::nn {

namespace {

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  const double* p = a.data<double>();
  const double* q = b.data<double>();
  for (int64_t i = 0; i < a.numel(); ++i) s += p[i] * q[i];
  return s;
}

Tensor random_f64(const Shape& s, Rng& rng, bool away_from_zero) {
  Tensor t(s, DType::F64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = rng.uniform(-1.0, 1.0);
    if (away_from_zero && std::abs(v) < 1e-3) v = v < 0 ? -1e-3 : 1e-3;
    p[i] = v;
  }
  return t;
}

}  // namespace

std::string GradCheckResult::str() const {
  std::ostringstream os;
  for (const auto& r : reports) os << r << "\n";
  os << mismatches << " mismatch(es), max relative error " << max_rel_err;
  return os.str();
}

Tensor gradcheck_input(const Shape& s, uint64_t seed, bool away_from_zero) {
  Rng rng(seed);
  return random_f64(s, rng, away_from_zero);
}

void gradcheck_tensor(const std::string& what, Tensor& target, const Tensor& analytic,
                      const std::function<double()>& loss, GradCheckResult& r, const GradCheckOptions& o) {
  EDP_CHECK_SHAPE(target.dtype() == DType::F64 && analytic.dtype() == DType::F64 && target.device().is_cpu() &&
                      analytic.device().is_cpu() && target.numel() == analytic.numel(),
                  "gradcheck_tensor(", what, "): needs float64 CPU tensors of one size, got ", target.str(), " and ",
                  analytic.str());
  double* p = target.data<double>();
  const double* a = analytic.data<double>();
  for (int64_t i = 0; i < target.numel(); ++i) {
    const double orig = p[i];
    p[i] = orig + o.step;
    const double lp = loss();
    p[i] = orig - o.step;
    const double lm = loss();
    p[i] = orig;
    const double num = (lp - lm) / (2 * o.step);
    const double err = std::abs(num - a[i]);
    const double scale = std::max({1.0, std::abs(num), std::abs(a[i])});
    r.max_rel_err = std::max(r.max_rel_err, err / scale);
    if (err > o.tolerance * scale && ++r.mismatches <= o.max_reports) {
      std::ostringstream os;
      os << what << "[" << i << "]: analytic " << a[i] << " numeric " << num << " (err " << err << ")";
      r.reports.push_back(os.str());
    }
  }
}

namespace {
// r is drawn from `rng` after whatever drew the input.
GradCheckResult check_module(Module& m, const Tensor& input, Rng& rng, const GradCheckOptions& o) {
  m.to(DType::F64);
  const bool ids = input.dtype() != DType::F32 && input.dtype() != DType::F64;
  Tensor x = ids ? input : input.to(DType::F64).clone();
  Tensor y = m.forward(x);
  Tensor r = random_f64(y.shape(), rng, false);
  m.zero_grad();
  Tensor dx = m.backward(r);
  GradCheckResult res;
  if (!ids) {
    EDP_CHECK_SHAPE(dx.defined() && dx.shape() == x.shape(), "gradcheck(", m.type_name(), "): backward returned ",
                    dx.defined() ? dx.shape().str() : std::string("no input gradient"), " for an input of ",
                    x.shape().str());
    dx = dx.clone();
  }
  // The analytic parameter gradients, kept before the numeric loop runs more forwards.
  std::vector<Tensor> pgrads;
  for (Parameter* p : m.parameters()) pgrads.push_back(p->grad.clone());
  auto loss = [&] { return dot(m.forward(x), r); };
  if (!ids) gradcheck_tensor(m.type_name() + " dx", x, dx, loss, res, o);
  auto params = m.parameters();
  for (size_t k = 0; k < params.size(); ++k)
    gradcheck_tensor(m.type_name() + " d" + params[k]->name, params[k]->value, pgrads[k], loss, res, o);
  return res;
}
}  // namespace

GradCheckResult gradcheck(Module& m, const Tensor& input, GradCheckOptions o) {
  Rng rng(o.seed);
  return check_module(m, input, rng, o);
}

GradCheckResult gradcheck(Module& m, const Shape& input, GradCheckOptions o) {
  Rng rng(o.seed);
  const Tensor x = random_f64(input, rng, true);
  return check_module(m, x, rng, o);
}

}  // namespace edp::nn
