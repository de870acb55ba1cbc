// Conv2d on the CPU (float32, float64): the oracle of backend/cuda/conv2d.cpp (cuDNN; no
// kernels/conv2d.cu — the bias and its gradient use kernels/activation.cu and reduce.cu).
//
//   forward   y[n, o, oh, ow] = b[o] + Σ_{i, kh, kw} w[o, i, kh, kw] · x[n, i, oh·s+kh-pad, ow·s+kw-pad]
//             (cross-correlation, zero padding; with relu set, y = max(that, 0))
//   backward  dx = dy convolved back through w (transposed convolution);
//             dw += Σ_n dy ⋆ x (correlation of dy with x);  db += Σ_{n, oh, ow} dy
//
// Gradient contract: parameter gradients accumulate (dw +=, db +=); the input gradient is
// returned (dx =, a fresh tensor, or undefined when want_dx is false).
//
// Two implementations (ops::CpuConv, EDP_CPU_CONV):
//
// * eigen — the reference, always built, float32 and float64: im2col + GEMM over groups of S
//   samples: im2col of S samples side by side into a thread-local col [Ci·k·k, S·Ho·Wo],
//   out[Co, S·Ho·Wo] = W[Co, Ci·k·k] · col, scattered into NCHW. Grouping makes the GEMM wide
//   enough to run near peak while col stays in cache. Samples are split statically across
//   threads (each GEMM single-threaded), so results are deterministic for a given thread count.
//   Backward reuses the forward's col when given one; per-thread dW partials are summed in
//   thread order.
//
// * dnnl — oneDNN's JIT direct convolutions (the library PyTorch uses on x86), float32 only,
//   when the build found oneDNN (EDP_DNNL). At batch 64 on the example CNN they run conv2 2-3x
//   faster than the GEMMs above (docs/performance.md) because they keep the output tile in
//   registers over the whole Ci·k·k reduction instead of streaming an im2col matrix. Activations
//   stay NCHW between layers: each call reorders its operands into the blocked layouts oneDNN
//   chose ("any") and the result back, which costs a few percent of the convolution. Primitives
//   are cached per shape. oneDNN's CPU convolutions are run-to-run deterministic for a fixed
//   thread count and ISA (its documentation: "for most primitives, oneDNN provides a run-to-run
//   deterministic execution for a fixed environment"; the JIT convolutions used here give each
//   output and each weight-gradient partial one owner thread and reduce the partials in a fixed
//   order, no atomics); tests/backend/conv2d_test.cpp checks repeated calls bitwise and both
//   implementations against each other. The ISA follows EDP_CPU_ISA (dnnl_engine.cpp).
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#include "edp/core/knobs.h"
#include "edp/core/threads.h"
#include "edp/core/log.h"
#include "dnnl_engine.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

namespace {

struct ConvDims {
  int64_t N, C, H, W, O, k, Ho, Wo, stride, pad;
  int64_t K() const { return C * k * k; }
  int64_t P() const { return Ho * Wo; }
};

ConvDims conv_dims(const Tensor& x, const Tensor& w, Conv2dGeometry g, const char* op) {
  EDP_CHECK_SHAPE(x.ndim() == 4, op, ": input must be [N, C, H, W], got ", x.shape().str());
  EDP_CHECK_SHAPE(w.ndim() == 4 && w.dim(2) == w.dim(3), op,
                  ": weight must be [Co, Ci, k, k], got ", w.shape().str());
  EDP_CHECK_SHAPE(x.dim(1) == w.dim(1), op, ": input ", x.shape().str(), " has ", x.dim(1),
                  " channels but weight ", w.shape().str(), " expects ", w.dim(1));
  EDP_CHECK(g.stride >= 1 && g.pad >= 0, op, ": stride must be >= 1 and pad >= 0");
  ConvDims d{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), 0, 0, g.stride, g.pad};
  EDP_CHECK_SHAPE(d.H + 2 * d.pad >= d.k && d.W + 2 * d.pad >= d.k, op, ": input ",
                  x.shape().str(), " with padding ", d.pad, " is smaller than the kernel ", d.k);
  d.Ho = (d.H + 2 * d.pad - d.k) / d.stride + 1;
  d.Wo = (d.W + 2 * d.pad - d.k) / d.stride + 1;
  return d;
}

