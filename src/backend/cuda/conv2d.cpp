// Conv2d on the GPU — the op of backend/cpu/conv2d.cpp (the oracle: same math, same gradient
// contract) — through cuDNN 9 (forward, backward-data, backward-filter), hence no
// kernels/conv2d.cu; square kernels with symmetric zero padding, cross-correlation as on the CPU.
//
// cuDNN 9's convolution entry points of the (still shipped, no longer extended) descriptor API
// are used rather than the graph API: the three passes need nothing the graph API adds here (the
// fused attention, attention_cudnn.cpp, is where edp uses the graph API, through cudnn-frontend).
//
// Per problem shape (batch, channels, size, kernel, stride, padding, math mode) the descriptors
// and the algorithm of each pass are chosen once with cudnnFind*AlgorithmEx — cuDNN times its
// candidates on our own buffers — and cached; EDP_DETERMINISTIC=1 restricts the choice to
// deterministic algorithms. One workspace per (device, stream) is grown to the largest need and
// reused. The weight gradient accumulates (beta = 1), as the gradient contract requires; the bias
// is added by edp's kernels (in place after the forward product; its gradient is a per-channel
// sum of dy). TF32 tensor cores unless EDP_TF32=0.
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "common.h"

#ifdef EDP_HAVE_CUDNN
#include <cudnn.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "cudnn_check.h"
#include "kernels/kernels.h"
#include "kernels/launch.h"

namespace edp::cuda {
using namespace detail;

namespace {

constexpr size_t kFindWorkspaceCap = size_t{512} << 20;

bool deterministic_only() {
  static const bool on = knobs::get_bool("EDP_DETERMINISTIC");
  return on;
}

struct ConvKey {
  int64_t N, C, H, W, O, k, stride, pad;
  bool tf32, det;
  auto tie() const { return std::make_tuple(N, C, H, W, O, k, stride, pad, tf32, det); }
  bool operator<(const ConvKey& o) const { return tie() < o.tie(); }
};

// EDP_CUDNN_VERBOSE=1: one line on stderr per algorithm chosen (shape, pass, cuDNN's algorithm
// number, workspace, the time cudnnFind measured), to see which algorithms a run got (e.g.
// Winograd or FFT, whose FP32 error is larger than a direct or GEMM-based convolution's).
bool verbose() {
  static const bool on = knobs::get_bool("EDP_CUDNN_VERBOSE");
  return on;
}

template <typename Perf>
void log_choice(const char* pass, const ConvKey& k, const Perf& r) {
  if (!verbose()) return;
  log::info("cudnn conv2d [", k.N, ", ", k.C, ", ", k.H, ", ", k.W, "] x ", k.O, " filters ", k.k, "x", k.k,
            " stride ", k.stride, " pad ", k.pad, ", tf32 ", k.tf32 ? "on" : "off", k.det ? ", deterministic" : "",
            ": ", pass, " algo ", static_cast<int>(r.algo), ", workspace ", r.memory, " B, ",
            static_cast<double>(r.time), " ms");
}

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t fwd = nullptr, bwd_data = nullptr, bwd_filter = nullptr;
  int64_t Ho = 0, Wo = 0;
  bool have_fwd = false, have_bwd_data = false, have_bwd_filter = false;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo{};
  size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
};

struct DnnState {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::map<ConvKey, ConvPlan> plans;
  std::map<cudaStream_t, Tensor> workspaces;
};

DnnState& dnn_state(int device) {
  return per_device_state<DnnState>(device, [](auto& s) { CUDNN_CHECK(cudnnCreate(&s.handle)); });
}

int to_int(int64_t v, const char* what, const char* op) {
  EDP_CHECK_SHAPE(v >= 0 && v <= INT_MAX, op, ": ", what, " = ", v, " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

cudnnConvolutionDescriptor_t make_conv(const ConvKey& k, const char* op) {
  cudnnConvolutionDescriptor_t d;
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, to_int(k.pad, "padding", op), to_int(k.pad, "padding", op),
                                              to_int(k.stride, "stride", op), to_int(k.stride, "stride", op),
                                              1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionMathType(d, k.tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  return d;
}

ConvPlan make_plan(const ConvKey& k, const char* op) {
  ConvPlan p;
  EDP_CHECK_SHAPE(k.N * k.C * k.H * k.W <= INT_MAX && k.O * k.C * k.k * k.k <= INT_MAX, op,
                  ": tensors of more than 2^31 elements are not supported by cuDNN's descriptor API");
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(k.N, "batch", op),
                                         to_int(k.C, "channels", op), to_int(k.H, "height", op),
                                         to_int(k.W, "width", op)));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, to_int(k.O, "out channels", op),
                                         to_int(k.C, "channels", op), to_int(k.k, "kernel", op),
                                         to_int(k.k, "kernel", op)));
  p.fwd = make_conv(k, op);
  p.bwd_data = make_conv(k, op);
  p.bwd_filter = make_conv(k, op);
  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.fwd, p.x, p.w, &n, &c, &h, &w));
  p.Ho = (k.H + 2 * k.pad - k.k) / k.stride + 1;
  p.Wo = (k.W + 2 * k.pad - k.k) / k.stride + 1;
  EDP_CHECK(n == k.N && c == k.O && h == p.Ho && w == p.Wo, op, ": cuDNN computes output [", n, ", ",
            c, ", ", h, ", ", w, "], edp expects [", k.N, ", ", k.O, ", ", p.Ho, ", ", p.Wo, "]");
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  return p;
}

