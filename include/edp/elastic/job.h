// elastic::Job — a data-parallel training job that survives restarts and changes size while it
// runs. It owns everything the elastic protocol touches, so that a user's training loop holds
// only the model's forward and backward:
//
//   the job's communicator (it changes: ranks leave, new ranks join), the gradient reduction
//   (DistributedDataParallel over the CPU world, NCCL or the colocated communicator on GPUs),
//   the data position (a DistributedLoader: which samples of the epoch are left), the batch-size
//   and learning-rate rules, checkpoints (commit, resume at any world size), the control file
//   (a request for another size) and the numerical guard (a non-finite loss or gradient).
//
//   elastic::Job job(world, model, opt, train_set, {.epochs = 5, .global_batch = 128, ...});
//   data::Batch b;
//   while (job.next_epoch())
//     while (job.next_batch(b)) {
//       const double loss = ce.forward(job.forward(b.x), b.y);
//       job.backward(ce.backward());
//       job.step(loss);
//     }
//   return job.exit_code();
//
// A rescale (docs/elastic.md). Every `control_every` steps rank 0 reads the control file; a valid
// request for another size (or to stop: a checkpoint of that step, then exit_code() =
// kStopExitCode) is broadcast and carried out by every rank at the same step boundary:
//   in place (the default): a shrink splits the communicator — the leaving ranks see
//     next_batch() and next_epoch() return false and end their program with exit code 0 — and a
//     grow starts the new ranks with MPI_Comm_spawn (edp/comm/membership.h). They run the same
//     program; their Job receives the state (parameters, optimizer, data position, step) from
//     rank 0 by broadcast and continues the same epoch. The rest of the epoch is re-sharded:
//     every sample is still seen exactly once.
//   by restart (EDP_RESCALE_MODE=restart, or when spawning fails under auto): rank 0 commits a
//     checkpoint naming the new size, every rank stops (exit_code() = kRescaleExitCode, 75) and
//     edprun starts the job again at that size; the new Job resumes from the checkpoint.
// Either way the global batch follows the request (or keeps the per-rank batch), the learning
// rate follows the batch rule, the LR schedule keeps its position in samples, and after the
// change every rank checks that the replicas are bitwise identical.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "edp/comm/agree.h"
#include "edp/core/tensor.h"
#include "edp/data/loader.h"
#include "edp/ddp/ddp.h"
#include "edp/optim/schedule.h"
#include "edp/elastic/elastic.h"

namespace edp::comm {
class Communicator;
}
namespace edp::nn {
class Module;
}
namespace edp::optim {
class Optimizer;
}
namespace edp::data {
class DistributedLoader;
}

