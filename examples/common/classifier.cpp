// Training driver for the classifier examples (see classifier.h): flags, data, model and the
// report. Everything data-parallel and elastic — checkpoints, resuming at any size, rescaling on
// request, in place or by restart — is elastic::Job's (edp/elastic/job.h). Runs unchanged as one
// process, under `mpirun -np N` or under edprun.
#include "common/classifier.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tuple>

#include "edp/backend/ops.h"
#include "edp/comm/agree.h"
#include "edp/comm/communicator.h"
#include "edp/comm/stall.h"
#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/core/threads.h"
#include "edp/core/timeline.h"
#include "edp/cuda/runtime.h"
#include "edp/data/dataset.h"
#include "edp/elastic/job.h"
#include "edp/nn/init.h"
#include "edp/optim/optimizer.h"
#include "edp/train/evaluate.h"
#include "edp/train/options.h"
#include "edp/train/progress.h"

namespace edp::examples {

namespace {
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
  set_num_threads(static_cast<int>(o.i64("threads")));  // more than the cores: a warning, and the cores
  // One rank per GPU: "auto" and "cuda" pick the GPU by the rank's place on its host.
  const std::string dev_arg = o.str("device");
  Device device = dev_arg == "auto" ? (cuda::available() ? Device::cuda(0) : Device::cpu()) : Device::parse(dev_arg);
  EDP_CHECK(device.is_cpu() || cuda::available(), "--device ", dev_arg, ": ", cuda::unavailable_reason());
  if (device.is_cuda() && (dev_arg == "auto" || dev_arg == "cuda"))
    device = Device::cuda(world.local_rank() % cuda::device_count());
  if (device.is_cuda()) cuda::set_device(device.index);
  EDP_CHECK(o.i64("epochs") >= 1 && o.i64("batch") >= 1, "--epochs and --batch must be >= 1");
  check_hyperparameters(o);
  comm::set_comm_timeout(o.f64("comm-timeout"));
  Timeline::get().open_from_env(world.rank(), world.size());

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

  manual_seed(static_cast<uint64_t>(o.i64("seed")));
  auto model = spec.build();
  model->set_input_grad(false);
  model->to(device);
  optim::SGD opt(model->parameters(), {.lr = o.f64("lr"), .momentum = o.f64("momentum"),
                                       .weight_decay = o.f64("weight-decay"), .nesterov = o.f64("momentum") > 0});

  // Every rank must run with the same flags, except those that may differ per rank.
  std::vector<comm::Setting> settings;
  for (const auto& [k, v] : o.values())
    if (k != "threads" && k != "workers" && k != "data" && k != "device" && k != "control-file" && k != "comm-timeout")
      settings.emplace_back("--" + k, canonical(v));
  settings.emplace_back("test samples", std::to_string(test_set->size()));
  // The elastic job: checkpoints, resume at any size, rescale on request (docs/elastic.md).
  elastic::Job job(world, model, opt, train_set,
                   {.name = spec.name,
                    .epochs = o.i64("epochs"),
                    .global_batch = o.i64("batch") * world.size(),
                    .lr = o.f64("lr"),
                    .lr_base_batch = 64,
                    .lr_scaling = o.str("lr-scaling"),
                    .warmup_steps = o.i64("warmup-steps"),
                    .seed = static_cast<uint64_t>(o.i64("seed")),
                    .loader_workers = static_cast<int>(o.i64("workers")),
                    // --threads given: that count; otherwise the threads follow the ranks on the host
                    .threads = o.source("threads") == "default" ? 0 : static_cast<int>(o.i64("threads")),
                    .checkpoint_dir = o.str("checkpoint-dir"),
                    .keep_checkpoints = static_cast<int>(o.i64("keep-checkpoints")),
                    .checkpoint_every = o.i64("checkpoint-every"),
                    .control_file = o.str("control-file"),
                    .control_every = o.i64("control-every"),
                    .max_worker_batch = 0,
                    .max_micro_batch = o.i64("max-micro-batch"),
                    .rescale_mode = "",
                    .device = device,
                    .bucket_cap_bytes = o.i64("bucket-cap-mb") << 20,
                    .zero_stage = static_cast<int>(o.i64("zero")),
                    .on_nonfinite = o.str("on-nonfinite"),
                    .progress = true,
                    .settings = settings,
                    .min_global_batch = o.i64("min-global-batch"),
                    .max_global_batch = o.i64("max-global-batch"),
                    .divergence_factor = o.f64("divergence-factor"),
                    // How long, how often checkpoints are written and looked at, evaluation, the
                    // guards (the options marked run_setting() below): a resume may change them;
                    // every other flag is the training run's identity.
                    .resume_may_change = o.run_settings(),
                    .accept_config_change = o.flag("accept-config-change")});
  if (job.is_root())
    std::fprintf(stderr,
                 "%s: %lld train / %lld test samples, %lld parameters, %d rank(s) x batch %lld (global %lld), "
                 "lr %.4g (%s scaling), %d thread(s) per rank, %zu gradient bucket(s), on %s\n",
                 spec.name.c_str(), static_cast<long long>(train_set->size()),
                 static_cast<long long>(test_set->size()), static_cast<long long>(model->num_parameters()),
                 job.size(), static_cast<long long>(job.batch_per_rank()), static_cast<long long>(job.global_batch()),
                 job.peak_lr(), o.str("lr-scaling").c_str(), num_threads(), job.gradient_buckets(), device.str().c_str());

