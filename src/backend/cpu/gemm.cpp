// The CPU matrix product of gemm.h and the process-wide bfloat16 switch of edp/backend/ops.h.
//
// bfloat16 path: the operands are rounded to bfloat16 (round to nearest even) into thread-local
// buffers in their stored layout, and a oneDNN matmul — described with strides, so a transposed
// operand is not copied — multiplies them with float32 accumulation and a float32 result (an
// output scale for alpha, a sum post-op for accumulate). Primitives are cached per shape. oneDNN's
// CPU matmul is run-to-run deterministic at a fixed thread count and ISA, so deterministic mode
// and bitwise resume hold in bfloat16 too.
#include "gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "dnnl_engine.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#include "edp/core/dtype.h"
#include "edp/core/error.h"
#include "edp/core/knobs.h"

namespace edp::ops {

namespace {
std::atomic<int> g_bf16{-1};  // -1: not decided yet (EDP_BF16 read on first use)
}

bool cpu_bf16_available(std::string* why) {
#if EDP_HAVE_DNNL
  // Every CPU with AMX-BF16 (Sapphire Rapids on) also has AVX512-BF16.
  if (!__builtin_cpu_supports("avx512bf16")) {
    if (why) *why = "this CPU has no AVX512-BF16";
    return false;
  }
  const std::string isa = cpu::dnnl_isa_name();
  if (isa != "avx512_core_bf16" && isa != "avx512_core_amx" && isa != "all" && isa != "other") {
    if (why) *why = "oneDNN is capped at " + isa + " (EDP_CPU_ISA=build or DNNL_MAX_CPU_ISA), which has no bfloat16 products";
    return false;
  }
  return true;
#else
  if (why) *why = "this build of edp has no oneDNN (EDP_DNNL)";
  return false;
#endif
}

const char* cpu_isa_name() {
#if EDP_HAVE_DNNL
  return cpu::dnnl_isa_name();
#else
  return "none";
#endif
}

bool set_matmul_bf16(bool on) {
  g_bf16 = on ? 1 : 0;
  return !on || cpu_bf16_available();
}

bool matmul_bf16() {
  int v = g_bf16.load();
  if (v < 0) {
    v = knobs::get_bool("EDP_BF16") ? 1 : 0;
    g_bf16 = v;
  }
  return v == 1;
}

namespace cpu {

namespace {

template <typename M>
using Strided = Eigen::Map<M, 0, Eigen::OuterStride<>>;
template <typename T>
using Row = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename T>
void gemm_eigen(Mat<T> A, bool ta, Mat<T> B, bool tb, T* C, int64_t ldc, T alpha, bool acc) {
  Strided<const Row<T>> a(A.p, A.rows, A.cols, Eigen::OuterStride<>(A.ld));
  Strided<const Row<T>> b(B.p, B.rows, B.cols, Eigen::OuterStride<>(B.ld));
  const int64_t M = ta ? A.cols : A.rows, N = tb ? B.rows : B.cols;
  if (M == 0 || N == 0) return;
  Strided<Row<T>> c(C, M, N, Eigen::OuterStride<>(ldc));
  // Eight variants so that each is one Eigen product without temporaries.
  if (acc) {
    if (!ta && !tb) c.noalias() += alpha * a * b;
    else if (ta && !tb) c.noalias() += alpha * a.transpose() * b;
    else if (!ta && tb) c.noalias() += alpha * a * b.transpose();
    else c.noalias() += alpha * a.transpose() * b.transpose();
  } else {
    if (!ta && !tb) c.noalias() = alpha * a * b;
    else if (ta && !tb) c.noalias() = alpha * a.transpose() * b;
    else if (!ta && tb) c.noalias() = alpha * a * b.transpose();
    else c.noalias() = alpha * a.transpose() * b.transpose();
  }
}

#if EDP_HAVE_DNNL
using dt = dnnl::memory::data_type;

// One row of n floats to bfloat16 with AVX512-BF16's VCVTNE2PS2BF16 (32 per instruction; round to
// nearest even like to_bfloat16, except that it treats denormal inputs as zero). Compiled for that
// ISA alone and called only where the CPU has it: the bf16 path needs it anyway.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void row_to_bf16_avx512(const float* s, bfloat16* d,
                                                                                        int64_t n) {
  int64_t c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + c + 16), _mm512_loadu_ps(s + c));
    _mm512_storeu_si512(d + c, reinterpret_cast<__m512i>(v));
  }
  for (; c < n; ++c) d[c] = to_bfloat16(s[c]);
}

