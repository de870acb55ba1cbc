// A job's goodput learned online from what the job reports (docs/autoscaler.md §7, "Learning
// online"): no throughput table, no gradient statistics of batches it did not run at.
//
// What a job states (LearnSpec): its batch limits — the batch its learning rate was set for
// (init_batch, the reference of its statistical efficiency), the largest batch it trains well
// with, the per-GPU micro-batch bounds (max_local: memory) — and optionally a fixed batch. What it
// reports: the configurations it ran at (nodes, GPUs, micro-batch) with the micro-step time and
// its exposed synchronisation there, and its latest gradient statistics (|g|^2 and the gradient
// variance, AdaScale's / Pollux's sqr and var) at the batch it runs.
//
// The model (GoodputModel), fitted to the job's own observations only, with the pieces of the one
// goodput model (goodput.h):
//   compute(b) = a + c*b           least squares on (step - sync) when two micro-batches were
//                                  seen, else the share fixed_share fixed and the rest per sample
//                                  through the one seen
//   sync(n, g) = 0 (g = 1);  s0 + s1*g within one node (n = 1), t0 + t1*g across nodes (n > 1):
//                                  a line when two GPU counts of that kind were seen, a constant
//                                  from one, the other kind's when none (0 when neither)
//   throughput at an unobserved configuration x: the nearest observed one o times the model's
//   ratio between x and o raised to trust = k / (k + trust_half), k = configurations observed —
//   shrunk toward what was measured, the more so the less was (live.h's Predictor, with nodes)
//   efficiency(B) = gain(B) / (B / init_batch),  gain = (var + sqr) / (var / s + sqr), s = B / init
//   (1 for every batch before the job reported statistics; then only init_batch is worth it)
// and a job is offered at most explore x the largest GPU count it ran at, or one node when that is
// more (1 GPU before it ran).
//
// A global batch B on g GPUs runs as the job splits it (split_batch): micro-batch and
// accumulation steps, the artifact's and AdaptDL's rule; the micro-step time of the split is what
// the model predicts, and an accumulated batch takes step + accum x (step - sync).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "edp/autoscale/goodput.h"

namespace edp::autoscale {

struct StepObservation {
  int nodes = 1, gpus = 1;
  double local_batch = 0;  // per-GPU micro-batch
  double step_s = 0;       // one micro-batch step with its synchronisation
  double sync_s = 0;       // the synchronisation backward did not hide
  std::string type;        // the GPU type it ran on (requests with types; "" otherwise)
};

// What a job states about one GPU type of a cluster with several (plan.h PlanRequest::types).
struct TypeLearn {
  std::string name;
  int max_local = 0;   // its per-GPU micro-batch limit there (memory); 0: LearnSpec::max_local
  double speed = 1.0;  // its 1-GPU throughput there relative to the other types' (a profile, Sia's bootstrap)
};

struct LearnSpec {
  int init_batch = 0;  // >= 1
  int max_batch = 0;   // >= init_batch
  int min_local = 1, max_local = 0;
  int max_gpus = 0;     // 0: the cluster's
  int fixed_batch = 0;  // > 0: the job runs this batch whatever its GPUs
  bool accumulate_on_one_gpu = false;  // one GPU above init_batch accumulates at least once (AdaptDL's rule)
  double explore = 4.0;                // at most explore x the largest GPU count it ran at (or a node)
  // While one micro-batch was measured: the share of its compute taken as fixed per step (the rest
  // grows with the micro-batch). Pollux's prior is 1/2; a quarter predicts a split batch better.
  double fixed_share = 0.25;
  // How far a prediction away from what it measured is believed: trust = k / (k + trust_half) for k
  // configurations measured (1: a half after one).
  double trust_half = 1.0;
  std::vector<StepObservation> observed;
  // Requests with types: the types it may run on (none given: every type, at speed 1). Each
  // type's step times are fitted on that type's observations alone; a type it has not run on is
  // predicted from the type it has the most observations on, scaled by their speeds.
  std::vector<TypeLearn> types;
  bool has_grad = false;
  double grad_sqr = 0, grad_var = 0;
};

// One configuration's prediction.
struct LearnedConfig {
  int nodes = 0, gpus = 0;
  int batch = 0;  // global batch
  BatchSplit split;
  double samples_per_s = 0;
  double efficiency = 1;  // progress per sample relative to init_batch: gain / (B / init_batch)
  double goodput() const { return samples_per_s * efficiency; }  // init-batch samples per second
};

class GoodputModel {
 public:
  explicit GoodputModel(const LearnSpec& spec);

  bool observed_any() const { return !obs_.empty(); }
  double trust() const;
  // Micro-step and sync time at (nodes, gpus, micro-batch): the observation there, else predicted.
  std::pair<double, double> step_sync(int nodes, int gpus, double local_batch) const;
  double efficiency(double batch) const;
  // The batch with the best predicted goodput on (nodes, gpus); gpus == 0 when no batch fits.
  LearnedConfig best(int nodes, int gpus) const;
  // GPU counts it may be offered: up to explore x the largest it ran at or node_gpus, the larger
  // (1 before it ran), within the spec's max_gpus and max_batch / min_local.
  int max_gpus(int node_gpus = 1) const;

  // The fitted model alone (for tests): compute and sync times.
  double model_compute(double local_batch) const { return a_ + c_ * local_batch; }
  double model_sync(int nodes, int gpus) const;

 private:
  LearnedConfig evaluate(int nodes, int gpus, int batch) const;
  double model_step(int nodes, int gpus, double b) const { return model_compute(b) + model_sync(nodes, gpus); }
  LearnSpec spec_;
  std::vector<StepObservation> obs_;  // distinct configurations, first report kept
  double a_ = 0, c_ = 0;
  bool intra_known_ = false, inter_known_ = false;
  double s0_ = 0, s1_ = 0, t0_ = 0, t1_ = 0;
  std::vector<int> locals_;  // candidate micro-batches
};

}  // namespace edp::autoscale
