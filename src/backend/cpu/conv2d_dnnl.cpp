// Conv2d on the CPU through oneDNN's JIT direct convolutions (conv2d.cpp says when this path is
// taken and why; conv2d_dims.h has the contracts). Built only with oneDNN (EDP_DNNL).
#include "conv2d_dims.h"

#if EDP_HAVE_DNNL
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "common.h"
#include "dnnl_engine.h"
#include "edp/core/threads.h"

namespace edp::ops::cpu::dnnl_conv {

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace edp::ops::cpu::dnnl_conv
#endif  // EDP_HAVE_DNNL
