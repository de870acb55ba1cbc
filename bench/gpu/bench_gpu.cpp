// GPU benchmarks of edp's CUDA backend, each against a peer measured in the same run:
//   bandwidth  edp's memory-bound kernels (ReLU, GELU, axpy, scale, dropout, BatchNorm apply,
//              sum) in GB/s counting bytes read + written, next to a device-to-device
//              cudaMemcpy of the same bytes
//   gemm       Linear forward (cuBLASLt, bias fused) in TFLOP/s next to cublasSgemm on the same
//              problem with the same math mode (TF32 unless EDP_TF32=0)
//   train      the Fashion-MNIST CNN (examples/common/models.h), batch 256, SGD with Nesterov
//              momentum, synthetic data uploaded from pinned host memory every step, the loss
//              read back once per step — the same loop bench/pytorch/train_fashion_mnist.py
//              --bench-steps runs in PyTorch
//   resnet18   the same loop for ResNet-18, CIFAR variant (cifar_resnet18 in
//              examples/common/models.h), 3x32x32 inputs, batch 128 (--resnet-batch); not run
//              by default (a separate section so that bench/gpu/run.sh can give it its own time)
// Timing: CUDA events around the region after a warm-up, the median of repeated runs; the
// training sections time --train-steps steps with the wall clock after 20 warm-up steps (5 for
// resnet18 with --quick: its steps are long, and 5 cover the allocator's and the libraries'
// first-call work).
// Prints a table per section and one JSON line (prefix "JSON ") with everything.
//   edp_bench_gpu [--sections bandwidth,gemm,train,resnet18] [--train-steps 200] [--batch 256]
//                 [--resnet-batch 128] [--quick]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/models.h"
#include "edp/backend/ops.h"
#include "edp/core/random.h"
#include "edp/backend/cuda_ops.h"
#include "edp/cuda/runtime.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"

