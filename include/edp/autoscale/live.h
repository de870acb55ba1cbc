// The live autoscaler's decisions (edp-autoscale serve, docs/autoscaler.md §8): what a submitted
// job asks for (JobSpec), what the controller knows of it (LiveJob: its measured step times at the
// sizes it ran at, its progress, its rescale cost), and one planning round (plan_live): a request
// of plan.h over each job's options (slots, ranks per slot, global batch), decided restart-aware
// by the same valuation and DP as every other caller (plan, both simulators).
//
// Everything here is a pure function of its inputs, so that the controller's decisions can be
// tested and replayed without processes.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "edp/autoscale/plan.h"
#include "edp/autoscale/policy.h"
#include "edp/autoscale/throughput.h"
#include "edp/elastic/events.h"

namespace edp::autoscale {

// `edp-autoscale submit SPEC.json`. Unknown fields are refused.
struct JobSpec {
  std::string name;                  // [A-Za-z0-9_.-], 1..40 characters
  std::vector<std::string> command;  // program and arguments; "{job_dir}" becomes the job's directory
  std::string cwd;                   // where the job runs (absolute; submit fills in its own)
  std::map<std::string, std::string> env;  // added to the job's environment
  int min_workers = 1, max_workers = 1;
  int workers = 0;                   // start size (0: min_workers)
  int64_t min_batch = 0, max_batch = 0;  // the global batch range the job trains well with
  int64_t batch = 0;                 // start global batch (0: min_batch)
  int64_t max_worker_batch = 0;      // largest per-worker batch (memory); 0: no limit
  double weight = 1.0;
  bool preemptible = false;          // may be stopped (from its last checkpoint) to make room
  int max_restarts = 1;              // crashes edprun restarts before the job counts as failed
  int64_t samples = 0;               // optional: samples the whole training takes (before it reports)
  double grad_noise_scale = 0;       // optional: B_noise for the goodput policy's efficiency
  double gpu_busy = 1.0;             // GPU slots: fraction of a step one rank keeps its GPU busy (collocation model)
  // Optional: what each rank needs in its slot's memory (edp/autoscale/memory.h). With the slots'
  // memory known (edp-autoscale serve --slot-memory-mib), a sharded job's min_workers rises to the
  // fewest workers it fits on, and no size it does not fit is chosen.
  MemoryNeed memory;
};

// Parses and validates a spec; throws edp::DataError "<where>: field 'x': ..." naming the field.
// A spec that could never start is refused here, when it is submitted: a command or environment
// that exec(2) cannot pass on (an argument or NAME=value over 128 KiB, more than 4096 arguments or
// variables, more than 1 MiB in all).
JobSpec parse_job_spec(const std::string& json_text, const std::string& where);
std::string job_spec_json(const JobSpec& s);  // the spec back as JSON (what parse_job_spec reads)

// One (workers, ranks per slot) measurement merged over the job's life (the status file's configs
// of every process that ran it).
struct Measured {
  Measured() = default;
  Measured(int workers_, int ranks_per_slot_, int64_t batch_, int64_t steps_, double step_s_, double comm_s_,
           std::string type_ = {})
      : workers(workers_), ranks_per_slot(ranks_per_slot_), batch(batch_), steps(steps_), step_s(step_s_),
        comm_s(comm_s_), type(std::move(type_)) {}
  int workers = 0;  // ranks
  int ranks_per_slot = 1;
  int64_t batch = 0;
  int64_t steps = 0;
  double step_s = 0, comm_s = 0;
  std::string type;  // the GPU type it was taken on (LivePolicy::types); "" with one type
};

// Fits throughput.h's step-time model to a job's own measurements (docs/autoscaler.md §8): the
// compute line a + c*b by least squares when two per-rank batches were measured (else through the
// origin), the exposed communication s0 + s1*w when two sizes above 1 were (else proportional to
// w from the one there is, else 0: linear scaling until a measurement says otherwise). The caller
// chooses the rows (plan_live: those past their warm-up, LivePolicy::measured_steps()).
StepTimeModel fit_measured(const std::vector<Measured>& m);

struct LiveJob {
  std::string id;
  JobSpec spec;
  bool running = false;
  int workers = 0, ranks_per_slot = 1;  // running: its size now
  int64_t batch = 0;
  bool settled = true;  // running: measured at its current size and no rescale in flight
  std::vector<Measured> measured;
  int64_t samples_done = 0, samples_total = 0;  // 0 total: not reported yet
  double pause_s = -1;  // its measured rescale cost (mean pause); < 0: none measured
  std::string type;     // running, with several GPU types: the type of the slots it runs on
};

// One GPU type of the slots (LivePolicy::types).
struct SlotType {
  std::string name;    // a token (serve: derived from nvidia-smi's product name, docs/autoscaler.md §8)
  int slots = 0;       // how many slots are of this type
  double speed = 1.0;  // a job's speed here relative to the other types', before it was measured here
  bool given = false;  // the speed was given (serve --gpu-speeds): else jobs that ran here and on
                       // another type at the same size measure it (live.cpp, type_speeds)
};

struct LivePolicy {
  std::string name = "goodput";  // static | dp | goodput (parse_policy(name, PolicyScope::Live))
  int slots = 0;
  bool gpu_slots = false;        // GPUs: options with several ranks per slot (MPS)
  int max_ranks_per_slot = 1;    // GPU slots: 1, 2, 4 ... up to this
  int64_t slot_memory_bytes = 0;  // each slot's memory (0: not limited; JobSpec::memory unused)
  double hysteresis = 0.15;      // an option other than the current one must be worth this much more
  double default_pause_s = 0.8;  // rescale cost before a job measured its own
  double start_s = 3.0;          // cost of starting a job (process start, data load)
  double explore_factor = 2.0;   // a job may be given at most this times the largest size it was measured at
  // The first steps at a new size are slow (allocations, page faults, new ranks loading). A size
  // counts as measured once it has 2 x warmup_steps + 1 steps: then the median step time the job
  // reports (over its recent steps) is no longer a warm-up step.
  int warmup_steps = 3;
  int measured_steps() const { return 2 * warmup_steps + 1; }
  // Several GPU types (docs/autoscaler.md §9): each type's slots, summing to `slots`. A job is
  // offered options on every type, each on one type only (never across types); a type it was not
  // measured on is predicted from the type it was measured on most, times their speed ratio (the
  // projection of plan's learned jobs). A running job stays on its type. Empty or one type: the
  // slots are alike, as before.
  std::vector<SlotType> types;
  bool typed() const { return types.size() > 1; }
};

// A job's throughput at a configuration: measured where it ran (past its warm-up), else predicted
// cautiously: the step-time model fitted to its measurements (fit_measured) gives the ratio
// between the configuration and the nearest one measured (distance |ln w/w'| + |ln B/B'|), and
// the prediction is that measurement times the ratio raised to trust = n / (n + 1), n being the
// configurations measured — shrunk toward what was measured, the more so the less was. A job that
// measured nothing gets the median per-rank throughput of the others (prior_rank_sps) x ranks.
class Predictor {
 public:
  Predictor(const LiveJob& job, const LivePolicy& policy, double prior_rank_sps);
  double samples_per_s(int workers, int ranks_per_slot, int64_t batch, bool* was_measured = nullptr) const;
  double trust() const;