// Bytes the algorithm search may use as workspace: a share of what is free, capped.
size_t find_limit(int device) {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const DeviceAllocatorStats st = allocator_stats(device);
  const size_t usable = free_b + static_cast<size_t>(std::max<int64_t>(0, st.cached_bytes));
  return std::min(kFindWorkspaceCap, usable / 4);
}

// First (fastest) successful result within the limit, deterministic when asked.
template <typename Perf>
const Perf* choose(const std::vector<Perf>& perf, int returned, size_t limit, bool det) {
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[static_cast<size_t>(i)];
    if (r.status != CUDNN_STATUS_SUCCESS || r.memory > limit) continue;
    if (det && r.determinism != CUDNN_DETERMINISTIC) continue;
    return &r;
  }
  return nullptr;
}

void* workspace(DnnState& st, const Ctx& c, size_t bytes) {
  if (bytes == 0) return nullptr;
  Tensor& ws = st.workspaces[c.stream];
  if (!ws.defined() || ws.nbytes() < bytes) {
    ws = Tensor();  // back to the cache first (stream-ordered), then the larger block
    ws = Tensor({static_cast<int64_t>(bytes)}, DType::U8, c.dev());
  }
  return ws.raw();
}

[[noreturn]] void no_algo(const char* pass, const ConvKey& k) {
  throw Error(std::string("conv2d: cuDNN found no usable ") + pass + " algorithm for input [" +
              std::to_string(k.N) + ", " + std::to_string(k.C) + ", " + std::to_string(k.H) + ", " +
              std::to_string(k.W) + "], " + std::to_string(k.O) + " filters " + std::to_string(k.k) +
              "x" + std::to_string(k.k) + (k.det ? " (EDP_DETERMINISTIC=1 restricts the choice)" : ""));
}

struct ConvCall {
  const ConvKey key;
  DnnState& st;
  ConvPlan& plan;
};

