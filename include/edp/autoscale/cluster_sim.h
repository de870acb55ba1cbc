// The node-level simulator, calibrated against the published elastic schedulers.
//
// simulator.h models a cluster as a pool of GPUs with a fitted throughput curve and counts
// progress in samples; that is enough to compare edp's own policies, but it is optimistic
// exactly where the published comparison (Pollux, OSDI'21) is decided: rescale churn, jobs
// spread over 4-GPU nodes, and how a job's batch is tuned. This simulator models those:
//
//   * nodes of `gpus_per_node` GPUs; an allocation is a list of node ids, one per GPU, and a
//     job's step time is looked up in the measured profiles for its actual placement (the
//     per-node GPU counts), linearly interpolated in the per-GPU batch; placements that were not
//     profiled (more than 4 nodes) are interpolated between measured (nodes, GPUs) pairs;
//   * time advances in scheduling intervals (60 s); jobs submitted inside an interval are seen
//     at its end; every change of a job's allocation (first start and restarts after a
//     preemption included) costs a pause (30 s) during which it makes no progress;
//   * progress is counted in the profiles' scale-invariant iterations: a step at global batch M
//     adds the AdaScale gain r(M) computed from the gradient statistics of the job's current
//     epoch; the job ends after the model's max_epochs epochs. A batch above what one GPU holds
//     uses gradient accumulation (step + k x (step - sync));
//   * each policy tunes the batch its own way: Tiresias and Optimus keep the workload's batch
//     (Tiresias also its GPU count), edp's policies pick the batch with the best goodput for
//     the job's actual placement at every (re)allocation and epoch.
//
// These facts are those of the Pollux artifact's simulator (petuum/adaptdl, branch
// osdi21-artifact), which docs/autoscaler.md cites; the code is edp's own.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "edp/autoscale/online.h"
#include "edp/autoscale/policy.h"

namespace edp::autoscale {

// One measured point: per-GPU (atomic) batch, step time and its non-overlapped sync part.
struct StepPoint {
  double local_bsz = 0;
  double step_s = 0;
  double sync_s = 0;
};

// Per-epoch state of one validated batch size (convergence_gradstats.csv).
struct EpochStats {
  double progress = 0;   // cumulative scale-invariant iterations at the end of the epoch
  double iteration = 0;  // cumulative optimizer steps at the end of the epoch
  double grad_sqr = 0, grad_var = 0;
};

// Everything the simulator knows of one model (an "application" in the artifact).
struct ClusterApp {
  std::string name;
  int init_batch = 0, max_batch = 0;
  int min_local = 0, max_local = 0;
  int max_epochs = 0;
  std::vector<int> local_grid;                          // profiled per-GPU batches, ascending
  std::map<std::string, std::vector<StepPoint>> placements;  // "1212" (smallest rotation) -> rows
  // (nodes, GPUs) -> rows: the placements averaged per (nodes, GPUs, batch) for <= 4 nodes, and
  // the scalability rows (6, 8, 12, 16 nodes); used when a placement was not profiled.
  std::map<std::pair<int, int>, std::vector<StepPoint>> levels;
  std::map<int, std::vector<EpochStats>> validation;   // global batch -> per-epoch rows
  std::vector<double> epoch_progress;                  // [e] = progress at the end of e epochs (min over batches)
  // Tables of the Sia artifact (ClusterProfiles::load_sia; the Pollux tables leave these unset):
  double pause_s = 0;    // the model's restart delay (0: the simulator's restart_s)
  double slowdown = 1;   // real steps are this much slower than the tables (the artifact's calibration)
  // The largest profiled micro-batch per placement key, per GPU count, and per (nodes, GPUs) of
  // the scalability rows: what the job's split of a batch may put on one GPU (max_local_at, split).
  std::map<std::string, int> local_max_by_placement;
  std::map<int, int> local_max_by_gpus;
  std::map<std::pair<int, int>, int> local_max_by_level;

