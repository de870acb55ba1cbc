// elastic::Job's changes of size (job_impl.h): in place, by restart, and the stop.
#include "elastic/job_impl.h"

namespace edp::elastic {

void Job::Impl::rescale(const RescaleRequest& next) {
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

double Job::Impl::remaining_s() const {
  const int64_t left = o.epochs * static_cast<int64_t>(train->size()) - std::max<int64_t>(0, samples_done());
  const double step = std::max(typical_step(), change_typical_s);  // just after a change: the step before it
  return static_cast<double>(std::max<int64_t>(0, left)) / static_cast<double>(job.global_batch_) * step;
}

bool Job::Impl::grow_is_fast(int W, int W2) const {
  if (o.device.is_cuda() || knobs::get_string("EDP_HOST_SHM") != "off" || !restart_pays()) return true;
  const auto hosts = knobs::launch_hosts();
  if (hosts.empty()) return false;
  for (int r = W; r < W2; ++r)
    for (int q = 0; q < W; ++q)
      if (knobs::fill_slot(hosts, W2, r).host == knobs::fill_slot(hosts, W2, q).host) return false;
  return true;
}

void Job::Impl::restart_at(const RescaleRequest& rec, double requested_t) {
  guard_partial("the change of size");
  const std::string written = commit(&rec, requested_t);
  if (root()) record_rescale(rec, job.step_, written);
  world->barrier();
  job.exit_code_ = kRescaleExitCode;
  if (root())
    log::info(o.name, ": stopping to be restarted at ", rec.workers, " worker(s) (exit code ", kRescaleExitCode, ")");
}

void Job::Impl::stop() {
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

bool Job::Impl::in_place(int W2, int64_t gb2, double requested_t) {
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

MembershipEvent Job::Impl::change_event(int W2, int64_t gb2, double requested_t) const {
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

void Job::Impl::fold_sums() {
  world->allreduce(sums, sums, 2, DType::F64, comm::ReduceOp::Sum);
  if (rank() != 0) sums[0] = sums[1] = 0;
}

void Job::Impl::finish_change(std::unique_ptr<comm::Communicator> nw, MembershipEvent ev, const comm::CpuMask& cores, double lr_before, double begun) {
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

void Job::Impl::poll_grow(bool wait) {
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

void Job::Impl::join_grow() {
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

void Job::Impl::leave_slow_path() {
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

void Job::Impl::leave() {
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

}  // namespace edp::elastic
