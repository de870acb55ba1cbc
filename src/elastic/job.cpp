#include "edp/elastic/job.h"

#include <cinttypes>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <thread>

#include "edp/comm/communicator.h"
#include "edp/comm/device.h"
#include "edp/comm/membership.h"
#include "edp/comm/stall.h"
#include "edp/config.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "edp/core/stopwatch.h"
#include "edp/core/timeline.h"
#include "edp/cuda/runtime.h"
#include "edp/data/distributed_loader.h"
#include "edp/elastic/events.h"
#include "edp/nn/module.h"
#include "edp/optim/optimizer.h"
#include "edp/optim/schedule.h"
#include "edp/train/checkpoint.h"
#include "edp/train/progress.h"

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
  std::unique_ptr<ElasticControl> control;
  std::unique_ptr<optim::LRSchedule> schedule;
  int64_t steps_per_epoch = 1;

  // The epoch in progress.
  bool in_epoch = false, epoch_finished = false;
  std::unique_ptr<train::Progress> progress;
  int64_t progress_base = 0;  // steps of the epoch before the current Progress began
  Stopwatch epoch_sw;
  double sums[2] = {0, 0};  // loss x samples, samples (this rank; folded into rank 0 at a rescale)
  int64_t local_count = 0;  // this rank's samples in the step being taken
  int64_t skipped_steps = 0;

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
  train::Checkpoint capture(const RescaleRequest* next, double requested_t) const {
    train::Checkpoint c = train::capture(*job.model_, &opt, &loader->sampler());
    c.meta["model"] = o.name;
    c.meta["world_size"] = std::to_string(size());
    c.meta["global_batch"] = std::to_string(job.global_batch_);
    c.meta["step"] = std::to_string(job.step_);
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
    train::restore(c, *job.model_, &opt, &loader->sampler());
    loader->load_state(loader->sampler().state());
    job.step_ = opt.steps();
    const auto& s = loader->sampler();
    job.epoch_ = s.epoch() + (s.epoch_done() ? 1 : 0);
  }

  std::string commit(const RescaleRequest* next, double requested_t) {
    if (!ckpt || !root()) return "";
    return ckpt->commit(job.step_, capture(next, requested_t));
  }

  // Rank 0's state to the ranks from `first` on (collective over the world); `global_batch` is
  // the one the job continues with (a grow may change it).
  void send_state(int first, int64_t global_batch) {
    TimelineScope t("elastic state broadcast", "comm");
    comm::StallLabel label("elastic: rank 0's state to the new ranks");
    // New ranks are still starting (MPI, data, model): wait for them without spinning, which on
    // shared cores would take the CPU they start with.
    comm::Request arrived = world->ibarrier();
    while (!arrived.test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<char> bytes;
    if (root()) {
      train::Checkpoint c = capture(nullptr, 0);
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
    }
  }

  void make_loader(int64_t global_batch) {
    EDP_CHECK(global_batch % size() == 0, o.name, ": a global batch of ", global_batch, " cannot be split evenly over ",
              size(), " rank(s)");
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
    schedule = std::make_unique<optim::WarmupLR>(std::make_shared<optim::CosineLR>(job.lr_, total),
                                                 std::min<int64_t>(o.warmup_steps, total));
  }

  // Everything that depends on the world: (re)built after each change, on every rank of it.
  void enter(std::unique_ptr<comm::Communicator> nw, int64_t global_batch) {
    if (ddp) add(stats_before, ddp->stats());
    ddp.reset();  // its communication thread uses the old communicators
    device_comm.reset();
    if (nw) {
      owned_world = std::move(nw);
      world = owned_world.get();
    }
    EDP_CHECK(global_batch % size() == 0, o.name, ": a global batch of ", global_batch, " cannot be split evenly over ",
              size(), " rank(s)");
    job.global_batch_ = global_batch;
    if (!loader)
      make_loader(global_batch);
    else
      loader->reshard(size(), rank(), global_batch / size());
    configure_schedule();
    device_comm = comm::make_device_communicator(*world, o.device);
    ddp = std::make_unique<ddp::DistributedDataParallel>(job.model_, device_comm ? *device_comm : *world,
                                                         ddp::DDPOptions{.bucket_cap_bytes = o.bucket_cap_bytes});
    if (control) {
      ControlLimits limits = control->limits();
      control = std::make_unique<ElasticControl>(control->path(), size(), job.global_batch_, limits);
    }
    // One run, one configuration: the program's settings and what the job derived.
    std::vector<comm::Setting> settings = o.settings;
    settings.emplace_back("epochs", std::to_string(o.epochs));
    settings.emplace_back("global batch", std::to_string(job.global_batch_));
    char lr[32];
    std::snprintf(lr, sizeof lr, "%.17g", job.lr_);
    settings.emplace_back("learning rate after scaling", lr);
    settings.emplace_back("LR rule", o.lr_scaling + " from " + std::to_string(o.lr_base_batch));
    settings.emplace_back("warmup steps", std::to_string(o.warmup_steps));
    settings.emplace_back("data seed", std::to_string(o.seed));
    settings.emplace_back("training samples", std::to_string(train->size()));
    settings.emplace_back("model parameters", std::to_string(job.model_->num_parameters()));
    settings.emplace_back("checkpoint directory", o.checkpoint_dir);
    settings.emplace_back("rescale mode", mode);
    settings.emplace_back("non-finite rule", o.on_nonfinite);
    settings.emplace_back("build arithmetic", std::string(EDP_CPU_FLAGS) + " / " + EDP_COMPILER);
    comm::check_agreement(*world, settings, o.name);
    entered_t = wall_time();
  }

  // Collective: every rank's state must be bitwise rank 0's (after a change of membership).
  void check_replicas(const std::string& when) {
    const uint64_t h = fnv1a(train::encode_checkpoint(capture(nullptr, 0)));
    comm::check_agreement(*world, {{"model and optimizer state digest", hex(h)}}, o.name + " replicas " + when);
  }

  // ---- rescale ----
  void rescale(const RescaleRequest& next) {
    const double requested_t = wall_time();
    const int W = size(), W2 = next.workers;
    const int64_t gb2 = next.global_batch > 0 ? next.global_batch : job.batch_per_rank() * W2;
    if (root())
      log::info(o.name, ": rescale requested at step ", job.step_, ": ", W, " -> ", W2, " worker(s), global batch ",
                job.global_batch_, " -> ", gb2);
    if (mode != "restart") {
      if (in_place(W2, gb2, requested_t)) return;
    }
    if (!ckpt) {
      if (root())
        log::warn(o.name, ": cannot rescale by restart without a checkpoint directory (JobOptions::checkpoint_dir, the examples' --checkpoint-dir); the job keeps its size");
      return;
    }
    const RescaleRequest rec{W2, gb2};
    const std::string written = commit(&rec, requested_t);
    if (root()) record_rescale(rec, job.step_, written);
    world->barrier();
    job.exit_code_ = kRescaleExitCode;
    if (root()) log::info(o.name, ": stopping to be restarted at ", W2, " worker(s) (exit code ", kRescaleExitCode, ")");
  }

  // ---- stop (a preemption that loses nothing) ----
  // Every rank at the same step boundary: rank 0 commits a checkpoint of this step, then every
  // rank stops with kStopExitCode. Started again (at any size), the job resumes at this step.
  void stop() {
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
    MembershipEvent ev;
    ev.event = "stop";
    ev.workers = size();
    ev.global_batch = job.global_batch_;
    ev.step = job.step_;
    ev.t = wall_time();
    append_event(ev);
    status.finish("stopped");
    log::info(o.name, ": stopped at step ", job.step_, " as the control file asks (exit code ", kStopExitCode, ")",
              written.empty() ? std::string() : ": started again, it resumes from " + written);
  }

  // True when done (or this rank left); false to fall back to the restart path.
  bool in_place(int W2, int64_t gb2, double requested_t) {
    const int W = size(), me = rank();
    const int64_t gb = job.global_batch_;
    MembershipEvent ev;
    ev.event = "rescale";
    ev.mode = "in_place";
    ev.from_workers = W;
    ev.workers = W2;
    ev.from_global_batch = gb;
    ev.global_batch = gb2;
    ev.requested_t = requested_t;
    Stopwatch sw;
    // The epoch's loss sums so far go to rank 0, which stays.
    world->allreduce(sums, sums, 2, DType::F64, comm::ReduceOp::Sum);
    if (me != 0) sums[0] = sums[1] = 0;
    std::unique_ptr<comm::Communicator> nw;
    if (W2 < W) {
      nw = world->split(me < W2 ? 0 : comm::Communicator::kNoColor, me);
      ev.phases.emplace_back("split_s", sw.seconds());
      if (!nw) {
        leave();
        return true;
      }
      comm::watch_communicator(nw.get());
    } else if (W2 > W) {
      try {
        nw = comm::spawn_ranks(*world, W2 - W);
      } catch (const comm::SpawnError& e) {
        if (mode == "in-place") throw Error(o.name + ": cannot grow in place (EDP_RESCALE_MODE=in-place): " + e.what());
        if (root()) log::warn(o.name, ": cannot grow in place: ", e.what(), "; rescaling by restart instead");
        return false;
      }
      ev.phases.emplace_back("spawn_s", sw.seconds());
      sw.reset();
      world = nw.get();  // the new ranks take rank 0's state first (their Job's constructor)
      send_state(W, gb2);
      ev.phases.emplace_back("state_s", sw.seconds());
    }
    sw.reset();
    enter(std::move(nw), gb2);
    check_replicas("after the rescale");
    ev.phases.emplace_back("rebuild_s", sw.seconds());
    pending = ev;
    restart_progress();
    for (auto& cb : callbacks) cb({W, W2, gb, gb2, false});
    return true;
  }

  void leave() {
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

  void first_step_done() {
    if (!pending) return;
    MembershipEvent ev = *pending;
    pending.reset();
    if (!root()) return;
    ev.t = wall_time();
    ev.step = job.step_;
    ev.pause_s = ev.t - ev.requested_t;
    if (ev.mode == "in_place") ev.phases.emplace_back("first_step_s", ev.t - entered_t);
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
  EDP_CHECK(o.checkpoint_every >= 0 && o.keep_checkpoints >= 1 && o.control_every >= 1 && o.warmup_steps >= 0,
            o.name, ": checkpoint_every and warmup_steps must be >= 0, keep_checkpoints and control_every >= 1");
  EDP_CHECK(o.on_nonfinite == "stop" || o.on_nonfinite == "skip", o.name,
            ": on_nonfinite must be stop or skip, got '", o.on_nonfinite, "'");
  m.mode = o.rescale_mode.empty() ? knobs::get_string("EDP_RESCALE_MODE") : o.rescale_mode;
  EDP_CHECK(m.mode == "auto" || m.mode == "in-place" || m.mode == "restart", o.name,
            ": the rescale mode must be auto, in-place or restart, got '", m.mode, "'");
  if (o.control_file.empty()) o.control_file = knobs::get_string("EDP_CONTROL_FILE");
  m.world = &world;
  if (o.device.is_cuda()) m.uploader = std::make_unique<cuda::AsyncUploader>(o.device);
  if (!o.checkpoint_dir.empty()) m.ckpt = std::make_unique<train::CheckpointDir>(o.checkpoint_dir, o.keep_checkpoints);

  const bool joined = comm::spawned();
  int64_t global_batch = o.global_batch;
  std::optional<train::Checkpoint> resume;
  std::string resume_path;
  if (joined) {
    // Started by a grow: the running ranks send their state (Impl::in_place on their side).
    m.send_state(0, 0);  // every rank that runs this is new; rank 0 says the global batch
  } else {
    if (m.ckpt) resume = m.ckpt->latest(&resume_path);
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
    limits.max_global_batch = m.train->size();
    limits.max_worker_batch = o.max_worker_batch;
    m.control = std::make_unique<ElasticControl>(o.control_file, world.size(), global_batch_, limits);
  }
  m.enter(nullptr, global_batch_);
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
      if (const std::string diff = train::build_difference(*resume); !diff.empty())
        log::warn(o.name, ": the checkpoint was written by another build (", diff,
                  "): training continues correctly, but not bitwise as the uninterrupted run would have");
    }
    MembershipEvent start;
    start.event = "start";
    start.workers = size();
    start.global_batch = global_batch_;
    start.step = step_;
    start.t = wall_time();
    append_event(start);
  }
  if (resume && resume->meta.count("next.requested_t")) {
    MembershipEvent ev;
    ev.event = "rescale";
    ev.mode = "restart";
    ev.from_workers = resume->meta.count("world_size") ? static_cast<int>(resume->int_at("world_size")) : 0;
    ev.workers = size();
    ev.from_global_batch = resume->meta.count("global_batch") ? resume->int_at("global_batch") : 0;
    ev.global_batch = global_batch_;
    ev.requested_t = std::strtod(resume->at("next.requested_t").c_str(), nullptr);
    m.pending = ev;
  }
  if (joined) {
    for (auto& cb : m.callbacks) cb({0, size(), 0, global_batch_, true});
  }
}

