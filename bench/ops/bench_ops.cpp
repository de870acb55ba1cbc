// One op at a time, forward and backward, at the GPT example's shapes (llm.c's dev/cuda habit: an
// op measured alone, by its name). For each op: the median time of a call, the bytes it must at
// least read and write (inputs, outputs, kept tensors, gradients) as GB/s, and the FLOPs of the
// matrix products as GFLOP/s. Prints a table and one JSON line.
//
//   edp_bench_ops [--device cpu|cuda] [--ops linear,layernorm,...] [--batch 8] [--context 256]
//                 [--dim 512] [--heads 8] [--layers 6] [--vocab 256] [--iters 20] [--threads N]
//
// Ops: embedding, layernorm, linear (the attention's qkv projection, D -> 3D), attention, gelu
// (on the MLP's 4D activations), softmax_xent (the sequence form over the vocabulary; the examples'
// byte tokens by default), adamw (one step over the parameters of a GPT of --layers layers). On the GPU each timed call is bracketed by
// a device synchronise, so a time is the op's own.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "edp/backend/ops.h"
#include "edp/config.h"
#include "edp/core/random.h"
#include "edp/core/stopwatch.h"
#include "edp/core/threads.h"
#include "edp/nn/init.h"
#include "edp/train/options.h"
#if EDP_HAVE_CUDA
#include "edp/cuda/runtime.h"
#endif

using namespace edp;

namespace {

struct Row {
  std::string op, shape;
  double fwd_us = 0, bwd_us = 0;  // 0: the op has no such pass
  double fwd_bytes = 0, bwd_bytes = 0, fwd_flops = 0, bwd_flops = 0;
};

Device dev;

void sync() {
#if EDP_HAVE_CUDA
  if (dev.is_cuda()) cuda::synchronize();
#endif
}

Tensor randn(Shape s, double std = 1.0) {
  Tensor t(s);
  nn::init::normal_(t, 0.0, std);
  return t.to(dev);
}

Tensor token_ids(int64_t B, int64_t T, int64_t V) {
  Tensor t({B, T}, DType::I32);
  Rng rng(7);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng.next_u64() % uint64_t(V));
  return t.to(dev);
}

