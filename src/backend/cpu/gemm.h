// One matrix product for the CPU ops that are built from products (linear, attention): oneDNN's
// matmul where the build has oneDNN — float32, or, when ops::matmul_bf16() is on, bfloat16
// operands with float32 accumulation (AVX512-BF16 or AMX kernels) — else Eigen. float64 is always
// Eigen. Private to src/backend/cpu/.
#pragma once
#include <cstdint>
#include <vector>

#include "edp/core/tensor.h"

namespace edp::ops::cpu {

// A row-major matrix of rows × cols whose rows are `ld` elements apart.
template <typename T>
struct Mat {
  const T* p;
  int64_t rows, cols, ld;
};
using MatF = Mat<float>;

// C[M, N] = alpha · op(A) · op(B) (+ C when accumulate), op(X) = X or Xᵀ; C is row-major with
// leading dimension ldc. Runs on the calling thread (Eigen) or as oneDNN decides (bf16: oneDNN
// parallelises over its own OpenMP threads, one thread inside a parallel region).
void gemm(MatF A, bool ta, MatF B, bool tb, float* C, int64_t ldc, float alpha, bool accumulate);
// float64 (gradient checks): always Eigen.
void gemm(Mat<double> A, bool ta, Mat<double> B, bool tb, double* C, int64_t ldc, double alpha, bool accumulate);

// `batch` products C_i = alpha · op(A_i) · op(B_i) (+ C_i), with A_i = A.p + i·sa, B_i = B.p + i·sb,
// C_i = C + i·sc: one oneDNN call for all (the attention's heads), a loop of Eigen products without.
void gemm_batched(int64_t batch, MatF A, int64_t sa, bool ta, MatF B, int64_t sb, bool tb, float* C, int64_t ldc,
                  int64_t sc, float alpha, bool accumulate);
void gemm_batched(int64_t batch, Mat<double> A, int64_t sa, bool ta, Mat<double> B, int64_t sb, bool tb, double* C,
                  int64_t ldc, int64_t sc, double alpha, bool accumulate);

// A float32 matrix rounded to a dense bfloat16 tensor [rows, cols], for an operand that several
// products use (a Linear's output gradient feeds its weight and its input gradient; its input and
// weight are kept from the forward for the backward): rounded once.
Tensor to_bf16(MatF m);
// As gemm() in bfloat16, on [rows, cols] bfloat16 tensors rounded beforehand (needs oneDNN).
void gemm(const Tensor& A, bool ta, const Tensor& B, bool tb, float* C, int64_t ldc, float alpha, bool accumulate);

// Whether the bf16 path runs now (matmul_bf16() and the CPU supports it).
bool gemm_in_bf16();
// Whether float32 products run on oneDNN (the build has it).
bool gemm_on_dnnl();

}  // namespace edp::ops::cpu
