// The autoscaler's optimizer on a cluster of several GPU types: every job gets one of its
// options — a number of GPUs of each type (most options use one type; an option that spans types
// is allowed and costs GPUs of each) and a batch — or waits, so that the total value is maximal
// under each type's capacity. The one-type problem is solve() (optimizer.h); this is its
// multi-dimensional form (docs/autoscaler.md, "Several GPU types").
//
// Two methods, chosen by size:
//   - exact: a DP over the product of the capacities (prod_t (C_t + 1) cells per job, the largest
//     type's rounded up to whole lanes of 8), with the one-type solver's exact reductions per job
//     (per GPU vector the best option; an option that costs at least as much of every type as
//     another and is worth no more is dropped). Used while the cells of all jobs' tables fit
//     kExactCells. Its tables are pruned: a short descent of the dual below gives prices and a
//     feasible plan; a cell from which even the bound (Lagrangian on all types but the largest,
//     a one-type DP along it) cannot reach the plan's value is dropped. The answer is the same as
//     without pruning (same choices, same bits); the descent's plan only decides what is computed;
//   - decomposed: beyond that (hundreds of jobs on thousands of GPUs of four types), Lagrangian
//     prices per type: at prices λ each job alone takes its best option less λ x its GPUs, which
//     bounds the optimum from above (the dual); the primal assigns every job the type of its
//     priced choice and solves each type exactly with solve(). The gap to the bound is reported
//     (TypedSolution::bound); exact is true only when the two meet.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace edp::autoscale {

// One allowed choice of a job. gpus[t] GPUs of type t (the request's types, in order); at least
// one GPU in all. Waiting is TypedJob::may_wait, not an option.
struct TypedOption {
  std::vector<int> gpus;
  int batch = 0;
  double value = 0;
  int tag = 0;           // the caller's, carried into the choice
  bool current = false;  // the job's allocation now: preferred among equally good choices
};

struct TypedJob {
  std::vector<TypedOption> options;
  bool may_wait = true;  // false: the job must get one of its options
};

struct TypedChoice {
  std::vector<int> gpus;  // per type; all 0 when the job waits
  int batch = 0;
  double value = 0;
  int tag = 0;
  int option = -1;  // index into the job's options; -1: it waits
};

struct TypedSolution {
  double objective = 0;
  double bound = 0;    // an upper bound on the optimum (== objective when exact)
  bool exact = false;  // proven optimal (always, for the exact method)
  std::string method;  // "exact" or "decomposed"
  std::vector<TypedChoice> choices;  // one per job, in input order
  std::vector<int> gpus_used;        // per type
  int64_t cells = 0;                 // DP cells evaluated, for benchmarks
};

// The largest problem the exact method takes: the tables of all jobs together (jobs x cells, as
// laid out: the largest type's cells rounded up to whole lanes of 8),
// 64 MiB of doubles, the one-type solver's bound on the tables it keeps whole.
constexpr int64_t kExactCells = int64_t{8} << 20;

// Maximises the total value under capacity[t] GPUs of each type t (see above). Ties go toward
// each job's current option. Throws edp::Error naming the field for malformed options (a GPU
// vector of another length, no GPU, a non-finite value), and when the jobs that must run cannot
// all fit. force: "exact", "exact-dense" (the exact DP without pruning) or "decomposed" (tests and
// benchmarks); "" chooses by size.
TypedSolution solve_typed(const std::vector<TypedJob>& jobs, const std::vector<int>& capacity,
                          const std::string& force = "");

// Reference solver for tests: every assignment (exponential; tiny instances only).
TypedSolution solve_typed_brute_force(const std::vector<TypedJob>& jobs, const std::vector<int>& capacity);

}  // namespace edp::autoscale