  double total_progress() const { return epoch_progress.back(); }
  // The largest micro-batch one GPU may take at a placement: max_local, or with the Sia tables the
  // largest profiled there (a placement not profiled: the scalability rows of at least its nodes
  // and GPUs).
  int max_local_at(const std::vector<int>& placement) const;
  // How the job runs a global batch at a placement: split_batch at max_local_at (accumulation on
  // one GPU above the initial batch), with the Sia tables' memory correction (the micro-batch at
  // most the largest profiled at that GPU count).
  BatchSplit split(const std::vector<int>& placement, int batch) const;
  // Step and sync time at a placement (per-node GPU counts, any order, zeros ignored).
  std::pair<double, double> step_sync(const std::vector<int>& placement, double local_bsz) const;
  // Gradient statistics during epoch `epoch` (0-based: epochs completed) at global batch
  // `batch`, linearly interpolated between the validated batch sizes around it.
  std::pair<double, double> grad_stats(double batch, int epoch) const;
  // AdaScale gain r(M) = (var + sqr) / (var / s + sqr), s = M / init_batch.
  double gain(double batch, int epoch) const;
  // Optimizer steps after `epoch` + 1 epochs at `batch` (interpolated), as Optimus predicts.
  double iterations(double batch, int epoch) const;
};

class ClusterProfiles {
 public:
  // Reads model_limits.csv, throughput_placements.csv, throughput_scalability.csv and
  // convergence_gradstats.csv from `dir`. Malformed files raise edp::DataError with
  // file:line:column. yolov3's per-GPU batch is capped at 8, as its job code does.
  static ClusterProfiles load(const std::string& dir);
  // One GPU type's tables of the Sia SOSP'23 artifact (public repository siasosp23/artifacts,
  // `sia-simulator/`; read, not copied): `traces/<model>/placements-<type>.csv`,
  // `scalability-<type>.csv` and `validation-<batch>.csv` under `sim_dir`, for the models the
  // artifact runs (bert, cifar10, deepspeech2, imagenet, ncf, yolov3; those without tables of the
  // type are left out), with its facts per model: epochs, restart delay and calibration slowdown.
  static ClusterProfiles load_sia(const std::string& sim_dir, const std::string& type);
  const ClusterApp& app(const std::string& name) const;  // edp::Error listing the known names
  const std::vector<ClusterApp>& apps() const { return apps_; }

