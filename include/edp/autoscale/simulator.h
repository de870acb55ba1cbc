// Discrete-event simulator of a GPU cluster shared by elastic training jobs.
//
// Jobs come from the Philly trace (or a synthetic Poisson generator, or a Pollux workload file).
// Each job gets a model (seeded, by its GPU-time as in the Pollux workloads: < 1 GPU-h cifar10
// or ncf, 1-10 deepspeech2 or bert, 10-100 yolov3, >= 100 imagenet; a Pollux workload names it)
// whose fitted throughput curve decides how fast it runs at any (GPUs, batch). Its work, in
// samples, is set so that at its requested GPUs and its own batch it runs exactly its duration
// (a Pollux workload job: the model's complete run, whose duration the loader computes). The policy is asked for a new plan on
// every arrival, every completion and every `replan_interval_s`; a running job whose allocation
// changes pauses for `rescale_pause_s` (it holds its new GPUs but makes no progress).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "edp/autoscale/policy.h"
#include "edp/autoscale/throughput.h"

namespace edp::autoscale {

// The pause of a rescale edp measured on CPU workers (bench/rescale.sh, Fashion-MNIST CNN, 2-core
// AMD EPYC, docs/performance.md): an in-place grow 1 -> 2 took 0.77-0.84 s from the request to
// the first step at the new size (a shrink 0.04 s, a restart 2.0 s). The simulators' default
// pause for CPU slots (edp-autoscale --slots cpu); GPU clusters keep Pollux's 30 s.
constexpr double kMeasuredCpuRescalePauseS = 0.8;

struct TraceJob {
  std::string id;
  double submit_s = 0;
  int gpus = 1;
  double duration_s = 0;  // at its own configuration (gpus, own batch)
  std::string vc;
  std::string model;  // the model profile's name; empty: assign_model() picks one
  int batch = 0;      // the job's own global batch; 0: own_batch()'s default (SimConfig::own_batch)
};

// Reads philly_jobs.csv (submit_time_s, gpus_requested, duration_s, ...). Malformed rows raise
// edp::DataError with file:line:column. Jobs with duration 0 are kept (they finish at once).
std::vector<TraceJob> load_philly_trace(const std::string& path);

// Reads a Pollux (OSDI'21) workload file, data/pollux_workloads/*/workload-N.csv
// (name, time, application, num_replicas, batch_size): each job names its model and its own
// (GPUs, global batch); its work is the model's complete run (ModelProfile::total_samples) and
// its duration_s is the time that takes at its own configuration on the fitted model. A batch
// that `num_replicas` does not divide is rounded down to a multiple of it (own_batch()).
// Unknown models, bad numbers and models without total_samples raise edp::DataError with
// file:line:column.
std::vector<TraceJob> load_pollux_workload(const std::string& path, const std::vector<ModelProfile>& profiles);

// Whether a CSV file's header is that of a Pollux workload (has `application` and
// `num_replicas`) rather than a Philly-format trace.
bool is_pollux_workload(const std::string& path);

// Synthetic jobs: Poisson arrivals, Philly-like GPU sizes (mostly 1), log-normal durations.
struct PoissonOptions {
  int jobs = 200;
  double arrivals_per_hour = 40;
  double median_duration_s = 1000;
  double duration_sigma = 1.5;  // of log(duration)
  uint64_t seed = 1;
};
std::vector<TraceJob> poisson_trace(const PoissonOptions& opt);

// What a trace job's own global batch is when the trace does not say (TraceJob::batch == 0):
//   PerGpu: the model's initial batch per GPU times the requested GPUs (weak scaling; the
//           Pollux "realistic" workloads are built this way), capped at the model's max batch;
//   Model:  the model's default global batch (init_batch_size, the batch Pollux starts every job
//           at), kept when the job asks for more GPUs (strong scaling), raised only as far as
//           the requested GPUs need to hold the model's minimum per-GPU batch.
enum class OwnBatch { PerGpu, Model };

struct SimConfig {
  int gpus = 64;
  std::string policy = "dp";
  double rescale_pause_s = 30;     // Pollux's simulator default re-allocation cost
  double replan_interval_s = 300;  // periodic re-plan besides arrivals and completions
  double hysteresis = 0.05;        // value fraction a change must overcome (--rescale-penalty)
  Weighting weighting = Weighting::Remaining;  // DP job weights (policy.h; the documented default)
  double window_s = 7 * 86400.0;   // "completed within the window" counts finish <= window
  int max_scale = 4;               // elastic max GPUs = min(64, max(gpus_per_node, max_scale * requested))
  OwnBatch own_batch = OwnBatch::Model;  // a trace job's own batch (above)
  bool statistical_efficiency = false;  // progress = samples/s x efficiency(batch) when true
  bool restart_aware = false;      // elastic policies value 1 / (time left + pause if restarted)
  // Collocation (docs/autoscaler.md §8): the elastic policies may run k in {1, 2, 4, 8} <= this
  // many ranks on each GPU (under MPS), the throughput from StepTimeModel::colocated_samples_per_s
  // with `colocation_idle`, the share of a rank's fixed step time (the model's a) during which its
  // GPU waits for the host. 1: no collocation (the simulator before it). A model assumption until
  // edp has measured collocated ranks on a GPU.
  int max_ranks_per_gpu = 1;
  double colocation_idle = 0;
  uint64_t seed = 1;               // model assignment
  bool record_timeline = true;
  bool record_allocations = false;  // every (GPUs, batch) change of every job, for per-job analysis
  // Called every ~progress_every_s of simulated time with (now, jobs finished, jobs total).
  std::function<void(double, int, int)> progress;
  double progress_every_s = 86400;
};

struct JobResult {
  std::string id;
  std::string model;
  double submit_s = 0, duration_s = 0;
  int req_gpus = 0, ref_batch = 0;
  double work = 0;       // samples (reference-batch samples when statistical_efficiency)
  double done_work = 0;  // integrated progress; equals work when finished
  double start_s = -1, finish_s = -1;  // -1: never started / not finished
  int rescales = 0;
  double gpu_seconds = 0;
  bool finished() const { return finish_s >= 0; }
};

struct TimelinePoint {
  double t = 0;
  int gpus_used = 0;
  int running = 0;
  int queued = 0;
};

// One change of a job's allocation (gpus == 0: the job was preempted). A job's allocation holds
// from `t` until its next event or its finish.
struct AllocationEvent {
  double t = 0;
  int job = 0;  // index into SimResult::jobs
  int gpus = 0;
  int batch = 0;
  double samples_per_s = 0;  // progress rate at this allocation (0 while preempted)
  int ranks_per_gpu = 1;
};

struct SimSummary {
  std::string policy;
  int gpus = 0;
  int jobs = 0;
  int completed = 0;            // by the end of the simulation
  int completed_in_window = 0;  // finish_s <= window_s
  int never_started = 0;
  double avg_jct_s = 0, median_jct_s = 0, p95_jct_s = 0;  // over finished jobs
  double avg_queue_s = 0;                                 // submit -> first start, started jobs
  double makespan_s = 0;                                  // last finish
  double utilisation = 0;  // allocated GPU-seconds / (gpus x makespan)
  int rescales = 0;
  int replans = 0;
  double wall_s = 0;
  double plan_ms_avg = 0, plan_ms_max = 0;
  int max_gpus_used = 0;
  double colocated_share = 0;  // of the allocated GPU-seconds, those with more than one rank per GPU
};

struct SimResult {
  std::vector<JobResult> jobs;
  SimSummary summary;
  std::vector<TimelinePoint> timeline;
  std::vector<AllocationEvent> allocations;  // when SimConfig::record_allocations
};

// Builds the elastic configurations of one job (exposed for tests and the plan tool).
struct JobModel {
  const ModelProfile* profile = nullptr;
  int ref_batch = 0;
  double ref_samples_per_s = 0;
  int max_gpus = 0;
  std::vector<Config> elastic;          // best (batch, ranks per GPU) per GPU count (throughput)
  std::vector<Config> elastic_goodput;  // best (batch, ranks per GPU) per GPU count (throughput x efficiency)
  std::vector<Config> fixed_batch;  // batch == ref_batch (best ranks per GPU)
};
// `batch` is the job's own global batch (0: own_batch()'s default).
JobModel make_job_model(const ModelProfile& profile, int req_gpus, const SimConfig& cfg, int batch = 0);

// A job's own global batch at `gpus` GPUs: `requested`, or when 0 the rule's default (OwnBatch
// above), made a multiple of `gpus` (requested or PerGpu: rounded down; Model: rounded up, the
// smallest feasible batch >= init_batch) and clamped so that the per-GPU batch lies in the
// model's [min_local, max_local].
int own_batch(const ModelProfile& profile, int gpus, int requested = 0, OwnBatch rule = OwnBatch::PerGpu);

// Which model a trace job gets (deterministic in seed and job index).
size_t assign_model(const TraceJob& job, size_t job_index, const std::vector<ModelProfile>& profiles, uint64_t seed);

// The job's model: the one it names (TraceJob::model; edp::Error if no profile has that name),
// else assign_model().
size_t job_model(const TraceJob& job, size_t job_index, const std::vector<ModelProfile>& profiles, uint64_t seed);

SimResult simulate(const std::vector<TraceJob>& trace, const std::vector<ModelProfile>& profiles,
                   const SimConfig& cfg);

// What a policy's options alone allow a job (no queueing, no pauses): its shortest run time
// (the best configuration on an empty cluster) and its fewest GPU-seconds (the most efficient
// configuration per GPU). Summed over a trace they bound the policy's average JCT on an unlimited
// cluster (exactly its value there for static, baseline and dp; goodput, which values
// throughput x efficiency, may choose slower ones) and the GPU-time the work needs on a
// saturated one (docs/results/autoscaler.md, "Why dp/baseline stays below 2x"). In trace order;
// cfg.policy picks the options (static: the requested configuration only);
// cfg.statistical_efficiency counts progress as the simulator does.
struct JobBound {
  std::string model;
  double own_gpu_s = 0;  // requested GPUs x trace duration
  double min_time_s = 0;
  double min_gpu_s = 0;
};
std::vector<JobBound> job_bounds(const std::vector<TraceJob>& trace, const std::vector<ModelProfile>& profiles,
                                 const SimConfig& cfg);

// Output helpers: per-job CSV, summary JSON (one object), timeline CSV.
void write_jobs_csv(const SimResult& r, const std::string& path);
std::string summary_json(const SimSummary& s);
void write_timeline_csv(const SimResult& r, const std::string& path);
void write_allocations_csv(const SimResult& r, const std::string& path);  // t_s,id,model,gpus,batch,...

}  // namespace edp::autoscale