namespace edp::elastic {

// Defaults of JobOptions' bounds and guard.
constexpr int64_t kBatchRange = 8;     // min/max global batch: the first one / or x this
constexpr int64_t kGuardWindow = 10;   // steps per window of the divergence guard
constexpr int kGuardPatience = 3;      // windows in a row above the limit (or not back from it)
constexpr double kGuardRecovered = 1.2;  // a window back within this multiple of the level ends a blow-up

// What a learning-rate schedule is built from (JobOptions::schedule), at the current global batch.
struct LRContext {
  double peak_lr = 0;           // JobOptions::lr scaled to this global batch by lr_scaling
  int64_t global_batch = 0;
  int64_t steps_per_epoch = 0;  // at this global batch
  int64_t total_steps = 0;      // steps_per_epoch x epochs
  int64_t warmup_steps = 0;     // JobOptions::warmup_steps
};

struct JobOptions {
  std::string name = "job";  // in messages, and the checkpoints' "model"
  int64_t epochs = 1;
  // The global batch at a fresh start (a checkpoint that names the size to continue at, or a
  // rescale, changes it); the world size must divide it.
  int64_t global_batch = 64;
  // The learning rate for a global batch of lr_base_batch, scaled to the actual global batch by
  // lr_scaling ("none", "linear", "sqrt"); 0 (the default): the optimizer's own rate, as it was
  // constructed. Its course over the training is `schedule`'s (default: linear warmup over
  // warmup_steps, counted at the starting global batch, then cosine decay to 0 at the end of the
  // last epoch).
  double lr = 0;
  int64_t lr_base_batch = 64;
  std::string lr_scaling = "linear";
  int64_t warmup_steps = 0;
  // The learning-rate schedule, built at the start and after every change of the global batch
  // from what holds at that batch (LRContext); the job sets the optimizer's rate to its lr(t)
  // before every step, t counted at the current global batch from the start of the training
  // (a resumed or rescaled job continues the curve). Any optim schedule, e.g.
  //   o.schedule = [](const elastic::LRContext& c) {
  //     return std::make_unique<optim::StepLR>(c.peak_lr, c.steps_per_epoch * 30, 0.1); };
  // Empty: warmup + cosine (above).
  std::function<std::unique_ptr<optim::LRSchedule>(const LRContext&)> schedule;
  uint64_t seed = 42;           // the data order (the model's initialisation is the caller's)
  int loader_workers = 1;       // threads assembling batches
  // Compute threads per rank. 0 (the default): follow the layout — after the start and after
  // every rescale, the rank's share of its host's cores given the ranks now on that host, unless
  // the environment fixes a count (edp/comm/layout.h). > 0: that count, always.
  int threads = 0;
  // Checkpoints: the newest one in checkpoint_dir is resumed from; one is committed every
  // checkpoint_every steps (0: at the end of every epoch). Empty dir: no checkpoints (then a
  // rescale can only happen in place).
  std::string checkpoint_dir;
  int keep_checkpoints = 2;
  int64_t checkpoint_every = 0;
  // The control file (empty: EDP_CONTROL_FILE, set by edprun --control-file; both empty: the
  // job never rescales) and how often rank 0 looks at it.
  std::string control_file;
  int64_t control_every = 1;
  int64_t max_worker_batch = 0;  // refuse requests above this per-rank batch (memory); 0: no limit
  // The most samples one forward/backward takes on a rank (what fits in its memory); 0: no
  // limit. A step whose per-rank batch is larger is taken in micro-batches of at most this many:
  // next_batch() hands them out one by one, the loop runs forward, backward and step(loss) on
  // each as on a batch, and the job accumulates their gradients (each weighted by its share of
  // the rank's samples, the allreduce once, with the last) and updates once — the step of the
  // whole batch, whatever global batch a request or the autoscaler chose; also sharded (zero_stage 1, 2).
  int64_t max_micro_batch = 0;
  std::string rescale_mode;      // "auto", "in-place", "restart"; empty: EDP_RESCALE_MODE
  Device device = Device::cpu();
  int64_t bucket_cap_bytes = 0;   // DistributedDataParallel's cap (0: EDP_BUCKET_CAP_MB)
  // 1: the optimizer state sharded over the ranks (DistributedDataParallel's ZeRO stage 1; host
  // or GPU memory). A change of size in place moves each rank's part straight to its new owners
  // (ddp::reshard); a checkpoint is written in parts, one per rank, and resumes at any world
  // size, sharded or not (edp/train/shards.h). 2: the gradients too (ZeRO stage 2: no rank keeps a
  // whole gradient between backward passes; the same state, moves and checkpoints as 1). 0: every
  // rank holds all of it.
  int zero_stage = 0;
  // Clip the gradients' global L2 norm to this before every optimizer step (0: no clipping). It
  // runs after the allreduce, on the averaged gradients every rank holds, so every rank computes
  // the same norm and applies the same scale (also a rank without samples in an uneven last step).
  double max_grad_norm = 0;
  std::string on_nonfinite = "stop";  // "stop" (an error naming the step and parameter) or "skip"
  bool progress = true;               // a progress line on rank 0
  // More settings every rank must agree on (the program's flags), checked with the job's own.
  std::vector<comm::Setting> settings;
  // A request may move the global batch only within [min_global_batch, max_global_batch] (and
  // never above the training set). 0: the job's first global batch divided (min) or multiplied
  // (max) by kBatchRange. The learning rate follows the batch (lr_scaling), so this bounds what a
  // request can do to it.
  int64_t min_global_batch = 0, max_global_batch = 0;
  // The divergence guard: every kGuardWindow steps the job's mean loss over them (every rank's
  // samples) is compared with its running level (a moving average of the earlier windows). More
  // than divergence_factor times that level for kGuardPatience windows in a row stops the job with
  // an error naming the steps, the losses and the last change of size. A window that comes down
  // from a blow-up (a window above divergence_factor² times the level) but stays above
  // kGuardRecovered times the level still counts toward the patience: a loss that explodes and
  // then settles above where it was (a network the explosion broke, e.g. stuck at chance) is
  // stopped too, while one that comes back, or recovers slowly from a milder rise, is not. The
  // checkpoints committed since the last good window are set aside (renamed *.diverged), so the
  // job, started again, resumes from its last good state. Where the windows cannot fill — before
  // a change of size or a stop, and when the training ends (next_epoch(), finish()) — the steps
  // since the last window are judged against the level before them (no level yet: against the
  // first step's loss) by the same factor: a job of a few steps, or one asked for a batch that
  // ruins it just before it ends, stops with the error instead of reporting success. 0: no guard.
  double divergence_factor = 4;
  // Settings (names in `settings`) that a resume may change: those of the run, not of the training
  // trajectory so far — how long (the examples' --epochs, --steps), how often checkpoints are
  // written, what is printed (cli::Options::run_settings()). Every other setting, and the job's
  // own (learning rate and its rule, warmup, data seed, training samples, model size), is the
  // job's identity: each checkpoint records it and a resume with a different one is refused,
  // naming the differences, unless accept_config_change (a deliberate change, e.g. of the
  // learning rate). A resume with more epochs trains on with the schedule of the new length.
  std::vector<std::string> resume_may_change;
  bool accept_config_change = false;
  // An in-place grow starts the new ranks in the background: the job trains on at its size while
  // they start, load their data and build their model, and joins them at the first step boundary
  // after they are ready. false (or EDP_BACKGROUND_GROW=0): the job waits for them at the step of
  // the request.
  bool background_grow = true;
};

// What a reset callback learns after the job's membership or batch changed in place.
struct ResetInfo {
  int from_workers = 0, workers = 0;
  int64_t from_global_batch = 0, global_batch = 0;
  bool joined = false;  // this rank has just been started and joined the job
};

struct EpochSummary {
  int64_t epoch = -1;     // 0-based
  double train_loss = 0;  // mean over the epoch's samples (every rank's)
  int64_t samples = 0;
  double seconds = 0;
};

class Job {
 public:
  // Collective over `world` (comm::world(): on a rank started by a grow it is already the grown
  // job). A rank started by a grow runs the program from main, so the program must not use
  // `world` for collectives of its own before this constructor (the running ranks are then
  // waiting in the state broadcast, and would take its collective for theirs). Restores the newest checkpoint in options.checkpoint_dir, or — on a new rank —
  // receives the state from the running ones; checks that every rank runs the same
  // configuration. The model must already be on options.device; `opt` must optimise its
  // parameters.
  Job(comm::Communicator& world, std::shared_ptr<nn::Module> model, optim::Optimizer& opt,
      std::shared_ptr<const data::Dataset> train_set, JobOptions options);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // ---- the training loop ----
  // Starts the next epoch; false when the training is over: every epoch done, this rank left
  // the job (a shrink), or the job stops (for a restart at another size, or as asked: see
  // exit_code()).
  bool next_epoch();
  // Ends the training before its last epoch (a step limit the program keeps): new ranks still
  // starting join and leave, and the end is recorded as after the last epoch (the "end" event,
  // the status file's "done"). Collective; next_epoch() returns false afterwards.
  void end();
  // This rank's next batch of the epoch (on the job's device); false at the end of the epoch or
  // when next_epoch() would return false. A step in which this rank has no sample (the uneven
  // last step) is taken inside, without the caller.
  bool next_batch(data::Batch& b);
  Tensor forward(const Tensor& x);
  void backward(const Tensor& grad_out);
  // Ends the step: the numerical guard, the optimizer step, checkpoints, the control file (which
  // may change the job's size here, in place or by stopping). `loss` is this rank's mean loss.
  void step(double loss);
  // The program ends the training before next_epoch() returned false (e.g. at a step count).
  // Collective. The divergence guard judges the steps its windows did not cover, as next_epoch()
  // does when the last epoch ends: a ruined model is an error, never a finished training.
  void finish();