// The median of `iters` timed calls after 3 untimed ones, in microseconds.
double median_us(int64_t iters, const std::function<void()>& call) {
  std::vector<double> t;
  for (int64_t i = -3; i < iters; ++i) {
    sync();
    Stopwatch sw;
    call();
    sync();
    if (i >= 0) t.push_back(sw.seconds() * 1e6);
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

std::string dims(std::initializer_list<int64_t> d) {
  std::ostringstream os;
  const char* sep = "";
  for (int64_t v : d) os << sep << v, sep = "x";
  return os.str();
}

}  // namespace

int run(int argc, char** argv) {
  train::Options o("edp_bench_ops", "Times one op at a time, forward and backward, at the GPT example's shapes.");
  o.add("device", "cpu", "cpu or cuda").add("ops", "embedding,layernorm,linear,attention,gelu,softmax_xent,adamw",
                                             "the ops to time, comma-separated")
      .add("batch", "8", "sequences per call").add("context", "256", "tokens per sequence")
      .add("dim", "512", "model width D").add("heads", "8", "attention heads").add("layers", "6", "layers (adamw's parameter count)").add("vocab", "256", "vocabulary")
      .add("iters", "20", "timed calls per pass").add("threads", std::to_string(num_threads()), "CPU threads");
  o.parse(argc, argv);
  set_num_threads(static_cast<int>(o.i64("threads")));
  dev = Device::parse(o.str("device"));
  const int64_t B = o.i64("batch"), T = o.i64("context"), D = o.i64("dim"), H = o.i64("heads"), V = o.i64("vocab"),
                iters = o.i64("iters"), N = B * T;
  EDP_CHECK(o.i64("layers") >= 1, "edp_bench_ops: --layers must be >= 1");
  EDP_CHECK(B >= 1 && T >= 1 && D >= 1 && H >= 1 && D % H == 0 && V >= 1 && iters >= 1,
            "edp_bench_ops: batch, context, dim, heads, vocab and iters must be >= 1, and dim a multiple of heads");
  manual_seed(1);
  const double f = 4.0;  // bytes per float32
  std::vector<Row> rows;
  const std::vector<std::string> known{"embedding", "layernorm", "linear", "attention", "gelu", "softmax_xent", "adamw"};
  std::vector<std::string> chosen;
  std::stringstream list(o.str("ops"));
  for (std::string op; std::getline(list, op, ',');) {
    if (std::find(known.begin(), known.end(), op) == known.end()) {
      std::fprintf(stderr, "edp_bench_ops: unknown op '%s' (known: embedding, layernorm, linear, attention, gelu, "
                   "softmax_xent, adamw)\n", op.c_str());
      return 2;
    }
    chosen.push_back(op);
  }
  for (const std::string& op : chosen) {
    Row r{op, ""};
    if (op == "embedding") {
      const Tensor ids = token_ids(B, T, V), wte = randn({V, D}, 0.02), wpe = randn({T, D}, 0.02);
      Tensor y, dwte = Tensor::zeros({V, D}).to(dev), dwpe = Tensor::zeros({T, D}).to(dev);
      const Tensor dy = randn({B, T, D});
      r.shape = dims({B, T, D});
      r.fwd_us = median_us(iters, [&] { y = ops::embedding_forward(ids, wte, wpe); });
      r.bwd_us = median_us(iters, [&] { ops::embedding_backward(ids, dy, dwte, dwpe); });
      r.fwd_bytes = 3.0 * N * D * f;  // the rows of wte and wpe read, y written
      r.bwd_bytes = 5.0 * N * D * f;  // dy read, the rows of dwte and dwpe read and written
    } else if (op == "layernorm") {
      const Tensor x = randn({N, D}), g = randn({D}), b = randn({D}), dy = randn({N, D});
      Tensor y, m, s, dx, dg = Tensor::zeros({D}).to(dev), db = Tensor::zeros({D}).to(dev);
      r.shape = dims({N, D});
      r.fwd_us = median_us(iters, [&] { y = ops::layernorm_forward(x, g, b, 1e-5, m, s); });
      r.bwd_us = median_us(iters, [&] { dx = ops::layernorm_backward(x, dy, g, m, s, dg, db); });
      r.fwd_bytes = 2.0 * N * D * f;  // x read, y written
      r.bwd_bytes = 3.0 * N * D * f;  // x and dy read, dx written
    } else if (op == "linear") {
      const Tensor x = randn({N, D}), w = randn({3 * D, D}, 0.02), b = randn({3 * D}), dy = randn({N, 3 * D});
      Tensor y, dx, dw = Tensor::zeros({3 * D, D}).to(dev), db = Tensor::zeros({3 * D}).to(dev);
      r.shape = dims({N, D, 3 * D});
      r.fwd_us = median_us(iters, [&] { y = ops::linear_forward(x, w, b); });
      r.bwd_us = median_us(iters, [&] { dx = ops::linear_backward(x, w, dy, dw, &db, true); });
      r.fwd_flops = 2.0 * N * D * 3 * D;
      r.bwd_flops = 2.0 * r.fwd_flops;
      r.fwd_bytes = (N * D + 3.0 * D * D + 3.0 * N * D) * f;
      r.bwd_bytes = (N * D + 2 * 3.0 * D * D + 3.0 * N * D + N * D) * f;
    } else if (op == "attention") {
      const Tensor qkv = randn({B, T, 3 * D}), dy = randn({B, T, D});
      Tensor y, lse, dqkv;
      r.shape = dims({B, T, D}) + "/" + std::to_string(H);
      r.fwd_us = median_us(iters, [&] { y = ops::attention_forward(qkv, H, lse); });
      r.bwd_us = median_us(iters, [&] { dqkv = ops::attention_backward(qkv, y, dy, lse, H); });
      // Causal: half of the T x T scores; QK^T and PV forward, four products backward.
      r.fwd_flops = 2.0 * 2.0 * B * T * T * D / 2.0;
      r.bwd_flops = 2.0 * r.fwd_flops;
      r.fwd_bytes = (3.0 * N * D + N * D) * f;
      r.bwd_bytes = (3.0 * N * D + 2.0 * N * D + 3.0 * N * D) * f;
    } else if (op == "gelu") {
      const Tensor x = randn({N, 4 * D}), dy = randn({N, 4 * D});
      Tensor y, dx;
      r.shape = dims({N, 4 * D});
      r.fwd_us = median_us(iters, [&] { y = ops::gelu_forward(x); });
      r.bwd_us = median_us(iters, [&] { dx = ops::gelu_backward(x, dy); });
      r.fwd_bytes = 2.0 * N * 4 * D * f;
      r.bwd_bytes = 3.0 * N * 4 * D * f;
    } else if (op == "softmax_xent") {
      const Tensor z = randn({N, V}), lab = token_ids(N, 1, V).reshape(Shape{N});
      Tensor p, dz;
      int64_t counted = 0;
      r.shape = dims({N, V});
      r.fwd_us = median_us(iters, [&] { ops::softmax_cross_entropy_forward(z, lab, p, -1, &counted); });
      r.bwd_us = median_us(iters, [&] { dz = ops::softmax_cross_entropy_backward(p, lab, 1.0 / N, -1); });
      r.fwd_bytes = 2.0 * N * V * f;  // logits read, probabilities written
      r.bwd_bytes = 2.0 * N * V * f;
    } else if (op == "adamw") {
      // A GPT's parameters (12 D² a layer, the tied embedding, the positions) as one tensor.
      const int64_t P = o.i64("layers") * 12 * D * D + V * D + T * D;
      Tensor p = randn({P}, 0.02), g = randn({P}, 1e-3), m = Tensor::zeros({P}).to(dev), v = Tensor::zeros({P}).to(dev);
      ops::AdamWStep h;
      h.beta2 = 0.95;
      h.decay = 1 - 1e-3 * 0.1;
      h.step_size = 1e-3 / (1 - 0.9);
      h.rbc2 = 1 / std::sqrt(1 - 0.95);
      r.shape = std::to_string(P);
      r.fwd_us = median_us(iters, [&] { ops::adamw_step({&p}, {&g}, {&m}, {&v}, h); });
      r.fwd_bytes = 7.0 * P * f;  // p, g, m, v read; p, m, v written
    }
    rows.push_back(r);
  }
  std::printf("device %s, %d CPU thread(s), batch %lld x context %lld, D %lld, %lld heads, vocab %lld, "
              "median of %lld calls\n", dev.str().c_str(), num_threads(), static_cast<long long>(B),
              static_cast<long long>(T), static_cast<long long>(D), static_cast<long long>(H),
              static_cast<long long>(V), static_cast<long long>(iters));
  std::printf("%-13s %-18s %10s %8s %9s %10s %8s %9s\n", "op", "shape", "fwd(us)", "GB/s", "GFLOP/s", "bwd(us)",
              "GB/s", "GFLOP/s");
  auto rate = [](double x, double us) { return us > 0 && x > 0 ? x / us / 1e3 : 0.0; };
  std::ostringstream js;
  js << "{\"bench\": \"ops\", \"device\": \"" << dev.str() << "\", \"threads\": " << num_threads()
     << ", \"batch\": " << B << ", \"context\": " << T << ", \"dim\": " << D << ", \"heads\": " << H
     << ", \"vocab\": " << V << ", \"cpu_arch\": \"" << EDP_CPU_ARCH << "\", \"ops\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf("%-13s %-18s %10.1f %8.1f %9.1f %10.1f %8.1f %9.1f\n", r.op.c_str(), r.shape.c_str(), r.fwd_us,
                rate(r.fwd_bytes, r.fwd_us), rate(r.fwd_flops, r.fwd_us), r.bwd_us, rate(r.bwd_bytes, r.bwd_us),
                rate(r.bwd_flops, r.bwd_us));
    js << (i ? ", " : "") << "{\"op\": \"" << r.op << "\", \"shape\": \"" << r.shape << "\", \"fwd_us\": " << r.fwd_us
       << ", \"bwd_us\": " << r.bwd_us << ", \"fwd_gbps\": " << rate(r.fwd_bytes, r.fwd_us)
       << ", \"bwd_gbps\": " << rate(r.bwd_bytes, r.bwd_us) << ", \"fwd_gflops\": " << rate(r.fwd_flops, r.fwd_us)
       << ", \"bwd_gflops\": " << rate(r.bwd_flops, r.bwd_us) << "}";
  }
  js << "]}";
  std::printf("%s\n", js.str().c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edp_bench_ops: %s\n", e.what());
    return 1;
  }
}