Job::~Job() = default;

comm::Communicator& Job::world() {
  EDP_CHECK(impl_->world != nullptr, impl_->o.name, ": this rank has left the job (a shrink); it has no communicator");
  return *impl_->world;
}
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
  if (epoch_ >= m.o.epochs) {
    if (m.root()) m.status.finish();
    return false;
  }
  m.loader->start_epoch(epoch_);
  m.status.gap();
  m.in_epoch = true;
  m.progress_base = 0;
  m.sums[0] = m.sums[1] = 0;
  m.epoch_sw.reset();
  m.progress = std::make_unique<train::Progress>(m.epoch_label(), m.loader->steps_remaining(), m.root() && m.o.progress);
  return true;
}

bool Job::next_batch(data::Batch& b) {
  Impl& m = *impl_;
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
    if (s.local > 0) {
      b.x = m.uploader ? m.uploader->upload(s.batch.x) : s.batch.x;
      b.y = m.uploader ? m.uploader->upload(s.batch.y) : s.batch.y;
      b.indices = std::move(s.batch.indices);
      return true;
    }
    // Uneven last step: nothing here, but the step's collectives still run.
    m.ddp->sync_without_backward();
    step(0.0);
  }
}

Tensor Job::forward(const Tensor& x) { return impl_->ddp->forward(x); }
void Job::backward(const Tensor& grad_out) { impl_->ddp->backward(grad_out); }

