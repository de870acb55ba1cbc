// The autoscaler's one decision (docs/plan.md): a cluster state in, every job's configuration out.
//
// Every caller asks it: `edp-autoscale plan` (the public JSON contract, this file's parse/format
// functions), the pool simulator's policies (policy.h), the node-level simulator's edp policies
// (cluster_sim.h) and the live controller (live.h). Each describes its jobs as a PlanRequest —
// the configurations a job may take and their throughput, its remaining work, its current
// configuration, what a pause costs it — and decide() values every option with one valuation and
// solves the exact DP (optimizer.h) over them; so an outside scheduler or simulator that sends the
// same request gets the same decision.
//
// The valuation of an option o of job j (samples_per_s x efficiency = its progress rate r_o):
//   throughput     v = weight x (samples_per_s_o / own.samples_per_s) x efficiency_o
//                  (the speedup over the job's own configuration; the v1 contract)
//   remaining      v = weight x r_o / remaining        (the share of its remaining work per second)
//   restart-aware  v = weight / (remaining / r_o + pause_o + margin_o)   (the reciprocal of its time
//                  to finish there, counting the pause that taking the option costs)
// where pause_o = 0 for the job's current configuration, its change pause (`pause_s`, `rebatch_s`
// for a change of batch alone) x (1 + pause_per_gpu x its current GPUs) for another configuration
// of a running job, its start pause (`start_s`) for a job that is not running; margin_o =
// `margin_s` for a change of a running job (0 for a free rebatch). Then an option other than the
// current one of a running job loses the fraction `hysteresis` of its value (not a free rebatch). `fifo` values nothing: running jobs keep their configuration, the others start at their
// own configuration in order while it fits (a job larger than the cluster is passed over, a job
// that does not fit now blocks the ones behind it).
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "edp/autoscale/memory.h"
#include "edp/autoscale/online.h"
#include "edp/autoscale/optimizer.h"

namespace edp::autoscale {

enum class Objective { Throughput, Remaining, RestartAware, Fifo };

// "throughput", "remaining", "restart-aware", "fifo"; parse_objective throws edp::DataError
// listing the names for anything else.
const char* objective_name(Objective o);
Objective parse_objective(const std::string& name);

// One configuration of a job. gpus are the slots it costs; batch 0 means the job picks its batch
// itself at that size (an adaptive batch: such configurations are told apart by gpus and ranks
// per GPU only).
struct Config {
  Config() = default;
  Config(int gpus_, int batch_, int ranks_per_gpu_ = 1, double samples_per_s_ = 0, double efficiency_ = 1.0,
         std::string type_ = {})
      : gpus(gpus_), batch(batch_), ranks_per_gpu(ranks_per_gpu_), samples_per_s(samples_per_s_),
        efficiency(efficiency_), type(std::move(type_)) {}
  int gpus = 0;
  int batch = 0;
  int ranks_per_gpu = 1;
  double samples_per_s = 0;  // throughput there (measured or predicted)
  double efficiency = 1.0;   // statistical efficiency: progress per sample, relative to the job's own batch
  std::string type;          // the GPU type (PlanRequest::types); "" in a request without types
};

struct PlanJob {
  std::string id;
  double weight = 1.0;
  bool may_wait = true;  // false: the job must be given one of its options (a running, non-preemptible job)
  double remaining = 0;  // work left, in samples x efficiency (the units of samples_per_s x efficiency); > 0
  Config own;            // its own configuration: fifo starts it there; throughput's unit
  Config current;        // gpus == 0: not running
  double pause_s = -1;   // what a change of its configuration costs it (< 0: the request's)
  double start_s = -1;   // what starting it costs (< 0: the request's)
  // What a change of its batch alone (same GPUs and ranks per GPU) costs it (< 0: as pause_s). 0
  // (given): the job rebatches in place for free, and such a change is no change (no hysteresis).
  double rebatch_s = -1;
  std::vector<int> current_nodes;  // node index of each of its current GPUs (requests with nodes)
  // What it needs in each GPU's memory (edp/autoscale/memory.h): options it does not fit in
  // (PlanRequest::gpu_memory_bytes) are never chosen, but for the one it runs in now.
  MemoryNeed memory;
  std::vector<Config> options;
  // A job whose options edp builds itself from what the job reported (online.h): one per GPU count
  // that packs onto the request's nodes, each at the batch with the best predicted goodput.
  bool learned = false;
  LearnSpec learn;
};

// One GPU type of a cluster with several (docs/plan.md, "Several GPU types").
struct GpuType {
  std::string name;              // what options, current and own configurations name it by
  int gpus = 0;                  // how many
  std::vector<int> nodes;        // GPUs per node (empty: one pool); numbered after the previous types' nodes
  int64_t gpu_memory_bytes = 0;  // each GPU's memory (0: the request's)
};

struct PlanRequest {
  int version = 2;  // the contract version it came as (from_v1: 1); the answer is given in the same
  int gpus = 0;     // capacity
  Objective objective = Objective::RestartAware;
  double hysteresis = 0.15;
  double pause_s = 30;  // default change pause
  double start_s = 30;  // default start pause
  // Restart-aware: a change of a running job must save it this many seconds beyond its pause.
  double margin_s = 0;
  // Restart-aware: a running job's change pause counts (1 + pause_per_gpu x the GPUs it holds)
  // times: while it restarts every GPU it holds idles, capacity the other jobs lose.
  double pause_per_gpu = 0;
  // GPUs per node; empty: one pool. With nodes the decision also places every job (Plan::nodes),
  // and learned jobs' GPU counts pack onto them (1..node size, then whole nodes).
  std::vector<int> nodes;
  int64_t gpu_memory_bytes = 0;  // each GPU's memory (0: not limited; the jobs' MemoryNeed is then unused)
  // Several GPU types: every configuration names its type, gpus is their sum, nodes (numbered
  // across the types in order) are given per type, and decide() solves over the types' capacities
  // (typed_optimizer.h). Empty: one type, the configurations name none. Learned jobs learn per type
  // (online.h LearnSpec::types).
  std::vector<GpuType> types;
  std::vector<PlanJob> jobs;
};

// An option's value and its terms (the formulas above).
struct Valuation {
  double rate = 0;      // progress per second there: samples_per_s x efficiency
  double pause_s = 0;   // restart-aware: what taking it costs the job (0 for its current configuration)
  double margin_s = 0;  // restart-aware: what a change must save beyond its pause
  double finish_s = 0;  // restart-aware: remaining / rate + pause + margin, the time to finish there
  double value = 0;     // what decide() maximises (hysteresis included)
};

// A job's decision: the option chosen (index into its options; -1 when it waits, or, under fifo,
// when the configuration is its own or its current one and not among its options) and the
// configuration itself (gpus == 0: it waits).
struct PlanChoice {
  int option = -1;
  Config config;
  double value = 0;
  Valuation valuation;  // the chosen option's valuation (option_valuation; not under fifo)
};

struct Plan {
  std::vector<PlanChoice> choices;         // one per job, in request order
  std::vector<std::vector<double>> values;  // [job][option]: the valuation (hysteresis included); fifo: empty
  std::vector<std::vector<int>> nodes;       // [job]: node index per GPU (requests with nodes; else empty)
  double objective = 0;
  int gpus_used = 0;
};

// The value of one option of a job under the request's objective (above). Exposed for tests;
// decide() uses exactly this.
double option_value(const PlanRequest& req, const PlanJob& job, const Config& option);
// The same value with the terms it is made of: what a decision log reports, so that the reason it
// gives is the valuation the decision was made on.
Valuation option_valuation(const PlanRequest& req, const PlanJob& job, const Config& option);
bool is_current(const PlanJob& job, const Config& option);

// Validates the request (edp::DataError naming the job and field), builds learned jobs' options,
// values every option, solves, and with nodes places the jobs. Throws edp::Error when the jobs
// that must run cannot all fit.
Plan decide(const PlanRequest& req);

// The same, reusing its buffers across calls (the simulators decide thousands of times).
class Planner {
 public:
  const Plan& decide(const PlanRequest& req);

