// Training driver for the classifier examples (see classifier.h). Runs unchanged as one process
// or under `mpirun -np N`: each rank trains on its share of every global batch
// (DistributedSampler) and DistributedDataParallel averages the gradients; rank 0 reports.
#include "common/classifier.h"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <iostream>
#include <optional>

#include "edp/backend/ops.h"
#include "edp/core/stopwatch.h"
#include "edp/comm/agree.h"
#include "edp/comm/colocated.h"
#include "edp/comm/stall.h"
#include "edp/config.h"
#include "edp/core/error.h"
#include "edp/core/log.h"
#include "edp/comm/communicator.h"
#include "edp/core/threads.h"
#include "edp/comm/nccl.h"
#include "edp/cuda/runtime.h"
#include "edp/data/dataset.h"
#include "edp/data/distributed_sampler.h"
#include "edp/data/loader.h"
#include "edp/ddp/ddp.h"
#include "edp/elastic/elastic.h"
#include "edp/launch/placement.h"
#include "edp/nn/init.h"
#include "edp/optim/optimizer.h"
#include "edp/optim/schedule.h"
#include "edp/train/checkpoint.h"
#include "edp/train/evaluate.h"
#include "edp/train/options.h"
#include "edp/train/progress.h"
#include "edp/core/knobs.h"
#include "edp/core/timeline.h"