// col[(c·k + kh)·k + kw][oh·Wo + ow] = x[c][oh·s - p + kh][ow·s - p + kw] (0 outside);
// rows of col are `ld` apart (several samples sit side by side in one col matrix).
template <typename T>
void im2col(const T* x, T* col, const ConvDims& d, int64_t ld) {
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t kh = 0; kh < d.k; ++kh)
      for (int64_t kw = 0; kw < d.k; ++kw) {
        T* row = col + ((c * d.k + kh) * d.k + kw) * ld;
        const T* plane = x + c * d.H * d.W;
        for (int64_t oh = 0; oh < d.Ho; ++oh) {
          const int64_t ih = oh * d.stride - d.pad + kh;
          T* out = row + oh * d.Wo;
          if (ih < 0 || ih >= d.H) {
            for (int64_t ow = 0; ow < d.Wo; ++ow) out[ow] = T(0);
            continue;
          }
          const T* in = plane + ih * d.W;
          if (d.stride == 1) {
            // Valid ow range: 0 <= ow - p + kw < W.
            const int64_t lo = std::clamp<int64_t>(d.pad - kw, 0, d.Wo);
            const int64_t hi = std::clamp<int64_t>(d.W + d.pad - kw, lo, d.Wo);
            // Inline loops, not fill/copy calls: rows are short (14-28 values) and three
            // library calls per row cost more than the copy itself.
            const T* src = in - d.pad + kw;
            for (int64_t ow = 0; ow < lo; ++ow) out[ow] = T(0);
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = src[ow];
            for (int64_t ow = hi; ow < d.Wo; ++ow) out[ow] = T(0);
          } else {
            for (int64_t ow = 0; ow < d.Wo; ++ow) {
              const int64_t iw = ow * d.stride - d.pad + kw;
              out[ow] = (iw >= 0 && iw < d.W) ? in[iw] : T(0);
            }
          }
        }
      }
}

// The adjoint of im2col: x[c][ih][iw] += col[...] (x must be zeroed by the caller).
template <typename T>
void col2im(const T* col, T* x, const ConvDims& d, int64_t ld) {
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t kh = 0; kh < d.k; ++kh)
      for (int64_t kw = 0; kw < d.k; ++kw) {
        const T* row = col + ((c * d.k + kh) * d.k + kw) * ld;
        T* plane = x + c * d.H * d.W;
        for (int64_t oh = 0; oh < d.Ho; ++oh) {
          const int64_t ih = oh * d.stride - d.pad + kh;
          if (ih < 0 || ih >= d.H) continue;
          const T* in = row + oh * d.Wo;
          T* out = plane + ih * d.W;
          if (d.stride == 1) {
            const int64_t lo = std::clamp<int64_t>(d.pad - kw, 0, d.Wo);
            const int64_t hi = std::clamp<int64_t>(d.W + d.pad - kw, lo, d.Wo);
            T* o = out - d.pad + kw;
            for (int64_t ow = lo; ow < hi; ++ow) o[ow] += in[ow];
          } else {
            for (int64_t ow = 0; ow < d.Wo; ++ow) {
              const int64_t iw = ow * d.stride - d.pad + kw;
              if (iw >= 0 && iw < d.W) out[iw] += in[ow];
            }
          }
        }
      }
}

// 1×1 convolution with stride 1 and no padding needs no im2col: col is the input plane itself.
bool is_pointwise(const ConvDims& d) { return d.k == 1 && d.stride == 1 && d.pad == 0; }

// Samples per GEMM: as many as keep the col buffer (K·S·P values) near a megabyte, at most 4 —
// measured on the example CNN (bench/layers): S = 4 ran conv2 ~1.3x faster than S = 1, while
// S = 16 fell back as col left the cache.
int64_t group_size(const ConvDims& d) {
  const int64_t by_cache = (256 * 1024) / std::max<int64_t>(1, d.K() * d.P());
  static const int64_t forced = knobs::get_int("EDP_CONV_GROUP");  // tuning knob: fixed S
  if (forced > 0) return forced;
  return std::clamp<int64_t>(by_cache, 1, 4);
}