void Job::step(double loss) {
  Impl& m = *impl_;
  EDP_CHECK(m.in_epoch && m.world, m.o.name, ": step() outside an epoch");
  // Numerical guard: a non-finite loss on this rank, or a non-finite reduced gradient (the same
  // on every rank, so every rank decides alike). The scan is one pass over the gradients on the
  // CPU, but one host-device sync per parameter on a GPU: there it runs every 50 steps (and on a
  // non-finite loss) unless skipping was asked for, which must see every step.
  const bool skip_mode = m.o.on_nonfinite == "skip";
  const bool scan = m.o.device.is_cpu() || skip_mode || step_ % 50 == 0 || !std::isfinite(loss);
  const nn::Parameter* bad = scan ? nn::first_nonfinite_grad(model_->parameters()) : nullptr;
  if (!skip_mode) {
    EDP_CHECK(std::isfinite(loss), "the loss is ", loss, " at step ", step_ + 1, " (epoch ", epoch_ + 1,
              "): the training diverged; lower the learning rate or skip such steps (on_nonfinite = skip)");
    EDP_CHECK(!bad, "the gradient of ", bad ? bad->name : "", " is not finite at step ", step_ + 1, " (epoch ",
              epoch_ + 1, "): the training diverged; lower the learning rate or skip such steps (on_nonfinite = skip)");
  }
  if (bad) {
    if (m.root()) log::warn("step ", step_ + 1, ": the gradient of ", bad->name, " is not finite; skipping the update");
    ++m.skipped_steps;
    const int64_t max_skipped = std::max<int64_t>(10, m.steps_per_epoch * m.o.epochs / 10);
    if (m.skipped_steps > max_skipped)
      throw Error("gave up after " + std::to_string(m.skipped_steps) + " skipped steps with non-finite gradients");
  } else {
    TimelineScope t("optimizer step", "compute");
    m.opt.step();
  }
  if (!std::isfinite(loss)) loss = 0;  // skip mode: kept out of the reported mean
  ++step_;
  m.sums[0] += loss * static_cast<double>(m.local_count);
  m.sums[1] += static_cast<double>(m.local_count);
  if (m.progress) {
    ++m.progress_base;
    m.progress->update(m.progress_base, static_cast<int64_t>(m.sums[1]) * size(), loss);
  }
  m.first_step_done();
  if (m.status.active() && m.root()) {
    const int64_t n = static_cast<int64_t>(m.train->size());
    m.status.step(m.o.name, size(), global_batch_, epoch_, m.o.epochs, step_, epoch_ * n + m.loader->position(),
                  m.o.epochs * n, ddp_stats().exposed_comm_s);
  }
  if (m.o.checkpoint_every > 0 && step_ % m.o.checkpoint_every == 0) m.commit(nullptr, 0);
  if (m.control && step_ % m.o.control_every == 0) {
    if (const auto next = m.control->poll(*m.world)) {
      if (next->stop)
        m.stop();
      else
        m.rescale(*next);
    }
  }
}

std::string Job::commit() { return impl_->commit(nullptr, 0); }

void Job::sync() {
  impl_->send_state(1, global_batch_);
}

void Job::on_reset(std::function<void(const ResetInfo&)> callback) { impl_->callbacks.push_back(std::move(callback)); }

}  // namespace edp::elastic