ConvCall prepare(const Ctx& c, const Tensor& x, const Tensor& w, ops::Conv2dGeometry g, const char* op) {
  EDP_CHECK_SHAPE(x.ndim() == 4, op, ": input must be [N, C, H, W], got ", x.shape().str());
  EDP_CHECK_SHAPE(w.ndim() == 4 && w.dim(2) == w.dim(3), op, ": weight must be [Co, Ci, k, k], got ",
                  w.shape().str());
  EDP_CHECK_SHAPE(x.dim(1) == w.dim(1), op, ": input ", x.shape().str(), " has ", x.dim(1),
                  " channels but weight ", w.shape().str(), " expects ", w.dim(1));
  EDP_CHECK(g.stride >= 1 && g.pad >= 0, op, ": stride must be >= 1 and pad >= 0");
  EDP_CHECK_SHAPE(x.dim(2) + 2 * g.pad >= w.dim(2) && x.dim(3) + 2 * g.pad >= w.dim(2), op, ": input ",
                  x.shape().str(), " with padding ", g.pad, " is smaller than the kernel ", w.dim(2));
  const ConvKey key{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), g.stride, g.pad,
                    tf32_enabled(), deterministic_only()};
  DnnState& st = dnn_state(c.device);
  auto it = st.plans.find(key);
  if (it == st.plans.end()) it = st.plans.emplace(key, make_plan(key, op)).first;
  CUDNN_CHECK(cudnnSetStream(st.handle, c.stream));
  return ConvCall{key, st, it->second};
}

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, ops::Conv2dGeometry g) {
  const char* op = "conv2d_forward";
  const int d = op_device(x, op, "input");
  require(w, d, DType::F32, op, "weight");
  if (b.defined()) {
    require(b, d, DType::F32, op, "bias");
    EDP_CHECK_SHAPE(b.ndim() == 1 && b.dim(0) == w.dim(0), op, ": bias ", b.shape().str(),
                    " does not fit weight ", w.shape().str());
  }
  Ctx c(d);
  const int64_t N = x.dim(0), O = w.dim(0);
  if (N == 0) {
    const int64_t Ho = (x.dim(2) + 2 * g.pad - w.dim(2)) / g.stride + 1;
    const int64_t Wo = (x.dim(3) + 2 * g.pad - w.dim(2)) / g.stride + 1;
    return Tensor({0, O, Ho, Wo}, DType::F32, c.dev());
  }
  DnnState& st0 = dnn_state(d);
  std::lock_guard<std::mutex> lock(st0.mu);
  ConvCall cc = prepare(c, x, w, g, op);
  ConvPlan& p = cc.plan;
  Tensor y({N, O, p.Ho, p.Wo}, DType::F32, c.dev());
  const float one = 1.0f, zero = 0.0f;
  if (!p.have_fwd) {
    int max_algos = 0;
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(cc.st.handle, &max_algos));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(1, max_algos)));
    const size_t limit = find_limit(d);
    int returned = 0;
    {
      Tensor tmp = scratch(c, static_cast<int64_t>(std::max<size_t>(limit, 1)), DType::U8);
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(cc.st.handle, p.x, x.raw(), p.w, w.raw(), p.fwd,
                                                         p.y, y.raw(), static_cast<int>(perf.size()),
                                                         &returned, perf.data(), tmp.raw(), limit));
    }
    const auto* best = choose(perf, returned, limit, cc.key.det);
    if (!best) no_algo("forward", cc.key);
    p.fwd_algo = best->algo;
    log_choice("forward", cc.key, *best);
    p.fwd_ws = best->memory;
    if (cc.key.tf32) CUDNN_CHECK(cudnnSetConvolutionMathType(p.fwd, best->mathType));
    p.have_fwd = true;
  }
  void* ws = workspace(cc.st, c, p.fwd_ws);
  CUDNN_CHECK(cudnnConvolutionForward(cc.st.handle, &one, p.x, x.raw(), p.w, w.raw(), p.fwd, p.fwd_algo,
                                      ws, p.fwd_ws, &zero, p.y, y.raw()));
  if (b.defined())
    kern::bias_act_forward(f32(y), cf32(b), f32(y), y.numel(), O, p.Ho * p.Wo, kern::Act::Identity,
                           c.stream);
  return y;
}

