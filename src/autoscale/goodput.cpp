// The autoscaler's one goodput model (goodput.h): statistical efficiency, step time with
// accumulation, the batch split, the step-time fits and the shrinkage toward measurements.
#include "edp/autoscale/goodput.h"

#include <algorithm>
#include <cmath>

#include "edp/core/error.h"

namespace edp::autoscale {

GradStats grad_stats_of_noise_scale(double noise_scale, double ref_batch) { return GradStats{ref_batch, noise_scale}; }

double statistical_gain(const GradStats& g, double batch, double ref_batch) {
  const double s = batch / ref_batch;
  const double denom = g.var / s + g.sqr;
  return denom > 0 ? (g.var + g.sqr) / denom : 1.0;
}

double statistical_efficiency(const GradStats& g, double batch, double ref_batch) {
  return statistical_gain(g, batch, ref_batch) / (batch / ref_batch);
}

double accumulated_step_s(double step_s, double sync_s, int accum) { return step_s + accum * (step_s - sync_s); }

BatchSplit split_global_batch(int gpus, int batch, int max_local, int max_batch, bool accumulate_once) {
  EDP_CHECK(gpus >= 1 && batch >= 1 && max_local >= 1, "split_batch: gpus, batch and max_local must be >= 1");
  const int local = static_cast<int>(std::ceil(double(batch) / gpus - 1e-8));
  BatchSplit s;
  s.accum = static_cast<int>(std::ceil(double(local) / max_local - 1e-8)) - 1;
  if (gpus == 1 && accumulate_once) s.accum = std::max(1, s.accum);
  s.atomic = static_cast<int>(std::ceil(double(local) / (s.accum + 1) - 1e-8));
  s.atomic = std::max(1, std::min(s.atomic, max_batch / (gpus * (s.accum + 1))));
  return s;
}

BatchSplit split_batch(int gpus, int batch, int max_local, int init_batch, int max_batch, bool accumulate_on_one_gpu) {
  return split_global_batch(gpus, batch, max_local, max_batch, accumulate_on_one_gpu && batch > init_batch);
}

bool fit_line(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& w, double& p,
              double& q) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sw += w[i];
    sx += w[i] * x[i];
    sy += w[i] * y[i];
    sxx += w[i] * x[i] * x[i];
    sxy += w[i] * x[i] * y[i];
  }
  const double det = sw * sxx - sx * sx;
  if (!(std::abs(det) > 1e-12 * std::max(1.0, sw * sxx))) return false;
  q = (sw * sxy - sx * sy) / det;
  p = (sy - q * sx) / sw;
  return true;
}

ComputeLine fit_compute_line(const std::vector<StepSample>& samples, double sync_cap, double fixed_share) {
  ComputeLine out;
  if (samples.empty()) return out;
  std::vector<double> x, y, w;
  bool varies = false;
  for (const StepSample& r : samples) {
    x.push_back(r.local_batch);
    y.push_back(std::max(1e-9, r.step_s - std::min(r.sync_s, sync_cap * r.step_s)));
    w.push_back(1.0 / (r.step_s * r.step_s));  // squared: the residual of the row scaled by 1/step
    varies = varies || r.local_batch != samples.front().local_batch;
  }
  if (varies && fit_line(x, y, w, out.a, out.c) && out.a >= 0 && out.c > 0) {
    out.fitted = true;
    return out;
  }
  double sb = 0, sc = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sb += x[i];
    sc += y[i];
  }
  const double comp = sc / double(x.size()), b = sb / double(x.size());
  out.a = comp * fixed_share;
  out.c = comp * (1 - fixed_share) / b;
  return out;
}

bool fit_sync_line(const std::map<int, std::pair<double, int>>& sync_by_size, OnePoint one, double& s0, double& s1) {
  s0 = s1 = 0;
  if (sync_by_size.empty()) return false;
  std::vector<double> x, y, w;
  for (const auto& [g, sc] : sync_by_size) {
    x.push_back(g);
    y.push_back(sc.first / sc.second);
    w.push_back(1.0);
  }
  if (x.size() == 1 && one == OnePoint::Proportional) {
    s1 = y[0] / x[0];
    return true;
  }
  double mean = 0;
  for (double v : y) mean += v / double(y.size());
  if (x.size() >= 2 && fit_line(x, y, w, s0, s1) && s1 >= 0) return true;
  s0 = mean;
  s1 = 0;
  return true;
}

double trust_of(int measured_configs, double half) { return double(measured_configs) / (double(measured_configs) + half); }

double log_distance(double a, double b) { return std::abs(std::log(a / b)); }

double shrink_toward(double measured_near, double model_near, double model_here, double trust) {
  return measured_near * std::pow(model_here / model_near, trust);
}

}  // namespace edp::autoscale