  // ---- where the job stands ----
  comm::Communicator& world();  // the job's communicator now (it changes at a rescale)
  int rank() const;
  int size() const;
  bool is_root() const { return rank() == 0; }
  int64_t epoch() const { return epoch_; }  // 0-based, the current or the last epoch
  int64_t steps() const { return step_; }   // optimizer steps since the start of the training
  int64_t global_batch() const { return global_batch_; }
  int64_t batch_per_rank() const;
  double lr() const;                  // the optimizer's rate now (the schedule's at this step)
  double peak_lr() const { return lr_; }  // JobOptions::lr after scaling to the current global batch
  const EpochSummary& last_epoch() const { return summary_; }
  bool left() const { return left_; }
  // The job resumed from a checkpoint of its finished training: there was nothing left to train
  // (evaluate the model and report; last_epoch() is empty).
  bool complete_at_start() const { return complete_at_start_; }
  // Still training: not left, not stopping for a restart. After next_batch() returned false,
  // true means the epoch ended (evaluate, report) and false that the program should end.
  bool active() const { return !left_ && exit_code_ == 0; }
  // 0; kRescaleExitCode when the job stopped to be restarted at another size (edprun restarts
  // it); kStopExitCode when it committed a checkpoint and stopped because the control file asked
  // ({"stop": true}). Return it from main.
  int exit_code() const { return exit_code_; }
  // Where the synchronised backward passes' time went, over every world the job has had.
  ddp::DDPStats ddp_stats() const;
  size_t gradient_buckets() const;
  nn::Module& model() { return *model_; }

  // ---- Horovod-style state handling ----
  // Rank 0 writes a checkpoint now (in checkpoint_dir) and returns its path; the other ranks
  // return "" (the replicas are identical). Call it on every rank: with the optimizer state
  // sharded (zero_stage 1, 2) the ranks first gather it (collective).
  std::string commit();
  // Collective: every rank takes rank 0's state (parameters, buffers, optimizer, data position).
  void sync();
  // Called on every rank after the job's size or global batch changed in place.
  void on_reset(std::function<void(const ResetInfo&)> callback);
  // A rescale under way: new ranks starting in the background (JobOptions::background_grow).
  bool rescaling() const;
  // Collective, at a step boundary (after step(), before the next next_batch()): waits until a
  // rescale under way has joined the new ranks (or failed).
  void settle();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<nn::Module> model_;
  int64_t epoch_ = 0, step_ = 0, global_batch_ = 0;
  double lr_ = 0;
  bool left_ = false, complete_at_start_ = false;
  int exit_code_ = 0;
  EpochSummary summary_;
};

}  // namespace edp::elastic