Tensor conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                       ops::Conv2dGeometry g, bool want_dx) {
  const char* op = "conv2d_backward";
  const int d = op_device(dy, op, "grad_output");
  require(x, d, DType::F32, op, "input");
  require(w, d, DType::F32, op, "weight");
  require(dw, d, DType::F32, op, "weight grad");
  check_same_shape(dw, w, "conv2d_backward: weight grad vs weight");
  Ctx c(d);
  const int64_t N = x.defined() && x.ndim() == 4 ? x.dim(0) : -1;
  Tensor dx;
  if (N == 0) {
    if (want_dx) dx = Tensor(x.shape(), DType::F32, c.dev());
    return dx;
  }
  DnnState& st0 = dnn_state(d);
  std::lock_guard<std::mutex> lock(st0.mu);
  ConvCall cc = prepare(c, x, w, g, op);
  ConvPlan& p = cc.plan;
  const int64_t O = w.dim(0);
  EDP_CHECK_SHAPE(dy.shape() == Shape({N, O, p.Ho, p.Wo}), op, ": grad_output ", dy.shape().str(),
                  " does not match the output [", N, ", ", O, ", ", p.Ho, ", ", p.Wo, "]");
  if (db) {
    require(*db, d, DType::F32, op, "bias grad");
    EDP_CHECK_SHAPE(db->ndim() == 1 && db->dim(0) == O, op, ": bias grad ", db->shape().str(),
                    " does not fit ", O, " filters");
  }
  const float one = 1.0f, zero = 0.0f;

  // Weight gradient, accumulated: dw = 1·(dy ⋆ x) + 1·dw.
  if (!p.have_bwd_filter) {
    int max_algos = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cc.st.handle, &max_algos));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(std::max(1, max_algos)));
    const size_t limit = find_limit(d);
    int returned = 0;
    {
      // The search writes its result: give it a scratch gradient, never the accumulator.
      Tensor dw_tmp(w.shape(), DType::F32, c.dev());
      Tensor tmp = scratch(c, static_cast<int64_t>(std::max<size_t>(limit, 1)), DType::U8);
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          cc.st.handle, p.x, x.raw(), p.y, dy.raw(), p.bwd_filter, p.w, dw_tmp.raw(),
          static_cast<int>(perf.size()), &returned, perf.data(), tmp.raw(), limit));
    }
    const auto* best = choose(perf, returned, limit, cc.key.det);
    if (!best) no_algo("backward-filter", cc.key);
    p.bwd_filter_algo = best->algo;
    log_choice("backward-filter", cc.key, *best);
    p.bwd_filter_ws = best->memory;
    if (cc.key.tf32) CUDNN_CHECK(cudnnSetConvolutionMathType(p.bwd_filter, best->mathType));
    p.have_bwd_filter = true;
  }
  {
    void* ws = workspace(cc.st, c, p.bwd_filter_ws);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cc.st.handle, &one, p.x, x.raw(), p.y, dy.raw(),
                                               p.bwd_filter, p.bwd_filter_algo, ws, p.bwd_filter_ws,
                                               &one, p.w, dw.raw()));
  }
  if (db) {
    const int64_t P = p.Ho * p.Wo;
    const int64_t splits = std::clamp<int64_t>(channel_splits(O, N * P, sm_count(d)), 1, N);
    Tensor partial = scratch(c, splits * O, DType::F64);
    kern::channel_sum_accumulate(cf32(dy), f32(*db), N, O, P, ptr<double>(partial), splits, c.stream);
  }
  if (!want_dx) return dx;

  dx = Tensor(x.shape(), DType::F32, c.dev());
  if (!p.have_bwd_data) {
    int max_algos = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cc.st.handle, &max_algos));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(1, max_algos)));
    const size_t limit = find_limit(d);
    int returned = 0;
    {
      Tensor tmp = scratch(c, static_cast<int64_t>(std::max<size_t>(limit, 1)), DType::U8);
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          cc.st.handle, p.w, w.raw(), p.y, dy.raw(), p.bwd_data, p.x, dx.raw(),
          static_cast<int>(perf.size()), &returned, perf.data(), tmp.raw(), limit));
    }
    const auto* best = choose(perf, returned, limit, cc.key.det);
    if (!best) no_algo("backward-data", cc.key);
    p.bwd_data_algo = best->algo;
    log_choice("backward-data", cc.key, *best);
    p.bwd_data_ws = best->memory;
    if (cc.key.tf32) CUDNN_CHECK(cudnnSetConvolutionMathType(p.bwd_data, best->mathType));
    p.have_bwd_data = true;
  }
  void* ws = workspace(cc.st, c, p.bwd_data_ws);
  CUDNN_CHECK(cudnnConvolutionBackwardData(cc.st.handle, &one, p.w, w.raw(), p.y, dy.raw(), p.bwd_data,
                                           p.bwd_data_algo, ws, p.bwd_data_ws, &zero, p.x, dx.raw()));
  return dx;
}

}  // namespace edp::cuda

#else  // no cuDNN --------------------------------------------------------------------------------------

namespace edp::cuda {
namespace {
[[noreturn]] void no_cudnn(const char* op) {
  throw Error(std::string(op) +
              ": this build of edp found no cuDNN, which Conv2d on the GPU needs (install cuDNN 9 "
              "or point CUDNN_ROOT at it and reconfigure)");
}
}  // namespace
Tensor conv2d_forward(const Tensor&, const Tensor&, const Tensor&, ops::Conv2dGeometry) {
  no_cudnn("conv2d_forward");
}
Tensor conv2d_backward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor*,
                       ops::Conv2dGeometry, bool) {
  no_cudnn("conv2d_backward");
}
}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDNN
#endif  // EDP_HAVE_CUDA
