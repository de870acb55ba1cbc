// A job's goodput learned from its own reports (online.h).
#include "edp/autoscale/online.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "edp/core/error.h"

namespace edp::autoscale {

BatchSplit split_batch(int gpus, int batch, int max_local, int init_batch, int max_batch, bool accumulate_on_one_gpu) {
  EDP_CHECK(gpus >= 1 && batch >= 1 && max_local >= 1, "split_batch: gpus, batch and max_local must be >= 1");
  const int local = static_cast<int>(std::ceil(double(batch) / gpus - 1e-8));
  BatchSplit s;
  s.accum = static_cast<int>(std::ceil(double(local) / max_local - 1e-8)) - 1;
  if (gpus == 1 && accumulate_on_one_gpu && batch > init_batch) s.accum = std::max(1, s.accum);
  s.atomic = static_cast<int>(std::ceil(double(local) / (s.accum + 1) - 1e-8));
  s.atomic = std::max(1, std::min(s.atomic, max_batch / (gpus * (s.accum + 1))));
  return s;
}

namespace {

// Least squares of y = p + q*x with weights w; false when x does not vary.
bool line_fit(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& w, double& p,
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

// A sync line s0 + s1*g through the observations of one kind (slope >= 0: noise is not a speedup).
bool sync_fit(const std::vector<const StepObservation*>& rows, double& s0, double& s1) {
  if (rows.empty()) return false;
  std::map<int, std::pair<double, int>> by_g;
  for (const StepObservation* r : rows) {
    by_g[r->gpus].first += r->sync_s;
    ++by_g[r->gpus].second;
  }
  std::vector<double> x, y, w;
  for (const auto& [g, sc] : by_g) {
    x.push_back(g);
    y.push_back(sc.first / sc.second);
    w.push_back(1.0);
  }
  double mean = 0;
  for (double v : y) mean += v / double(y.size());
  if (x.size() >= 2 && line_fit(x, y, w, s0, s1) && s1 >= 0) return true;
  s0 = mean;
  s1 = 0;
  return true;
}

}  // namespace

GoodputModel::GoodputModel(const LearnSpec& spec) : spec_(spec) {
  EDP_CHECK(spec.init_batch >= 1 && spec.max_batch >= spec.init_batch, "GoodputModel: needs 1 <= init_batch <= max_batch");
  EDP_CHECK(spec.min_local >= 1 && spec.max_local >= spec.min_local, "GoodputModel: needs 1 <= min_local <= max_local");
  std::set<std::tuple<int, int, double>> seen;
  for (const StepObservation& o : spec.observed)
    if (o.gpus >= 1 && o.nodes >= 1 && o.local_batch > 0 && o.step_s > 0 &&
        seen.insert({o.nodes, o.gpus, o.local_batch}).second)
      obs_.push_back(o);
  // compute(b) = a + c*b, weighted by 1/step (a relative error).
  std::vector<double> x, y, w;
  std::set<double> bs;
  for (const StepObservation& o : obs_) {
    const double comp = std::max(1e-9, o.step_s - std::min(o.sync_s, 0.95 * o.step_s));
    x.push_back(o.local_batch);
    y.push_back(comp);
    w.push_back(1.0 / (o.step_s * o.step_s));
    bs.insert(o.local_batch);
  }
  bool fitted = false;
  if (bs.size() >= 2 && line_fit(x, y, w, a_, c_) && a_ >= 0 && c_ > 0) fitted = true;
  if (!fitted && !obs_.empty()) {
    // One micro-batch seen: half of its compute fixed, half per sample (Pollux's prior too).
    double sb = 0, sc = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      sb += x[i];
      sc += y[i];
    }
    const double comp = sc / double(x.size()), b = sb / double(x.size());
    a_ = comp * spec.fixed_share;
    c_ = comp * (1 - spec.fixed_share) / b;
  }
  std::vector<const StepObservation*> intra, inter;
  for (const StepObservation& o : obs_)
    if (o.gpus > 1) (o.nodes > 1 ? inter : intra).push_back(&o);
  intra_known_ = sync_fit(intra, s0_, s1_);
  inter_known_ = sync_fit(inter, t0_, t1_);
  // Candidate micro-batches: a geometric grid over [min_local, max_local] and those observed.
  std::set<int> loc;
  const double lo = spec.min_local, hi = spec.max_local;
  const int steps = 8;
  for (int i = 0; i <= steps; ++i)
    loc.insert(static_cast<int>(std::lround(lo * std::pow(hi / lo, double(i) / steps))));
  for (const StepObservation& o : obs_) {
    const int b = static_cast<int>(std::lround(o.local_batch));
    if (b >= spec.min_local && b <= spec.max_local) loc.insert(b);
  }
  locals_.assign(loc.begin(), loc.end());
}

double GoodputModel::trust() const { return double(obs_.size()) / (double(obs_.size()) + 1.0); }

double GoodputModel::model_sync(int nodes, int gpus) const {
  if (gpus <= 1) return 0.0;
  const bool across = nodes > 1;
  auto line = [gpus](double p, double q) { return std::max(0.0, p + q * gpus); };
  if (across && inter_known_) return line(t0_, t1_);
  if (!across && intra_known_) return line(s0_, s1_);
  if (across && intra_known_) return line(s0_, s1_);  // across nodes is no faster than within one
  if (!across && inter_known_) return line(t0_, t1_);
  return 0.0;
}

std::pair<double, double> GoodputModel::step_sync(int nodes, int gpus, double b) const {
  const StepObservation* near = nullptr;
  double best = 0;
  for (const StepObservation& o : obs_) {
    if (o.nodes == nodes && o.gpus == gpus && o.local_batch == b) return {o.step_s, o.sync_s};
    const double d = std::abs(std::log(double(gpus) / o.gpus)) + std::abs(std::log(b / o.local_batch)) +
                     std::abs(std::log(double(nodes) / o.nodes));
    if (!near || d < best) near = &o, best = d;
  }
  if (!near) return {model_step(nodes, gpus, b), model_sync(nodes, gpus)};
  // Throughput here = the nearest observation's x (the model's ratio)^trust.
  const double x_near = near->gpus * near->local_batch / near->step_s;
  const double m_near = near->gpus * near->local_batch / model_step(near->nodes, near->gpus, near->local_batch);
  const double m_here = gpus * b / model_step(nodes, gpus, b);
  const double x_here = x_near * std::pow(m_here / m_near, trust());
  const double step = gpus * b / x_here;
  const double sync = model_sync(nodes, gpus) * step / model_step(nodes, gpus, b);
  return {step, sync};
}

double GoodputModel::efficiency(double batch) const {
  const double s = batch / spec_.init_batch;
  if (!spec_.has_grad) return 1.0 / s;  // nothing reported: no batch above init_batch pays
  const double denom = spec_.grad_var / s + spec_.grad_sqr;
  const double gain = denom > 0 ? (spec_.grad_var + spec_.grad_sqr) / denom : 1.0;
  return gain / s;
}

LearnedConfig GoodputModel::evaluate(int nodes, int gpus, int batch) const {
  LearnedConfig c;
  c.nodes = nodes;
  c.gpus = gpus;
  c.split = split_batch(gpus, batch, spec_.max_local, spec_.init_batch, spec_.max_batch, spec_.accumulate_on_one_gpu);
  c.batch = gpus * c.split.atomic * (c.split.accum + 1);
  const auto [step, sync] = step_sync(nodes, gpus, c.split.atomic);
  const double total = step + c.split.accum * (step - sync);
  c.samples_per_s = c.batch / total;
  c.efficiency = efficiency(c.batch);
  return c;
}

LearnedConfig GoodputModel::best(int nodes, int gpus) const {
  if (spec_.fixed_batch > 0) return evaluate(nodes, gpus, spec_.fixed_batch);
  LearnedConfig best;
  const int64_t lo = std::max<int64_t>(spec_.init_batch, int64_t{gpus} * spec_.min_local);
  for (int b : locals_)
    for (int k = 0; k < 16; ++k) {
      const int64_t B = int64_t{gpus} * b * (k + 1);
      if (B > spec_.max_batch) break;
      if (B < lo) continue;
      const LearnedConfig c = evaluate(nodes, gpus, static_cast<int>(B));
      if (c.split.atomic < spec_.min_local) continue;
      if (best.gpus == 0 || c.goodput() > best.goodput()) best = c;
    }
  return best;
}

int GoodputModel::max_gpus(int node_gpus) const {
  int seen = 0;
  for (const StepObservation& o : obs_) seen = std::max(seen, o.gpus);
  int cap = seen == 0 ? 1 : std::max({1, node_gpus, static_cast<int>(std::floor(spec_.explore * seen))});
  if (spec_.max_gpus > 0) cap = std::min(cap, spec_.max_gpus);
  if (spec_.fixed_batch == 0) cap = std::min(cap, std::max(1, spec_.max_batch / spec_.min_local));
  return cap;
}

}  // namespace edp::autoscale
