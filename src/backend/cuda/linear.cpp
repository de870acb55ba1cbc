// Linear on the GPU — the op of backend/cpu/linear.cpp (the oracle: same math, same gradient
// contract) — through cuBLASLt, hence no kernels/linear.cu. The three products of a Linear step (forward, input
// gradient, accumulating weight gradient) are mapped from edp's row-major layout to cuBLASLt's
// column-major one by launch.h's linear_gemm (unit-tested on the CPU). The bias is fused into
// the forward product with the BIAS epilogue; if cuBLASLt offers no algorithm for it, the product
// runs without it and a bias kernel adds it in place. The bias gradient is a column sum
// (kernels/reduce.cu). TF32 tensor cores unless EDP_TF32=0.
//
// Per device: one cuBLASLt handle; per (device, stream): a 32 MiB workspace (concurrent streams
// must not share one); per problem shape: the matmul descriptor, layouts and the algorithm
// chosen by cuBLASLt's heuristic, cached so that a training step does no planning after the
// first. With ops::matmul_bf16() the operands are rounded to bfloat16 (kernels/bf16.cu) and the
// products accumulate and write float32 (CUBLAS_COMPUTE_32F).
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "cuda/cublas.h"

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/kernels.h"
#include "kernels/launch.h"
#include "edp/backend/cuda_ops.h"
#include "common.h"

namespace edp::cuda {
using namespace detail;

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 4 && (a % al) != 0) al >>= 1;
  return al;
}

struct PlanKey {
  GemmSpec g;
  bool bias, tf32;
  bool bf16;  // bfloat16 A and B (ops::matmul_bf16), float32 D and accumulation
  uint32_t align_a, align_b, align_d;
  auto tie() const {
    return std::make_tuple(g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.beta, bias,
                           tf32, bf16, align_a, align_b, align_d);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;  // the heuristic found an algorithm
};

struct LtState {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  std::map<PlanKey, Plan> plans;
  std::map<cudaStream_t, Tensor> workspaces;
};

LtState& lt_state(int device) {
  return per_device_state<LtState>(device, [](auto& s) { CUBLAS_CHECK(cuda::lazy::cublasLtCreate(&s.handle)); });
}

Plan make_plan(cublasLtHandle_t h, const PlanKey& key) {
  const GemmSpec& g = key.g;
  Plan p;
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulDescCreate(
      &p.desc, key.tf32 && !key.bf16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (key.bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(cuda::lazy::cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  }
  const cudaDataType_t in = key.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  CUBLAS_CHECK(cuda::lazy::cublasLtMatrixLayoutCreate(&p.a, in, static_cast<uint64_t>(g.a_rows()),
                                          static_cast<uint64_t>(g.a_cols()), g.lda));
  CUBLAS_CHECK(cuda::lazy::cublasLtMatrixLayoutCreate(&p.b, in, static_cast<uint64_t>(g.b_rows()),
                                          static_cast<uint64_t>(g.b_cols()), g.ldb));
  CUBLAS_CHECK(cuda::lazy::cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, static_cast<uint64_t>(g.m),
                                          static_cast<uint64_t>(g.n), g.ldd));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a, sizeof key.align_a));
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b, sizeof key.align_b));
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_d, sizeof key.align_d));
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d, sizeof key.align_d));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cuda::lazy::cublasLtMatmulAlgoGetHeuristic(h, p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &found);
  (void)cuda::lazy::cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
    p.algo = res.algo;
    p.ok = true;
  } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
    CUBLAS_CHECK(st);
  }
  return p;
}

// D = op(A) op(B) (+ D when beta = 1) (+ bias) on `c`'s stream; A and B are float32, or bfloat16
// when bf16.
void gemm(const Ctx& c, const GemmSpec& g, const void* A, const void* B, float* D, const float* bias,
          bool bf16 = false) {
  LtState& st = lt_state(c.device);
  std::lock_guard<std::mutex> lock(st.mu);
  PlanKey key{g, bias != nullptr, tf32_enabled(), bf16, alignment_of(A), alignment_of(B), alignment_of(D)};
  auto it = st.plans.find(key);
  if (it == st.plans.end()) it = st.plans.emplace(key, make_plan(st.handle, key)).first;
  const Plan* plan = &it->second;
  const float* fused_bias = bias;
  if (!plan->ok && bias) {
    // No fused algorithm for this shape: plain product, bias added by our kernel below.
    PlanKey plain = key;
    plain.bias = false;
    auto jt = st.plans.find(plain);
    if (jt == st.plans.end()) jt = st.plans.emplace(plain, make_plan(st.handle, plain)).first;
    plan = &jt->second;
    fused_bias = nullptr;
  }
  EDP_CHECK(plan->ok, "cuBLASLt has no algorithm for the ", g.m, "x", g.n, "x", g.k, bf16 ? " bfloat16" : " float32",
            " product (transa=", g.trans_a, ", transb=", g.trans_b,
            "); try EDP_TF32=0 (or without bfloat16) or report this shape");
  if (fused_bias)
    CUBLAS_CHECK(cuda::lazy::cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &fused_bias, sizeof fused_bias));
  Tensor& ws = st.workspaces[c.stream];
  if (!ws.defined()) ws = Tensor({static_cast<int64_t>(kWorkspaceBytes)}, DType::U8, c.dev());
  const float alpha = 1.0f, beta = g.beta;
  CUBLAS_CHECK(cuda::lazy::cublasLtMatmul(st.handle, plan->desc, &alpha, A, plan->a, B, plan->b, &beta, D,
                              plan->d, D, plan->d, &plan->algo, ws.raw(), kWorkspaceBytes, c.stream));
  if (bias && !fused_bias)  // D is yᵀ [O, N]: bias index = row = (i % O) → channel layout C=O, inner=1
    kern::bias_act_forward(D, bias, D, g.m * g.n, g.m, 1, kern::Act::Identity, c.stream);
}

