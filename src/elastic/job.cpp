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

namespace edp::elastic {

namespace {

uint64_t fnv1a(const std::vector<char>& b) {
  uint64_t h = 1469598103934665603ull;
  for (char c : b) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

void add(ddp::DDPStats& to, const ddp::DDPStats& s) {
  to.steps += s.steps;
  to.backward_s += s.backward_s;
  to.exposed_comm_s += s.exposed_comm_s;
  to.comm_s += s.comm_s;
  to.bytes_reduced += s.bytes_reduced;
}

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace

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

  // The divergence guard (JobOptions::divergence_factor): this rank's loss sums over the window,
  // the running level (a moving average of good windows' means; < 0: none yet), the windows above
  // the limit in a row, and the step at the end of the last good window.
  double guard_sum = 0, guard_n = 0, guard_level = -1;
  int guard_suspect = 0;
  int64_t guard_good_step = 0, guard_first_bad = 0;
  double guard_peak = 0;         // the highest window mean of the rise in doubt
  bool guard_came_down = false;  // a window of it was under the limit but not back to the level
  double guard_last = 0;         // the last full window's mean
  int64_t guard_from = 1;        // the first step in guard_sum
  double guard_first[2] = {0, 0};  // this rank's loss sum and samples of this process's first step
  bool guard_first_set = false, guard_ended = false;
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
  void unshard() {
    if (ddp && ddp->sharded()) ddp->gather_optimizer_state(opt);
  }
  void release_unsharded() {
    if (ddp && ddp->sharded()) opt.release_state();
  }
  // zero_stage 1: the optimizer state lives in the ranks' shards. A change of size moves it from
  // the old ranks' parts straight to the new ranks' parts (ddp::reshard); no rank gathers it.
  bool sharding() const { return o.zero_stage == 1; }
  // The state on its way to the new world: a shrink reshards before the leaving ranks go and
  // `moving` is this rank's new part (moving_from 0); a grow reshards over the grown world once
  // every rank has entered it, and `moving` is this rank's old part (a new rank's is empty),
  // moving_from the old world's size.
  std::optional<ddp::StateShard> moving;
  int moving_from = 0;
  // After enter(): the state that moved lands in this rank's new DDP (collective for a grow).
  void land_state() {
    if (!moving) return;
    ddp::StateShard s = std::move(*moving);
    moving.reset();
    if (moving_from > 0) s = ddp::reshard(*world, ddp->layout(), std::move(s), moving_from, size());
    moving_from = 0;
    ddp->put_optimizer_state(std::move(s), opt);
  }

  // optimizer_tensors false: the optimizer's steps only (its sharded state moves by reshard).
  train::Checkpoint capture(const RescaleRequest* next, double requested_t, bool optimizer_tensors = true) const {
    train::Checkpoint c = train::capture(*job.model_, &opt, &loader->sampler(), optimizer_tensors);
    c.meta["model"] = o.name;
    c.meta["world_size"] = std::to_string(size());
    c.meta["global_batch"] = std::to_string(job.global_batch_);
    c.meta["step"] = std::to_string(job.step_);
    c.meta["origin.global_batch"] = std::to_string(origin_global_batch);
    for (const auto& [k, v] : identity()) c.meta["config." + k] = v;
    if (next) {
      c.meta["next.workers"] = std::to_string(next->workers);
      c.meta["next.global_batch"] = std::to_string(next->global_batch);
      char t[32];
      std::snprintf(t, sizeof t, "%.6f", requested_t);
      c.meta["next.requested_t"] = t;
    }
    return c;
  }

  void restore(const train::Checkpoint& c) {
    // A sharded checkpoint's optimizer state is read into the shards once the DDP is built
    // (land_checkpoint); its step count now.
    const bool parts = train::is_sharded(c);
    train::restore(c, *job.model_, parts ? nullptr : &opt, &loader->sampler());
    if (parts) opt.set_steps(c.int_at("optim.steps"));
    loader->load_state(loader->sampler().state());
    job.step_ = opt.steps();
    const auto& s = loader->sampler();
    job.epoch_ = s.epoch() + (s.epoch_done() ? 1 : 0);
    if (c.meta.count("origin.global_batch")) origin_global_batch = c.int_at("origin.global_batch");
    // The divergence guard learns the loss's level again from the first window after a resume
    // (its state is not in the checkpoint, whose bytes are the same however the run was cut).
    guard_good_step = job.step_;
    guard_from = job.step_ + 1;
  }

  static std::string number(double v) {  // the shortest text that reads back as v
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  }

  // The settings that make this training run what it is (JobOptions::resume_may_change).
  std::vector<comm::Setting> identity() const {
    std::vector<comm::Setting> id;
    for (const auto& st : o.settings)
      if (std::find(o.resume_may_change.begin(), o.resume_may_change.end(), st.first) == o.resume_may_change.end())
        id.push_back(st);
    id.emplace_back("job", o.name);
    id.emplace_back("learning rate", number(o.lr));
    id.emplace_back("LR rule", o.lr_scaling + " from " + std::to_string(o.lr_base_batch));
    id.emplace_back("warmup steps", std::to_string(o.warmup_steps));
    id.emplace_back("data seed", std::to_string(o.seed));
    id.emplace_back("training samples", std::to_string(train->size()));
    id.emplace_back("model parameters", std::to_string(job.model_->num_parameters()));
    return id;
  }

  // A checkpoint of another configuration of the job: refused, naming each difference, unless the
  // change is deliberate. Checkpoints written before identities were recorded pass.
  void check_identity(const train::Checkpoint& c, const std::string& path) const {
    bool recorded = false;
    for (const auto& [k, v] : c.meta) recorded = recorded || k.rfind("config.", 0) == 0;
    if (!recorded) return;
    std::string diff;
    for (const auto& [k, v] : identity()) {
      const auto it = c.meta.find("config." + k);
      const std::string was = it == c.meta.end() ? "(not recorded)" : it->second;
      if (was != v) diff += "\n  " + k + ": '" + was + "' in the checkpoint, '" + v + "' now";
    }
    if (diff.empty()) return;
    if (o.accept_config_change) {
      if (root()) log::warn(o.name, ": resuming ", path, " with a changed configuration, as asked:", diff);
      return;
    }
    throw Error(o.name + ": " + path + " was written by a job with another configuration:" + diff +
                "\nResuming it would continue another training run. Give this job its own checkpoint directory, or "
                "resume deliberately with the change (JobOptions::accept_config_change, the examples' "
                "--accept-config-change)");
  }

  // This rank's part of a sharded checkpoint's optimizer state, read from its parts (after enter()).
  void land_checkpoint(const train::Checkpoint& c, const std::string& path) {
    if (!train::is_sharded(c)) return;
    const int w = ddp->shard_world(), r = ddp->shard_rank();
    ddp->put_optimizer_state(train::read_shards(c, path, ddp->layout().runs(w, r), w, r, job.model_->parameters()), opt);
  }

  std::string commit(const RescaleRequest* next, double requested_t) {
    if (!ckpt) return "";
    if (sharding() && ddp) {  // every rank writes its part, then rank 0 the checkpoint with the manifest
      const std::string path = ckpt->path_of(job.step_);
      const auto manifest =
          train::write_shard(*world, path, ddp->optimizer_state_part(opt), job.model_->parameters(), ddp->layout());
      if (!root()) return "";
      train::Checkpoint c = capture(next, requested_t, false);
      for (const auto& [k, v] : manifest) c.meta[k] = v;
      return ckpt->commit(job.step_, c);
    }
    unshard();  // collective: every rank commits at the same step boundary
    const std::string written = root() ? ckpt->commit(job.step_, capture(next, requested_t)) : "";
    release_unsharded();
    return written;
  }

  // Rank 0's state to the ranks from `first` on (collective over the world); `global_batch` is
  // the one the job continues with (a grow may change it).
  // How the ranks meet before rank 0's state is broadcast.
  enum class Meet {
    kSync,        // the same ranks (a fresh start: every rank takes rank 0's parameters)
    kJoinNew,     // a new rank (started by a grow): the ready barrier, then the stall inspector
    kJoinRunning  // a running rank at the join (its Grow passed the ready barrier): the inspector
  };
  void send_state(int first, int64_t global_batch, Meet meet) {
    TimelineScope t("elastic state broadcast", "comm");
    comm::StallLabel label("elastic: rank 0's state to the new ranks");
    if (meet == Meet::kJoinNew) comm::ready_barrier(*world);  // the running ranks' Grow waits for it
    if (meet != Meet::kSync) comm::watch_communicator(world);  // collective over the grown job
    std::vector<char> bytes;
    // Joining ranks of a sharded job get their part of the optimizer state by reshard (land_state).
    const bool moved = sharding() && meet != Meet::kSync;
    if (root()) {
      train::Checkpoint c = capture(nullptr, 0, !moved);
      c.meta["continue.from_workers"] = std::to_string(first);
      c.meta["continue.global_batch"] = std::to_string(global_batch);
      c.meta["continue.epoch"] = std::to_string(job.epoch_);
      bytes = train::encode_checkpoint(c);
    }
    int64_t n = static_cast<int64_t>(bytes.size());
    world->broadcast(&n, 1, DType::I64, 0);
    bytes.resize(static_cast<size_t>(n));
    world->broadcast(bytes.data(), n, DType::U8, 0);
    if (rank() >= first) {
      const train::Checkpoint c = train::decode_checkpoint(bytes, "the state rank 0 sent");
      if (!loader) make_loader(c.int_at("continue.global_batch"));
      restore(c);
      // The senders are inside their epoch even when its last step is done (a change requested
      // in that step): the new ranks finish it with them (finish_epoch's collective) instead of
      // beginning the next one, which restore() would do for a checkpoint.
      job.epoch_ = c.int_at("continue.epoch");
      if (moved && meet == Meet::kJoinNew) {
        moving = ddp::StateShard{};
        moving_from = static_cast<int>(c.int_at("continue.from_workers"));
      }
    }
  }

  // A new rank's first step at the size it joins would otherwise be its first ever: the
  // operators' plans, the kernels' code and the buffers are made then, while every other rank
  // waits. So a new rank runs one forward and backward pass on a batch of the size it will train
  // with during its own start. Its parameters, buffers and counters are then replaced by rank 0's
  // state, and its gradients zeroed: nothing of the pass remains. A model the pass does not suit
  // is left to its first step.
  void warm_up() {
    const int64_t n = std::min<int64_t>(knobs::get_int("EDP_SPAWN_WORKER_BATCH", 0), train->size());
    if (n < 1) return;
    try {
      TimelineScope t("elastic warm-up of a new rank", "compute");
      std::vector<int64_t> dims{n};
      const Shape sample = train->sample_shape();  // by value: keep it alive for the loop
      for (int64_t d : sample.dims()) dims.push_back(d);
      // The samples as the loader reads them (token windows: int32 features, a label per position).
      Tensor x(Shape(dims), train->feature_dtype());
      const int64_t row = x.numel() / n;
      std::vector<char> labels(static_cast<size_t>(std::max<int64_t>(1, train->label_shape().numel())) *
                               dtype_size(train->label_dtype()));
      char* xs = static_cast<char*>(x.raw());
      for (int64_t i = 0; i < n; ++i)
        train->read_sample(i, xs + static_cast<size_t>(i * row) * dtype_size(x.dtype()), labels.data());
      if (uploader) x = uploader->upload(x);
      Tensor y = job.model_->forward(x);
      job.model_->backward(Tensor::full(y.shape(), 1.0, y.dtype(), y.device()));
      opt.zero_grad();
    } catch (const std::exception& e) {
      log::debug(o.name, ": no warm-up for this new rank: ", e.what());
      opt.zero_grad();
    }
  }

  // Rank 0 takes the checkpoint directory's lock (one job per directory); its verdict goes to
  // every rank, so all of them fail alike when the directory is in use.
  void take_lock(comm::Communicator& w) {
    std::string err;
    if (w.rank() == 0) {
      try {
        lock = std::make_unique<train::CheckpointLock>(ckpt->dir(), o.name, knobs::get_string("EDP_LAUNCH_JOB_DIR"));
      } catch (const Error& e) {
        err = e.what();
      }
    }
    int64_t n = static_cast<int64_t>(err.size());
    w.broadcast(&n, 1, DType::I64, 0);
    err.resize(static_cast<size_t>(n));
    w.broadcast(err.data(), n, DType::U8, 0);
    if (!err.empty()) throw CollectiveError(o.name + ": " + err, w.rank(), w.size());
  }

  // Every rank must resume from the same checkpoint: rank 0 alone writes them, so ranks that see
  // different files (node-local disks behind one path, or different paths) would restore
  // different states. Compared before anything else is done with them.
  void check_same_checkpoint(comm::Communicator& w, const train::Checkpoint* c, const std::string& path) {
    std::string found = "none";
    if (c) {
      const std::vector<char> bytes = train::encode_checkpoint(*c);
      found = std::filesystem::path(path).filename().string() + ", step " +
              (c->meta.count("step") ? c->at("step") : std::string("?")) + ", digest " +
              hex(fnv1a(bytes));
    }
    comm::check_agreement(w, {{"newest checkpoint in the checkpoint directory", found}},
                          o.name + ": every rank reads its checkpoints from one directory that rank 0 writes, "
                                   "shared by all hosts");
  }

  void make_loader(int64_t global_batch) {
    EDP_CHECK(global_batch % size() == 0, o.name, ": a global batch of ", global_batch, " cannot be split evenly over ",
              size(), " rank(s)");
    EDP_CHECK(global_batch <= train->size(), o.name, ": a global batch of ", global_batch,
              " is larger than the training set (", train->size(),
              " samples): lower the batch (the examples' --batch is per rank: global = batch x ranks)");
    job.global_batch_ = global_batch;
    loader = std::make_unique<data::DistributedLoader>(
        train, o.seed, size(), rank(), global_batch / size(),
        data::DistributedLoaderOptions{.workers = o.loader_workers, .prefetch = 4});
  }

  // The LR rule and schedule for the current global batch: what a fresh start at this size
  // would compute, so that the in-place and the restart paths give the same learning rates.
  void configure_schedule() {
    const int64_t gb = job.global_batch_;
    job.lr_ = optim::scale_lr(o.lr, o.lr_base_batch, gb, o.lr_scaling);
    steps_per_epoch = loader->steps_per_epoch();
    const int64_t total = steps_per_epoch * o.epochs;
    if (o.schedule) {
      schedule = o.schedule(LRContext{.peak_lr = job.lr_, .global_batch = gb, .steps_per_epoch = steps_per_epoch,
                                      .total_steps = total, .warmup_steps = o.warmup_steps});
      EDP_CHECK(schedule != nullptr, o.name, ": JobOptions::schedule returned no schedule");
      return;
    }
    schedule = std::make_unique<optim::WarmupLR>(std::make_shared<optim::CosineLR>(job.lr_, total),
                                                 std::min<int64_t>(o.warmup_steps, total));
  }

  // Everything that depends on the world: (re)built after each change, on every rank of it.
  // `before`: after a change of membership, the cores this host's ranks had before it
  // (edp/comm/layout.h: bound ranks are bound again to a share of them).
  void enter(std::unique_ptr<comm::Communicator> nw, int64_t global_batch, const comm::CpuMask* before = nullptr) {
    if (ddp) add(stats_before, ddp->stats());
    ddp.reset();  // its communication thread uses the old communicators
    device_comm.reset();
    if (nw) {
      owned_world = std::move(nw);
      world = owned_world.get();
    }
    comm::set_job_position(world->rank(), world->size());
    EDP_CHECK(global_batch % size() == 0, o.name, ": a global batch of ", global_batch, " cannot be split evenly over ",
              size(), " rank(s)");
    // The cores and compute threads follow the ranks now on this host (a grow adds ranks beside
    // this one, a shrink frees the cores of those that left).
    const int threads_before = num_threads();
    if (comm::follow_layout(*world, o.threads, before) != threads_before && entered_t > 0)
      log::info(o.name, ": ", num_threads(), " compute thread(s) on this rank now (", threads_before, " before)");
    threads.assign(static_cast<size_t>(size()), 0);
    const int mine = num_threads();
    world->allgather(&mine, threads.data(), 1, DType::I32);
    rate_armed = true;
    rate_open = false;
    job.global_batch_ = global_batch;
    if (!loader)
      make_loader(global_batch);
    else
      loader->reshard(size(), rank(), global_batch / size());
    configure_schedule();
    device_comm = comm::make_device_communicator(*world, o.device);
    ddp = std::make_unique<ddp::DistributedDataParallel>(
        job.model_, device_comm ? *device_comm : *world,
        ddp::DDPOptions{.bucket_cap_bytes = o.bucket_cap_bytes, .zero_stage = o.zero_stage});
    if (root() && size() > 1)  // which path the gradients take between which ranks (docs/elastic.md)
      log::info(o.name, ": ", size(), " ranks, gradients over ", (device_comm ? *device_comm : *world).transport());
    // Alike on every rank: ranks of separate launches on a slower path than one launch gives them.
    slow_path = !device_comm && !world->as_fast_as_one_launch();
    if (control) {
      ControlLimits limits = control->limits();
      control = std::make_unique<ElasticControl>(control->path(), size(), job.global_batch_, limits);
    }
    // One run, one configuration: the program's settings and what the job derived.
    std::vector<comm::Setting> settings = o.settings;
    settings.emplace_back("epochs", std::to_string(o.epochs));
    settings.emplace_back("global batch", std::to_string(job.global_batch_));
    settings.emplace_back("learning rate after scaling", number(job.lr_));
    settings.emplace_back("LR rule", o.lr_scaling + " from " + std::to_string(o.lr_base_batch));
    settings.emplace_back("warmup steps", std::to_string(o.warmup_steps));
    settings.emplace_back("data seed", std::to_string(o.seed));
    settings.emplace_back("training samples", std::to_string(train->size()));
    settings.emplace_back("model parameters", std::to_string(job.model_->num_parameters()));
    settings.emplace_back("checkpoint directory", o.checkpoint_dir);
    settings.emplace_back("rescale mode", mode);
    settings.emplace_back("non-finite rule", o.on_nonfinite);
    settings.emplace_back("gradient clipping (max norm)", std::to_string(o.max_grad_norm));
    settings.emplace_back("ZeRO stage", std::to_string(o.zero_stage));
    settings.emplace_back("build arithmetic", std::string(EDP_CPU_FLAGS) + " / " + EDP_COMPILER);
    comm::check_agreement(*world, settings, o.name);
    step_times.clear();  // the typical step is measured again at the new size
    entered_t = wall_time();
  }

  // Collective: every rank's state must be bitwise rank 0's (after a change of membership).
  void check_replicas(const std::string& when) {
    // Sharded, the optimizer state differs from rank to rank by design; its steps are compared.
    const uint64_t h = fnv1a(train::encode_checkpoint(capture(nullptr, 0, !sharding())));
    comm::check_agreement(*world, {{"model and optimizer state digest", hex(h)}}, o.name + " replicas " + when);
  }

  // ---- rescale ----
  void rescale(const RescaleRequest& next) {
    guard_partial("the change of size");  // a ruined model is not carried to the new size
    const double requested_t = wall_time();
    const int W = size(), W2 = next.workers;
    const int64_t gb2 = next.global_batch > 0 ? next.global_batch : job.batch_per_rank() * W2;
    if (root())
      log::info(o.name, ": rescale requested at step ", job.step_, ": ", W, " -> ", W2, " worker(s), global batch ",
                job.global_batch_, " -> ", gb2);
    int fast = 1;
    if (mode == "auto" && W2 > W && ckpt) {  // rank 0's judgement (its step times) on every rank
      fast = grow_is_fast(W, W2) ? 1 : 0;
      world->broadcast(&fast, 1, DType::I32, 0);
    }
    if (!fast) {
      if (root())
        log::info(o.name, ": growing by restart: ranks started by an in-place grow would exchange gradients with the "
                          "running ranks of their host over a slower path than ranks started together "
                          "(EDP_HOST_SHM=off; docs/elastic.md, \"Which transport\"), and the rest of the job (about ",
                  std::lround(remaining_s()), " s) is long enough to repay a restart");
    } else if (mode != "restart") {
      if (in_place(W2, gb2, requested_t)) return;
    }
    if (!ckpt) {
      control->failed("a rescale by restart needs a checkpoint directory (JobOptions::checkpoint_dir, the examples' "
                      "--checkpoint-dir)");
      return;
    }
    restart_at({W2, gb2}, requested_t);
  }

  // The rest of the training at the present speed, in seconds (0 when no step was timed yet).
  double remaining_s() const {
    const int64_t left = o.epochs * static_cast<int64_t>(train->size()) - std::max<int64_t>(0, samples_done());
    const double step = std::max(typical_step(), change_typical_s);  // just after a change: the step before it
    return static_cast<double>(std::max<int64_t>(0, left)) / static_cast<double>(job.global_batch_) * step;
  }

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
  bool grow_is_fast(int W, int W2) const {
    if (o.device.is_cuda() || knobs::get_string("EDP_HOST_SHM") != "off" || !restart_pays()) return true;
    const auto hosts = knobs::launch_hosts();
    if (hosts.empty()) return false;
    for (int r = W; r < W2; ++r)
      for (int q = 0; q < W; ++q)
        if (knobs::fill_slot(hosts, W2, r).host == knobs::fill_slot(hosts, W2, q).host) return false;
    return true;
  }

  // By restart: a checkpoint naming the size to continue at, then every rank stops (edprun starts
  // the job again at that size).
  void restart_at(const RescaleRequest& rec, double requested_t) {
    guard_partial("the change of size");
    const std::string written = commit(&rec, requested_t);
    if (root()) record_rescale(rec, job.step_, written);
    world->barrier();
    job.exit_code_ = kRescaleExitCode;
    if (root())
      log::info(o.name, ": stopping to be restarted at ", rec.workers, " worker(s) (exit code ", kRescaleExitCode, ")");
  }

  // ---- stop (a preemption that loses nothing) ----
  // Every rank at the same step boundary: rank 0 commits a checkpoint of this step, then every
  // rank stops with kStopExitCode. Started again (at any size), the job resumes at this step.
  void stop() {
    guard_partial("the stop");  // the checkpoint of the stop must not hold a ruined model
    std::string written;
    if (ckpt)
      written = commit(nullptr, 0);
    else if (root())
      log::warn(o.name, ": stopping as the control file asks, without a checkpoint directory (JobOptions::checkpoint_dir, "
                "the examples' --checkpoint-dir): the job's progress is lost, it starts over when started again");
    world->barrier();  // the checkpoint is committed before any rank reports the stop
    job.exit_code_ = kStopExitCode;
    if (progress) progress->finish();
    progress.reset();
    if (!root()) return;
    append_event(event_now("stop"));
    status.finish("stopped");
    log::info(o.name, ": stopped at step ", job.step_, " as the control file asks (exit code ", kStopExitCode, ")",
              written.empty() ? std::string() : ": started again, it resumes from " + written);
  }

  // True when done, under way (a grow) or this rank left; false to fall back to the restart path.
  bool in_place(int W2, int64_t gb2, double requested_t) {
    const int W = size();
    if (W2 > W) {
      try {
        // The new ranks learn the batch they will train with, to warm up on it while they start.
        grow = std::make_unique<comm::Grow>(*world, W2 - W,
                                            std::vector<std::string>{"EDP_SPAWN_WORKER_BATCH=" + std::to_string(gb2 / W2)});
      } catch (const comm::SpawnError& e) {
        if (mode == "in-place") throw Error(o.name + ": cannot grow in place (EDP_RESCALE_MODE=in-place): " + e.what());
        if (root()) log::warn(o.name, ": cannot grow in place: ", e.what(), "; rescaling by restart instead");
        return false;
      }
      grow_to = {W2, gb2};
      grow_requested_t = requested_t;
      if (root())
        log::info(o.name, ": starting ", W2 - W, " new rank(s); the job trains on at ", W,
                  " worker(s) until they are ready");
      if (!background_grow()) settle();
      return true;
    }
    MembershipEvent ev = change_event(W2, gb2, requested_t);
    Stopwatch sw;
    const double lr_before = job.lr_, begun = wall_time();
    fold_sums();
    if (sharding()) {  // the leaving ranks hand their parts over before they go
      moving = ddp::reshard(*world, ddp->layout(), ddp->take_optimizer_state(opt), W, W2);
      moving_from = 0;
      ev.phases.emplace_back("reshard_s", sw.seconds());
      sw.reset();
    }
    const comm::CpuMask cores = comm::host_cores(*world);  // what this host's ranks have, before the change
    std::unique_ptr<comm::Communicator> nw;
    if (W2 < W) {
      const int me = rank();
      nw = world->split(me < W2 ? 0 : comm::Communicator::kNoColor, me);
      ev.phases.emplace_back("split_s", sw.seconds());
      if (!nw) {
        leave();
        return true;
      }
      comm::watch_communicator(nw.get());
    }
    sw.reset();
    finish_change(std::move(nw), ev, cores, lr_before, begun);
    return true;
  }

  MembershipEvent change_event(int W2, int64_t gb2, double requested_t) const {
    MembershipEvent ev;
    ev.event = "rescale";
    ev.mode = "in_place";
    ev.from_workers = size();
    ev.workers = W2;
    ev.from_global_batch = job.global_batch_;
    ev.global_batch = gb2;
    ev.requested_t = requested_t;
    return ev;
  }

  // The epoch's loss sums so far go to rank 0, which stays.
  void fold_sums() {
    world->allreduce(sums, sums, 2, DType::F64, comm::ReduceOp::Sum);
    if (rank() != 0) sums[0] = sums[1] = 0;
  }

  // The end of every in-place change on the ranks of the new world: rebuild, check, report.
  // `begun`: when the work that stops the training for the change began (for the visible pause).
  void finish_change(std::unique_ptr<comm::Communicator> nw, MembershipEvent ev, const comm::CpuMask& cores,
                     double lr_before, double begun) {
    Stopwatch sw;
    const int W = ev.from_workers, W2 = ev.workers;
    const int64_t gb = ev.from_global_batch, gb2 = ev.global_batch;
    change_typical_s = typical_step();
    enter(std::move(nw), gb2, &cores);
    if (moving && moving_from > 0) {  // a grow: the state moves over the grown world now
      Stopwatch rs;
      land_state();
      ev.phases.emplace_back("reshard_s", rs.seconds());
    }
    land_state();
    check_replicas("after the rescale");
    ev.phases.emplace_back("rebuild_s", sw.seconds());
    ev.threads = threads;
    last_change = "at step " + std::to_string(job.step_) + ", in place: " + std::to_string(W) + " -> " +
                  std::to_string(W2) + " worker(s), global batch " + std::to_string(gb) + " -> " +
                  std::to_string(gb2) + ", learning rate " + detail::concat(lr_before) + " -> " + detail::concat(job.lr_);
    change_begun = begun;
    pending = ev;
    restart_progress();
    for (auto& cb : callbacks) cb({W, W2, gb, gb2, false});
  }

  bool background_grow() const { return o.background_grow && knobs::get_bool("EDP_BACKGROUND_GROW"); }

  // A grow under way: where it stands (collective). Joins the new ranks when they are ready; with
  // `wait`, waits for that (or for the grow to fail).
  void poll_grow(bool wait) {
    while (grow) {
      const comm::Grow::State st = grow->poll(*world);
      if (st == comm::Grow::State::kStarting) {
        if (!wait) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      if (st == comm::Grow::State::kReady) {
        join_grow();
        return;
      }
      const std::string why = grow->error();
      grow.reset();
      if (mode == "in-place") throw Error(o.name + ": cannot grow in place (EDP_RESCALE_MODE=in-place): " + why);
      if (root()) log::warn(o.name, ": the grow failed and left the job as it was: ", why);
      if (ckpt && job.epoch_ < o.epochs)
        restart_at(grow_to, grow_requested_t);
      else if (control)
        control->failed(why);
      return;
    }
  }

  // Every rank of the running world and the new ranks, at a step boundary: the new ranks take
  // rank 0's state, and the job continues on the grown world.
  void join_grow() {
    MembershipEvent ev = change_event(grow_to.workers, grow_to.global_batch, grow_requested_t);
    const double lr_before = job.lr_, begun = wall_time();
    ev.phases.emplace_back("background_s", begun - grow_requested_t);
    Stopwatch sw;
    fold_sums();
    if (sharding()) {  // resharded over the grown world once every rank has entered it
      moving = ddp->take_optimizer_state(opt);
      moving_from = ev.from_workers;
    }
    const comm::CpuMask cores = comm::host_cores(*world);
    std::unique_ptr<comm::Communicator> nw = grow->take();
    grow.reset();
    world = nw.get();  // the new ranks take rank 0's state first (their Job's constructor)
    send_state(ev.from_workers, ev.global_batch, Meet::kJoinRunning);
    ev.phases.emplace_back("state_s", sw.seconds());
    finish_change(std::move(nw), ev, cores, lr_before, begun);
  }

  // At the step boundary after a change that left ranks of separate launches on a slower data path
  // than a start at this size would give them (EDP_HOST_SHM=off, or no room in /dev/shm for the
  // grown communicator): in auto mode the job restarts at its size when the rest of the run repays
  // the restart (rank 0 decides; collective).
  void leave_slow_path() {
    slow_path = false;
    int go = root() && mode == "auto" && ckpt && restart_pays() ? 1 : 0;
    world->broadcast(&go, 1, DType::I32, 0);
    if (go) {
      if (root())
        log::info(o.name, ": restarting at ", size(), " worker(s): its ranks of separate launches exchange gradients over ",
                  "a slower path than a start at this size gives them (", world->transport(), ")");
      restart_at({size(), job.global_batch_}, wall_time());
    } else if (root()) {
      log::warn(o.name, ": ranks of separate launches exchange gradients over a slower path than a start at this size ",
                "would give them (", world->transport(), "); docs/elastic.md, \"Which transport\"");
    }
  }

  // Waits for a rescale under way (a grow) to complete or fail. Collective.
  void settle() { poll_grow(true); }

  void leave() {
    moving.reset();
    ddp.reset();
    device_comm.reset();
    loader.reset();
    uploader.reset();
    comm::watch_communicator(nullptr);
    owned_world.reset();
    world = nullptr;
    in_epoch = false;
    job.left_ = true;
  }

  void restart_progress() {
    if (!in_epoch || !progress) return;
    progress_base = 0;
    progress_samples = 0;
    progress = std::make_unique<train::Progress>(epoch_label() + " at " + std::to_string(size()) + " worker(s)",
                                                 loader->steps_remaining(), root() && o.progress);
  }

  std::string epoch_label() const {
    return "epoch " + std::to_string(job.epoch_ + 1) + "/" + std::to_string(o.epochs);
  }

  void finish_epoch() {
    if (o.checkpoint_every == 0) commit(nullptr, 0);
    const double secs = epoch_sw.seconds();
    world->allreduce(sums, sums, 2, DType::F64, comm::ReduceOp::Sum);
    job.summary_ = {job.epoch_, sums[0] / std::max(1.0, sums[1]), static_cast<int64_t>(sums[1]), secs};
    if (progress) progress->finish();
    progress.reset();
    in_epoch = false;
    epoch_finished = true;
  }

  // An event of the job as it stands now (its size, batch, step and the time).
  MembershipEvent event_now(const char* kind) const {
    MembershipEvent ev;
    ev.event = kind;
    ev.workers = size();
    ev.global_batch = job.global_batch_;
    ev.step = job.step_;
    ev.t = wall_time();
    ev.samples = samples_done();
    return ev;
  }

  // Samples trained since the job began, over every epoch (the position in the current one).
  int64_t samples_done() const {
    const int64_t n = static_cast<int64_t>(train->size());
    return loader ? job.epoch_ * n + loader->position() : -1;
  }

  // The divergence guard, at the end of every kGuardWindow-th step (collective: every rank decides
  // on the same reduced numbers). See JobOptions::divergence_factor.
  void guard_check() {
    double v[2] = {guard_sum, guard_n};
    world->allreduce(v, v, 2, DType::F64, comm::ReduceOp::Sum);
    guard_sum = guard_n = 0;
    guard_from = job.step_ + 1;
    if (v[1] <= 0) return;
    const double mean = v[0] / v[1];
    guard_last = mean;
    log::debug(o.name, ": divergence guard: mean loss ", mean, " over steps ", job.step_ - kGuardWindow + 1, "-",
               job.step_, ", running level ", guard_level);
    if (guard_level < 0) {
      guard_level = mean;
      guard_good_step = job.step_;
      return;
    }
    const double f = o.divergence_factor;
    const bool above = f > 0 && mean > f * guard_level;
    // Down from a blow-up (a window above factor² times the level) but not back to the level:
    // still in doubt. After a milder rise a slow recovery is normal (e.g. after a rescale).
    const bool not_back = guard_suspect > 0 && guard_peak > f * f * guard_level && mean > kGuardRecovered * guard_level;
    if (above || not_back) {
      if (guard_suspect++ == 0) {
        guard_first_bad = job.step_ - kGuardWindow + 1;
        guard_peak = 0;
        guard_came_down = false;
        if (ckpt) ckpt->hold(guard_good_step);  // rotation must not remove the last good state
      }
      guard_peak = std::max(guard_peak, mean);
      guard_came_down = guard_came_down || !above;
      if (guard_suspect >= kGuardPatience) guard_diverged(mean);
      return;
    }
    guard_suspect = 0;
    if (ckpt) ckpt->hold(-1);
    guard_level = 0.9 * guard_level + 0.1 * mean;
    guard_good_step = job.step_;
  }

  // The guard where its windows cannot fill (collective): before a change of size or a stop, and
  // when the training ends. The steps since the last full window (none: the last window, when it
  // was in doubt) are judged against the level before them — with no level yet (a job shorter
  // than one window), against this process's first step. Above divergence_factor times it, or down
  // from a blow-up but not back within kGuardRecovered, the model is ruined: the job stops as
  // guard_diverged() stops it (the checkpoints after the last good state set aside), never
  // reporting a ruined model as trained.
  void guard_partial(const std::string& when) {
    if (o.divergence_factor <= 0 || !world) return;
    double v[4] = {guard_sum, guard_n, guard_first[0], guard_first[1]};
    world->allreduce(v, v, 4, DType::F64, comm::ReduceOp::Sum);
    const bool partial = v[1] > 0;
    if (!partial && guard_suspect == 0) return;
    const double mean = partial ? v[0] / v[1] : guard_last;
    const bool have_level = guard_level >= 0;
    const double level = have_level ? guard_level : v[3] > 0 ? v[2] / v[3] : -1;
    if (level < 0 || !std::isfinite(mean)) return;  // nothing to compare with (a non-finite loss stops elsewhere)
    const double f = o.divergence_factor;
    const bool above = mean > f * level;
    const bool not_back = guard_suspect > 0 && guard_peak > f * f * level && mean > kGuardRecovered * level;
    if (!above && !not_back) return;
    // The steps judged: those since the last full window (windows end at multiples of kGuardWindow).
    const long long to = job.step_;
    const long long from = partial ? guard_from : std::max<long long>(1, to - kGuardWindow + 1);
    char m[640];
    std::snprintf(m, sizeof m,
                  "the loss diverged: its mean over steps %lld-%lld, the last before %s, was %.4g, more than %g times "
                  "%s %.4g; the guard's windows of %lld steps did not fill before %s.",
                  from, to, when.c_str(), mean, above ? f : kGuardRecovered,
                  have_level ? "its running level" : "the loss of the job's first step,", level,
                  static_cast<long long>(kGuardWindow), when.c_str());
    diverged(m,
             " The peak learning rate is " + detail::concat(job.lr_) + " at global batch " +
                 std::to_string(job.global_batch_) +
                 ". Lower the learning rate or the largest global batch the job may be given (JobOptions::"
                 "max_global_batch, the examples' --max-global-batch), or turn the guard off (divergence_factor 0)",
             true);
  }

  // The training ends here (at its last epoch, or where the program stops it): the guard judges
  // the steps its windows did not cover, once.
  void guard_end() {
    if (guard_ended) return;
    guard_ended = true;
    guard_partial("the end of the training");
  }

  // Stops the job on every rank (collective: all ranks decided alike; otherwise this rank alone).
  // Rank 0 first sets aside the checkpoints committed after the last good window of the guard, so
  // that the job, started again, resumes from its last good state.
  [[noreturn]] void diverged(const std::string& what, const std::string& advice, bool collective) {
    std::string where;
    if (ckpt && root()) {
      const std::vector<std::string> moved = ckpt->set_aside_after(guard_good_step, "diverged");
      const std::vector<std::string> left = ckpt->list();
      where = left.empty() ? " No checkpoint from before the divergence remains."
                           : " Started again, it resumes from " + left.front() + ", the last good state.";
      if (!moved.empty())
        where += " The " + std::to_string(moved.size()) + " checkpoint(s) written after step " +
                 std::to_string(guard_good_step) + " were set aside (renamed *.diverged).";
    }
    const std::string m = o.name + ": " + what + " The last change of size: " + last_change + "." + where + advice;
    if (!collective) throw Error(m);
    world->barrier();  // rank 0 has set them aside before any rank ends the job
    throw CollectiveError(m, world->rank(), world->size());
  }

  // Every window in doubt above the limit, or (guard_came_down) some only not back from it.
  void guard_diverged(double mean) {
    char m[600];
    const long long from = job.step_ - kGuardWindow + 1, to = job.step_;
    if (!guard_came_down)
      std::snprintf(m, sizeof m,
                    "the loss diverged: its mean over steps %lld-%lld was %.4g, more than %g times its running level "
                    "%.4g, in %d windows of %lld steps in a row (since step %lld).",
                    from, to, mean, o.divergence_factor, guard_level, kGuardPatience,
                    static_cast<long long>(kGuardWindow), static_cast<long long>(guard_first_bad));
    else
      std::snprintf(m, sizeof m,
                    "the loss diverged: it rose to %.4g, more than %g times its running level %.4g (since step %lld), "
                    "and did not come back: its mean over steps %lld-%lld was %.4g, still more than %g times that "
                    "level, %d windows of %lld steps after the rise began.",
                    guard_peak, o.divergence_factor, guard_level, static_cast<long long>(guard_first_bad), from, to,
                    mean, kGuardRecovered, kGuardPatience, static_cast<long long>(kGuardWindow));
    std::string lr = o.lr_scaling == "none" || job.global_batch_ == o.lr_base_batch
                         ? ""
                         : " (" + o.lr_scaling + " scaling of " + detail::concat(o.lr) + " at global batch " +
                               std::to_string(o.lr_base_batch) + "; sqrt scaling, the examples' --lr-scaling sqrt, "
                               "gives less)";
    diverged(m,
             " The peak learning rate is " + detail::concat(job.lr_) + " at global batch " +
                 std::to_string(job.global_batch_) + lr +
                 ". Lower the learning rate or the largest global batch the job may be given (JobOptions::"
                 "max_global_batch, the examples' --max-global-batch), or turn the guard off (divergence_factor 0)",
             true);
  }

  // The median of the recent step times (0 when none was measured).
  double typical_step() const {
    if (step_times.empty()) return 0;
    std::vector<double> t = step_times;
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
    return t[t.size() / 2];
  }

  // After every step: the step's time, for typical_step(); a change empties the record (enter()).
  void time_step() {
    const double now = wall_time();
    if (last_step_t > 0 && !pending) {
      if (step_times.size() >= 32) step_times.erase(step_times.begin());
      step_times.push_back(now - last_step_t);
    }
    last_step_t = now;
  }

  // After every step: the settled-speed window (see rate_armed).
  void rate_step() {
    if (!rate_armed) return;
    if (!rate_open) {
      rate_open = true;
      rate_from_step = job.step_;
      rate_from_t = wall_time();
      rate_samples = 0;
      return;
    }
    rate_samples += global_count;
    if (job.step_ - rate_from_step < kRateSteps) return;
    rate_armed = rate_open = false;
    if (!root()) return;
    MembershipEvent ev = event_now("rate");
    ev.steps = job.step_ - rate_from_step;
    ev.samples_per_s = static_cast<double>(rate_samples) / std::max(1e-9, ev.t - rate_from_t);
    append_event(ev);
  }

  void first_step_done() {
    if (!pending) return;
    MembershipEvent ev = *pending;
    pending.reset();
    if (!root()) return;
    ev.t = wall_time();
    ev.step = job.step_;
    ev.samples = samples_done();
    ev.pause_s = ev.t - ev.requested_t;
    if (ev.mode == "in_place") {
      ev.phases.emplace_back("first_step_s", ev.t - entered_t);
      // What the training lost: from the stop for the change to the end of the first step at the
      // new size, less the step a typical step takes (the median of the steps before it).
      ev.visible_s = std::max(0.0, ev.t - change_begun - change_typical_s);
    } else {
      ev.visible_s = ev.pause_s;  // by restart, the whole pause stops the training
    }
    append_event(ev);
    log::info(o.name, ": first step at ", ev.workers, " worker(s) done, ", ev.pause_s, " s after the request (",
              ev.mode == "in_place" ? "in place" : "by restart", ")");
  }
};

Job::Job(comm::Communicator& world, std::shared_ptr<nn::Module> model, optim::Optimizer& opt,
         std::shared_ptr<const data::Dataset> train_set, JobOptions options)
    : impl_(std::make_unique<Impl>(*this, opt, std::move(train_set), std::move(options))), model_(std::move(model)) {
  Impl& m = *impl_;
  JobOptions& o = m.o;
  EDP_CHECK(model_ != nullptr && m.train != nullptr, "elastic::Job needs a model and a training set");
  EDP_CHECK(m.train->size() > 0, o.name, ": the training set is empty: nothing to train on");
  EDP_CHECK(o.epochs >= 1, o.name, ": epochs must be >= 1, got ", o.epochs);
  EDP_CHECK(o.global_batch >= 1, o.name, ": the global batch must be >= 1, got ", o.global_batch);
  EDP_CHECK(o.lr_base_batch >= 1, o.name, ": lr_base_batch must be >= 1");
  EDP_CHECK(o.lr >= 0, o.name, ": the learning rate must be >= 0 (0: the optimizer's), got ", o.lr);
  if (o.lr == 0) o.lr = m.opt.lr();  // given once, to the optimizer
  EDP_CHECK(o.max_micro_batch >= 0, o.name, ": max_micro_batch must be >= 0, got ", o.max_micro_batch);
  EDP_CHECK(o.checkpoint_every >= 0 && o.keep_checkpoints >= 1 && o.control_every >= 1 && o.warmup_steps >= 0,
            o.name, ": checkpoint_every and warmup_steps must be >= 0, keep_checkpoints and control_every >= 1");
  EDP_CHECK(o.divergence_factor == 0 || o.divergence_factor > kGuardRecovered, o.name,
            ": the divergence factor must be 0 (no guard) or above ", kGuardRecovered,
            " (a loss that merely stays at its level would count as diverging), got ", o.divergence_factor);
  EDP_CHECK(o.on_nonfinite == "stop" || o.on_nonfinite == "skip", o.name,
            ": on_nonfinite must be stop or skip, got '", o.on_nonfinite, "'");
  knobs::check_environment();  // every EDP_* value now: EDP_SPAWN_TIMEOUT=abc fails here, not at the first grow
  m.mode = o.rescale_mode.empty() ? knobs::get_string("EDP_RESCALE_MODE") : o.rescale_mode;
  EDP_CHECK(m.mode == "auto" || m.mode == "in-place" || m.mode == "restart", o.name,
            ": the rescale mode must be auto, in-place or restart, got '", m.mode, "'");
  if (o.control_file.empty()) o.control_file = knobs::get_string("EDP_CONTROL_FILE");
  m.world = &world;
  m.min_step_s = knobs::get_double("EDP_MIN_STEP_MS") / 1000.0;
  if (o.device.is_cuda()) m.uploader = std::make_unique<cuda::AsyncUploader>(o.device);
  if (!o.checkpoint_dir.empty()) m.ckpt = std::make_unique<train::CheckpointDir>(o.checkpoint_dir, o.keep_checkpoints);

  const bool joined = comm::spawned();
  int64_t global_batch = o.global_batch;
  m.origin_global_batch = o.global_batch;
  std::optional<train::Checkpoint> resume;
  std::string resume_path;
  if (joined) {
    // Started by a grow: the running ranks send their state (Impl::in_place on their side).
    m.warm_up();  // before the handshake: the running ranks keep training meanwhile
    m.send_state(0, 0, Impl::Meet::kJoinNew);  // every rank that runs this is new; rank 0 says the global batch
  } else {
    if (m.ckpt) {
      m.take_lock(world);
      resume = m.ckpt->latest(&resume_path);
      m.check_same_checkpoint(world, resume ? &*resume : nullptr, resume_path);
      if (resume) m.check_identity(*resume, resume_path);
    }
    if (resume && resume->meta.count("next.global_batch")) global_batch = resume->int_at("next.global_batch");
    EDP_CHECK(global_batch % world.size() == 0, o.name, ": a global batch of ", global_batch,
              resume && resume->meta.count("next.global_batch") ? " (asked for by the checkpoint " + resume_path + ")"
                                                                  : std::string(),
              " cannot be split evenly over ", world.size(), " rank(s)");
    m.make_loader(global_batch);
    if (resume) {
      m.restore(*resume);
    }
  }
  if (!o.control_file.empty()) {
    EDP_CHECK(m.ckpt || m.mode != "restart", o.name,
              ": a control file with EDP_RESCALE_MODE=restart needs a checkpoint directory: the job restarts from it");
    ControlLimits limits = ControlLimits::from_env();
    const int64_t first = m.origin_global_batch, samples = static_cast<int64_t>(m.train->size());
    const bool given = o.max_global_batch > 0 || o.min_global_batch > 0;
    const int64_t max_gb = o.max_global_batch > 0 ? o.max_global_batch : first * kBatchRange;
    limits.max_global_batch = std::min(samples, max_gb);
    limits.min_global_batch = o.min_global_batch > 0 ? o.min_global_batch : std::max<int64_t>(1, first / kBatchRange);
    const std::string range =
        given ? "JobOptions::min_global_batch/max_global_batch, the examples' --min-global-batch and "
                "--max-global-batch"
              : "within " + std::to_string(kBatchRange) + "x of the job's first global batch " + std::to_string(first) +
                    "; JobOptions::min_global_batch/max_global_batch, the examples' --min-global-batch and "
                    "--max-global-batch, widen it";
    limits.max_global_batch_rule = samples < max_gb ? "the training set's size" : range;
    limits.min_global_batch_rule = range;
    limits.max_worker_batch = o.max_worker_batch;
    m.control = std::make_unique<ElasticControl>(o.control_file, world.size(), global_batch_, limits);
  }
  const comm::CpuMask own = comm::affinity();
  m.enter(nullptr, global_batch_, joined ? &own : nullptr);  // a new rank takes part in the re-binding
  m.land_state();  // a new rank of a sharded job: its part of the optimizer state
  if (resume) m.land_checkpoint(*resume, resume_path);
  if (!joined && !resume) {
    sync();  // a fresh start: every rank begins from rank 0's parameters
  } else {
    m.check_replicas(joined ? "after joining" : "after resuming");
  }
  if (m.root()) {
    if (resume) {
      log::info(o.name, ": resumed from ", resume_path, ": step ", step_, ", epoch ", m.loader->epoch() + 1, ", ",
                m.loader->position(), " samples into it (saved by ",
                resume->meta.count("world_size") ? resume->at("world_size") : std::string("?"), " rank(s))");
      if (epoch_ >= o.epochs)
        log::info(o.name, ": the training is already complete (all ", o.epochs, " epoch(s), step ", step_,
                  "): nothing to train; the model is the checkpoint's");
      if (const std::string diff = train::build_difference(*resume); !diff.empty())
        log::warn(o.name, ": the checkpoint was written by another build (", diff,
                  "): training continues correctly, but not bitwise as the uninterrupted run would have");
    }
    MembershipEvent start = m.event_now("start");
    start.threads = m.threads;
    append_event(start);
  }
  complete_at_start_ = resume && epoch_ >= o.epochs;
  if (resume && resume->meta.count("next.requested_t")) {
    MembershipEvent ev;
    ev.event = "rescale";
    ev.mode = "restart";
    ev.from_workers = resume->meta.count("world_size") ? static_cast<int>(resume->int_at("world_size")) : 0;
    ev.workers = size();
    ev.from_global_batch = resume->meta.count("global_batch") ? resume->int_at("global_batch") : 0;
    ev.global_batch = global_batch_;
    ev.requested_t = std::strtod(resume->at("next.requested_t").c_str(), nullptr);
    ev.threads = m.threads;
    m.pending = ev;
    m.last_change = "at step " + std::to_string(step_) + ", by restart: " + std::to_string(ev.from_workers) +
                    " -> " + std::to_string(ev.workers) + " worker(s), global batch " +
                    std::to_string(ev.from_global_batch) + " -> " + std::to_string(ev.global_batch) +
                    ", learning rate now " + detail::concat(lr_);
  }
  if (joined) {
    m.last_change = "at step " + std::to_string(step_) + ", in place: this rank joined the job at " +
                    std::to_string(size()) + " worker(s), global batch " + std::to_string(global_batch_);
    for (auto& cb : m.callbacks) cb({0, size(), 0, global_batch_, true});
  }
}

Job::~Job() = default;

comm::Communicator& Job::world() {
  EDP_CHECK(impl_->world != nullptr, impl_->o.name, ": this rank has left the job (a shrink); it has no communicator");
  return *impl_->world;
}
double Job::lr() const { return impl_->opt.lr(); }
int Job::rank() const { return impl_->world ? impl_->world->rank() : -1; }
int Job::size() const { return impl_->world ? impl_->world->size() : 0; }
int64_t Job::batch_per_rank() const { return impl_->world ? global_batch_ / impl_->world->size() : 0; }

ddp::DDPStats Job::ddp_stats() const {
  ddp::DDPStats total = impl_->stats_before;
  if (impl_->ddp) add(total, impl_->ddp->stats());
  return total;
}

size_t Job::gradient_buckets() const { return impl_->ddp ? impl_->ddp->buckets().size() : 0; }

bool Job::next_epoch() {
  Impl& m = *impl_;
  if (left_ || exit_code_ != 0) return false;
  EDP_CHECK(!m.in_epoch, m.o.name, ": next_epoch() called before next_batch() had returned false");
  if (m.epoch_finished) {
    ++epoch_;
    m.epoch_finished = false;
  }
  if (epoch_ >= m.o.epochs || m.ended) {
    end();
    return false;
  }
  m.loader->start_epoch(epoch_);
  m.status.gap();
  m.in_epoch = true;
  m.progress_base = 0;
  m.progress_samples = 0;
  m.sums[0] = m.sums[1] = 0;
  m.rate_open = false;  // the window must not span the time between epochs (evaluation)
  m.epoch_sw.reset();
  m.progress = std::make_unique<train::Progress>(m.epoch_label(), m.loader->steps_remaining(), m.root() && m.o.progress);
  return true;
}

void Job::end() {
  Impl& m = *impl_;
  if (left_ || exit_code_ != 0 || m.ended) return;
  // New ranks still starting: they join now and see that the training is over.
  m.settle();
  m.guard_end();  // on every rank of the final world (the new ones judge along)
  if (m.in_epoch && m.progress) m.progress->finish();
  m.in_epoch = false;
  m.ended = true;
  // The training's last state is committed, also when it ended between checkpoints (every
  // checkpoint_every steps, or at a step limit of the program): nothing trained is lost. Rank 0
  // reads the directory; the commit is collective (sharded, every rank writes its part).
  if (m.ckpt) {
    int64_t need = 0;
    if (m.root()) {
      const std::vector<std::string> have = m.ckpt->list();
      need = have.empty() || train::CheckpointDir::step_of(have.front()) != step_;
    }
    m.world->broadcast(&need, 1, DType::I64, 0);
    if (need) m.commit(nullptr, 0);
  }
  if (!m.root()) return;
  append_event(m.event_now("end"));
  m.status.finish();
}

bool Job::next_batch(data::Batch& b) {
  Impl& m = *impl_;
  if (m.micro + 1 < m.micros && !left_ && exit_code_ == 0 && m.in_epoch) {  // the step's next micro-batch
    m.take_micro(m.micro + 1, b);
    m.mid_step = true;
    return true;
  }
  for (;;) {
    if (left_ || exit_code_ != 0 || !m.in_epoch) return false;
    if (m.loader->steps_remaining() == 0) {
      m.finish_epoch();
      return false;
    }
    // The schedule's position counts the epoch's samples at the current global batch, so that
    // it is the same after a change of size (in place or by restart).
    m.opt.set_lr(m.schedule->lr(epoch_ * m.steps_per_epoch + m.loader->position() / global_batch_));
    m.opt.zero_grad();
    comm::set_stall_step(step_);
    data::DistributedLoader::Step s;
    m.loader->next(s);
    m.ddp->set_step_weight(static_cast<double>(s.local) / static_cast<double>(s.global));
    m.local_count = s.local;
    m.global_count = s.global;
    if (s.local > 0) {
      b.x = m.uploader ? m.uploader->upload(s.batch.x) : s.batch.x;
      b.y = m.uploader ? m.uploader->upload(s.batch.y) : s.batch.y;
      b.indices = std::move(s.batch.indices);
      m.micro = 0;
      m.micros = m.o.max_micro_batch > 0 ? (s.local + m.o.max_micro_batch - 1) / m.o.max_micro_batch : 1;
      m.micro_loss = 0;
      if (m.micros > 1) {
        m.step_batch = std::move(b);
        m.take_micro(0, b);
      }
      m.mid_step = true;
      return true;
    }
    // Uneven last step: nothing here, but the step's collectives still run.
    m.ddp->sync_without_backward();
    step(0.0);
  }
}

Tensor Job::forward(const Tensor& x) { return impl_->ddp->forward(x); }
void Job::backward(const Tensor& grad_out) {
  Impl& m = *impl_;
  if (m.micros <= 1) {
    m.ddp->backward(grad_out);
    return;
  }
  // The loop's loss is the micro-batch's mean: weighted by the micro-batch's share of the rank's
  // samples, the accumulated gradient is that of the rank's mean loss, which the allreduce (with
  // the last micro-batch's backward) weights by the rank's share of the step as without micro-batches.
  Tensor g = grad_out.clone();
  ops::scale_(g, static_cast<double>(m.micro_size) / static_cast<double>(m.local_count));
  std::optional<ddp::DistributedDataParallel::NoSync> local_only;  // all but the last: no allreduce
  if (m.micro + 1 < m.micros) local_only.emplace(*m.ddp);
  m.ddp->backward(g);
}

void Job::step(double loss) {
  Impl& m = *impl_;
  EDP_CHECK(m.in_epoch && m.world, m.o.name, ": step() outside an epoch");
  m.mid_step = false;
  if (m.micros > 1) {
    m.micro_loss += loss * static_cast<double>(m.micro_size) / static_cast<double>(m.local_count);
    if (m.micro + 1 < m.micros) {  // the step goes on with the next micro-batch
      m.mid_step = true;
      return;
    }
    loss = m.micro_loss;
    m.micros = 1;
    m.step_batch = data::Batch{};
  }
  // Numerical guard: a non-finite loss on this rank, or a non-finite reduced gradient (the same
  // on every rank, so every rank decides alike). The scan is one pass over the gradients on the
  // CPU, but one host-device sync per parameter on a GPU: there it runs every 50 steps (and on a
  // non-finite loss) unless skipping was asked for, which must see every step.
  const bool skip_mode = m.o.on_nonfinite == "skip";
  const bool scan = m.o.device.is_cpu() || skip_mode || step_ % 50 == 0 || !std::isfinite(loss);
  const nn::Parameter* nonfinite = scan ? nn::first_nonfinite_grad(model_->parameters()) : nullptr;
  std::string bad_name = nonfinite ? nonfinite->name : "";
  if (scan && m.ddp->sharded()) {
    // Sharded, a rank's grads are its own (the averaged ones are spread over the ranks): any
    // rank's non-finite gradient makes every rank decide alike.
    const int any = m.world->allreduce_value<int>(nonfinite ? 1 : 0, comm::ReduceOp::Max);
    if (any && !nonfinite) bad_name = "a parameter on another rank";
  }
  const bool bad = !bad_name.empty();
  if (!skip_mode) {
    const std::string at = " at step " + std::to_string(step_ + 1) + " (epoch " + std::to_string(epoch_ + 1) + ")";
    const char* advice = " Lower the learning rate, or skip such steps (on_nonfinite = skip, the examples' "
                         "--on-nonfinite skip)";
    // The reduced gradient is the same on every rank: they stop together. The loss is this rank's.
    if (bad) m.diverged("the gradient of " + bad_name + " is not finite" + at + ": the training diverged.", advice, true);
    if (!std::isfinite(loss))
      m.diverged("the loss is " + detail::concat(loss) + at + ": the training diverged.", advice, false);
  }
  if (bad) {
    if (m.root()) log::warn("step ", step_ + 1, ": the gradient of ", bad_name, " is not finite; skipping the update");
    m.ddp->skip_step();
    ++m.skipped_steps;
    const int64_t max_skipped = std::max<int64_t>(10, m.steps_per_epoch * m.o.epochs / 10);
    if (m.skipped_steps > max_skipped)
      throw Error("gave up after " + std::to_string(m.skipped_steps) + " skipped steps with non-finite gradients");
  } else {
    TimelineScope t("optimizer step", "compute");
    if (m.o.max_grad_norm > 0) m.ddp->clip_grad_norm(m.o.max_grad_norm);
    m.ddp->step(m.opt);
  }
  if (std::isfinite(loss)) {
    m.guard_sum += loss * static_cast<double>(m.local_count);
    m.guard_n += static_cast<double>(m.local_count);
    if (!m.guard_first_set) {  // the level of a job shorter than one window (guard_partial)
      m.guard_first[0] = loss * static_cast<double>(m.local_count);
      m.guard_first[1] = static_cast<double>(m.local_count);
      m.guard_first_set = true;
    }
  } else {
    loss = 0;  // skip mode: kept out of the reported mean
  }
  ++step_;
  m.sums[0] += loss * static_cast<double>(m.local_count);
  m.sums[1] += static_cast<double>(m.local_count);
  if (m.progress) {
    ++m.progress_base;
    m.progress_samples += m.global_count;  // (not this rank's count x ranks: a shrink folds the others' into rank 0's)
    m.progress->update(m.progress_base, m.progress_samples, loss);
  }
  if (m.min_step_s > 0) {  // pacing (EDP_MIN_STEP_MS): the step lasts at least that long
    const double now = wall_time();
    if (m.last_step_end > 0 && now - m.last_step_end < m.min_step_s)
      std::this_thread::sleep_for(std::chrono::duration<double>(m.min_step_s - (now - m.last_step_end)));
    m.last_step_end = wall_time();
  }
  m.time_step();
  m.first_step_done();
  m.rate_step();
  if (step_ % kGuardWindow == 0) m.guard_check();
  if (m.status.active() && m.root()) {
    const int64_t n = static_cast<int64_t>(m.train->size());
    m.status.step(m.o.name, size(), global_batch_, epoch_, m.o.epochs, step_, epoch_ * n + m.loader->position(),
                  m.o.epochs * n, ddp_stats().exposed_comm_s);
  }
  if (m.o.checkpoint_every > 0 && step_ % m.o.checkpoint_every == 0) m.commit(nullptr, 0);
  if (m.slow_path && !m.grow) m.leave_slow_path();
  if (exit_code_ != 0) return;
  if (m.grow) {
    m.poll_grow(false);  // new ranks starting in the background: join them once they are ready
  } else if (m.control && step_ % m.o.control_every == 0) {
    if (const auto next = m.control->poll(*m.world)) {
      if (next->stop)
        m.stop();
      else
        m.rescale(*next);
    }
  }
}

std::string Job::commit() { return impl_->commit(nullptr, 0); }

void Job::finish() {
  EDP_CHECK(!impl_->mid_step, impl_->o.name, ": finish() between next_batch() and step(): call it at a step boundary");
  if (!active()) return;
  impl_->settle();  // a grow under way joins first: the judgement is collective over the final world
  impl_->guard_end();
}

void Job::sync() {
  impl_->unshard();
  impl_->send_state(1, global_batch_, Impl::Meet::kSync);
  impl_->release_unsharded();
}

void Job::settle() {
  EDP_CHECK(!impl_->mid_step, impl_->o.name, ": settle() between next_batch() and step(): call it at a step boundary");
  impl_->settle();
}

bool Job::rescaling() const { return impl_->grow != nullptr; }

void Job::on_reset(std::function<void(const ResetInfo&)> callback) { impl_->callbacks.push_back(std::move(callback)); }

}  // namespace edp::elastic
