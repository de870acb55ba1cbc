// elastic::Job's state (job_impl.h): capture, restore, checkpoints, the state new ranks receive, enter().
#include "elastic/job_impl.h"

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

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace

void Job::Impl::unshard() {
  if (ddp && ddp->sharded()) ddp->gather_optimizer_state(opt);
}

void Job::Impl::release_unsharded() {
  if (ddp && ddp->sharded()) opt.release_state();
}

void Job::Impl::land_state() {
  if (!moving) return;
  ddp::StateShard s = std::move(*moving);
  moving.reset();
  if (moving_from > 0) s = ddp::reshard(*world, ddp->layout(), std::move(s), moving_from, size());
  moving_from = 0;
  ddp->put_optimizer_state(std::move(s), opt);
}

train::Checkpoint Job::Impl::capture(const RescaleRequest* next, double requested_t, bool optimizer_tensors) const {
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

void Job::Impl::restore(const train::Checkpoint& c) {
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
  guard.resume_at(job.step_);
}

std::string Job::Impl::number(double v) {  // the shortest text that reads back as v
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::vector<comm::Setting> Job::Impl::identity() const {
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

void Job::Impl::check_identity(const train::Checkpoint& c, const std::string& path) const {
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

void Job::Impl::land_checkpoint(const train::Checkpoint& c, const std::string& path) {
  if (!train::is_sharded(c)) return;
  const int w = ddp->shard_world(), r = ddp->shard_rank();
  ddp->put_optimizer_state(train::read_shards(c, path, ddp->layout().runs(w, r), w, r, job.model_->parameters()), opt);
}

std::string Job::Impl::commit(const RescaleRequest* next, double requested_t) {
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

void Job::Impl::send_state(int first, int64_t global_batch, Meet meet) {
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

void Job::Impl::start_from_root() {
  if (opt.has_state()) {  // a caller's optimizer that has stepped already: its state goes too
    job.sync();
    return;
  }
  TimelineScope t("elastic state broadcast", "comm");
  comm::StallLabel label("elastic: rank 0's parameters to every rank at the start");
  auto send = [&](Tensor& v) {
    if (v.numel() == 0) return;
    if (v.device().is_cpu()) {
      world->broadcast(v.raw(), v.numel(), v.dtype(), 0);
      return;
    }
    Tensor host = v.to(Device::cpu());  // the world communicator reduces host memory
    world->broadcast(host.raw(), host.numel(), host.dtype(), 0);
    if (!root()) v.copy_from(host);
  };
  for (nn::Parameter* p : job.model_->parameters()) send(p->value);
  for (nn::Buffer* b : job.model_->buffers()) send(b->value);
  std::vector<int64_t> counters;
  for (const auto& [name, c] : job.model_->counters()) counters.push_back(static_cast<int64_t>(*c));
  if (!counters.empty()) {
    world->broadcast(counters.data(), static_cast<int64_t>(counters.size()), DType::I64, 0);
    size_t i = 0;
    for (const auto& [name, c] : job.model_->counters()) *c = static_cast<uint64_t>(counters[i++]);
  }
}

void Job::Impl::warm_up() {
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

void Job::Impl::take_lock(comm::Communicator& w) {
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

void Job::Impl::check_same_checkpoint(comm::Communicator& w, const train::Checkpoint* c, const std::string& path) {
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

void Job::Impl::make_loader(int64_t global_batch) {
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

void Job::Impl::configure_schedule() {
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

void Job::Impl::enter(std::unique_ptr<comm::Communicator> nw, int64_t global_batch, const comm::CpuMask* before) {
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

void Job::Impl::check_replicas(const std::string& when) {
  // Sharded, the optimizer state differs from rank to rank by design; its steps are compared.
  const uint64_t h = fnv1a(train::encode_checkpoint(capture(nullptr, 0, !sharding())));
  comm::check_agreement(*world, {{"model and optimizer state digest", hex(h)}}, o.name + " replicas " + when);
}

}  // namespace edp::elastic