const void* pick(Operand o, const void* x, const void* w, const void* dy) {
  switch (o) {
    case Operand::X: return x;
    case Operand::W: return w;
    case Operand::DY: return dy;
  }
  return nullptr;
}

// The operands of a step's products: the float32 tensors themselves, or (ops::matmul_bf16) their
// bfloat16 roundings, made once per call and shared by the products that read them.
struct Operands {
  Tensor xb, wb, dyb;
  const void *x, *w, *dy;
  bool bf16;
  Operands(const Ctx& c, const Tensor& x_, const Tensor& w_, const Tensor* dy_) : bf16(ops::matmul_bf16()) {
    auto round = [&](const Tensor& t, Tensor& keep) -> const void* {
      if (!bf16) return t.raw();
      keep = Tensor(t.shape(), DType::BF16, c.dev());
      kern::to_bf16(cf32(t), keep.raw(), t.numel(), c.stream);
      return keep.raw();
    };
    x = round(x_, xb);
    w = round(w_, wb);
    dy = dy_ ? round(*dy_, dyb) : nullptr;
  }
};

}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  const char* op = "linear_forward";
  const int d = op_device(x, op, "input");
  require(w, d, DType::F32, op, "weight");
  EDP_CHECK_SHAPE(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1), op, ": input ",
                  x.shape().str(), " does not fit weight ", w.shape().str(),
                  " (expected input [N, ", w.ndim() == 2 ? w.dim(1) : -1, "])");
  if (b.defined()) {
    require(b, d, DType::F32, op, "bias");
    EDP_CHECK_SHAPE(b.ndim() == 1 && b.dim(0) == w.dim(0), op, ": bias ", b.shape().str(),
                    " does not fit weight ", w.shape().str());
  }
  const int64_t N = x.dim(0), I = x.dim(1), O = w.dim(0);
  Ctx c(d);
  Tensor y({N, O}, DType::F32, c.dev());
  if (N == 0 || O == 0) return y;
  if (I == 0) {  // empty product: y = bias (or 0)
    CUDA_CHECK(cudaMemsetAsync(y.raw(), 0, y.nbytes(), c.stream));
    if (b.defined()) kern::bias_act_forward(f32(y), cf32(b), f32(y), N * O, O, 1, kern::Act::Identity, c.stream);
    return y;
  }
  const GemmSpec g = linear_gemm(LinearPass::Forward, N, I, O);
  const Operands in(c, x, w, nullptr);
  gemm(c, g, pick(g.a, in.x, in.w, nullptr), pick(g.b, in.x, in.w, nullptr), f32(y), b.defined() ? cf32(b) : nullptr,
       in.bf16);
  return y;
}

Tensor linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                       bool want_dx) {
  const char* op = "linear_backward";
  const int d = op_device(dy, op, "grad_output");
  require(x, d, DType::F32, op, "input");
  require(w, d, DType::F32, op, "weight");
  require(dw, d, DType::F32, op, "weight grad");
  EDP_CHECK_SHAPE(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1), op, ": input ",
                  x.shape().str(), " does not fit weight ", w.shape().str());
  const int64_t N = x.dim(0), I = x.dim(1), O = w.dim(0);
  EDP_CHECK_SHAPE(dy.ndim() == 2 && dy.dim(0) == N && dy.dim(1) == O, op, ": grad_output ",
                  dy.shape().str(), " does not match output [", N, ", ", O, "]");
  check_same_shape(dw, w, "linear_backward: weight grad vs weight");
  if (db) {
    require(*db, d, DType::F32, op, "bias grad");
    EDP_CHECK_SHAPE(db->ndim() == 1 && db->dim(0) == O, op, ": bias grad ", db->shape().str(),
                    " does not fit ", O, " outputs");
  }
  Ctx c(d);
  Tensor dx;
  if (want_dx) dx = Tensor({N, I}, DType::F32, c.dev());
  if (N == 0 || O == 0 || I == 0) {
    if (want_dx && dx.nbytes()) CUDA_CHECK(cudaMemsetAsync(dx.raw(), 0, dx.nbytes(), c.stream));
    if (db && N > 0 && O > 0) {
      Tensor partial = scratch(c, O, DType::F64);
      kern::channel_sum_accumulate(cf32(dy), f32(*db), N, O, 1, ptr<double>(partial), 1, c.stream);
    }
    return dx;
  }
  const GemmSpec gw = linear_gemm(LinearPass::GradWeight, N, I, O);
  const Operands in(c, x, w, &dy);
  gemm(c, gw, pick(gw.a, in.x, in.w, in.dy), pick(gw.b, in.x, in.w, in.dy), f32(dw), nullptr, in.bf16);
  if (db) {
    const int64_t splits = column_splits(O, N, sm_count(d));
    Tensor partial = scratch(c, splits * O, DType::F64);
    kern::channel_sum_accumulate(cf32(dy), f32(*db), N, O, 1, ptr<double>(partial), splits, c.stream);
  }
  if (want_dx) {
    const GemmSpec gx = linear_gemm(LinearPass::GradInput, N, I, O);
    gemm(c, gx, pick(gx.a, in.x, in.w, in.dy), pick(gx.b, in.x, in.w, in.dy), f32(dx), nullptr, in.bf16);
  }
  return dx;
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
