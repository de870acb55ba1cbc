// elastic::Job's state (edp/elastic/job.h), shared by the files that implement it:
//   job.cpp          the public Job: construction and resume, epochs, batches, backward, step
//   job_state.cpp    the job's state: capture, restore, checkpoints (whole or in parts), the
//                    state sent to new ranks, the world-dependent rebuild (enter)
//   job_rescale.cpp  changes of size: in place (shrink, grow in the background, the sharded
//                    optimizer state moved), by restart, and the stop
//   job_steps.cpp    epochs' progress, events, the divergence guard, step timing
#pragma once
#include "edp/elastic/job.h"

#include <charconv>
#include <cinttypes>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "edp/backend/ops.h"
#include "edp/comm/communicator.h"
#include "edp/comm/device.h"
#include "edp/comm/layout.h"
#include "edp/comm/membership.h"
#include "edp/comm/stall.h"
#include "edp/config.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "edp/core/stopwatch.h"
#include "edp/core/threads.h"
#include "edp/core/timeline.h"
#include "edp/cuda/runtime.h"
#include "edp/data/distributed_loader.h"
#include "edp/elastic/events.h"
#include "edp/nn/module.h"
#include "edp/optim/optimizer.h"
#include "edp/optim/schedule.h"
#include "edp/train/checkpoint.h"
#include "edp/train/progress.h"
#include "edp/train/shards.h"
#include "elastic/divergence_guard.h"

namespace edp::elastic {

// DDP statistics added up over the DistributedDataParallel objects a job replaced.
inline void add(ddp::DDPStats& to, const ddp::DDPStats& s) {
  to.steps += s.steps;
  to.backward_s += s.backward_s;
  to.exposed_comm_s += s.exposed_comm_s;
  to.comm_s += s.comm_s;
  to.bytes_reduced += s.bytes_reduced;
}

struct Job::Impl {
  Job& job;
  optim::Optimizer& opt;
  std::shared_ptr<const data::Dataset> train;
  JobOptions o;
  std::string mode;  // auto | in-place | restart

  comm::Communicator* world = nullptr;  // the job's communicator now
  std::unique_ptr<comm::Communicator> owned_world;
  std::unique_ptr<comm::Communicator> device_comm;
  std::unique_ptr<ddp::DistributedDataParallel> ddp;
  std::unique_ptr<data::DistributedLoader> loader;
  std::unique_ptr<cuda::AsyncUploader> uploader;
  std::unique_ptr<train::CheckpointDir> ckpt;
  std::unique_ptr<train::CheckpointLock> lock;  // rank 0 of a job with a checkpoint directory
  int64_t origin_global_batch = 0;              // the global batch the job was first started at
  std::unique_ptr<ElasticControl> control;
  std::unique_ptr<optim::LRSchedule> schedule;
  int64_t steps_per_epoch = 1;

  // The epoch in progress.
  bool in_epoch = false, epoch_finished = false;
  bool ended = false;  // the training is over and its end recorded (Job::end)
  bool slow_path = false;  // the communicator is slower than one launch's (leave_slow_path)
  std::unique_ptr<train::Progress> progress;
  int64_t progress_base = 0;     // steps taken since the current Progress began
  int64_t progress_samples = 0;  // the whole job's samples since then
  Stopwatch epoch_sw;
  double sums[2] = {0, 0};  // loss x samples, samples (this rank; folded into rank 0 at a rescale)
  int64_t local_count = 0;  // this rank's samples in the step being taken
  int64_t global_count = 0;  // the whole job's samples in the step being taken
  bool mid_step = false;     // next_batch() gave a batch, step() has not ended it yet
  // Gradient accumulation (JobOptions::max_micro_batch): the step's batch of this rank, cut into
  // `micros` micro-batches; `micro` is the one handed out last; the loss of the step so far,
  // weighted by the micro-batches' shares.
  data::Batch step_batch;
  int64_t micros = 1, micro = 0, micro_size = 0;
  double micro_loss = 0;
  // Micro-batch k of the step's batch (rows split as evenly as possible, larger ones first).
  void take_micro(int64_t k, data::Batch& b) {
    const int64_t n = step_batch.size(), base = n / micros, extra = n % micros;
    const int64_t start = k * base + std::min(k, extra);
    micro_size = base + (k < extra ? 1 : 0);
    b.x = step_batch.x.narrow(start, micro_size);
    b.y = step_batch.y.narrow(start, micro_size);
    b.indices.assign(step_batch.indices.begin() + start, step_batch.indices.begin() + start + micro_size);
    micro = k;
  }
  std::vector<int> threads;  // compute threads of each rank in the current world