  const int64_t stop_after = o.i64("stop-after-steps");
  EDP_CHECK(stop_after >= 0, "--stop-after-steps must be >= 0");
  nn::SoftmaxCrossEntropy ce;
  double train_seconds = 0;
  int64_t samples_seen = 0;
  train::EvalResult test{};
  data::Batch b;
  double flops_per_sample = 0;  // a training step's products per sample (nn::Module::forward_flops)
  while (job.next_epoch()) {
    while (job.next_batch(b)) {
      const double loss = ce.forward(job.forward(b.x), b.y);
      job.backward(ce.backward());
      if (flops_per_sample == 0 && b.x.dim(0) > 0)
        flops_per_sample = (model->forward_flops() + model->backward_flops()) / static_cast<double>(b.x.dim(0));
      job.step(loss);
      if (stop_after > 0 && job.steps() >= stop_after) {
        // A stand-in for a job that is stopped (preempted, crashed) here: the test of resuming.
        if (job.is_root()) std::fprintf(stderr, "%s: stopping after step %lld (--stop-after-steps)\n",
                                        spec.name.c_str(), static_cast<long long>(job.steps()));
        job.world().barrier();
        return 3;
      }
    }
    if (job.left() || job.exit_code() != 0) break;
    const elastic::EpochSummary& e = job.last_epoch();
    train_seconds += e.seconds;
    samples_seen += e.samples;
    if (!o.flag("no-eval") || e.epoch + 1 == o.i64("epochs")) {
      test = train::evaluate(*model, *test_set, job.world());
      if (job.is_root())
        std::fprintf(stderr, "epoch %lld: train loss %.4f  test loss %.4f  test acc %.4f  %.0f samples/s\n",
                     static_cast<long long>(e.epoch + 1), e.train_loss, test.loss, test.accuracy,
                     e.samples / std::max(1e-9, e.seconds));
    }
  }
  if (job.left() || job.exit_code() != 0) return job.exit_code();  // left in a shrink (0), 75: restart me, 78: stopped
  if (job.complete_at_start()) {
    // Nothing was left to train: the checkpoint's model, evaluated; no training figures to report.
    test = train::evaluate(*model, *test_set, job.world());
    if (job.is_root())
      std::printf("{\"model\": \"%s\", \"world_size\": %d, \"already_complete\": true, \"epochs\": %lld, "
                  "\"steps\": %lld, \"test_acc\": %.4f, \"test_loss\": %.4f, \"final_loss\": null, "
                  "\"samples_per_s\": null}\n",
                  spec.name.c_str(), job.size(), static_cast<long long>(o.i64("epochs")),
                  static_cast<long long>(job.steps()), test.accuracy, test.loss);
    return 0;
  }
  const ddp::DDPStats st = job.ddp_stats();
  const double step_s = train_seconds / std::max<int64_t>(1, st.steps);
  const double exposed = st.exposed_comm_s / std::max<int64_t>(1, st.steps);
  const double rss = job.world().allreduce_value<double>(train::peak_rss_bytes() / 1048576.0, comm::ReduceOp::Max);
  if (job.is_root())
    std::printf(
        "{\"model\": \"%s\", \"world_size\": %d, \"threads\": %d, \"batch\": %lld, "
        "\"global_batch\": %lld, \"epochs\": %lld, \"lr\": %.4g, \"samples_per_s\": %.1f, "
        "\"test_acc\": %.4f, \"final_loss\": %.4f, \"train_seconds\": %.2f, "
        "\"step_ms\": %.3f, \"comm_exposed_ms\": %.3f, \"comm_exposed_share\": %.4f, "
        "\"comm_ms\": %.3f, \"peak_rss_mb_per_rank\": %.1f, \"cpu_conv\": \"%s\", "
        "\"train_mflop_per_sample\": %.3f, \"gflops\": %.2f}\n",
        spec.name.c_str(), job.size(), num_threads(), static_cast<long long>(job.batch_per_rank()),
        static_cast<long long>(job.global_batch()), static_cast<long long>(o.i64("epochs")), job.peak_lr(),
        train_seconds > 0 ? samples_seen / train_seconds : 0.0, test.accuracy, job.last_epoch().train_loss,
        train_seconds, 1e3 * step_s, 1e3 * exposed, step_s > 0 ? exposed / step_s : 0.0,
        1e3 * st.comm_s / std::max<int64_t>(1, st.steps), rss, ops::cpu_conv_name(), flops_per_sample / 1e6,
        train_seconds > 0 ? samples_seen / train_seconds * flops_per_sample / 1e9 : 0.0);
  Timeline::get().close();
  return 0;
}
}  // namespace