// Rounds a stored rows × cols block (leading dimension ld) into dense bfloat16 at `out`.
void round_to_bf16(MatF m, bfloat16* out) {
  static const bool fast = __builtin_cpu_supports("avx512bf16");
  for (int64_t r = 0; r < m.rows; ++r) {
    const float* s = m.p + r * m.ld;
    bfloat16* d = out + r * m.cols;
    if (fast) {
      row_to_bf16_avx512(s, d, m.cols);
    } else {
      for (int64_t c = 0; c < m.cols; ++c) d[c] = to_bfloat16(s[c]);
    }
  }
}

// A primitive per (element type, sizes, transposes, leading dimensions, alpha, accumulate).
// Batched products add the batch count and the three batch strides. And per thread count: a
// primitive runs as many OpenMP threads as there were when it was made, so one made before an
// elastic rescale took a core away would run two threads on one core, each spinning at its barriers
// while the other waits for the core (a GPT step 30x slower, measured).
using Key = std::tuple<bool, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, float, bool, int64_t,
                       int64_t, int64_t, int64_t, int>;
struct Prim {
  dnnl::memory::desc a, b, c;
  dnnl::matmul mm;
  size_t scratch_bytes;
};

Prim& prim_for(bool bf16, int64_t M, int64_t N, int64_t K, bool ta, bool tb, int64_t lda, int64_t ldb, int64_t ldc,
               float alpha, bool acc, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Prim>> cache;
  const Key key{bf16, M, N, K, ta, tb, lda, ldb, ldc, alpha, acc, batch, sa, sb, sc, omp_get_max_threads()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  // Row-major stored operands, described by strides: A is M×K (or K×M when transposed), B is
  // K×N (or N×K), so a transposed operand is read in place.
  const dt in = bf16 ? dt::bf16 : dt::f32;
  using dims = dnnl::memory::dims;
  auto desc = [&](dims d, dims st, dt t, int64_t bs) {
    if (batch == 1) return dnnl::memory::desc(d, t, st);
    d.insert(d.begin(), batch);
    st.insert(st.begin(), bs);
    return dnnl::memory::desc(d, t, st);
  };
  const dnnl::memory::desc a = desc({M, K}, ta ? dims{1, lda} : dims{lda, 1}, in, sa);
  const dnnl::memory::desc b = desc({K, N}, tb ? dims{1, ldb} : dims{ldb, 1}, in, sb);
  const dnnl::memory::desc c = desc({M, N}, dims{ldc, 1}, dt::f32, sc);
  dnnl::primitive_attr attr;
  // Our scratchpad, not the library's: the attention runs the same primitive on several threads
  // at once, and a shared library scratchpad would be raced over.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.f) attr.set_output_scales(0, {alpha});
  if (acc) {
    dnnl::post_ops po;
    po.append_sum(1.f);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, dnnl_engine());
  auto p = std::make_unique<Prim>(Prim{a, b, c, dnnl::matmul(pd), pd.scratchpad_desc().get_size()});
  Prim& r = *p;
  cache.emplace(key, std::move(p));
  return r;
}

// One oneDNN product. A and B are the stored operands (float32 with leading dimensions, or dense
// bfloat16 copies); M, N, K the product's sizes.
void run_dnnl(bool bf16, const void* a, int64_t lda, bool ta, const void* b, int64_t ldb, bool tb, int64_t M,
              int64_t N, int64_t K, float* C, int64_t ldc, float alpha, bool acc, int64_t batch = 1, int64_t sa = 0,
              int64_t sb = 0, int64_t sc = 0) {
  thread_local std::vector<char> scratch;
  Prim& p = prim_for(bf16, M, N, K, ta, tb, lda, ldb, ldc, alpha, acc, batch, sa, sb, sc);
  if (scratch.size() < p.scratch_bytes) scratch.resize(p.scratch_bytes);
  dnnl::stream s(dnnl_engine());
  dnnl::memory am(p.a, dnnl_engine(), const_cast<void*>(a)), bm(p.b, dnnl_engine(), const_cast<void*>(b)),
      cm(p.c, dnnl_engine(), C);
  dnnl::memory sm(dnnl::memory::desc({static_cast<int64_t>(p.scratch_bytes)}, dt::u8, dnnl::memory::dims{1}),
                  dnnl_engine(), scratch.data());
  p.mm.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
  s.wait();
}

// float32 operands are read in place; bfloat16 ones are first rounded into dense thread-local
// buffers (their leading dimension becomes their stored width).
void gemm_dnnl(bool bf16, MatF A, bool ta, MatF B, bool tb, float* C, int64_t ldc, float alpha, bool acc) {
  const int64_t M = ta ? A.cols : A.rows, K = ta ? A.rows : A.cols, N = tb ? B.rows : B.cols;
  if (!bf16) return run_dnnl(false, A.p, A.ld, ta, B.p, B.ld, tb, M, N, K, C, ldc, alpha, acc);
  thread_local std::vector<bfloat16> abuf, bbuf;
  abuf.resize(static_cast<size_t>(A.rows * A.cols));
  bbuf.resize(static_cast<size_t>(B.rows * B.cols));
  round_to_bf16(A, abuf.data());
  round_to_bf16(B, bbuf.data());
  run_dnnl(true, abuf.data(), A.cols, ta, bbuf.data(), B.cols, tb, M, N, K, C, ldc, alpha, acc);
}
#endif

}  // namespace