 private:
  std::vector<ClusterApp> apps_;
};

// The per-GPU placement of an allocation: GPUs per node in the order the nodes first appear.
std::vector<int> placement_of(const std::vector<int>& alloc);
// The canonical placement key: drop zeros, the lexicographically smallest rotation, as digits.
std::string placement_key(std::vector<int> placement);

// How a job with a fixed global batch runs on `replicas` GPUs: per-GPU micro-batch and
// accumulation steps (the artifact's rule: a batch above max_local per GPU is accumulated; a
// single GPU with a batch above init_batch always accumulates at least once; the micro-batch is
// cut so that the total stays <= max_batch).
using BatchConfig = BatchSplit;  // goodput.h
BatchConfig fixed_batch_config(const ClusterApp& app, int replicas, int batch, bool force_single_gpu_accum);

// One GPU type of a cluster with several (simulate_cluster with types): its name (the tables'),
// its nodes and GPUs per node, and the most nodes a job may span on it (the artifact's profiled
// node limit; 0: all).
struct ClusterNodeType {
  std::string name;
  int nodes = 0, gpus_per_node = 0, max_job_nodes = 0;
};
// The GPUs per node of the Sia artifact's GPU types (aws 4 x T4, dgx-ext 8 x A100, rtx 8 x RTX
// 2080Ti, ...) and the most nodes a job spans on each; "aws:6,dgx-ext:2,rtx:3" -> the paper's 64
// GPUs. Malformed or unknown types raise edp::Error.
std::vector<ClusterNodeType> sia_cluster(const std::string& spec);

// A job of a Pollux workload file (name,time,application,num_replicas,batch_size).
struct ClusterJob {
  std::string name;
  std::string app;
  double submit_s = 0;
  int replicas = 1;  // the user's GPU count (Tiresias uses it)
  int batch = 0;     // the user's global batch (Tiresias and Optimus use it)
};
std::vector<ClusterJob> load_cluster_workload(const std::string& path);

// What a policy sees of an active job.
struct ClusterJobView {
  int id = 0;  // stable index in the workload
  const ClusterApp* app = nullptr;
  double submit_s = 0;
  int target_replicas = 1, target_batch = 0;
  int epoch = 0;
  double progress = 0;          // scale-invariant iterations done
  std::vector<int> alloc;       // node id per GPU (empty: not running)
  double goodput = 0;           // progress per second at the current allocation and batch (0: none)
  int restarts = 0;
  // What the job reports (the policies that learn read only these): the configurations it ran at
  // with their step and sync times, its gradient statistics at its batch in its current epoch,
  // and the global batch it runs (0: not running).
  std::vector<StepObservation> observed;
  bool has_grad = false;
  double grad_sqr = 0, grad_var = 0;
  int batch = 0;
  // With GPU types: the job's tables on each type (ClusterSimConfig::types' order), the type it
  // runs on (-1: none; `app` is that type's, or the first's), and whether it is still restarting
  // (a restart delay left: it keeps its configuration this round, the artifact's rule).
  std::vector<const ClusterApp*> apps;
  int type = -1;
  bool restarting = false;
};

struct ClusterPolicyConfig {
  double restart_s = 30;       // the pause a change costs (restart-aware policies price it in)
  bool restart_aware = true;   // edp policies: a change must pay for its pause over the job's remaining time
  // On top of that (plan.h): a change must save margin_s seconds more, and a running job's pause
  // counts (1 + pause_per_gpu x its GPUs) times (a restart idles every GPU it holds); no relative
  // hysteresis. Chosen on the eight load-1.0 workloads (docs/autoscaler.md §7, "Ablations").
  double hysteresis = 0.0;
  double margin_s = 150;
  double pause_per_gpu = 0.5;
  int max_gpus_per_job = 64;
  // The learning policy's priors (online.h LearnSpec): the share of a step's compute taken as fixed
  // while one micro-batch was measured, and the configurations at which a prediction away from the
  // measured ones is believed half.
  double fixed_share = 0.25, trust_half = 1.0;
  double tiresias_threshold_gpu_s = 16 * 3600.0;  // Tiresias: queue-0 -> queue-1 demotion
};

class ClusterPolicy {
 public:
  virtual ~ClusterPolicy() = default;
  virtual std::string name() const = 0;
  // Returns every active job's allocation (node id per GPU; empty: wait). Must not use more GPUs
  // of a node than it has.
  virtual std::vector<std::vector<int>> plan(const std::vector<ClusterJobView>& active, int nodes, int gpus_per_node,
                                             double now_s) = 0;
  // Whether the job's batch is tuned by the job for goodput (edp) or fixed at the workload's.
  virtual bool adaptive_batch() const { return false; }
  // Whether the policy names every job's global batch (batches(), after plan()); the job splits it
  // over its GPUs (split_batch, with accumulation on one GPU above the initial batch) and runs it
  // until the next plan.
  virtual bool chooses_batch() const { return false; }
  virtual const std::vector<int>& batches() const {
    static const std::vector<int> none;
    return none;
  }
  // Whether the job is confined to the workload's GPU count (Tiresias).
  virtual bool fixed_replicas() const { return false; }
  // Tiresias: the job's queue (0 or 1); others: -1.
  virtual int queue_of(int /*id*/) const { return -1; }
  // With GPU types: every active job's allocation as global node ids (the types' nodes numbered in
  // order), all on one type. Only edp's learning and oracle policies take types.
  virtual std::vector<std::vector<int>> plan_typed(const std::vector<ClusterJobView>& active,
                                                   const std::vector<ClusterNodeType>& types, double now_s);
};

// A node-level policy by name (parse_policy(name, PolicyScope::Cluster), policy.h; the names:
// policy_names(PolicyScope::Cluster)): "tiresias", "optimus"; edp's restart-aware goodput DP,
// naming each job's batch: "goodput" (learns each job's goodput online from what it reports,
// online.h), "goodput-oracle" (the true tables: the measured step times of the placement and the
// gradient statistics of every batch); and with the batch tuned inside the job at every epoch
// from the true tables: "dp" (restart-aware throughput DP), "goodput-eager" (goodput DP without
// restart awareness).
std::unique_ptr<ClusterPolicy> make_cluster_policy(const std::string& name, const ClusterPolicyConfig& cfg = {});

// A job as edp's node-level policies see it: its remaining progress (scale-invariant iterations),
// the GPUs it holds, and its progress rate at each GPU count it may take.
struct ClusterDpJob {
  double remaining = 0;
  int current_gpus = 0;
  std::vector<std::pair<int, double>> rates;  // (GPUs, progress per second)
};
// The request (plan.h) edp's node-level policies decide on: restart-aware (else remaining),
// hysteresis cfg.hysteresis, every change and every start pausing cfg.restart_s, one option per
// GPU count with a positive rate (batch 0: the job adapts its batch).
struct PlanRequest;
void fill_cluster_request(PlanRequest& req, const std::vector<ClusterDpJob>& jobs, int capacity,
                          const ClusterPolicyConfig& cfg, bool restart_aware);

// Goodput of a job with an adaptive batch at a placement: the best (micro-batch, accumulation)
// over the profiled grid (global batch in [init_batch, max_batch]); ncf keeps 32768 (the
// artifact fixes it for Pollux).
struct AdaptiveChoice {
  int atomic = 0, accum = 0;
  double goodput = 0;  // progress per second
  double samples_per_s = 0;
};
AdaptiveChoice best_adaptive(const ClusterApp& app, const std::vector<int>& placement, int epoch, bool by_goodput = true);
// The same over the global batches a policy may name (the job splits them by split_batch): the
// true goodput of the best; its atomic/accum are the split's.
struct NamedBatch {
  int batch = 0;
  AdaptiveChoice run;
};
NamedBatch best_named_batch(const ClusterApp& app, const std::vector<int>& placement, int epoch);
// The batch `batch` as the job runs it at the placement (ClusterApp::split): its true goodput and
// throughput, slowed by the tables' calibration.
NamedBatch named_batch_at(const ClusterApp& app, const std::vector<int>& placement, int epoch, int batch);
// What a job of `app` states for learning (online.h): its batch limits, one GPU for ncf at batch
// 32768 (as the artifact runs ncf for Pollux), accumulation on one GPU above the initial batch.
LearnSpec learn_spec_of(const ClusterApp& app, int max_gpus_per_job);

struct ClusterSimConfig {
  int nodes = 16, gpus_per_node = 4;
  double interval_s = 60;  // scheduling interval
  double restart_s = 30;   // pause per allocation change
  std::string policy = "goodput";
  ClusterPolicyConfig policy_cfg;
  // GPU types (empty: one type, nodes x gpus_per_node): nodes numbered across the types in order;
  // simulate_cluster then takes one ClusterProfiles per type.
  std::vector<ClusterNodeType> types;
  double max_time_s = 30 * 86400.0;  // safety stop
};

struct ClusterJobResult {
  std::string name, app;
  double submit_s = 0, start_s = -1, finish_s = -1;
  int restarts = 0;  // allocation changes after the first start
  double gpu_seconds = 0;
  int type_changes = 0;  // restarts onto another GPU type
  bool finished() const { return finish_s >= 0; }
};

struct ClusterSimResult {
  std::string policy;
  std::vector<ClusterJobResult> jobs;
  double avg_jct_s = 0;
  int finished = 0;
  int restarts = 0;
  double restarts_per_job = 0;
  double makespan_s = 0;
  double utilisation = 0;  // allocated GPU-seconds / (GPUs x makespan)
  int plans = 0;
  double plan_ms_avg = 0, plan_ms_max = 0;
};

ClusterSimResult simulate_cluster(const std::vector<ClusterJob>& jobs, const ClusterProfiles& profiles,
                                  const ClusterSimConfig& cfg);
// With GPU types (cfg.types, one profile per type in that order): a job runs on the nodes of one
// type at a time with that type's tables; a change of type is a restart.
ClusterSimResult simulate_cluster(const std::vector<ClusterJob>& jobs, const std::vector<const ClusterProfiles*>& profiles,
                                  const ClusterSimConfig& cfg);

// A published average JCT (s) of the Pollux paper's simulator study (16 nodes x 4 GPUs): per
// workload file 1..8 (0: not published) and their mean. nullptr when that policy and relative job
// load were not published ("pollux", "tiresias", "optimus"; loads 0.5, 1.0, 1.5, 2.0).
struct PublishedJct {
  const char* policy;
  double load;
  double per_workload[8];
  double mean;
};
const PublishedJct* published_jct(const std::string& policy, double load);

}  // namespace edp::autoscale
