// A job's goodput learned from its own reports (online.h).
#include "edp/autoscale/online.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "edp/core/error.h"

namespace edp::autoscale {

GoodputModel::GoodputModel(const LearnSpec& spec) : spec_(spec) {
  EDP_CHECK(spec.init_batch >= 1 && spec.max_batch >= spec.init_batch, "GoodputModel: needs 1 <= init_batch <= max_batch");
  EDP_CHECK(spec.min_local >= 1 && spec.max_local >= spec.min_local, "GoodputModel: needs 1 <= min_local <= max_local");
  std::set<std::tuple<int, int, double>> seen;
  for (const StepObservation& o : spec.observed)
    if (o.gpus >= 1 && o.nodes >= 1 && o.local_batch > 0 && o.step_s > 0 &&
        seen.insert({o.nodes, o.gpus, o.local_batch}).second)
      obs_.push_back(o);
  // compute(b) = a + c*b, weighted by 1/step (a relative error); one micro-batch seen: the share
  // fixed_share of its compute fixed, the rest per sample.
  std::vector<StepSample> samples;
  for (const StepObservation& o : obs_) samples.push_back(StepSample{o.local_batch, o.step_s, o.sync_s});
  const ComputeLine line = fit_compute_line(samples, 0.95, spec.fixed_share);
  a_ = line.a;
  c_ = line.c;
  // The exposed sync within one node and across nodes, each a line in the GPUs (a constant from one
  // size).
  std::map<int, std::pair<double, int>> intra, inter;
  for (const StepObservation& o : obs_)
    if (o.gpus > 1) {
      auto& e = (o.nodes > 1 ? inter : intra)[o.gpus];
      e.first += o.sync_s;
      ++e.second;
    }
  intra_known_ = fit_sync_line(intra, OnePoint::Constant, s0_, s1_);
  inter_known_ = fit_sync_line(inter, OnePoint::Constant, t0_, t1_);
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

double GoodputModel::trust() const { return trust_of(static_cast<int>(obs_.size()), spec_.trust_half); }

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
    const double d = log_distance(gpus, o.gpus) + log_distance(b, o.local_batch) + log_distance(nodes, o.nodes);
    if (!near || d < best) near = &o, best = d;
  }
  if (!near) return {model_step(nodes, gpus, b), model_sync(nodes, gpus)};
  // Throughput here = the nearest observation's x (the model's ratio)^trust.
  const double x_near = near->gpus * near->local_batch / near->step_s;
  const double m_near = near->gpus * near->local_batch / model_step(near->nodes, near->gpus, near->local_batch);
  const double m_here = gpus * b / model_step(nodes, gpus, b);
  const double x_here = shrink_toward(x_near, m_near, m_here, trust());
  const double step = gpus * b / x_here;
  const double sync = model_sync(nodes, gpus) * step / model_step(nodes, gpus, b);
  return {step, sync};
}

double GoodputModel::efficiency(double batch) const {
  // Before the job reported statistics: gain 1, so no batch above init_batch pays.
  const GradStats g = spec_.has_grad ? GradStats{spec_.grad_sqr, spec_.grad_var} : GradStats{};
  return statistical_efficiency(g, batch, spec_.init_batch);
}

LearnedConfig GoodputModel::evaluate(int nodes, int gpus, int batch) const {
  LearnedConfig c;
  c.nodes = nodes;
  c.gpus = gpus;
  c.split = split_batch(gpus, batch, spec_.max_local, spec_.init_batch, spec_.max_batch, spec_.accumulate_on_one_gpu);
  c.batch = gpus * c.split.atomic * (c.split.accum + 1);
  const auto [step, sync] = step_sync(nodes, gpus, c.split.atomic);
  c.samples_per_s = c.batch / accumulated_step_s(step, sync, c.split.accum);
  c.efficiency = efficiency(c.batch);
  return c;
}

LearnedConfig GoodputModel::best(int nodes, int gpus) const {
  if (spec_.fixed_batch > 0) return evaluate(nodes, gpus, spec_.fixed_batch);
  const int64_t lo = std::max<int64_t>(spec_.init_batch, int64_t{gpus} * spec_.min_local);
  const std::optional<LearnedConfig> best = best_batch<LearnedConfig>(
      locals_, gpus, lo, spec_.max_batch,
      [&](int, int, int64_t B) -> std::optional<LearnedConfig> {
        const LearnedConfig c = evaluate(nodes, gpus, static_cast<int>(B));
        if (c.split.atomic < spec_.min_local) return std::nullopt;
        return c;
      },
      [](const LearnedConfig& c) { return c.goodput(); });
  return best ? *best : LearnedConfig{};
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