namespace edp::examples {

namespace {
// Wall-clock seconds (for the rescale timestamps that bench/rescale.sh reads).
double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The shortest text that reads back as `d`.
std::string shortest(double d) {
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}
// A number written another way ("0.05", "5e-2", "0.050000") compares equal.
std::string canonical(const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || !end || *end != '\0') return v;
  return shortest(d);
}

// Flags that must be numbers in range: refused before anything is loaded.
void check_hyperparameters(const train::Options& o) {
  const double lr = o.f64("lr"), momentum = o.f64("momentum"), wd = o.f64("weight-decay");
  EDP_CHECK(std::isfinite(lr) && lr > 0, "--lr must be a finite number > 0, got ", o.str("lr"));
  EDP_CHECK(std::isfinite(momentum) && momentum >= 0 && momentum < 1, "--momentum must be in [0, 1), got ",
            o.str("momentum"));
  EDP_CHECK(std::isfinite(wd) && wd >= 0, "--weight-decay must be a finite number >= 0, got ", o.str("weight-decay"));
  EDP_CHECK(o.i64("warmup-steps") >= 0, "--warmup-steps must be >= 0");
  EDP_CHECK(o.i64("threads") >= 1, "--threads must be >= 1");
  EDP_CHECK(o.i64("workers") >= 0, "--workers must be >= 0");
  EDP_CHECK(o.i64("keep-checkpoints") >= 1, "--keep-checkpoints must be >= 1");
  const double t = o.f64("comm-timeout");
  EDP_CHECK(std::isfinite(t) && t >= 0, "--comm-timeout must be a finite number of seconds >= 0, got ",
            o.str("comm-timeout"));
}

int train(comm::Communicator& world, const train::Options& o, const ClassifierSpec& spec) {
  const int W = world.size(), rank = world.rank();
  const bool root = rank == 0;
  set_num_threads(static_cast<int>(o.i64("threads")));  // more than the cores: a warning, and the cores
  const int threads = num_threads();
  // One rank per GPU: "auto" and "cuda" pick the GPU by local rank.
  const std::string dev_arg = o.str("device");
  Device device = dev_arg == "auto" ? (cuda::available() ? Device::cuda(0) : Device::cpu())
                                    : Device::parse(dev_arg);
  EDP_CHECK(device.is_cpu() || cuda::available(), "--device ", dev_arg, ": ", cuda::unavailable_reason());
  if (device.is_cuda() && (dev_arg == "auto" || dev_arg == "cuda"))
    device = Device::cuda(world.local_rank() % cuda::device_count());
  if (device.is_cuda()) cuda::set_device(device.index);
  const int64_t epochs = o.i64("epochs");
  int64_t batch = o.i64("batch");
  EDP_CHECK(epochs >= 1 && batch >= 1, "--epochs and --batch must be >= 1");
  check_hyperparameters(o);
  comm::set_comm_timeout(o.f64("comm-timeout"));
  const std::string on_nonfinite = o.str("on-nonfinite");
  EDP_CHECK(on_nonfinite == "stop" || on_nonfinite == "skip", "--on-nonfinite must be stop or skip, got '",
            on_nonfinite, "'");
  const uint64_t seed = static_cast<uint64_t>(o.i64("seed"));
  // Checkpoints (--checkpoint-dir): the newest whole one is read first, because a job stopped
  // for a rescale recorded the global batch it is to continue with ("next.global_batch").
  std::unique_ptr<train::CheckpointDir> ckpt;
  std::optional<train::Checkpoint> resume;
  std::string resume_path;
  if (!o.str("checkpoint-dir").empty()) {
    ckpt = std::make_unique<train::CheckpointDir>(o.str("checkpoint-dir"), static_cast<int>(o.i64("keep-checkpoints")));
    resume = ckpt->latest(&resume_path);
    if (resume && resume->meta.count("next.global_batch")) {
      const int64_t gb = resume->int_at("next.global_batch");
      EDP_CHECK(gb % W == 0, "the checkpoint ", resume_path, " asks for a global batch of ", gb,
                ", which ", W, " rank(s) cannot split evenly");
      batch = gb / W;
    }
  }
  const int64_t global_batch = batch * W;
  const double lr = optim::scale_lr(o.f64("lr"), 64, global_batch, o.str("lr-scaling"));
  Timeline::get().open_from_env(rank, W);

  std::shared_ptr<data::TensorDataset> train_set, test_set;
  if (spec.load) {
    std::tie(train_set, test_set) = spec.load(o.str("data"));
  } else {
    train_set = data::load_fashion_mnist(o.str("data"), "train");
    test_set = data::load_fashion_mnist(o.str("data"), "test");
  }
  EDP_CHECK(o.i64("limit") >= 0, "--limit must be >= 0");
  if (o.i64("limit") > 0) train_set = train_set->head(o.i64("limit"));
  EDP_CHECK(train_set->size() > 0, "the training set in ", o.str("data"), " is empty: nothing to train on");
  EDP_CHECK(test_set->size() > 0, "the test set in ", o.str("data"), " is empty: nothing to evaluate on");

  manual_seed(seed);
  auto model = spec.build();
  model->set_input_grad(false);
  model->to(device);
  // GPU gradients are reduced by NCCL (ncclUniqueId sent over `world`), or, when edprun put
  // several ranks on this GPU (--ranks-per-gpu K, EDP_GPU_RANKS > 1), by the colocated
  // communicator (CUDA IPC inside the GPU, NCCL between GPUs); CPU ones over `world`.
  std::unique_ptr<comm::Communicator> gpu_comm;
  if (device.is_cuda())
    gpu_comm = launch::placement_from_env().gpu_ranks > 1 ? comm::make_colocated_communicator(world)
                                                          : comm::make_nccl_communicator(world, device.index);
  ddp::DistributedDataParallel dmodel(model, gpu_comm ? *gpu_comm : world,
                                      {.bucket_cap_bytes = o.i64("bucket-cap-mb") << 20});
  std::unique_ptr<cuda::AsyncUploader> uploader;
  if (device.is_cuda()) uploader = std::make_unique<cuda::AsyncUploader>(device);
  optim::SGD opt(model->parameters(), {.lr = lr, .momentum = o.f64("momentum"),
                                       .weight_decay = o.f64("weight-decay"), .nesterov = o.f64("momentum") > 0});

  auto sampler = std::make_shared<data::DistributedSampler>(
      train_set->size(), seed, W, rank, data::DistributedSamplerOptions{.batch_size = batch});
  data::DataLoader loader(train_set, sampler,
                          {.batch_size = batch, .drop_last = false,
                           .workers = static_cast<int>(o.i64("workers")), .prefetch = 4});
  sampler->set_epoch(0);
  const int64_t steps_per_epoch = sampler->steps_remaining();
  const int64_t total_steps = steps_per_epoch * epochs;
  optim::WarmupLR schedule(std::make_shared<optim::CosineLR>(lr, total_steps),
                           std::min<int64_t>(o.i64("warmup-steps"), total_steps));

  // One run, one configuration: every flag except those that may differ per rank, and what
  // was derived from them and from the files each rank read.
  {
    std::vector<comm::Setting> settings;
    for (const auto& [k, v] : o.values())
      if (k != "threads" && k != "workers" && k != "data" && k != "device" && k != "control-file" &&
          k != "comm-timeout")
        settings.emplace_back("--" + k, canonical(v));
    settings.emplace_back("batch per rank", std::to_string(batch));
    settings.emplace_back("global batch", std::to_string(global_batch));
    settings.emplace_back("learning rate after scaling", shortest(lr));
    settings.emplace_back("training samples", std::to_string(train_set->size()));
    settings.emplace_back("test samples", std::to_string(test_set->size()));
    settings.emplace_back("model parameters", std::to_string(model->num_parameters()));
    settings.emplace_back("newest checkpoint", resume ? resume_path : "none");
    settings.emplace_back("build arithmetic", std::string(EDP_CPU_FLAGS) + " / " + EDP_COMPILER);
    comm::check_agreement(world, settings, spec.name);
  }

  if (root)
    std::fprintf(stderr,
                 "%s: %lld train / %lld test samples, %lld parameters, %d rank(s) x batch %lld "
                 "(global %lld), lr %.4g (%s scaling), %d thread(s) per rank, %zu gradient bucket(s), "
                 "on %s\n",
                 spec.name.c_str(), static_cast<long long>(train_set->size()),
                 static_cast<long long>(test_set->size()),
                 static_cast<long long>(model->num_parameters()), W,
                 static_cast<long long>(batch), static_cast<long long>(global_batch), lr,
                 o.str("lr-scaling").c_str(), threads, dmodel.buckets().size(), device.str().c_str());

  // Resume from the checkpoint read above; rank 0 commits every --checkpoint-every steps (0: at
  // the end of every epoch). Every rank reads the same file, so the replicas stay identical; the
  // sampler re-shards the rest of the epoch if the world size changed.
  int64_t step = 0, start_epoch = 0;
  const int64_t ckpt_every = o.i64("checkpoint-every"), stop_after = o.i64("stop-after-steps");
  EDP_CHECK(ckpt_every >= 0 && stop_after >= 0, "--checkpoint-every and --stop-after-steps must be >= 0");
  bool rescaled = false;
  if (resume) {
    train::restore(*resume, *model, &opt, sampler.get());
    step = opt.steps();
    start_epoch = sampler->epoch() + (sampler->epoch_done() ? 1 : 0);
    rescaled = resume->meta.count("next.global_batch") != 0;
    if (root)
      std::fprintf(stderr, "%s: resumed from %s: step %lld, epoch %lld, %lld samples into it (saved by %s rank(s)) (t=%.3f)\n",
                   spec.name.c_str(), resume_path.c_str(), static_cast<long long>(step),
                   static_cast<long long>(sampler->epoch() + 1), static_cast<long long>(sampler->position()),
                   resume->meta.count("world_size") ? resume->at("world_size").c_str() : "?", wall_seconds());
    if (const std::string diff = train::build_difference(*resume); root && !diff.empty())
      std::fprintf(stderr, "%s: note: the checkpoint was written by another build (%s): training continues "
                   "correctly, but not bitwise as the uninterrupted run would have\n", spec.name.c_str(), diff.c_str());
    resume.reset();  // the host copy of the state is no longer needed
  }
  // A rescale request commits a checkpoint that names the size to continue at.
  auto commit = [&](const elastic::RescaleRequest* next) -> std::string {
    if (!ckpt || !root) return "";
    train::Checkpoint c = train::capture(*model, &opt, sampler.get());
    c.meta["model"] = spec.name;
    c.meta["world_size"] = std::to_string(W);
    c.meta["global_batch"] = std::to_string(global_batch);
    c.meta["step"] = std::to_string(step);
    if (next) {
      c.meta["next.workers"] = std::to_string(next->workers);
      c.meta["next.global_batch"] = std::to_string(next->global_batch);
    }
    return ckpt->commit(step, c);
  };
  // The elastic control file (--control-file, set by edprun --control-file as EDP_CONTROL_FILE).
  std::unique_ptr<elastic::ElasticControl> control;
  const int64_t control_every = o.i64("control-every");
  if (!o.str("control-file").empty()) {
    EDP_CHECK(ckpt, "--control-file needs --checkpoint-dir: a rescale restarts the job from a checkpoint");
    EDP_CHECK(control_every >= 1, "--control-every must be >= 1");
    // Requests are checked before any rank acts on them: the worker counts the launcher can run
    // (EDP_ALLOWED_WORKERS, from edprun) and a global batch no larger than the training set.
    elastic::ControlLimits limits = elastic::ControlLimits::from_env();
    limits.max_global_batch = train_set->size();
    control = std::make_unique<elastic::ElasticControl>(o.str("control-file"), W, global_batch, limits);
  }

  nn::SoftmaxCrossEntropy ce;
  int64_t skipped_steps = 0;
  const int64_t max_skipped = std::max<int64_t>(10, total_steps / 10);
  double train_seconds = 0, last_epoch_loss = 0;
  int64_t samples_seen = 0;
  train::EvalResult test{};
  for (int64_t epoch = start_epoch; epoch < epochs; ++epoch) {
    sampler->set_epoch(epoch);
    loader.start_epoch(epoch);
    const int64_t steps = sampler->steps_remaining();
    train::Progress progress("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs),
                             steps, root);
    world.barrier();  // time the epoch from a common start
    Stopwatch sw;
    double sums[2] = {0, 0};  // loss·samples, samples (this rank)
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t local = sampler->step_local_count(0), global = sampler->step_global_count(0);
      // The schedule's position counts the epoch's samples at this run's global batch, so that
      // it stays right when a job resumes at another world size (step numbers then differ).
      opt.set_lr(schedule.lr(epoch * steps_per_epoch + sampler->position() / global_batch));
      opt.zero_grad();
      comm::set_stall_step(step);
      dmodel.set_step_weight(static_cast<double>(local) / static_cast<double>(global));
      double loss = 0;
      if (local > 0) {
        data::Batch b;
        EDP_CHECK(loader.next(b) && b.size() == local, "data loader and sampler disagree at step ", k);
        // GPU: pinned staging + cudaMemcpyAsync on a copy stream, ordered by an event.
        const Tensor x = uploader ? uploader->upload(b.x) : b.x;
        const Tensor y = uploader ? uploader->upload(b.y) : b.y;
        loss = ce.forward(dmodel.forward(x), y);
        dmodel.backward(ce.backward());
      } else {
        dmodel.sync_without_backward();  // uneven last step: nothing here, still reduce
      }
      // Numerical guard: a non-finite loss on this rank, or a non-finite reduced gradient (the
      // same on every rank, so every rank decides alike), stops the job naming the step and the
      // first parameter affected — or, with --on-nonfinite skip, skips the update.
      // The scan is one pass over the gradients on the CPU, but one host-device sync per
      // parameter on a GPU: there it runs every 50 steps (and on a non-finite loss) unless
      // skipping was asked for, which must see every step.
      const bool scan = device.is_cpu() || on_nonfinite == "skip" || step % 50 == 0 || !std::isfinite(loss);
      const nn::Parameter* bad = scan ? nn::first_nonfinite_grad(model->parameters()) : nullptr;
      if (on_nonfinite == "stop") {
        EDP_CHECK(std::isfinite(loss), "the loss is ", loss, " at step ", step + 1, " (epoch ", epoch + 1,
                  "): the training diverged; lower --lr or use --on-nonfinite skip");
        EDP_CHECK(!bad, "the gradient of ", bad ? bad->name : "", " is not finite at step ", step + 1, " (epoch ",
                  epoch + 1, "): the training diverged; lower --lr or use --on-nonfinite skip");
      }
      if (bad) {
        if (root) log::warn("step ", step + 1, ": the gradient of ", bad->name, " is not finite; skipping the update");
        ++skipped_steps;
      } else {
        TimelineScope t("optimizer step", "compute");
        opt.step();
      }
      if (!std::isfinite(loss)) loss = 0;  // skip mode: kept out of the reported mean
      sampler->advance();
      ++step;
      sums[0] += loss * static_cast<double>(local);
      sums[1] += static_cast<double>(local);
      progress.update(k + 1, static_cast<int64_t>(sums[1]) * W, loss);
      if (rescaled) {
        if (root) std::fprintf(stderr, "%s: first step at the new size done (t=%.3f)\n", spec.name.c_str(), wall_seconds());
        rescaled = false;
      }
      if (ckpt_every > 0 && step % ckpt_every == 0) commit(nullptr);
      if (skipped_steps > max_skipped)
        throw Error("gave up after " + std::to_string(skipped_steps) + " skipped steps with non-finite gradients");
      if (control && step % control_every == 0) {
        if (const auto next = control->poll(world)) {
          if (root)
            std::fprintf(stderr, "%s: rescale requested at step %lld: %d -> %d worker(s), global batch %lld -> %lld (t=%.3f)\n",
                         spec.name.c_str(), static_cast<long long>(step), W, next->workers,
                         static_cast<long long>(global_batch), static_cast<long long>(next->global_batch), wall_seconds());
          // edprun restarts the job at the size recorded here, not at what the control file says
          // by then (the file may have changed in between). Both are written before the barrier:
          // mpirun ends the other ranks as soon as one exits with 75.
          const std::string written = commit(&*next);
          if (root) elastic::record_rescale(*next, step, written);
          world.barrier();
          return elastic::kRescaleExitCode;
        }
      }
      if (stop_after > 0 && step >= stop_after) {
        // A stand-in for a job that is stopped (preempted, crashed) here: the test of resuming.
        if (root) std::fprintf(stderr, "%s: stopping after step %lld (--stop-after-steps)\n", spec.name.c_str(),
                               static_cast<long long>(step));
        world.barrier();
        return 3;
      }
    }
    if (ckpt_every == 0) commit(nullptr);
    const double secs = sw.seconds();
    world.allreduce(sums, sums, 2, DType::F64, comm::ReduceOp::Sum);
    train_seconds += secs;
    samples_seen += static_cast<int64_t>(sums[1]);
    last_epoch_loss = sums[0] / std::max(1.0, sums[1]);
    progress.finish();
    if (!o.flag("no-eval") || epoch + 1 == epochs) {
      test = train::evaluate(*model, *test_set, world);
      if (root)
        std::fprintf(stderr, "epoch %lld: train loss %.4f  test loss %.4f  test acc %.4f  %.0f samples/s\n",
                     static_cast<long long>(epoch + 1), last_epoch_loss, test.loss, test.accuracy,
                     sums[1] / secs);
    }
  }
  const ddp::DDPStats& st = dmodel.stats();
  const double step_s = train_seconds / std::max<int64_t>(1, st.steps);
  const double exposed = st.exposed_comm_s / std::max<int64_t>(1, st.steps);
  const double rss = world.allreduce_value<double>(train::peak_rss_bytes() / 1048576.0, comm::ReduceOp::Max);
  if (root)
    std::printf(
        "{\"model\": \"%s\", \"world_size\": %d, \"threads\": %d, \"batch\": %lld, "
        "\"global_batch\": %lld, \"epochs\": %lld, \"lr\": %.4g, \"samples_per_s\": %.1f, "
        "\"test_acc\": %.4f, \"final_loss\": %.4f, \"train_seconds\": %.2f, "
        "\"step_ms\": %.3f, \"comm_exposed_ms\": %.3f, \"comm_exposed_share\": %.4f, "
        "\"comm_ms\": %.3f, \"peak_rss_mb_per_rank\": %.1f, \"cpu_conv\": \"%s\"}\n",
        spec.name.c_str(), W, threads, static_cast<long long>(batch),
        static_cast<long long>(global_batch), static_cast<long long>(epochs), lr,
        train_seconds > 0 ? samples_seen / train_seconds : 0.0, test.accuracy, last_epoch_loss, train_seconds, 1e3 * step_s,
        1e3 * exposed, step_s > 0 ? exposed / step_s : 0.0, 1e3 * st.comm_s / std::max<int64_t>(1, st.steps), rss,
        ops::cpu_conv_name());
  Timeline::get().close();
  return 0;
}
}  // namespace