  // The settled speed at the current size (the "rate" event): armed by each start or rescale,
  // opened at the end of the first step at that size (or of an epoch's first step), written after
  // kRateSteps more steps.
  static constexpr int64_t kRateSteps = 20;
  bool rate_armed = false, rate_open = false;
  int64_t rate_from_step = 0, rate_samples = 0;
  double rate_from_t = 0;
  double min_step_s = 0, last_step_end = 0;  // EDP_MIN_STEP_MS pacing
  int64_t skipped_steps = 0;

  // The divergence guard's rule and state (JobOptions::divergence_factor; set by check_options()).
  DivergenceGuard guard{0};
  bool guard_ended = false;
  std::string last_change = "none since the job started";

  // A grow under way in the background (comm::Grow): the ranks train on at their size until the
  // new ones are ready, then join them at a step boundary.
  std::unique_ptr<comm::Grow> grow;
  RescaleRequest grow_to;
  double grow_requested_t = 0;
  // Recent step times (seconds, end to end), for the visible pause of a change.
  std::vector<double> step_times;
  double last_step_t = 0;
  double change_begun = 0;     // when the training stopped for the change that is pending
  double change_typical_s = 0;  // a typical step before it

  // A rescale whose first step at the new size has not finished yet.
  std::optional<MembershipEvent> pending;
  double entered_t = 0;
  std::vector<std::function<void(const ResetInfo&)>> callbacks;
  ddp::DDPStats stats_before;  // DDP statistics of the replaced DistributedDataParallel objects
  StatusReporter status;       // EDP_STATUS_FILE (rank 0)

  Impl(Job& j, optim::Optimizer& opt_, std::shared_ptr<const data::Dataset> train_, JobOptions opts)
      : job(j), opt(opt_), train(std::move(train_)), o(std::move(opts)) {}

  int rank() const { return world->rank(); }
  int size() const { return world->size(); }
  bool root() const { return world && world->rank() == 0; }

  // ---- state ----
  // Sharded (JobOptions::zero_stage): every rank's parts of the optimizer state back into `opt`,
  // on every rank (collective over the DDP's world), for what reads the whole state: a
  // checkpoint, rank 0's state for new ranks, a change of size (the next DDP shards it again at
  // its first step). release(): frees it again once read.
  void unshard();
  void release_unsharded();
  // zero_stage 1 or 2: the optimizer state lives in the ranks' shards. A change of size moves it from
  // the old ranks' parts straight to the new ranks' parts (ddp::reshard); no rank gathers it.
  bool sharding() const { return o.zero_stage >= 1; }
  // The state on its way to the new world: a shrink reshards before the leaving ranks go and
  // `moving` is this rank's new part (moving_from 0); a grow reshards over the grown world once
  // every rank has entered it, and `moving` is this rank's old part (a new rank's is empty),
  // moving_from the old world's size.
  std::optional<ddp::StateShard> moving;
  int moving_from = 0;
  // After enter(): the state that moved lands in this rank's new DDP (collective for a grow).
  void land_state();

  // optimizer_tensors false: the optimizer's steps only (its sharded state moves by reshard).
  train::Checkpoint capture(const RescaleRequest* next, double requested_t, bool optimizer_tensors = true) const;

  void restore(const train::Checkpoint& c);

  static std::string number(double v);

  // The settings that make this training run what it is (JobOptions::resume_may_change).
  std::vector<comm::Setting> identity() const;

