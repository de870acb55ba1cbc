// Causal self-attention on the GPU — the op of backend/cpu/attention.cpp (the oracle: same math,
// same gradient contract) — from cuBLAS strided-batched GEMMs (one per product, all B·H heads at
// once) and kernels/attention.cu (layout moves, the causal masked softmax and its backward). The
// [B·H, T, T] scores live in a scratch tensor for the duration of a call; the backward recomputes
// them (and the probabilities) instead of keeping them between forward and backward, so the layer
// keeps only the [B, H, T] log-sum-exps, like the CPU one. float32 GEMMs (TF32 tensor cores unless
// EDP_TF32=0 or cuda::set_tf32(false), read like the other ops through tf32_enabled()). On the
// bfloat16 path with EDP_FUSED_ATTENTION=1 the op runs through cuDNN's fused flash attention
// instead where it can (attention_cudnn.h); these products remain its fallback and the float32 path.
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "cuda/cublas.h"

#include <cmath>

#include "attention_cudnn.h"
#include "kernels/kernels.h"
#include "edp/backend/cuda_ops.h"
#include "edp/core/knobs.h"
#include "common.h"

namespace edp::cuda {
using namespace detail;

namespace {
struct BlasState {
  cublasHandle_t handle = nullptr;
};

cublasHandle_t blas(int device, cudaStream_t s) {
  BlasState& st = per_device_state<BlasState>(device, [](BlasState& b) { CUBLAS_CHECK(cuda::lazy::cublasCreate_v2(&b.handle)); });
  CUBLAS_CHECK(cuda::lazy::cublasSetStream_v2(st.handle, s));
  CUBLAS_CHECK(cuda::lazy::cublasSetMathMode(st.handle, tf32_enabled() ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                           : CUBLAS_DEFAULT_MATH));
  return st.handle;
}

// Row-major C[M, N] = alpha · op(A) · op(B) + beta · C for each of `batch` matrices; A, B and C
// are row-major with leading dimensions lda/ldb/ldc and batch strides sa/sb/sc (A and B contiguous:
// batch · sa and batch · sb elements). cuBLAS is column-major, so it computes
// Cᵀ = op(B)ᵀ op(A)ᵀ: the operands swap places. With ops::matmul_bf16() A and B are rounded to
// bfloat16 first (kernels/bf16.cu) and the product accumulates and writes float32.
void bgemm(cublasHandle_t h, const Ctx& c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, int64_t sa, const float* B, int64_t ldb, int64_t sb, float beta, float* C,
           int64_t ldc, int64_t sc, int64_t batch) {
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (!ops::matmul_bf16()) {
    CUBLAS_CHECK(cuda::lazy::cublasSgemmStridedBatched(h, opb, opa, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K),
                                           &alpha, B, static_cast<int>(ldb), sb, A, static_cast<int>(lda), sa, &beta,
                                           C, static_cast<int>(ldc), sc, static_cast<int>(batch)));
    return;
  }
  Tensor ab({batch * sa}, DType::BF16, c.dev()), bb({batch * sb}, DType::BF16, c.dev());
  kern::to_bf16(A, ab.raw(), batch * sa, c.stream);
  kern::to_bf16(B, bb.raw(), batch * sb, c.stream);
  CUBLAS_CHECK(cuda::lazy::cublasGemmStridedBatchedEx(h, opb, opa, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K),
                                          &alpha, bb.raw(), CUDA_R_16BF, static_cast<int>(ldb), sb, ab.raw(),
                                          CUDA_R_16BF, static_cast<int>(lda), sa, &beta, C, CUDA_R_32F,
                                          static_cast<int>(ldc), sc, static_cast<int>(batch), CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
}

using Dims = AttentionDims;

Dims check_attention(const Tensor& qkv, int64_t heads, const char* op) {
  EDP_CHECK_SHAPE(qkv.ndim() == 3 && qkv.dim(2) % 3 == 0, op, ": qkv must be [B, T, 3·D], got ", qkv.shape().str());
  const int64_t D = qkv.dim(2) / 3;
  EDP_CHECK_SHAPE(heads > 0 && D % heads == 0, op, ": model width ", D, " is not a multiple of ", heads, " heads");
  return {qkv.dim(0), qkv.dim(1), D, heads, D / heads};
}

// q, k, v [B·H, T, hd] from qkv, and P [B·H, T, T] = causal softmax(q kᵀ/√hd) with its lse.
struct Probs {
  Tensor q, k, v, P, lse;
};

Probs probabilities(const Tensor& qkv, const Dims& d, const Ctx& c, cublasHandle_t h) {
  Probs p;
  const int64_t BH = d.B * d.H, n = BH * d.T * d.hd;
  p.q = scratch(c, std::max<int64_t>(n, 1), DType::F32);
  p.k = scratch(c, std::max<int64_t>(n, 1), DType::F32);
  p.v = scratch(c, std::max<int64_t>(n, 1), DType::F32);
  p.P = scratch(c, std::max<int64_t>(BH * d.T * d.T, 1), DType::F32);
  p.lse = Tensor({d.B, d.H, d.T}, DType::F32, c.dev());
  kern::attention_split(cf32(qkv), f32(p.q), f32(p.k), f32(p.v), d.B, d.T, d.H, d.hd, c.stream);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.hd)));
  if (BH * d.T > 0)
    bgemm(h, c, false, true, d.T, d.T, d.hd, scale, cf32(p.q), d.hd, d.T * d.hd, cf32(p.k), d.hd, d.T * d.hd, 0.f,
          f32(p.P), d.T, d.T * d.T, BH);
  kern::causal_softmax_forward(f32(p.P), f32(p.lse), BH, d.T, c.stream);
  return p;
}
}  // namespace