// ---- the oneDNN implementation -------------------------------------------------------------
#if EDP_HAVE_DNNL
namespace dnnl_impl {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// The engine and its ISA policy (EDP_CPU_ISA): dnnl_engine.cpp.
dnnl::engine& engine() { return dnnl_engine(); }

// Everything oneDNN needs for one shape: the primitive descriptors (the layouts it chose) and
// the primitives. The backward ones are made on first use: inference never needs them.
struct Plan {
  dnnl::memory::desc x_plain, w_plain, y_plain, b_plain;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  std::optional<dnnl::convolution_backward_data::primitive_desc> bwd_data_pd;
  std::optional<dnnl::convolution_backward_data> bwd_data;
  std::optional<dnnl::convolution_backward_weights::primitive_desc> bwd_w_pd;
  std::optional<dnnl::convolution_backward_weights> bwd_w;
};

// The shape, the fused ops, and the thread count: oneDNN's OpenMP primitives split their work for
// the threads there were when they were created and run that many, so a plan made before the
// count changed (an elastic job's ranks follow the ranks on their host) would oversubscribe the
// cores or leave some idle.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int>;

struct Geometry {
  dims strides, pad_l, pad_r;
};

// oneDNN wants the right/bottom padding that makes its output size match ours exactly.
Geometry geometry(const ConvDims& d) {
  const int64_t pr_h = (d.Ho - 1) * d.stride + d.k - d.H - d.pad;
  const int64_t pr_w = (d.Wo - 1) * d.stride + d.k - d.W - d.pad;
  return {{d.stride, d.stride}, {d.pad, d.pad}, {pr_h, pr_w}};
}

// Shapes the oneDNN path takes: float32 with at least 8 input channels, and no input rows or
// columns that the convolution never reads (negative right padding, which oneDNN 2.x does not
// accept in every kernel). Few input channels (a model's first layer: 1 for Fashion-MNIST, 3
// for CIFAR) stay on im2col + Eigen, by measurement (bench/layers, the example CNN's conv1,
// 1 thread): the reduction is only Ci·k·k = 9 long, so the work is moving the 32-channel output,
// and oneDNN's blocked output plus its reorder back to NCHW made the forward 1.2-1.5x slower,
// while its weight gradient for Ci = 1 took 9 ms where Eigen takes 2.
bool supports(const ConvDims& d, DType t) {
  if (t != DType::F32 || d.C < 8) return false;
  const Geometry g = geometry(d);
  return g.pad_r[0] >= 0 && g.pad_r[1] >= 0;
}

std::mutex& plan_mutex() {
  static std::mutex m;
  return m;
}

Plan& plan_for(const ConvDims& d, bool bias, bool relu) {
  static std::map<Key, std::unique_ptr<Plan>> plans;
  const Key key{d.N, d.C, d.H, d.W, d.O, d.k, d.stride, d.pad, bias, relu, ::edp::num_threads()};
  std::lock_guard<std::mutex> lock(plan_mutex());
  auto it = plans.find(key);
  if (it != plans.end()) return *it->second;
  const Geometry g = geometry(d);
  const dims xs{d.N, d.C, d.H, d.W}, ws{d.O, d.C, d.k, d.k}, ys{d.N, d.O, d.Ho, d.Wo}, bs{d.O};
  const dnnl::memory::desc x_any(xs, dt::f32, tag::any), w_any(ws, dt::f32, tag::any),
      y_any(ys, dt::f32, tag::any), b_md(bs, dt::f32, tag::x);
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
  }
  auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                     dnnl::algorithm::convolution_direct, x_any, w_any,
                                                     b_md, y_any, g.strides, g.pad_l, g.pad_r)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                     dnnl::algorithm::convolution_direct, x_any, w_any,
                                                     y_any, g.strides, g.pad_l, g.pad_r);
  dnnl::convolution_forward::primitive_desc pd(desc, attr, engine());
  auto plan = std::make_unique<Plan>(Plan{dnnl::memory::desc(xs, dt::f32, tag::nchw),
                                          dnnl::memory::desc(ws, dt::f32, tag::oihw),
                                          dnnl::memory::desc(ys, dt::f32, tag::nchw), b_md, pd,
                                          dnnl::convolution_forward(pd), {}, {}, {}, {}});
  Plan& p = *plan;
  plans.emplace(key, std::move(plan));
  return p;
}

