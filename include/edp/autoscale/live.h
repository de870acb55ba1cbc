// The live autoscaler's decisions (edp-autoscale serve, docs/autoscaler.md §8): what a submitted
// job asks for (JobSpec), what the controller knows of it (LiveJob: its measured step times at the
// sizes it ran at, its progress, its rescale cost), and one planning round (plan_live): the same
// exact DP as the simulator (solve(), optimizer.h) over each job's options
// (slots, ranks per slot, global batch), valued restart-aware as the simulator's best policy.
//
// Everything here is a pure function of its inputs, so that the controller's decisions can be
// tested and replayed without processes.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
};

// Parses and validates a spec; throws edp::DataError "<where>: field 'x': ..." naming the field.
JobSpec parse_job_spec(const std::string& json_text, const std::string& where);
std::string job_spec_json(const JobSpec& s);  // the spec back as JSON (what parse_job_spec reads)

// One (workers, ranks per slot) measurement merged over the job's life (the status file's configs
// of every process that ran it).
struct Measured {
  int workers = 0;  // ranks
  int ranks_per_slot = 1;
  int64_t batch = 0;
  int64_t steps = 0;
  double step_s = 0, comm_s = 0;
};

// Fits throughput.h's step-time model to a job's own measurements (docs/autoscaler.md §8): the
// compute line a + c*b by least squares when two per-rank batches were measured (else through the
// origin), the exposed communication s0 + s1*w when two sizes above 1 were (else proportional to
// w from the one there is, else 0: linear scaling until a measurement says otherwise).
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
};

struct LivePolicy {
  std::string name = "goodput";  // static | dp | goodput
  int slots = 0;
  bool gpu_slots = false;        // GPUs: options with several ranks per slot (MPS)
  int max_ranks_per_slot = 1;    // GPU slots: 1, 2, 4 ... up to this
  double hysteresis = 0.15;      // an option other than the current one must be worth this much more
  double default_pause_s = 0.8;  // rescale cost before a job measured its own
  double start_s = 3.0;          // cost of starting a job (process start, data load)
  double explore_factor = 2.0;   // a job may be given at most this times the largest size it was measured at
};

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
  std::string action;        // start | grow | shrink | rebatch | stop | hold | wait
  std::string reason;
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

// The per-rank speed factor of `k` ranks sharing one GPU under MPS when one rank alone keeps it
// busy a fraction `busy` of its step: 1 while k x busy <= 1, then 1 / (k x busy).
double colocation_speed(int k, double busy);

}  // namespace edp::autoscale
