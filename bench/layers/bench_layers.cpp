// Per-layer forward/backward time of an example model on the CPU, with achieved GFLOP/s for
// the GEMM-shaped layers. Prints a table and one JSON line.
//   edp_bench_layers [--model cnn|mlp] [--batch 64] [--threads N] [--iters 20]
#include <cstdio>
#include <string>
#include <vector>

#include "common/models.h"
#include "edp/core/random.h"
#include "edp/core/stopwatch.h"
#include "edp/core/threads.h"
#include "edp/nn/init.h"
#include "edp/train/options.h"
#include "edp/train/progress.h"

using namespace edp;

int main(int argc, char** argv) {
  train::Options o("edp_bench_layers", "Times each layer of an example model.");
  o.add("model", "cnn", "cnn or mlp").add("batch", "64", "batch size")
      .add("threads", std::to_string(num_threads()), "CPU threads").add("iters", "20", "timed iterations");
  o.parse(argc, argv);
  set_num_threads(static_cast<int>(o.i64("threads")));
  manual_seed(1);
  auto model = o.str("model") == "mlp" ? examples::fashion_mnist_mlp() : examples::fashion_mnist_cnn();
  model->set_input_grad(false);
  const int64_t B = o.i64("batch"), iters = o.i64("iters");
  Tensor x({B, 1, 28, 28});
  Rng rng(3);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rng.normal());
  const size_t L = model->size();
  // Layers are called one by one here, not through Sequential::backward, which is what tells
  // the layers up to the first trained one that nobody needs their input gradient: tell them,
  // as training does (the CNN's conv1, the MLP's flatten and fc1).
  for (size_t l = 0; l < L; ++l) {
    (*model)[l].set_input_grad(false);
    if (!(*model)[l].parameters().empty()) break;
  }
  std::vector<double> fwd(L, 0), bwd(L, 0);
  for (int64_t it = -3; it < iters; ++it) {
    std::vector<Tensor> acts{x};
    for (size_t l = 0; l < L; ++l) {
      Stopwatch sw;
      acts.push_back((*model)[l].forward(acts.back()));
      if (it >= 0) fwd[l] += sw.seconds();
    }
    Tensor g = Tensor::full(acts.back().shape(), 0.01);
    for (size_t l = L; l-- > 0;) {
      Stopwatch sw;
      g = (*model)[l].backward(g);
      if (it >= 0) bwd[l] += sw.seconds();
      if (!g.defined()) break;  // nothing below needs a gradient
    }
  }
  double tf = 0, tb = 0;
  std::printf("%-10s %-14s %12s %12s\n", "layer", "type", "fwd(us)", "bwd(us)");
  for (size_t l = 0; l < L; ++l) {
    std::printf("%-10s %-14s %12.1f %12.1f\n", model->children()[l].first.c_str(),
                (*model)[l].type_name().c_str(), 1e6 * fwd[l] / iters, 1e6 * bwd[l] / iters);
    tf += fwd[l];
    tb += bwd[l];
  }
  const double step = (tf + tb) / iters;
  std::printf("total fwd %.1f us, bwd %.1f us, %.0f samples/s (no optimizer, no data)\n",
              1e6 * tf / iters, 1e6 * tb / iters, B / step);
  std::printf("{\"bench\": \"layers\", \"model\": \"%s\", \"batch\": %lld, \"threads\": %d, "
              "\"fwd_us\": %.1f, \"bwd_us\": %.1f, \"samples_per_s\": %.1f}\n",
              o.str("model").c_str(), static_cast<long long>(B), num_threads(), 1e6 * tf / iters,
              1e6 * tb / iters, B / step);
}