void make_backward(Plan& p, const ConvDims& d, bool bias) {
  std::lock_guard<std::mutex> lock(plan_mutex());
  if (p.bwd_w) return;
  const Geometry g = geometry(d);
  const dnnl::memory::desc x_any(p.x_plain.dims(), dt::f32, tag::any),
      w_any(p.w_plain.dims(), dt::f32, tag::any), y_any(p.y_plain.dims(), dt::f32, tag::any);
  dnnl::convolution_backward_data::desc dd(dnnl::algorithm::convolution_direct, x_any, w_any, y_any,
                                           g.strides, g.pad_l, g.pad_r);
  p.bwd_data_pd.emplace(dd, engine(), p.fwd_pd);
  p.bwd_data.emplace(*p.bwd_data_pd);
  auto wd = bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_any,
                                                            w_any, p.b_plain, y_any, g.strides, g.pad_l,
                                                            g.pad_r)
                 : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_any,
                                                            w_any, y_any, g.strides, g.pad_l, g.pad_r);
  p.bwd_w_pd.emplace(wd, engine(), p.fwd_pd);
  p.bwd_w.emplace(*p.bwd_w_pd);
}

// A oneDNN memory over `plain` data in the layout `want`: the data itself when the layouts are
// the same, else a reordered copy in a scratch tensor (edp's caching allocator, so steady-state
// training does not page-fault on it). `scratch` keeps the copy alive.
dnnl::memory as_layout(const dnnl::memory::desc& want, const dnnl::memory::desc& plain, float* data,
                       Tensor& scratch, dnnl::stream& s, DType scratch_dtype = DType::F32) {
  dnnl::memory src(plain, engine(), data);
  if (want == plain) return src;
  scratch = Tensor({static_cast<int64_t>(want.get_size() / sizeof(float))}, scratch_dtype);
  dnnl::memory dst(want, engine(), scratch.raw());
  dnnl::reorder(src, dst).execute(s, src, dst);
  return dst;
}

// A oneDNN memory in layout `want` for an output whose plain home is `data`: the home itself
// when the layouts agree (then `scratch` stays empty and nothing needs copying back).
dnnl::memory output_in(const dnnl::memory::desc& want, const dnnl::memory::desc& plain, float* data,
                       Tensor& scratch) {
  if (want == plain) return dnnl::memory(plain, engine(), data);
  scratch = Tensor({static_cast<int64_t>(want.get_size() / sizeof(float))}, DType::F32);
  return dnnl::memory(want, engine(), scratch.data<float>());
}

void copy_back(const dnnl::memory& m, const dnnl::memory::desc& plain, float* data, dnnl::stream& s) {
  if (m.get_desc() == plain) return;
  dnnl::memory dst(plain, engine(), data);
  dnnl::reorder(const_cast<dnnl::memory&>(m), dst).execute(s, const_cast<dnnl::memory&>(m), dst);
}

// dy in layout `want`, masked by the fused ReLU (relu_out > 0) when relu_out is given. The mask
// and oneDNN's usual layout for it (aBcd16b: channels in blocks of 16, the block innermost) are
// done in one pass: on this VM memory-bound passes over a 3 MiB activation cost ~0.5 ms each,
// an eighth of the convolution.
dnnl::memory gradient_in(const dnnl::memory::desc& want, const dnnl::memory::desc& plain, const float* dy,
                         const float* relu_out, Tensor& scratch, dnnl::stream& s) {
  if (!relu_out) return as_layout(want, plain, const_cast<float*>(dy), scratch, s);
  const dims dd = plain.dims();
  const int64_t N = dd[0], C = dd[1], P = dd[2] * dd[3], CB = (C + 15) / 16;
  if (want == dnnl::memory::desc(dd, dt::f32, tag::aBcd16b)) {
    scratch = Tensor({N * CB * P * 16}, DType::F32);
    float* out = scratch.data<float>();
#pragma omp parallel for schedule(static) collapse(2)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t cb = 0; cb < CB; ++cb) {
        float* o = out + (n * CB + cb) * P * 16;
        const int64_t c0 = cb * 16, nc = std::min<int64_t>(16, C - c0);
        if (nc < 16) std::memset(o, 0, sizeof(float) * static_cast<size_t>(P * 16));  // padded channels
        for (int64_t c = 0; c < nc; ++c) {
          const float* g = dy + (n * C + c0 + c) * P;
          const float* y = relu_out + (n * C + c0 + c) * P;
          for (int64_t v = 0; v < P; ++v) o[v * 16 + c] = y[v] > 0.f ? g[v] : 0.f;
        }
      }
    return dnnl::memory(want, engine(), out);
  }
  Tensor masked(Shape{N, C, dd[2], dd[3]}, DType::F32);
  float* m = masked.data<float>();
  parallel_for(N * C * P, [&](int64_t i) { m[i] = relu_out[i] > 0.f ? dy[i] : 0.f; });
  dnnl::memory r = as_layout(want, plain, m, scratch, s);
  if (!scratch.defined()) scratch = masked;  // the masked copy is the memory itself: keep it alive
  return r;
}