Tensor attention_forward(const Tensor& qkv, int64_t heads, Tensor& lse) {
  const char* op = "attention_forward";
  const int dev = op_device(qkv, op, "qkv");
  const Dims d = check_attention(qkv, heads, op);
  Ctx c(dev);
  Tensor fused_y;
  if (fused_attention_forward(c, qkv, d, fused_y, lse)) return fused_y;
  cublasHandle_t h = blas(dev, c.stream);
  Probs p = probabilities(qkv, d, c, h);
  const int64_t BH = d.B * d.H;
  Tensor o = scratch(c, std::max<int64_t>(BH * d.T * d.hd, 1), DType::F32);
  if (BH * d.T > 0)
    bgemm(h, c, false, false, d.T, d.hd, d.T, 1.f, cf32(p.P), d.T, d.T * d.T, cf32(p.v), d.hd, d.T * d.hd, 0.f, f32(o),
          d.hd, d.T * d.hd, BH);
  Tensor y({d.B, d.T, d.D}, DType::F32, c.dev());
  kern::attention_heads_to_rows(cf32(o), f32(y), d.B, d.T, d.H, d.hd, c.stream);
  lse = p.lse;
  return y;
}

Tensor attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& dy, const Tensor& lse, int64_t heads) {
  const char* op = "attention_backward";
  const int dev = op_device(qkv, op, "qkv");
  const Dims d = check_attention(qkv, heads, op);
  require(y, dev, DType::F32, op, "output");
  require(dy, dev, DType::F32, op, "grad_output");
  require(lse, dev, DType::F32, op, "saved log-sum-exp");
  EDP_CHECK_SHAPE(dy.shape() == Shape({d.B, d.T, d.D}), op, ": grad_output ", dy.shape().str(), " must be [", d.B,
                  ", ", d.T, ", ", d.D, "]");
  EDP_CHECK_SHAPE(lse.shape() == Shape({d.B, d.H, d.T}), op, ": saved log-sum-exp ", lse.shape().str(),
                  " must be [", d.B, ", ", d.H, ", ", d.T, "]");
  Ctx c(dev);
  Tensor fused_dqkv;
  if (fused_attention_backward(c, qkv, y, dy, lse, d, fused_dqkv)) return fused_dqkv;
  cublasHandle_t h = blas(dev, c.stream);
  Probs p = probabilities(qkv, d, c, h);  // recomputed: the forward kept only lse
  const int64_t BH = d.B * d.H, n = std::max<int64_t>(BH * d.T * d.hd, 1), st = d.T * d.hd, sp = d.T * d.T;
  Tensor dO = scratch(c, n, DType::F32), dq = scratch(c, n, DType::F32), dk = scratch(c, n, DType::F32),
         dv = scratch(c, n, DType::F32), dP = scratch(c, std::max<int64_t>(BH * sp, 1), DType::F32);
  kern::attention_rows_to_heads(cf32(dy), f32(dO), d.B, d.T, d.H, d.hd, c.stream);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.hd)));
  if (BH * d.T > 0) {
    bgemm(h, c, true, false, d.T, d.hd, d.T, 1.f, cf32(p.P), d.T, sp, cf32(dO), d.hd, st, 0.f, f32(dv), d.hd, st, BH);
    bgemm(h, c, false, true, d.T, d.T, d.hd, 1.f, cf32(dO), d.hd, st, cf32(p.v), d.hd, st, 0.f, f32(dP), d.T, sp, BH);
    kern::causal_softmax_backward(cf32(p.P), f32(dP), BH, d.T, c.stream);
    bgemm(h, c, false, false, d.T, d.hd, d.T, scale, cf32(dP), d.T, sp, cf32(p.k), d.hd, st, 0.f, f32(dq), d.hd, st, BH);
    bgemm(h, c, true, false, d.T, d.hd, d.T, scale, cf32(dP), d.T, sp, cf32(p.q), d.hd, st, 0.f, f32(dk), d.hd, st, BH);
  }
  Tensor dqkv(qkv.shape(), DType::F32, c.dev());
  kern::attention_merge_grads(cf32(dq), cf32(dk), cf32(dv), f32(dqkv), d.B, d.T, d.H, d.hd, c.stream);
  return dqkv;
}

bool fused_attention(const Tensor& qkv, int64_t heads) {
  const int dev = op_device(qkv, "fused_attention", "qkv");
  return fused_attention_usable(check_attention(qkv, heads, "fused_attention"), dev);
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