int run_classifier(int argc, char** argv, const ClassifierSpec& spec) {
  // EDP_NUM_THREADS (set by edprun) wins; otherwise the ranks on one host share its cores.
  const comm::LaunchInfo li = comm::launch_info();
  const int default_threads = knobs::is_set("EDP_NUM_THREADS")
                                  ? num_threads()
                                  : std::max(1, available_cores() / std::max(1, li.local_size));
  train::Options o(spec.name, spec.description);
  o.add("epochs", std::to_string(spec.default_epochs), "training epochs")
      .add("batch", "64", "batch size per rank (global batch = batch x ranks)")
      .add("lr", std::to_string(spec.default_lr), "learning rate for a global batch of 64 (SGD, Nesterov)")
      .add("lr-scaling", "linear", "how the LR follows the global batch: none, linear or sqrt")
      .add("momentum", "0.9", "SGD momentum")
      .add("weight-decay", "5e-4", "L2 weight decay")
      .add("warmup-steps", "100", "linear LR warmup steps, then cosine decay to 0")
      .add("threads", std::to_string(default_threads), "CPU threads per rank")
      .add("data", spec.default_data, "directory with the data set's files")
      .add("seed", "42", "seed for initialisation and shuffling")
      .add("limit", "0", "use only the first N training samples (0 = all)")
      .add("workers", "1", "data-loader threads per rank")
      .add("bucket-cap-mb", knobs::find("EDP_BUCKET_CAP_MB").def, "DDP gradient bucket cap in MiB")
      .add("device", "auto", "auto (cuda when a GPU is visible, else cpu), cpu, cuda or cuda:N")
      .add("checkpoint-dir", "", "keep checkpoints here and resume from the newest one (empty: none)")
      .add("checkpoint-every", "0", "commit a checkpoint every N optimizer steps (0: at the end of every epoch)")
      .add("keep-checkpoints", "2", "how many checkpoints to keep")
      .add("stop-after-steps", "0", "stop with exit code 3 after N steps, as a preempted job would (testing)")
      .add("control-file", "", "elastic control file: {\"workers\": W, \"global_batch\": B} asks for a restart at that size (edprun --control-file)")
      .add("control-every", "1", "look at the control file every N steps")
      .add("comm-timeout", knobs::find("EDP_COMM_TIMEOUT").def,
           "seconds a collective may wait for the other ranks before the job ends with exit code 76 naming "
           "them (0: forever)")
      .add("on-nonfinite", "stop", "a NaN/inf loss or gradient: stop (an error naming the step and parameter) or "
           "skip (the update; gives up after max(10, 10% of the steps))")
      .add_flag("no-eval", "skip the per-epoch test-set evaluation (the final one still runs)");
  o.parse(argc, argv);
  return comm::run_main(argc, argv, [&](comm::Communicator& world) { return train(world, o, spec); });
}

}  // namespace edp::examples