// With `keep`, the input in the forward's blocked layout is kept there for the backward's weight
// gradient (one reorder of x less per step). It is an int32 tensor so that the Eigen backward
// can tell it from its own im2col buffer (and recompute instead).
void forward(const ConvDims& d, const float* x, const float* w, const float* b, float* y, bool relu,
             Tensor* keep) {
  Plan& p = plan_for(d, b != nullptr, relu);
  dnnl::stream s(engine());
  Tensor xs, ws, ys;
  auto xm = as_layout(p.fwd_pd.src_desc(), p.x_plain, const_cast<float*>(x), xs, s,
                      keep ? DType::I32 : DType::F32);
  if (keep && xs.defined()) *keep = xs;
  auto wm = as_layout(p.fwd_pd.weights_desc(), p.w_plain, const_cast<float*>(w), ws, s);
  auto ym = output_in(p.fwd_pd.dst_desc(), p.y_plain, y, ys);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}};
  if (b) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.b_plain, engine(), const_cast<float*>(b)));
  p.fwd.execute(s, args);
  copy_back(ym, p.y_plain, y, s);
  s.wait();
}

// dy is the gradient at the convolution's output (the fused ReLU's mask already applied).
// dy is the gradient at the output; with relu_out (the fused ReLU) only where that was positive.
// `kept` is what forward kept (or undefined).
void backward(const ConvDims& d, const float* x, const float* w, const float* dy, const float* relu_out,
              float* dw, float* db, float* dx, bool relu, const Tensor& kept) {
  Plan& p = plan_for(d, db != nullptr, relu);
  make_backward(p, d, db != nullptr);
  dnnl::stream s(engine());
  Tensor dys_w, dys_d, xs, ws, dxs, dws;
  // Weight gradient, then added into dw / db (the accumulate contract; oneDNN overwrites).
  auto dym_w = gradient_in(p.bwd_w_pd->diff_dst_desc(), p.y_plain, dy, relu_out, dys_w, s);
  dnnl::memory xm;
  if (kept.defined() && kept.dtype() == DType::I32 && p.bwd_w_pd->src_desc() == p.fwd_pd.src_desc() &&
      static_cast<size_t>(kept.numel()) * sizeof(float) == p.fwd_pd.src_desc().get_size())
    xm = dnnl::memory(p.fwd_pd.src_desc(), engine(), kept.raw());
  else
    xm = as_layout(p.bwd_w_pd->src_desc(), p.x_plain, const_cast<float*>(x), xs, s);
  Tensor dw_new({d.O * d.K()}, DType::F32), db_new;
  auto dwm = output_in(p.bwd_w_pd->diff_weights_desc(), p.w_plain, dw_new.data<float>(), dws);
  std::unordered_map<int, dnnl::memory> wargs{{DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, dym_w},
                                              {DNNL_ARG_DIFF_WEIGHTS, dwm}};
  if (db) {
    db_new = Tensor({d.O}, DType::F32);
    wargs.emplace(DNNL_ARG_DIFF_BIAS, dnnl::memory(p.b_plain, engine(), db_new.data<float>()));
  }
  p.bwd_w->execute(s, wargs);
  copy_back(dwm, p.w_plain, dw_new.data<float>(), s);
  if (dx) {
    // The weight-gradient pass usually wants dy in the same blocked layout: reuse that copy.
    dnnl::memory dym_d = p.bwd_data_pd->diff_dst_desc() == dym_w.get_desc()
                             ? dym_w
                             : gradient_in(p.bwd_data_pd->diff_dst_desc(), p.y_plain, dy, relu_out, dys_d, s);
    auto wm = as_layout(p.bwd_data_pd->weights_desc(), p.w_plain, const_cast<float*>(w), ws, s);
    auto dxm = output_in(p.bwd_data_pd->diff_src_desc(), p.x_plain, dx, dxs);
    p.bwd_data->execute(s, {{DNNL_ARG_DIFF_DST, dym_d}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dxm}});
    copy_back(dxm, p.x_plain, dx, s);
  }
  s.wait();
  const float* dwn = dw_new.data<float>();
  for (int64_t i = 0; i < d.O * d.K(); ++i) dw[i] += dwn[i];
  if (db)
    for (int64_t o = 0; o < d.O; ++o) db[o] += db_new.data<float>()[o];
}

}  // namespace dnnl_impl
#endif  // EDP_HAVE_DNNL