 private:
  void place(const PlanRequest& req);
  std::vector<DpJob> problem_;
  PlanRequest expanded_;
  Plan plan_;
};

// The options of learned jobs (PlanJob::learned), written into req.jobs[i].options: for a job that
// reported steps, one per GPU count up to GoodputModel::max_gpus() that packs onto the nodes (and
// its current count), on ceil(g / node size) nodes (its current count on the nodes it holds), at
// the batch with the best predicted goodput; for one that has not, its first configuration (one
// GPU, init_batch or its fixed batch) valued as if it were as short as the shortest job that has
// (the request's start pause when none has).
void expand_learned(PlanRequest& req);

// Placement on nodes (node_gpus[k] GPUs on node k): a job whose GPU count stays keeps its nodes;
// the others, largest first, take whole free nodes for a count of a node or more (the nodes they
// had first), the fullest node with room for a smaller count (the one they had on a tie), and only
// when neither exists the most-free nodes. counts[j] == 0: no GPUs. Returns the node per GPU.
std::vector<std::vector<int>> place_on_nodes(const std::vector<int>& node_gpus,
                                             const std::vector<std::vector<int>>& current,
                                             const std::vector<int>& counts);
// `need` GPUs from the nodes with the most free GPUs, fullest-free first (ties: lowest index);
// updates free. Throws edp::Error when there are not enough.
std::vector<int> most_free_nodes(std::vector<int>& free, int need);

// ---- the JSON contract (docs/plan.md) ----------------------------------------------------------

// Parses a request of either version: v2 (`"version": 2`) or v1 (no version: the throughput-table
// form, converted with from_v1). `where` names the input in errors; every error is an
// edp::DataError naming the job and the field. gpus_override >= 0 replaces the request's "gpus".
PlanRequest parse_plan_request(const std::string& json_text, const std::string& where, int gpus_override = -1);
// The v1 request as v2: objective throughput, hysteresis as given (the v1 key rescale_penalty), the options its
// throughput rows that are feasible, own = the ref row.
PlanRequest from_v1(const TableRequest& v1);
// The request as v2 JSON (what parse_plan_request reads back to the same request).
std::string plan_request_json(const PlanRequest& req);
// The decision as JSON: v2 (allocations with the option and the configuration, each job's option
// values) or, for a request that came as v1, the v1 answer ({"objective", "allocations": [{"id",
// "gpus", "batch", "value"}], "solve_ms"}).
std::string plan_json(const PlanRequest& req, const Plan& plan, double solve_ms, int version = 2);
// The same text written to `out` as it is made (an answer for 10^5 jobs is tens of megabytes).
void print_plan_json(std::FILE* out, const PlanRequest& req, const Plan& plan, double solve_ms, int version = 2);
// A complete v2 request with every field, for `edp-autoscale plan --example`.
std::string example_plan_request();

}  // namespace edp::autoscale
