// elastic::Job (edp/elastic/job.h): construction and resume, the training loop's calls. The
// state, the changes of size and the guard are in job_state.cpp, job_rescale.cpp, job_steps.cpp.
#include "elastic/job_impl.h"

namespace edp::elastic {

Job::Job(comm::Communicator& world, std::shared_ptr<nn::Module> model, optim::Optimizer& opt,
         std::shared_ptr<const data::Dataset> train_set, JobOptions options)
    : impl_(std::make_unique<Impl>(*this, opt, std::move(train_set), std::move(options))), model_(std::move(model)) {
  Impl& m = *impl_;
  JobOptions& o = m.o;
  EDP_CHECK(model_ != nullptr && m.train != nullptr, "elastic::Job needs a model and a training set");
  m.check_options();
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
  if (!o.control_file.empty()) m.make_control();
  const comm::CpuMask own = comm::affinity();
  m.enter(nullptr, global_batch_, joined ? &own : nullptr);  // a new rank takes part in the re-binding
  m.land_state();  // a new rank of a sharded job: its part of the optimizer state
  if (resume) m.land_checkpoint(*resume, resume_path);
  if (!joined && !resume) {
    m.start_from_root();  // a fresh start: every rank begins from rank 0's parameters
  } else {
    m.check_replicas(joined ? "after joining" : "after resuming");
  }
  m.note_start(resume ? &*resume : nullptr, resume_path, joined);
}

void Job::Impl::check_options() {
  EDP_CHECK(train->size() > 0, o.name, ": the training set is empty: nothing to train on");
  EDP_CHECK(o.epochs >= 1, o.name, ": epochs must be >= 1, got ", o.epochs);
  EDP_CHECK(o.global_batch >= 1, o.name, ": the global batch must be >= 1, got ", o.global_batch);
  EDP_CHECK(o.lr_base_batch >= 1, o.name, ": lr_base_batch must be >= 1");
  EDP_CHECK(o.lr >= 0, o.name, ": the learning rate must be >= 0 (0: the optimizer's), got ", o.lr);
  if (o.lr == 0) o.lr = opt.lr();  // given once, to the optimizer
  EDP_CHECK(o.max_micro_batch >= 0, o.name, ": max_micro_batch must be >= 0, got ", o.max_micro_batch);
  EDP_CHECK(o.checkpoint_every >= 0 && o.keep_checkpoints >= 1 && o.control_every >= 1 && o.warmup_steps >= 0,
            o.name, ": checkpoint_every and warmup_steps must be >= 0, keep_checkpoints and control_every >= 1");
  EDP_CHECK(o.divergence_factor == 0 || o.divergence_factor > kGuardRecovered, o.name,
            ": the divergence factor must be 0 (no guard) or above ", kGuardRecovered,
            " (a loss that merely stays at its level would count as diverging), got ", o.divergence_factor);
  EDP_CHECK(o.on_nonfinite == "stop" || o.on_nonfinite == "skip", o.name,
            ": on_nonfinite must be stop or skip, got '", o.on_nonfinite, "'");
  guard = DivergenceGuard(o.divergence_factor);
}

void Job::Impl::make_control() {
  JobOptions& o = this->o;
  EDP_CHECK(ckpt || mode != "restart", o.name,
            ": a control file with EDP_RESCALE_MODE=restart needs a checkpoint directory: the job restarts from it");
  ControlLimits limits = ControlLimits::from_env();
  const int64_t first = origin_global_batch, samples = static_cast<int64_t>(train->size());
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
  control = std::make_unique<ElasticControl>(o.control_file, world->size(), job.global_batch_, limits);
}

void Job::Impl::note_start(const train::Checkpoint* resume, const std::string& resume_path, bool joined) {
  if (root()) {
    if (resume) {
      log::info(o.name, ": resumed from ", resume_path, ": step ", job.step_, ", epoch ", loader->epoch() + 1, ", ",
                loader->position(), " samples into it (saved by ",
                resume->meta.count("world_size") ? resume->at("world_size") : std::string("?"), " rank(s))");
      if (job.epoch_ >= o.epochs)
        log::info(o.name, ": the training is already complete (all ", o.epochs, " epoch(s), step ", job.step_,
                  "): nothing to train; the model is the checkpoint's");
      if (const std::string diff = train::build_difference(*resume); !diff.empty())
        log::warn(o.name, ": the checkpoint was written by another build (", diff,
                  "): training continues correctly, but not bitwise as the uninterrupted run would have");
    }
    MembershipEvent start = event_now("start");
    start.threads = threads;
    append_event(start);
  }
  job.complete_at_start_ = resume && job.epoch_ >= o.epochs;
  if (resume && resume->meta.count("next.requested_t")) {
    MembershipEvent ev;
    ev.event = "rescale";
    ev.mode = "restart";
    ev.from_workers = resume->meta.count("world_size") ? static_cast<int>(resume->int_at("world_size")) : 0;
    ev.workers = job.size();
    ev.from_global_batch = resume->meta.count("global_batch") ? resume->int_at("global_batch") : 0;
    ev.global_batch = job.global_batch_;
    ev.requested_t = std::strtod(resume->at("next.requested_t").c_str(), nullptr);
    ev.threads = threads;
    pending = ev;
    last_change = "at step " + std::to_string(job.step_) + ", by restart: " + std::to_string(ev.from_workers) +
                  " -> " + std::to_string(ev.workers) + " worker(s), global batch " +
                  std::to_string(ev.from_global_batch) + " -> " + std::to_string(ev.global_batch) +
                  ", learning rate now " + detail::concat(job.lr_);
  }
  if (joined) {
    last_change = "at step " + std::to_string(job.step_) + ", in place: this rank joined the job at " +
                  std::to_string(job.size()) + " worker(s), global batch " + std::to_string(job.global_batch_);
    for (auto& cb : callbacks) cb({0, job.size(), 0, job.global_batch_, true});
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
  const nn::Parameter* nonfinite = scan ? m.ddp->first_nonfinite_grad() : nullptr;
  std::string bad_name = nonfinite ? nonfinite->name : "";
  if (scan && m.ddp->sharded()) {
    // Sharded, each rank sees its parts of the averaged gradients (a non-finite gradient on any
    // rank reaches the sums it is part of): any rank's finding makes every rank decide alike.
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
    m.guard.add(loss * static_cast<double>(m.local_count), static_cast<double>(m.local_count));
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