// Which implementation this call takes (see the top of the file).
CpuConv& conv_override() {
  static CpuConv c = CpuConv::automatic;
  return c;
}

CpuConv from_knob() {
  static const CpuConv k = [] {
    const std::string v = knobs::get_string("EDP_CPU_CONV");
    if (v == "eigen") return CpuConv::eigen;
    if (v == "dnnl") {
      EDP_CHECK(EDP_HAVE_DNNL, "EDP_CPU_CONV=dnnl: this build of edp has no oneDNN (configure with "
                               "-DEDP_DNNL=ON and libdnnl-dev installed)");
      return CpuConv::dnnl;
    }
    return CpuConv::automatic;
  }();
  return k;
}

bool use_dnnl(const ConvDims& d, DType t) {
#if EDP_HAVE_DNNL
  CpuConv c = conv_override() != CpuConv::automatic ? conv_override() : from_knob();
  return c != CpuConv::eigen && dnnl_impl::supports(d, t);
#else
  (void)d;
  (void)t;
  if (conv_override() == CpuConv::automatic) from_knob();  // EDP_CPU_CONV=dnnl: say it is missing
  return false;
#endif
}

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Conv2dGeometry g,
                      Tensor* col_keep) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, w, b))
  {
    // cuDNN keeps no im2col (col_keep stays empty); the fused ReLU is a separate kernel there.
    Tensor y = cuda::conv2d_forward(x, w, b, g);
    return g.relu ? relu_forward(y) : y;
  }
#endif
  const char* op = "conv2d_forward";
  require_cpu(x, op, "input");
  require_cpu(w, op, "weight");
  require_dtype(x, w, op);
  const ConvDims d = conv_dims(x, w, g, op);
  if (b.defined())
    EDP_CHECK_SHAPE(b.ndim() == 1 && b.dim(0) == d.O, op, ": bias ", b.shape().str(),
                    " does not fit weight ", w.shape().str());
  Tensor y({d.N, d.O, d.Ho, d.Wo}, x.dtype());
#if EDP_HAVE_DNNL
  if (use_dnnl(d, x.dtype())) {
    dnnl_impl::forward(d, x.data<float>(), w.data<float>(), b.defined() ? b.data<float>() : nullptr,
                       y.data<float>(), g.relu, col_keep);
    return y;
  }
