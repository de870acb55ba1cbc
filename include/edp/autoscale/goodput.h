// The autoscaler's one goodput model: every caller that values a configuration of a job — decide()'s
// learned jobs (online.h), both simulators, `plan` and the live controller — takes its pieces from
// here, so that a change of the model is a change of one file (docs/autoscaler.md §2 and §7).
//
//   statistical gain        gain(B) = (var + sqr) / (var / s + sqr),  s = B / B0
//                           progress of one step at global batch B relative to one at the job's own
//                           batch B0 (Pollux's scale-invariant iterations), from the gradient's
//                           |g|^2 (sqr) and variance (var) at B0
//   statistical efficiency  E(B) = gain(B) / s: progress per sample relative to B0. A gradient
//                           noise scale B_noise = B0 var / sqr gives the same law in the form
//                           (B_noise + B0) / (B_noise + B) (McCandlish et al.)
//   accumulation            a step of `accum` extra micro-batches takes step + accum (step - sync):
//                           every micro-batch computes, only the last synchronises
//   batch split             a global batch on g GPUs: per-GPU ceil(B/g) in as few micro-batches of at
//                           most max_local as it takes (split_batch)
//   batch search            the best global batch on g GPUs over micro-batches x accumulation steps
//                           (best_batch)
//   step-time fits          compute(b) = a + c b by least squares weighted by 1/step (a relative
//                           error), the exposed synchronisation s0 + s1 g (fit_compute_line,
//                           fit_sync_line)
//   shrinkage               a prediction at a configuration not measured: the nearest measurement
//                           times the model's ratio between the two raised to trust = n / (n + 1),
//                           n configurations measured (shrink_toward)
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace edp::autoscale {

// ---- statistical efficiency ----------------------------------------------------------------------

// The gradient statistics at the job's own batch: |g|^2 and the variance (AdaScale's and Pollux's
// sqr and var).
struct GradStats {
  double sqr = 0, var = 0;
};
// The statistics a gradient noise scale B_noise (in samples) at reference batch ref_batch stands for
// (var / sqr = B_noise / ref_batch).
GradStats grad_stats_of_noise_scale(double noise_scale, double ref_batch);

// gain(B) and E(B) (above). A gradient with no signal and no noise (sqr = var = 0) gains nothing
// from a larger batch (gain 1).
double statistical_gain(const GradStats& g, double batch, double ref_batch);
double statistical_efficiency(const GradStats& g, double batch, double ref_batch);

// ---- step time and the batch -------------------------------------------------------------------

// One optimizer step of `accum` extra accumulation micro-steps, each micro-step taking step_s of
// which sync_s is the synchronisation only the last one pays.
double accumulated_step_s(double step_s, double sync_s, int accum);

// How a job runs global batch `batch` on `gpus` GPUs: the per-GPU batch ceil(B/g) accumulated in
// as few micro-batches of at most max_local as it takes (at least two on one GPU when
// accumulate_once: the artifact's and AdaptDL's rule above the initial batch), the micro-batch cut
// so that the total stays <= max_batch.
struct BatchSplit {
  int atomic = 0;  // micro-batch per GPU
  int accum = 0;   // extra accumulation steps
  int64_t batch(int gpus) const { return int64_t{gpus} * atomic * (accum + 1); }
};
BatchSplit split_global_batch(int gpus, int batch, int max_local, int max_batch, bool accumulate_once);
// The same with the rule of a job that accumulates on one GPU only above its initial batch.
BatchSplit split_batch(int gpus, int batch, int max_local, int init_batch, int max_batch, bool accumulate_on_one_gpu);

// Accumulation steps the batch search tries (1 to 16 micro-batches per step).
inline constexpr int kMaxMicroBatches = 16;

// The batch search: every global batch gpus x b x (k + 1), b one of `micro_batches` (ascending) and
// k < kMaxMicroBatches extra steps, in [lower, max_batch], evaluated by eval(b, k, batch) ->
// std::optional<T> (nullopt: not eligible); the eligible one of the highest score(T) wins, the
// first on a tie. nullopt when none is eligible.
template <class T, class Eval, class Score>
std::optional<T> best_batch(const std::vector<int>& micro_batches, int gpus, int64_t lower, int64_t max_batch,
                            Eval&& eval, Score&& score) {
  std::optional<T> best;
  double best_score = 0;
  for (int b : micro_batches)
    for (int k = 0; k < kMaxMicroBatches; ++k) {
      const int64_t batch = int64_t{gpus} * b * (k + 1);
      if (batch > max_batch) break;
      if (batch < lower) continue;
      std::optional<T> c = eval(b, k, batch);
      if (!c) continue;
      const double s = score(*c);
      if (!best || s > best_score) {
        best = std::move(c);
        best_score = s;
      }
    }
  return best;
}

// ---- step-time fits ------------------------------------------------------------------------------

// Weighted least squares of y = p + q x; false when x does not vary (p, q untouched).
bool fit_line(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& w, double& p,
              double& q);

// A measured step: per-GPU (per-rank) micro-batch, step time, the synchronisation it exposed.
struct StepSample {
  double local_batch = 0, step_s = 0, sync_s = 0;
};
// compute(b) = a + c b fitted to step - sync (sync taken as at most sync_cap x step), weighted by
// 1/step so that the residual is a relative error of the step; accepted when two micro-batches were
// measured and a >= 0, c > 0. Otherwise (fitted false) the share fixed_share of the mean compute is
// fixed and the rest per sample through the mean micro-batch (0: through the origin). a = c = 0
// when there are no samples.
struct ComputeLine {
  double a = 0, c = 0;
  bool fitted = false;
};
ComputeLine fit_compute_line(const std::vector<StepSample>& samples, double sync_cap, double fixed_share);

// The exposed synchronisation s0 + s1 g over sizes g > 1, from the mean sync measured at each size
// (sum, count): a line when two sizes were measured (slope >= 0, else their mean: noise is no
// speedup), from one size a constant (OnePoint::Constant) or proportional to g (Proportional).
// false (s0 = s1 = 0) when nothing was measured.
enum class OnePoint { Constant, Proportional };
bool fit_sync_line(const std::map<int, std::pair<double, int>>& sync_by_size, OnePoint one, double& s0, double& s1);

// ---- shrinkage toward what was measured ----------------------------------------------------------

// trust = n / (n + half) for n configurations measured: half the way to believing the model at
// `half` configurations (1: n / (n + 1)).
double trust_of(int measured_configs, double half = 1.0);
// |ln(a / b)|: one term of the distance between two configurations (GPUs, batch, nodes).
double log_distance(double a, double b);
// The throughput at a configuration not measured: the nearest measurement's, times the model's
// ratio between here and there raised to `trust` (a model fitted to one point claims only the
// square root of the speedup it extrapolates).
double shrink_toward(double measured_near, double model_near, double model_here, double trust);

}  // namespace edp::autoscale