bool gemm_in_bf16() {
  static const bool available = cpu_bf16_available();
  return available && matmul_bf16();
}

Tensor to_bf16(MatF m) {
  Tensor t({m.rows, m.cols}, DType::BF16);
  bfloat16* d = t.data<bfloat16>();
#if EDP_HAVE_DNNL
  round_to_bf16(m, d);
#else
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) d[i * m.cols + j] = to_bfloat16(m.p[i * m.ld + j]);
#endif
  return t;
}

void gemm(const Tensor& A, bool ta, const Tensor& B, bool tb, float* C, int64_t ldc, float alpha, bool accumulate) {
  EDP_CHECK(A.dtype() == DType::BF16 && B.dtype() == DType::BF16 && A.ndim() == 2 && B.ndim() == 2,
            "gemm: bfloat16 [rows, cols] operands expected, got ", A.str(), " and ", B.str());
#if EDP_HAVE_DNNL
  const int64_t M = ta ? A.dim(1) : A.dim(0), K = ta ? A.dim(0) : A.dim(1), N = tb ? B.dim(0) : B.dim(1);
  if (M == 0 || N == 0) return;
  run_dnnl(true, A.raw(), A.dim(1), ta, B.raw(), B.dim(1), tb, M, N, K, C, ldc, alpha, accumulate);
#else
  throw Error("bfloat16 products need oneDNN, which this build lacks");
#endif
}

bool gemm_on_dnnl() { return EDP_HAVE_DNNL != 0; }

void gemm(MatF A, bool ta, MatF B, bool tb, float* C, int64_t ldc, float alpha, bool accumulate) {
  const int64_t M = ta ? A.cols : A.rows, N = tb ? B.rows : B.cols;
  if (M == 0 || N == 0) return;
#if EDP_HAVE_DNNL
  const int64_t K = ta ? A.rows : A.cols;
  if (K > 0) return gemm_dnnl(gemm_in_bf16(), A, ta, B, tb, C, ldc, alpha, accumulate);
#endif
  gemm_eigen(A, ta, B, tb, C, ldc, alpha, accumulate);
}

