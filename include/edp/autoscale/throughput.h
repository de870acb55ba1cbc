// Throughput model of a data-parallel job: step time as a function of (GPUs, per-GPU batch),
// fitted to the measured Pollux profiles (data/model_profiles). The form, fitted by
// weighted least squares on relative error (docs/autoscaler.md, "Throughput model"):
//
//   compute(b)   = a + c * b                        b = per-GPU batch (linear: one GPU's work)
//   sync(g, b)   = 0                                 g == 1  (the ~ms framework overhead is in a)
//                = max(0, s0 + s1*g + [n>1](s2 + s3*n) - o * compute(b))    g > 1
//   step(g, b)   = compute(b) + sync(g, b)           n = ceil(g / gpus_per_node): packed nodes
//
// sync is the all-reduce time not hidden behind backward: it grows with GPUs and nodes and
// shrinks as a larger per-GPU batch gives backward more time to overlap it (the -o term).
// samples/s = g * b / step(g, b).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace edp::autoscale {

struct StepTimeModel {
  double a = 0, c = 0;                   // compute
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // synchronisation
  double o = 0;                           // overlap with compute
  int gpus_per_node = 4;

  double compute_s(double local_batch) const { return a + c * local_batch; }
  double sync_s(int gpus, double local_batch) const;
  double step_s(int gpus, double local_batch) const { return compute_s(local_batch) + sync_s(gpus, local_batch); }
  double samples_per_s(int gpus, int global_batch) const;

  // Collocation: `k` ranks share each of `gpus` GPUs (MPS), each computing a per-rank batch of
  // global_batch / (gpus * k). Alone, a rank's step computes for a + c*b; the GPU is busy for
  // c*b of it plus the share (1 - idle) of the fixed part a, the rest (`idle`, in [0, 1]) being
  // time the GPU waits for the host (launches, Python, the loader). k ranks interleave their
  // idle parts and serialise their busy parts:
  //     compute_k = max(a + c*b, k * (c*b + (1 - idle) * a))
  // i.e. speed min(1, 1/(k*u)) with u = busy / (a + c*b) (live.h's colocation_speed); the
  // gradient allreduce is hierarchical (within a GPU first), so it is the one among `gpus`,
  // overlapped with compute_k. k = 1 is exactly samples_per_s; idle = 0 never gains from k > 1.
  double colocated_compute_s(double rank_batch, int k, double idle) const;
  double colocated_samples_per_s(int gpus, int k, int global_batch, double idle) const;
};

// How well the model reproduces the measurements it was fitted to (relative error of step time,
// |pred - meas| / meas), over all rows and over the rows with the placement the simulator uses
// (packed: gpus_per_node per node).
struct FitReport {
  int rows = 0;
  double mean_rel_err = 0, p90_rel_err = 0, max_rel_err = 0;
  int packed_rows = 0;
  double packed_mean_rel_err = 0, packed_max_rel_err = 0;
};

struct ModelProfile {
  std::string name;
  int init_batch = 0;  // smallest validated global batch (M0)
  int max_batch = 0;   // largest validated global batch
  int min_local = 0;   // per-GPU batch bounds (max_local: memory)
  int max_local = 0;
  std::vector<int> local_grid;  // per-GPU batches that were profiled
  StepTimeModel model;
  FitReport fit;
  // Gradient noise scale (B_noise, in samples) at mid-training, from convergence_gradstats.csv;
  // 0 when unknown. Statistical efficiency at batch M is (B_noise + M0) / (B_noise + M).
  double grad_noise_scale = 0;
  // Samples of one complete run (model_limits.csv: total_progress x init_batch_size, i.e.
  // max_epochs x the dataset size); 0 when unknown. A Pollux workload job does this much work.
  double total_samples = 0;
  bool synthetic = false;
};

// Reads model_limits.csv, throughput_placements.csv, throughput_scalability.csv and (if present)
// convergence_gradstats.csv from `dir` and fits one StepTimeModel per model. Malformed files
// raise edp::DataError naming file, line and column.
std::vector<ModelProfile> load_model_profiles(const std::string& dir);

// Three made-up models (small/medium/large, different scaling) for tests and for machines
// without the data files. Marked synthetic = true.
std::vector<ModelProfile> synthetic_model_profiles();

// Per-GPU batches worth offering for a model at `gpus` GPUs whose global batch must lie in
// [min_batch, max_batch]: the profiled grid plus the bounds, each times `gpus`.
std::vector<int> candidate_batches(const ModelProfile& m, int gpus, int min_batch, int max_batch);

}  // namespace edp::autoscale