  // The constructor's parts: the options checked (JobOptions::lr = 0 takes the optimizer's rate);
  // the control file's reader and its batch limits; once the job runs, the resume logged, the
  // start event appended, a restart's rescale recorded as pending.
  void check_options();
  void make_control();
  void note_start(const train::Checkpoint* resume, const std::string& resume_path, bool joined);

  // A checkpoint of another configuration of the job: refused, naming each difference, unless the
  // change is deliberate. Checkpoints written before identities were recorded pass.
  void check_identity(const train::Checkpoint& c, const std::string& path) const;

  // This rank's part of a sharded checkpoint's optimizer state, read from its parts (after enter()).
  void land_checkpoint(const train::Checkpoint& c, const std::string& path);

  std::string commit(const RescaleRequest* next, double requested_t);

  // Rank 0's state to the ranks from `first` on (collective over the world); `global_batch` is
  // the one the job continues with (a grow may change it).
  // How the ranks meet before rank 0's state is broadcast.
  enum class Meet {
    kSync,        // the same ranks (a fresh start: every rank takes rank 0's parameters)
    kJoinNew,     // a new rank (started by a grow): the ready barrier, then the stall inspector
    kJoinRunning  // a running rank at the join (its Grow passed the ready barrier): the inspector
  };
  void send_state(int first, int64_t global_batch, Meet meet);
  // A fresh start (no checkpoint, optimizer without state): rank 0's parameters, buffers and
  // counters sent to every rank in place, tensor by tensor, instead of send_state's checkpoint of
  // the whole model (whose copies made the start the job's peak of memory); the ranks' samplers
  // and step counts are alike already. With optimizer state: send_state.
  void start_from_root();

  // A new rank's first step at the size it joins would otherwise be its first ever: the
  // operators' plans, the kernels' code and the buffers are made then, while every other rank
  // waits. So a new rank runs one forward and backward pass on a batch of the size it will train
  // with during its own start. Its parameters, buffers and counters are then replaced by rank 0's
  // state, and its gradients zeroed: nothing of the pass remains. A model the pass does not suit
  // is left to its first step.
  void warm_up();

  // Rank 0 takes the checkpoint directory's lock (one job per directory); its verdict goes to
  // every rank, so all of them fail alike when the directory is in use.
  void take_lock(comm::Communicator& w);

  // Every rank must resume from the same checkpoint: rank 0 alone writes them, so ranks that see
  // different files (node-local disks behind one path, or different paths) would restore
  // different states. Compared before anything else is done with them.
  void check_same_checkpoint(comm::Communicator& w, const train::Checkpoint* c, const std::string& path);

  void make_loader(int64_t global_batch);

  // The LR rule and schedule for the current global batch: what a fresh start at this size
  // would compute, so that the in-place and the restart paths give the same learning rates.
  void configure_schedule();

  // Everything that depends on the world: (re)built after each change, on every rank of it.
  // `before`: after a change of membership, the cores this host's ranks had before it
  // (edp/comm/layout.h: bound ranks are bound again to a share of them).
  void enter(std::unique_ptr<comm::Communicator> nw, int64_t global_batch, const comm::CpuMask* before = nullptr);

  // Collective: every rank's state must be bitwise rank 0's (after a change of membership).
  void check_replicas(const std::string& when);

  // ---- rescale ----
  void rescale(const RescaleRequest& next);

  // The rest of the training at the present speed, in seconds (0 when no step was timed yet).
  double remaining_s() const;

  static constexpr double kRestartPauseS = 1.0;  // a rescale by restart, measured 0.4-1.4 s (docs/performance.md)

  // Whether it pays to rescale by restart rather than in place because a restart gives the job a
  // faster data path for the rest of its run: a restart's pause (about a second) against a slower
  // path's loss, taken as the least measured (10 %; 35-90 % were measured with TCP between the old
  // and the new ranks of a host) over the remaining time.
  bool restart_pays() const { return 0.1 * remaining_s() > kRestartPauseS; }

  // Whether ranks a grow from W to W2 starts would exchange gradients as fast as ranks started
  // together, or else the rest of the run is too short to repay a restart (rescale() takes rank 0's
  // answer). Only the MPI data path can differ, and only where edp's shared memory is off and a new
  // rank would share a host with running ones (on one host: always; several: as edprun's
  // EDP_LAUNCH_HOSTS fills them).
  bool grow_is_fast(int W, int W2) const;