void gemm(Mat<double> A, bool ta, Mat<double> B, bool tb, double* C, int64_t ldc, double alpha, bool accumulate) {
  gemm_eigen(A, ta, B, tb, C, ldc, alpha, accumulate);
}

void gemm_batched(int64_t batch, MatF A, int64_t sa, bool ta, MatF B, int64_t sb, bool tb, float* C, int64_t ldc,
                  int64_t sc, float alpha, bool accumulate) {
  const int64_t M = ta ? A.cols : A.rows, N = tb ? B.rows : B.cols, K = ta ? A.rows : A.cols;
  if (batch == 0 || M == 0 || N == 0) return;
#if EDP_HAVE_DNNL
  if (K > 0) {
    if (!gemm_in_bf16())
      return run_dnnl(false, A.p, A.ld, ta, B.p, B.ld, tb, M, N, K, C, ldc, alpha, accumulate, batch, sa, sb, sc);
    // bfloat16: every slice rounded into one dense buffer per operand, slices back to back.
    thread_local std::vector<bfloat16> abuf, bbuf;
    abuf.resize(static_cast<size_t>(batch * A.rows * A.cols));
    bbuf.resize(static_cast<size_t>(batch * B.rows * B.cols));
    for (int64_t i = 0; i < batch; ++i) {
      round_to_bf16({A.p + i * sa, A.rows, A.cols, A.ld}, abuf.data() + i * A.rows * A.cols);
      round_to_bf16({B.p + i * sb, B.rows, B.cols, B.ld}, bbuf.data() + i * B.rows * B.cols);
    }
    if (ldc == N && sc == M * N)
      return run_dnnl(true, abuf.data(), A.cols, ta, bbuf.data(), B.cols, tb, M, N, K, C, ldc, alpha, accumulate,
                      batch, A.rows * A.cols, B.rows * B.cols, sc);
    // oneDNN 2.6 runs a bfloat16 product whose result is strided across the batch (the heads' columns
    // of one row) on its slow generic kernel (~10x slower than AMX here): the product goes to a
    // dense buffer, then into place.
    thread_local std::vector<float> dense;
    dense.resize(static_cast<size_t>(batch * M * N));
    run_dnnl(true, abuf.data(), A.cols, ta, bbuf.data(), B.cols, tb, M, N, K, dense.data(), N, alpha, false, batch,
             A.rows * A.cols, B.rows * B.cols, M * N);
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t r = 0; r < M; ++r) {
        const float* s = dense.data() + (i * M + r) * N;
        float* c = C + i * sc + r * ldc;
        if (accumulate) {
          for (int64_t j = 0; j < N; ++j) c[j] += s[j];
        } else {
          std::copy(s, s + N, c);
        }
      }
    return;
  }
#endif
  for (int64_t i = 0; i < batch; ++i)
    gemm_eigen(MatF{A.p + i * sa, A.rows, A.cols, A.ld}, ta, MatF{B.p + i * sb, B.rows, B.cols, B.ld}, tb, C + i * sc,
               ldc, alpha, accumulate);
}

void gemm_batched(int64_t batch, Mat<double> A, int64_t sa, bool ta, Mat<double> B, int64_t sb, bool tb, double* C,
                  int64_t ldc, int64_t sc, double alpha, bool accumulate) {
  for (int64_t i = 0; i < batch; ++i)
    gemm_eigen(Mat<double>{A.p + i * sa, A.rows, A.cols, A.ld}, ta, Mat<double>{B.p + i * sb, B.rows, B.cols, B.ld},
               tb, C + i * sc, ldc, alpha, accumulate);
}

}  // namespace cpu
}  // namespace edp::ops