#endif
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T* bp = b.defined() ? b.data<T>() : nullptr;
    CMatR<T> Wm(w.data<T>(), d.O, d.K());
    const int64_t S = group_size(d), groups = (d.N + S - 1) / S;
    T* keep = nullptr;
    if (col_keep && !is_pointwise(d)) {
      *col_keep = Tensor({d.N * d.K() * d.P()}, x.dtype());
      keep = col_keep->data<T>();
    }
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t n0, n1;
      thread_range(d.N, t, nt, n0, n1);
      if (is_pointwise(d)) {
        for (int64_t n = n0; n < n1; ++n) {
          MatR<T> Y(yp + n * d.O * d.P(), d.O, d.P());
          Y.noalias() = Wm * CMatR<T>(xp + n * d.C * d.H * d.W, d.K(), d.P());
          if (bp)
            for (int64_t o = 0; o < d.O; ++o) Y.row(o).array() += bp[o];
          if (g.relu) Y = Y.cwiseMax(T(0));
        }
      } else {
        // Groups of S samples (group q = samples [qS, qS + S)), whole groups per thread: col
        // [K, s·P] side by side, out [O, s·P], then scattered into NCHW. The group layout does
        // not depend on the thread count, so a kept col is valid for any backward.
        Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> local, out;
        if (!keep) local.resize(d.K(), S * d.P());
        int64_t q0, q1;
        thread_range(groups, t, nt, q0, q1);
        for (int64_t q = q0; q < q1; ++q) {
          const int64_t n = q * S, s = std::min(S, d.N - n), ld = s * d.P();
          T* col = keep ? keep + n * d.K() * d.P() : local.data();
          for (int64_t j = 0; j < s; ++j)
            im2col(xp + (n + j) * d.C * d.H * d.W, col + j * d.P(), d, ld);
          out.noalias() = Wm * CMatR<T>(col, d.K(), ld);
          for (int64_t j = 0; j < s; ++j)
            for (int64_t o = 0; o < d.O; ++o) {
              const T* src = out.data() + o * ld + j * d.P();
              T* dst = yp + ((n + j) * d.O + o) * d.P();
              const T bo = bp ? bp[o] : T(0);
              if (g.relu)
                for (int64_t v = 0; v < d.P(); ++v) dst[v] = std::max(src[v] + bo, T(0));
              else
                for (int64_t v = 0; v < d.P(); ++v) dst[v] = src[v] + bo;
            }
        }
      }
    }
  });
  return y;
}