int default_threads_per_rank() {
  const comm::LaunchInfo li = comm::launch_info();
  return knobs::is_set("EDP_NUM_THREADS") ? num_threads() : share_of_cores(available_cores(), li.local_size);
}

int run_classifier(int argc, char** argv, const ClassifierSpec& spec) {
  const int default_threads = default_threads_per_rank();
  train::Options o(spec.name, spec.description);
  o.add("epochs", std::to_string(spec.default_epochs), "training epochs").run_setting()
      .add("batch", "64", "batch size per rank (global batch = batch x ranks)")
      .add("lr", std::to_string(spec.default_lr), "learning rate for a global batch of 64 (SGD, Nesterov)")
      .add("lr-scaling", "linear", "how the LR follows the global batch: none, linear or sqrt")
      .add("momentum", "0.9", "SGD momentum")
      .add("weight-decay", "5e-4", "L2 weight decay")
      .add("warmup-steps", "100", "linear LR warmup steps, then cosine decay to 0")
      .add("max-micro-batch", "0", "the most samples per forward/backward on a rank; a larger per-rank batch is accumulated in micro-batches (0: no limit)").int_range(0, 1 << 30).run_setting()
      .add("threads", std::to_string(default_threads), "CPU threads per rank")
      .add("data", spec.default_data, "directory with the data set's files")
      .add("seed", "42", "seed for initialisation and shuffling")
      .add("limit", "0", "use only the first N training samples (0 = all)")
      .add("workers", "1", "data-loader threads per rank")
      .add("bucket-cap-mb", knobs::find("EDP_BUCKET_CAP_MB").def, "DDP gradient bucket cap in MiB").run_setting()
      .add("zero", "0", "1: the optimizer state sharded over the ranks (ZeRO stage 1); 2: the gradients too (ZeRO stage 2); 0: every rank holds it all")
      .int_range(0, 2)
      .run_setting()
      .add("device", "auto", "auto (cuda when a GPU is visible, else cpu), cpu, cuda or cuda:N")
      .add("checkpoint-dir", "", "keep checkpoints here and resume from the newest one (empty: none)").run_setting()
      .add("checkpoint-every", "0", "commit a checkpoint every N optimizer steps (0: at the end of every epoch)").run_setting()
      .add("keep-checkpoints", "2", "how many checkpoints to keep").run_setting()
      .add("stop-after-steps", "0", "stop with exit code 3 after N steps, as a preempted job would (testing)").run_setting()
      .add("control-file", "", "elastic control file: {\"workers\": W, \"global_batch\": B} asks for that size (default: EDP_CONTROL_FILE, set by edprun --control-file)")
      .add("control-every", "1", "look at the control file every N steps").run_setting()
      .add("comm-timeout", knobs::find("EDP_COMM_TIMEOUT").def,
           "seconds a collective may wait for the other ranks before the job ends with exit code 76 naming "
           "them (0: forever)")
      .add("on-nonfinite", "stop", "a NaN/inf loss or gradient: stop (an error naming the step and parameter) or "
           "skip (the update; gives up after max(10, 10% of the steps))").run_setting()
      .add("min-global-batch", "0", "smallest global batch a rescale request may ask for (0: the first global "
           "batch / 8)").run_setting()
      .add("max-global-batch", "0", "largest global batch a rescale request may ask for (0: the first global "
           "batch x 8, at most the training set); the learning rate follows the batch, so this bounds it").run_setting()
      .add("divergence-factor", "4", "stop when the mean loss of 3 windows of 10 steps in a row exceeds this "
           "multiple of its running level (or, after a window above its square, stays above 1.2x), resuming "
           "later from the last good checkpoint (0: no guard)").run_setting()
      .add_accept_config_change()
      .add_flag("no-eval", "skip the per-epoch test-set evaluation (the final one still runs)").run_setting();
  o.parse(argc, argv);
  return comm::run_main(argc, argv, [&](comm::Communicator& world) { return train(world, o, spec); });
}

}  // namespace edp::examples