  // By restart: a checkpoint naming the size to continue at, then every rank stops (edprun starts
  // the job again at that size).
  void restart_at(const RescaleRequest& rec, double requested_t);

  // ---- stop (a preemption that loses nothing) ----
  // Every rank at the same step boundary: rank 0 commits a checkpoint of this step, then every
  // rank stops with kStopExitCode. Started again (at any size), the job resumes at this step.
  void stop();

  // True when done, under way (a grow) or this rank left; false to fall back to the restart path.
  bool in_place(int W2, int64_t gb2, double requested_t);

  MembershipEvent change_event(int W2, int64_t gb2, double requested_t) const;

  // The epoch's loss sums so far go to rank 0, which stays.
  void fold_sums();

  // The end of every in-place change on the ranks of the new world: rebuild, check, report.
  // `begun`: when the work that stops the training for the change began (for the visible pause).
  void finish_change(std::unique_ptr<comm::Communicator> nw, MembershipEvent ev, const comm::CpuMask& cores,
                     double lr_before, double begun);

  bool background_grow() const { return o.background_grow && knobs::get_bool("EDP_BACKGROUND_GROW"); }

  // A grow under way: where it stands (collective). Joins the new ranks when they are ready; with
  // `wait`, waits for that (or for the grow to fail).
  void poll_grow(bool wait);

  // Every rank of the running world and the new ranks, at a step boundary: the new ranks take
  // rank 0's state, and the job continues on the grown world.
  void join_grow();

  // At the step boundary after a change that left ranks of separate launches on a slower data path
  // than a start at this size would give them (EDP_HOST_SHM=off, or no room in /dev/shm for the
  // grown communicator): in auto mode the job restarts at its size when the rest of the run repays
  // the restart (rank 0 decides; collective).
  void leave_slow_path();

  // Waits for a rescale under way (a grow) to complete or fail. Collective.
  void settle() { poll_grow(true); }

  void leave();

  void restart_progress();

  std::string epoch_label() const;

  void finish_epoch();

  // An event of the job as it stands now (its size, batch, step and the time).
  MembershipEvent event_now(const char* kind) const;

  // Samples trained since the job began, over every epoch (the position in the current one).
  int64_t samples_done() const;

  // The divergence guard, at the end of every kGuardWindow-th step (collective: every rank decides
  // on the same reduced numbers). See JobOptions::divergence_factor.
  void guard_check();

  // The guard where its windows cannot fill (collective): before a change of size or a stop, and
  // when the training ends. The steps since the last full window (none: the last window, when it
  // was in doubt) are judged against the level before them — with no level yet (a job shorter
  // than one window), against this process's first step. Above divergence_factor times it, or down
  // from a blow-up but not back within kGuardRecovered, the model is ruined: the job stops as
  // guard_diverged() stops it (the checkpoints after the last good state set aside), never
  // reporting a ruined model as trained.
  void guard_partial(const std::string& when);

  // The training ends here (at its last epoch, or where the program stops it): the guard judges
  // the steps its windows did not cover, once.
  void guard_end();

  // Stops the job on every rank (collective: all ranks decided alike; otherwise this rank alone).
  // Rank 0 first sets aside the checkpoints committed after the last good window of the guard, so
  // that the job, started again, resumes from its last good state.
  [[noreturn]] void diverged(const std::string& what, const std::string& advice, bool collective);

  // The guard's window ending at this step said the loss diverged: the job stops.
  void guard_diverged();

  // What a diverged job's message advises: the peak learning rate, how it was scaled, what to lower.
  std::string guard_advice() const;

  // The median of the recent step times (0 when none was measured).
  double typical_step() const;

  // After every step: the step's time, for typical_step(); a change empties the record (enter()).
  void time_step();

  // After every step: the settled-speed window (see rate_armed).
  void rate_step();

  void first_step_done();
};

}  // namespace edp::elastic