namespace {
using namespace edp;

#define BENCH_CHECK(call)                                                                      \
  do {                                                                                         \
    const cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                \
                   cudaGetErrorString(e_));                                                    \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

#define CUBLAS_BENCH_CHECK(call)                                                               \
  do {                                                                                         \
    const cublasStatus_t s_ = (call);                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                \
                   cublasGetStatusString(s_));                                                 \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

const Device kGpu = Device::cuda(0);

Tensor random_gpu(const Shape& s, uint64_t seed, double scale = 1.0) {
  Tensor t(s, DType::F32);
  Rng r(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(scale * r.normal());
  return t.to(kGpu);
}

// Median milliseconds of `reps` timed runs of fn (each timed with events on the default stream).
double time_ms(const std::function<void()>& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  cuda::Event a(true), b(true);
  for (int i = 0; i < reps; ++i) {
    a.record(nullptr);
    fn();
    b.record(nullptr);
    b.synchronize();
    ms.push_back(b.elapsed_ms(a));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::ostringstream g_json;
bool g_first_field = true;
void json_field(const std::string& key, const std::string& raw_value) {
  g_json << (g_first_field ? "" : ", ") << "\"" << key << "\": " << raw_value;
  g_first_field = false;
}

// ---- bandwidth -----------------------------------------------------------------------------------------
void bench_bandwidth(bool quick) {
  const std::vector<int64_t> sizes = quick ? std::vector<int64_t>{int64_t{1} << 24}
                                           : std::vector<int64_t>{int64_t{1} << 20, int64_t{1} << 24, int64_t{1} << 27};
  std::printf("\n## kernel bandwidth (GB/s, bytes read + written; median of 20)\n");
  std::printf("%-22s %12s %10s %10s %9s\n", "kernel", "elements", "ms", "GB/s", "vs_memcpy");
  std::ostringstream js;
  js << "[";
  bool first = true;
  for (int64_t n : sizes) {
    const Tensor x = random_gpu({n}, 1), y0 = random_gpu({n}, 2);
    Tensor y = y0.clone();
    Tensor dst({n}, DType::F32, kGpu);
    const double bytes_rw = 2.0 * static_cast<double>(n) * 4;
    const double memcpy_ms = time_ms([&] {
      BENCH_CHECK(cudaMemcpyAsync(dst.raw(), x.raw(), static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, nullptr));
    }, 3, 20);
    const double memcpy_gbs = bytes_rw / memcpy_ms / 1e6;
    struct K {
      const char* name;
      double bytes;
      std::function<void()> fn;
    };
    Tensor mask;
    const Tensor x4 = x.reshape({n / 1024, 16, 8, 8});
    const Tensor gamma = random_gpu({16}, 3), beta = random_gpu({16}, 4);
    const Tensor rm = random_gpu({16}, 5), rv = Tensor::full({16}, 1.0, DType::F32, kGpu);
    const std::vector<K> ks = {
        {"memcpy D2D", bytes_rw, [&] { BENCH_CHECK(cudaMemcpyAsync(dst.raw(), x.raw(), static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice, nullptr)); }},
        {"relu_forward", bytes_rw, [&] { (void)ops::relu_forward(x); }},
        {"relu_backward", 3.0 * n * 4, [&] { (void)ops::relu_backward(x, y0); }},
        {"gelu_forward", bytes_rw, [&] { (void)ops::gelu_forward(x); }},
        {"axpy_", 3.0 * n * 4, [&] { ops::axpy_(y, 0.5, x); }},
        {"scale_", bytes_rw, [&] { ops::scale_(y, 1.0); }},
        {"dropout_forward", 2.25 * n * 4, [&] { (void)ops::dropout_forward(x, 0.5, 7, mask); }},
        {"batchnorm_eval", bytes_rw, [&] { (void)ops::batchnorm2d_forward_eval(x4, gamma, beta, rm, rv, 1e-5); }},
        {"sum (read only)", 1.0 * n * 4, [&] { (void)ops::sum(x); }},
    };
    for (const K& k : ks) {
      const double ms = time_ms(k.fn, 3, 20);
      const double gbs = k.bytes / ms / 1e6;
      std::printf("%-22s %12lld %10.4f %10.1f %8.0f%%\n", k.name, static_cast<long long>(n), ms, gbs,
                  100.0 * gbs / memcpy_gbs);
      js << (first ? "" : ", ") << "{\"kernel\": \"" << k.name << "\", \"n\": " << n << ", \"ms\": " << ms
         << ", \"gbps\": " << gbs << ", \"vs_memcpy\": " << gbs / memcpy_gbs << "}";
      first = false;
    }
  }
  js << "]";
  json_field("bandwidth", js.str());
}

// ---- GEMM --------------------------------------------------------------------------------------------------
void bench_gemm(bool quick) {
  cublasHandle_t h;
  CUBLAS_BENCH_CHECK(cublasCreate(&h));
  const bool tf32 = cuda::tf32_enabled();
  CUBLAS_BENCH_CHECK(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  struct P {
    int64_t N, I, O;
  };
  std::vector<P> ps = {{256, 3136, 128}, {256, 128, 10}, {2048, 2048, 2048}, {8192, 8192, 8192}, {4096, 1024, 4096}};
  if (quick) ps = {{256, 3136, 128}, {4096, 4096, 4096}};
  std::printf("\n## GEMM: Linear forward y = x wT + b (TF32 %s; median of 20)\n", tf32 ? "on" : "off");
  std::printf("%-20s %12s %12s %12s %12s %8s\n", "N x I -> O", "edp_ms", "edp_TFLOPs", "cublas_ms", "cublas_TFLOPs", "ratio");
  std::ostringstream js;
  js << "[";
  bool first = true;
  for (const P& p : ps) {
    const Tensor x = random_gpu({p.N, p.I}, 10), w = random_gpu({p.O, p.I}, 11, 1.0 / std::sqrt(double(p.I)));
    const Tensor b = random_gpu({p.O}, 12);
    Tensor y({p.N, p.O}, DType::F32, kGpu);
    const double flops = 2.0 * p.N * p.I * p.O;
    const double edp_ms = time_ms([&] { (void)ops::linear_forward(x, w, b); }, 5, 20);
    // cuBLAS: yᵀ[O, N] = wᵀᵀ · xᵀ in column-major terms, bias not included (favours cuBLAS).
    const float one = 1.0f, zero = 0.0f;
    const double cub_ms = time_ms([&] {
      CUBLAS_BENCH_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.O), static_cast<int>(p.N),
                                     static_cast<int>(p.I), &one, static_cast<const float*>(w.raw()),
                                     static_cast<int>(p.I), static_cast<const float*>(x.raw()),
                                     static_cast<int>(p.I), &zero, static_cast<float*>(y.raw()),
                                     static_cast<int>(p.O)));
    }, 5, 20);
    const double et = flops / edp_ms / 1e9, ct = flops / cub_ms / 1e9;
    char name[64];
    std::snprintf(name, sizeof name, "%lldx%lld->%lld", static_cast<long long>(p.N), static_cast<long long>(p.I),
                  static_cast<long long>(p.O));
    std::printf("%-20s %12.4f %12.2f %12.4f %12.2f %8.2f\n", name, edp_ms, et, cub_ms, ct, et / ct);
    js << (first ? "" : ", ") << "{\"shape\": \"" << name << "\", \"edp_ms\": " << edp_ms << ", \"edp_tflops\": " << et
       << ", \"cublas_ms\": " << cub_ms << ", \"cublas_tflops\": " << ct << "}";
    first = false;
  }
  js << "]";
  json_field("gemm_tf32", tf32 ? "true" : "false");
  json_field("gemm", js.str());
  CUBLAS_BENCH_CHECK(cublasDestroy(h));
}

// ---- training throughput ----------------------------------------------------------------------------------
// One training loop for every model: `json_key` names the section's field in the JSON line,
// `sample` the shape of one input (C, H, W). Each section starts from an empty cache with its
// peak reset, so that its peak/reserved memory is its own even after other sections ran.
void bench_train_model(const char* json_key, const char* model_name,
                       const std::function<std::shared_ptr<nn::Sequential>()>& build, const Shape& sample,
                       int steps, int batch, int warm) {
  cuda::synchronize(0);
  cuda::empty_cache(0);
  cuda::reset_peak_stats(0);
  manual_seed(42);
  auto model = build();
  model->set_input_grad(false);
  model->to(kGpu);
  optim::SGD opt(model->parameters(), {0.05, 0.9, 0.0, 5e-4, true});
  // 16 host batches, reused in turn: the data's values do not change the work.
  std::vector<int64_t> xdims{batch};
  xdims.insert(xdims.end(), sample.dims().begin(), sample.dims().end());
  const Shape xshape(xdims);
  std::vector<Tensor> xs, ys;
  Rng r(7);
  for (int i = 0; i < 16; ++i) {
    Tensor x(xshape, DType::F32), y({batch}, DType::I32);
    for (int64_t k = 0; k < x.numel(); ++k) x.data<float>()[k] = static_cast<float>(r.normal());
    for (int64_t k = 0; k < batch; ++k) y.data<int32_t>()[k] = static_cast<int32_t>(r.below(10));
    xs.push_back(x);
    ys.push_back(y);
  }
  cuda::AsyncUploader up(kGpu, 3);
  double last_loss = 0;
  auto step = [&](int i) {
    const Tensor x = up.upload(xs[static_cast<size_t>(i % 16)]);
    const Tensor y = up.upload(ys[static_cast<size_t>(i % 16)]);
    opt.zero_grad();
    Tensor probs;
    const Tensor logits = model->forward(x);
    const Tensor loss = cuda::softmax_cross_entropy_forward_async(logits, y, probs);
    const Tensor dz = ops::softmax_cross_entropy_backward(probs, y, 1.0 / batch);
    model->backward(dz);
    opt.step();
    last_loss = cuda::read_loss(loss, y);  // one synchronisation per step, as loss.item()
  };
  for (int i = 0; i < warm; ++i) step(i);
  cuda::synchronize(0);
  const auto a0 = cuda::allocator_stats(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step(warm + i);
  cuda::synchronize(0);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto a1 = cuda::allocator_stats(0);
  const double sps = steps * static_cast<double>(batch) / secs;
  const long long params = static_cast<long long>(model->num_parameters());
  std::printf("\n## training: %s (%lld parameters), batch %d, %d timed steps after %d warm-up (TF32 %s)\n",
              model_name, params, batch, steps, warm, cuda::tf32_enabled() ? "on" : "off");
  std::printf("%-14s %12s %10s %12s %14s %14s\n", "impl", "samples/s", "step_ms", "final_loss", "cudaMalloc_timed",
              "peak_alloc_MiB");
  std::printf("%-14s %12.0f %10.3f %12.4f %14lld %14.1f\n", "edp", sps, 1e3 * secs / steps, last_loss,
              static_cast<long long>(a1.raw_allocs - a0.raw_allocs), a1.peak_allocated_bytes / 1048576.0);
  std::ostringstream js;
  js << "{\"model\": \"" << model_name << "\", \"impl\": \"edp\", \"parameters\": " << params
     << ", \"batch\": " << batch << ", \"steps\": " << steps << ", \"warmup\": " << warm
     << ", \"samples_per_s\": " << sps << ", \"step_ms\": " << 1e3 * secs / steps << ", \"final_loss\": " << last_loss
     << ", \"raw_allocs_timed\": " << (a1.raw_allocs - a0.raw_allocs)
     << ", \"peak_allocated_mib\": " << a1.peak_allocated_bytes / 1048576.0
     << ", \"reserved_mib\": " << a1.reserved_bytes / 1048576.0 << ", \"tf32\": " << (cuda::tf32_enabled() ? "true" : "false")
     << "}";
  json_field(json_key, js.str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string sections = "bandwidth,gemm,train";
  int train_steps = 200, batch = 256, resnet_batch = 128;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--sections") sections = next();
    else if (a == "--train-steps") train_steps = std::stoi(next());
    else if (a == "--batch") batch = std::stoi(next());
    else if (a == "--resnet-batch") resnet_batch = std::stoi(next());
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--sections bandwidth,gemm,train,resnet18] [--train-steps N] [--batch B] "
                           "[--resnet-batch B] [--quick]\n", argv[0]);
      return 2;
    }
  }
  std::vector<std::string> want;
  for (size_t p = 0; p <= sections.size();) {
    const size_t q = std::min(sections.find(',', p), sections.size());
    if (q > p) want.push_back(sections.substr(p, q - p));
    p = q + 1;
  }
  for (const std::string& w : want) {
    if (w != "bandwidth" && w != "gemm" && w != "train" && w != "resnet18") {
      std::fprintf(stderr, "edp_bench_gpu: unknown section '%s' (bandwidth, gemm, train, resnet18)\n", w.c_str());
      return 2;
    }
  }
  if (train_steps < 1 || batch < 1 || resnet_batch < 1) {
    std::fprintf(stderr, "edp_bench_gpu: --train-steps, --batch and --resnet-batch must be >= 1\n");
    return 2;
  }
  const auto has = [&](const char* s) { return std::find(want.begin(), want.end(), s) != want.end(); };
  if (!cuda::available()) {
    std::fprintf(stderr, "edp_bench_gpu: %s\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  const cuda::DeviceInfo d = cuda::device_info(0);
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  std::printf("# device: %s (%d SMs, cc %d.%d, %.0f GiB), CUDA runtime %d, driver %d\n", d.name.c_str(), d.sm_count,
              d.cc_major, d.cc_minor, d.total_memory / 1073741824.0, rt, drv);
  json_field("bench", "\"edp_bench_gpu\"");
  json_field("device", "\"" + d.name + "\"");
  json_field("cuda_runtime", std::to_string(rt));
  json_field("driver", std::to_string(drv));
  try {
    if (has("bandwidth")) bench_bandwidth(quick);
    if (has("gemm")) bench_gemm(quick);
    if (has("train"))
      bench_train_model("train", "fashion_mnist_cnn", [] { return examples::fashion_mnist_cnn(); }, {1, 28, 28},
                        train_steps, batch, 20);
    if (has("resnet18"))
      bench_train_model("resnet18", "cifar_resnet18", [] { return examples::cifar_resnet18(10); }, {3, 32, 32},
                        train_steps, resnet_batch, quick ? 5 : 20);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edp_bench_gpu: %s\n", e.what());
    return 1;
  }
  std::printf("JSON {%s}\n", g_json.str().c_str());
  return 0;
}