 private:
  const Measured* measured(int workers, int k, int64_t batch) const;
  double model(int workers, int k, int64_t batch) const;  // the fitted model alone
  const LiveJob& job_;
  const LivePolicy& policy_;
  double prior_rank_sps_;
  std::vector<Measured> usable_;  // measured past the warm-up
  int anchors_ = 0;               // of them, with one rank per slot (the model's rows)
  StepTimeModel model_;
};

// What the live controller does with a job in a round.
enum class Action { Start, Grow, Shrink, Rebatch, Stop, Hold, Wait, Deferred };
const char* action_name(Action a);

// One job's decision, with the reason the decision log shows.
struct LiveChoice {
  int slots = 0;  // 0: wait (queued) or stop (preempt)
  int ranks_per_slot = 1;
  int workers = 0;  // ranks = slots x ranks_per_slot
  int64_t batch = 0;
  double samples_per_s = 0;  // predicted (or measured) at the choice
  bool measured = false;     // samples_per_s was measured, not predicted
  double remaining_s = 0;    // predicted time to finish at the choice (pause included)
  double stay_remaining_s = 0;  // running: predicted time to finish where it is
  Action action = Action::Wait;
  std::string reason;
  std::string type;  // several GPU types: the type of the slots chosen ("" with one type, or none chosen)
};

struct LivePlan {
  std::vector<LiveChoice> choices;  // one per job, in input order
  double objective = 0;
  int slots_used = 0;
  double solve_ms = 0;
};

// One planning round. Jobs in submission order. Throws edp::Error only on an internal error; jobs
// that cannot run at all (min_workers > slots) are simply never started (the caller refuses them).
LivePlan plan_live(const std::vector<LiveJob>& jobs, const LivePolicy& policy);

// The request (plan.h) plan_live decides for dp and goodput: exposed so that tests can check that
// the controller asks the same question as the other callers.
PlanRequest live_request(const std::vector<LiveJob>& jobs, const LivePolicy& policy);

// The per-rank speed factor of `k` ranks sharing one GPU under MPS when one rank alone keeps it
// busy a fraction `busy` of its step: 1 while k x busy <= 1, then 1 / (k x busy).
double colocation_speed(int k, double busy);

}  // namespace edp::autoscale
