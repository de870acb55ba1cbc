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
//   implementations against each other. The ISA follows EDP_CPU_ISA (dnnl_engine.cpp). The
//   oneDNN calls are in conv2d_dnnl.cpp.
#include <algorithm>
#include <vector>

#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#include "edp/core/knobs.h"
#include "edp/core/threads.h"
#include "edp/core/log.h"
#include "conv2d_dims.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

namespace {


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
  return c != CpuConv::eigen && dnnl_conv::supports(d, t);
#else
  (void)d;
  (void)t;
  if (conv_override() == CpuConv::automatic) from_knob();  // EDP_CPU_CONV=dnnl: say it is missing
  return false;
#endif
}

// The Eigen backward (see the top of the file): per-thread dW / dB partials summed in thread
// order; dx (zeroed, or undefined when not wanted) receives col2im of Wᵀ·dY.
template <typename T>
void eigen_backward(const ConvDims& d, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                    Tensor& dx, bool want_dx, const Conv2dGeometry& g, const Tensor* col_kept,
                    const Tensor* relu_out, const char* op) {
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
    dnnl_conv::forward(d, x.data<float>(), w.data<float>(), b.defined() ? b.data<float>() : nullptr,
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
    dnnl_conv::backward(d, x.data<float>(), w.data<float>(), dy.data<float>(),
                        g.relu ? relu_out->data<float>() : nullptr, dw.data<float>(),
                        db ? db->data<float>() : nullptr, want_dx ? dx.data<float>() : nullptr, g.relu,
                        col_kept ? *col_kept : Tensor());
    return dx;
  }
#endif
  Tensor dx;
  if (want_dx) dx = Tensor::zeros(x.shape(), x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    eigen_backward<decltype(tag)>(d, x, w, dy, dw, db, dx, want_dx, g, col_kept, relu_out, op);
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
