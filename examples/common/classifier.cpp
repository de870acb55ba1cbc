// Training driver for the classifier examples (see classifier.h).
#include "common/classifier.h"

#include <cstdio>
#include <iostream>

#include "edp/backend/ops.h"
#include "edp/core/threads.h"
#include "edp/data/dataset.h"
#include "edp/data/loader.h"
#include "edp/nn/init.h"
#include "edp/optim/optimizer.h"
#include "edp/optim/schedule.h"
#include "edp/train/evaluate.h"
#include "edp/train/options.h"
#include "edp/train/progress.h"

namespace edp::examples {

int run_classifier(int argc, char** argv, const ClassifierSpec& spec) {
  train::Options o(spec.name, spec.description);
  o.add("epochs", std::to_string(spec.default_epochs), "training epochs")
      .add("batch", "64", "batch size per rank")
      .add("lr", std::to_string(spec.default_lr), "peak learning rate (SGD, Nesterov momentum)")
      .add("momentum", "0.9", "SGD momentum")
      .add("weight-decay", "5e-4", "L2 weight decay")
      .add("warmup-steps", "100", "linear LR warmup steps, then cosine decay to 0")
      .add("threads", std::to_string(num_threads()), "CPU threads for the ops")
      .add("data", data::kFashionMnistDir, "directory with the Fashion-MNIST IDX files")
      .add("seed", "42", "seed for initialisation and shuffling")
      .add("limit", "0", "use only the first N training samples (0 = all)")
      .add("workers", "1", "data-loader threads")
      .add("device", "cpu", "cpu (cuda needs a CUDA build and a GPU)")
      .add_flag("no-eval", "skip the per-epoch test-set evaluation (the final one still runs)");
  o.parse(argc, argv);

  try {
    const int threads = static_cast<int>(o.i64("threads"));
    set_num_threads(threads);
    const Device device = Device::parse(o.str("device"));
    EDP_CHECK(device.is_cpu(), "--device ", device.str(),
              ": this build trains on the CPU only (the CUDA backend is not available)");
    const int64_t epochs = o.i64("epochs"), batch = o.i64("batch");
    EDP_CHECK(epochs >= 1 && batch >= 1, "--epochs and --batch must be >= 1");
    const uint64_t seed = static_cast<uint64_t>(o.i64("seed"));

    auto train_set = data::load_fashion_mnist(o.str("data"), "train");
    auto test_set = data::load_fashion_mnist(o.str("data"), "test");
    if (o.i64("limit") > 0) train_set = train_set->head(o.i64("limit"));

    manual_seed(seed);
    auto model = spec.build();
    model->set_input_grad(false);
    auto params = model->parameters();
    optim::SGD opt(params, {.lr = o.f64("lr"), .momentum = o.f64("momentum"),
                            .weight_decay = o.f64("weight-decay"), .nesterov = true});

    data::DataLoader loader(train_set, std::make_shared<data::RandomSampler>(train_set->size(), seed),
                            {.batch_size = batch, .drop_last = false,
                             .workers = static_cast<int>(o.i64("workers")), .prefetch = 4});
    loader.start_epoch(0);
    const int64_t steps_per_epoch = loader.batches_per_epoch();
    const int64_t total_steps = steps_per_epoch * epochs;
    optim::WarmupLR schedule(
        std::make_shared<optim::CosineLR>(o.f64("lr"), total_steps),
        std::min<int64_t>(o.i64("warmup-steps"), total_steps));

    std::fprintf(stderr, "%s: %lld train / %lld test samples, %lld parameters, batch %lld, %d threads\n",
                 spec.name.c_str(), static_cast<long long>(train_set->size()),
                 static_cast<long long>(test_set->size()),
                 static_cast<long long>(model->num_parameters()), static_cast<long long>(batch),
                 threads);

    nn::SoftmaxCrossEntropy ce;
    double train_seconds = 0, last_epoch_loss = 0;
    int64_t samples_seen = 0, step = 0;
    train::EvalResult test{};
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      if (epoch > 0) loader.start_epoch(epoch);
      train::Progress progress("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs),
                               steps_per_epoch);
      train::Stopwatch sw;
      double loss_sum = 0;
      int64_t epoch_samples = 0, epoch_steps = 0;
      data::Batch b;
      while (loader.next(b)) {
        opt.set_lr(schedule.lr(step));
        opt.zero_grad();
        Tensor logits = model->forward(b.x);
        const double loss = ce.forward(logits, b.y);
        model->backward(ce.backward());
        opt.step();
        ++step;
        ++epoch_steps;
        loss_sum += loss * static_cast<double>(b.size());
        epoch_samples += b.size();
        progress.update(epoch_steps, epoch_samples, loss);
      }
      const double secs = sw.seconds();
      train_seconds += secs;
      samples_seen += epoch_samples;
      last_epoch_loss = loss_sum / static_cast<double>(std::max<int64_t>(1, epoch_samples));
      progress.finish();
      if (!o.flag("no-eval") || epoch + 1 == epochs) {
        test = train::evaluate(*model, *test_set);
        std::fprintf(stderr, "epoch %lld: train loss %.4f  test loss %.4f  test acc %.4f  %.0f samples/s\n",
                     static_cast<long long>(epoch + 1), last_epoch_loss, test.loss, test.accuracy,
                     epoch_samples / secs);
      }
    }
    std::printf(
        "{\"model\": \"%s\", \"world_size\": 1, \"threads\": %d, \"batch\": %lld, \"epochs\": %lld, "
        "\"samples_per_s\": %.1f, \"test_acc\": %.4f, \"final_loss\": %.4f, \"train_seconds\": %.2f, "
        "\"peak_rss_mb\": %.1f}\n",
        spec.name.c_str(), threads, static_cast<long long>(batch), static_cast<long long>(epochs),
        samples_seen / train_seconds, test.accuracy, last_epoch_loss, train_seconds,
        train::peak_rss_bytes() / 1048576.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", spec.name.c_str(), e.what());
    return 1;
  }
}

}  // namespace edp::examples