Tensor conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                       Conv2dGeometry g, bool want_dx, const Tensor* col_kept,
                       const Tensor* relu_out) {
#if EDP_HAVE_CUDA
  if (on_cuda(x, w, dy, dw))
    return cuda::conv2d_backward(x, w, g.relu ? relu_backward(*relu_out, dy) : dy, dw, db, g,
                                 want_dx);
#endif
  const char* op = "conv2d_backward";
  require_cpu(dy, op, "grad_output");
  const ConvDims d = conv_dims(x, w, g, op);
  EDP_CHECK_SHAPE(dy.shape() == Shape({d.N, d.O, d.Ho, d.Wo}), op, ": grad_output ",
                  dy.shape().str(), " does not match the output [", d.N, ", ", d.O, ", ", d.Ho,
                  ", ", d.Wo, "]");
  check_same_shape(dw, w, "conv2d_backward: weight grad vs weight");
  if (g.relu) {
    EDP_CHECK(relu_out && relu_out->defined(), op, ": a fused-ReLU convolution needs its output for backward");
    check_same_shape(*relu_out, dy, "conv2d_backward: output vs grad_output");
  }
#if EDP_HAVE_DNNL
  if (use_dnnl(d, x.dtype())) {
    require_cpu(x, op, "input");
    require_cpu(w, op, "weight");
    require_dtype(x, w, op);
    require_dtype(x, dy, op);
    Tensor dx = want_dx ? Tensor(x.shape(), x.dtype()) : Tensor();
    dnnl_impl::backward(d, x.data<float>(), w.data<float>(), dy.data<float>(),
                        g.relu ? relu_out->data<float>() : nullptr, dw.data<float>(),
                        db ? db->data<float>() : nullptr, want_dx ? dx.data<float>() : nullptr, g.relu,
                        col_kept ? *col_kept : Tensor());
    return dx;
  }
#endif
  Tensor dx;
  if (want_dx) dx = Tensor::zeros(x.shape(), x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const T* xp = x.data<T>();
    const T* dyp = dy.data<T>();
    CMatR<T> Wm(w.data<T>(), d.O, d.K());
    const int T_ = std::max(1, std::min<int>(omp_get_max_threads(), static_cast<int>(d.N)));
    std::vector<Mat> dw_part(static_cast<size_t>(T_));
    std::vector<Eigen::Matrix<T, Eigen::Dynamic, 1>> db_part(static_cast<size_t>(T_));
    const int64_t S = group_size(d), groups = (d.N + S - 1) / S;
    const T* yrp = g.relu ? relu_out->data<T>() : nullptr;
    const T* kept = nullptr;
    // An int32 buffer is the oneDNN forward's (its blocked input): not an im2col, recompute.
    if (col_kept && col_kept->defined() && col_kept->dtype() != DType::I32 && !is_pointwise(d)) {
      EDP_CHECK(col_kept->numel() == d.N * d.K() * d.P() && col_kept->dtype() == x.dtype(), op,
                ": the kept im2col buffer does not match this input (forward and backward inputs differ)");
      kept = col_kept->data<T>();
    }
#pragma omp parallel num_threads(T_)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t n0, n1;
      thread_range(d.N, t, nt, n0, n1);
      Mat& DWt = dw_part[static_cast<size_t>(t)];
      DWt.setZero(d.O, d.K());
      auto& DBt = db_part[static_cast<size_t>(t)];
      DBt.setZero(d.O);
      if (is_pointwise(d)) {
        Mat masked;
        for (int64_t n = n0; n < n1; ++n) {
          CMatR<T> X(xp + n * d.C * d.H * d.W, d.K(), d.P());
          const T* dyn = dyp + n * d.O * d.P();
          if (g.relu) {
            masked = (CMatR<T>(yrp + n * d.O * d.P(), d.O, d.P()).array() > T(0))
                         .select(CMatR<T>(dyn, d.O, d.P()), T(0));
            dyn = masked.data();
          }
          CMatR<T> DY(dyn, d.O, d.P());
          DWt.noalias() += DY * X.transpose();
          if (db) DBt += DY.rowwise().sum();
          if (want_dx)
            MatR<T>(dx.data<T>() + n * d.C * d.H * d.W, d.K(), d.P()).noalias() = Wm.transpose() * DY;
        }
      } else {
        // Same groups as forward: dY of a group gathered into [O, s·P].
        Mat local, dyg(d.O, S * d.P()), dcol;
        if (!kept) local.resize(d.K(), S * d.P());
        int64_t q0, q1;
        thread_range(groups, t, nt, q0, q1);
        for (int64_t q = q0; q < q1; ++q) {
          const int64_t n = q * S, s = std::min(S, d.N - n), ld = s * d.P();
          const T* col = kept ? kept + n * d.K() * d.P() : local.data();
          for (int64_t j = 0; j < s; ++j) {
            if (!kept) im2col(xp + (n + j) * d.C * d.H * d.W, local.data() + j * d.P(), d, ld);
            for (int64_t o = 0; o < d.O; ++o) {
              const T* src = dyp + ((n + j) * d.O + o) * d.P();
              T* dst = dyg.data() + o * ld + j * d.P();
              if (g.relu) {  // the fused ReLU's backward, applied while gathering
                const T* yr = yrp + ((n + j) * d.O + o) * d.P();
                for (int64_t v = 0; v < d.P(); ++v) {
                  const T gv = src[v];
                  dst[v] = yr[v] > T(0) ? gv : T(0);
                }
              } else {
                std::copy_n(src, d.P(), dst);
              }
            }
          }
          CMatR<T> DY(dyg.data(), d.O, ld);
          DWt.noalias() += DY * CMatR<T>(col, d.K(), ld).transpose();
          if (db) DBt += DY.rowwise().sum();
          if (want_dx) {
            dcol.noalias() = Wm.transpose() * DY;
            for (int64_t j = 0; j < s; ++j)
              col2im(dcol.data() + j * d.P(), dx.data<T>() + (n + j) * d.C * d.H * d.W, d, ld);
          }
        }
      }
    }
    MatR<T> DW(dw.data<T>(), d.O, d.K());
    for (int t = 0; t < T_; ++t) {
      if (dw_part[static_cast<size_t>(t)].size()) DW += dw_part[static_cast<size_t>(t)];
    }
    if (db) {
      Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>> DB(db->data<T>(), d.O);
      for (int t = 0; t < T_; ++t)
        if (db_part[static_cast<size_t>(t)].size()) DB += db_part[static_cast<size_t>(t)];
    }
  });
  return dx;
}

void set_cpu_conv(CpuConv c) {
  EDP_CHECK(c != CpuConv::dnnl || EDP_HAVE_DNNL,
            "set_cpu_conv(dnnl): this build of edp has no oneDNN (configure with -DEDP_DNNL=ON)");
  conv_override() = c;
}

bool cpu_conv_has_dnnl() { return EDP_HAVE_DNNL; }

const char* cpu_conv_name() {
  const ConvDims probe{1, 16, 3, 3, 1, 3, 1, 1, 1, 0};  // a layer past the first
  return use_dnnl(probe, DType::F32) ? "dnnl" : "eigen";
}

}  // namespace edp::ops
