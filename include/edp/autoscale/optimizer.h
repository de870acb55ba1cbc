// The autoscaler's optimizer: a pure function that gives every job a number of GPUs and a
// global batch (or 0 GPUs: the job waits) so that the total value is maximal under the GPU
// capacity. It is a multiple-choice knapsack solved exactly by dynamic programming over
// (jobs x GPUs); docs/autoscaler.md has the formulation, the recurrence and the complexity.
//
// Two levels:
//   - solve(): options with values -> the optimal choice per job. It needs no table and is what
//     decide() (plan.h: the one valuation every caller uses) calls;
//   - make_problem(): the v1 form of the `plan` contract (a measured throughput table per job, a
//     reference row, bounds, weights) -> per-job options with values, fully validated; the same
//     values decide() gives the request from_v1() makes of it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace edp::autoscale {

// One measured (or modelled) point of a job's throughput.
struct ThroughputPoint {
  int gpus = 0;
  int batch = 0;  // global batch (samples per optimizer step)
  double samples_per_s = 0;
};

// A job as the v1 `plan` contract describes it: a throughput table and bounds.
struct TableJob {
  std::string id;
  int min_gpus = 0;  // 0: the job may wait (0 GPUs); >= 1: it must run with at least this many
  int max_gpus = 0;
  int max_batch_per_gpu = 0;
  double weight = 1.0;
  int ref_gpus = 0;
  int ref_batch = 0;
  std::vector<ThroughputPoint> throughput;
  // Extensions (optional in the JSON): the job's allocation now (0 GPUs: not running). An option
  // other than the current one loses the fraction `hysteresis` of its value, which models
  // the pause a rescale costs and damps flapping between near-equal allocations.
  int current_gpus = 0;
  int current_batch = 0;
};

struct TableRequest {
  int gpus = 0;
  std::vector<TableJob> jobs;
  double hysteresis = 0.0;  // in [0, 1); the JSON key is "rescale_penalty" (the v1 contract)
};

// One allowed choice of a job. gpus == 0 is "wait" (value 0).
struct Option {
  int gpus = 0;
  int batch = 0;
  double value = 0;
  int tag = 0;  // the caller's, carried into the Choice (e.g. an index into its own option list)
};

// What solve() needs per job (elastic::JobOptions is a training job's settings). Options with gpus >
// capacity are simply never chosen.
struct DpJob {
  std::vector<Option> options;  // any order; duplicates allowed
  bool may_wait = true;         // false: the job must get one of its options (non-preemptible)
  int current_gpus = 0;         // tie-break: prefer (current_gpus, current_batch) among equals
  int current_batch = 0;
};

struct Choice {
  int gpus = 0;
  int batch = 0;
  double value = 0;
  int tag = 0;  // the chosen Option's tag (0 when waiting)
};

struct Solution {
  double objective = 0;
  std::vector<Choice> choices;  // one per job, in input order
  int gpus_used = 0;
  int64_t cells = 0;  // DP cells evaluated (options x capacities), for benchmarks
};

// Thrown (as edp::Error subclass) for invalid requests; the message names the job and field.
// make_problem validates; solve() checks only its own preconditions.
std::vector<DpJob> make_problem(const TableRequest& req);

// Exact optimum of: maximise sum_j value(choice_j) s.t. sum_j gpus(choice_j) <= capacity, each
// job takes exactly one of its options, or waits (value 0) when may_wait. Ties between optimal
// solutions go toward each job's current allocation (jobs examined from last to first), then
// toward fewer GPUs. Throws edp::Error when the jobs that must run cannot all fit.
Solution solve(const std::vector<DpJob>& jobs, int capacity);

// Reference solver for tests: enumerates every assignment (exponential; tiny instances only).
Solution solve_brute_force(const std::vector<DpJob>& jobs, int capacity);

}  // namespace edp::autoscale
