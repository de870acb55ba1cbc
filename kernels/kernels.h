// Host launchers of edp's own CUDA kernels (kernels/<name>.cu), one section per file. Plain
// signatures on raw device pointers and a stream; shapes were validated by the callers
// (src/backend/cuda/<name>.cpp, named like the kernel file), which own all allocation. Every launcher returns without launching when
// there is no work, and checks the launch (CUDA_CHECK_LAUNCH).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace edp::cuda::kern {

// ---- activation.cu: fused bias + activation ----------------------------------------------------
enum class Act : int { Identity = 0, ReLU = 1, GELU = 2 };
// y[i] = act(x[i] + b[c(i)]), c(i) = (i / inner) % C; b may be null (then C, inner unused).
// x may equal y (in place).
void bias_act_forward(const float* x, const float* b, float* y, int64_t n, int64_t C,
                      int64_t inner, Act act, cudaStream_t s);
// dz[i] = dy[i] · act'(z[i]); for ReLU `z` may be the output y.
void act_backward(const float* z, const float* dy, float* dz, int64_t n, Act act, cudaStream_t s);

// ---- elementwise.cu: smooth activations, arithmetic -------------------------------------------
enum class Unary : int { Sigmoid = 0, Tanh = 1, SiLU = 2 };
// y[i] = f(x[i]);  dx[i] = dy[i] · f'(x[i]) (from the input x).
void unary_forward(const float* x, float* y, int64_t n, Unary op, cudaStream_t s);
void unary_backward(const float* x, const float* dy, float* dx, int64_t n, Unary op, cudaStream_t s);
enum class Binary : int { Sub = 0, Mul = 1 };
// y[i] = a[i] op b[i]; y may be a (in place).
void binary(const float* a, const float* b, float* y, int64_t n, Binary op, cudaStream_t s);

// ---- loss.cu: pointwise losses (kind: ops::PointLoss's order: mse, l1, huber, bce_logits) ------
// l[i] = ℓ(p[i], t[i]);  g[i] = scale · ∂ℓ/∂p (p[i], t[i]).
void point_loss_forward(const float* p, const float* t, float* l, int64_t n, int kind, float delta,
                        cudaStream_t s);
void point_loss_backward(const float* p, const float* t, float* g, int64_t n, int kind, float delta,
                         float scale, cudaStream_t s);

// ---- reduce.cu: reductions, axpy/scale, fill, per-channel sums ----------------------------------
// partial[b] for b < reduce_blocks(n) (launch.h), then out[0] = Σ partial (double).
void sum_partial(const float* x, int64_t n, bool squares, double* partial, int blocks, cudaStream_t s);
void sum_finalize(const double* partial, int blocks, double* out, cudaStream_t s);
void axpy(float* y, float alpha, const float* x, int64_t n, cudaStream_t s);
void scale(float* x, float alpha, int64_t n, cudaStream_t s);
// n elements of elem_size (1, 4 or 8) bytes, each set to the low elem_size bytes of `pattern`.
void fill(void* p, int elem_size, uint64_t pattern, int64_t n, cudaStream_t s);
// out[c] += Σ_{o < outer, i < inner} x[(o·C + c)·inner + i], via partial[splits][C] (double).
// splits: launch.h channel_splits(C, outer·inner), capped at `outer` when inner > 1.
void channel_sum_accumulate(const float* x, float* out, int64_t outer, int64_t C, int64_t inner,
                            double* partial, int64_t splits, cudaStream_t s);
// buf[i] /= divisor in buf's type (dtype codes as edp::DType: 0 f32, 1 f64, 2 i32, 3 i64, 4 u8).
void divide(void* buf, int dtype, int64_t n, int divisor, cudaStream_t s);

// ---- softmax_xent.cu -----------------------------------------------------------------------------
// Per row: probs = softmax(z); row_loss = -log probs[label]; row_bad = label outside [0, C).
void softmax_xent_forward(const float* z, const int32_t* labels, float* probs, double* row_loss,
                          int32_t* row_flag, int64_t N, int64_t C, cudaStream_t s);
// out[0] = Σ row_val / N (0 when row_val is null); out[1] = first row with a non-zero flag or -1
// (count_mode false), or the number of non-zero flags (count_mode true).
void rows_finalize(const double* row_val, const int32_t* row_flag, int64_t N, bool count_mode,
                   double* out, cudaStream_t s);
// dz = (probs - onehot(label)) · scale
void softmax_xent_backward(const float* probs, const int32_t* labels, float* dz, int64_t N,
                           int64_t C, float scale, cudaStream_t s);
// row_flag[n] = (argmax_c z[n, c] == label[n]), first maximum on ties.
void correct_rows(const float* z, const int32_t* labels, int32_t* row_flag, int64_t N, int64_t C,
                  cudaStream_t s);

// Sequence form: rows whose label is ignore_index have loss 0, flag 0 and valid 0; other labels
// outside [0, C) are flagged. valid[n] = 1 for a counted row.
void softmax_xent_forward_ignore(const float* z, const int32_t* labels, int32_t ignore_index, float* probs,
                                 double* row_loss, int32_t* row_flag, int32_t* valid, int64_t N, int64_t C,
                                 cudaStream_t s);
// dz = (probs - onehot(label)) · scale, and 0 on rows labelled ignore_index.
void softmax_xent_backward_ignore(const float* probs, const int32_t* labels, int32_t ignore_index, float* dz,
                                  int64_t N, int64_t C, float scale, cudaStream_t s);

// ---- bf16.cu: y[i] = bfloat16(x[i]), round to nearest even (y: n 2-byte values), and back ---------
void to_bf16(const float* x, void* y, int64_t n, cudaStream_t s);
// y[i] = float(x[i]) (x: n 2-byte bfloat16 values; exact).
void from_bf16(const void* x, float* y, int64_t n, cudaStream_t s);

// ---- embedding.cu --------------------------------------------------------------------------------
// y[i, :] = wte[ids[i], :] + wpe[i % T, :] for i < N = B·T.
void embedding_forward(const int32_t* ids, const float* wte, const float* wpe, float* y, int64_t N, int64_t T,
                       int64_t D, cudaStream_t s);
// dwte[tokens[k], :] += Σ_{j in [start[k], start[k+1])} dy[order[j], :] for k < P (one block per k);
// dwpe[t, :] += Σ_b dy[b·T + t, :].
void embedding_backward(const float* dy, const int64_t* order, const int64_t* start, const int32_t* tokens,
                        int64_t P, float* dwte, float* dwpe, int64_t B, int64_t T, int64_t D, cudaStream_t s);

// ---- layernorm.cu --------------------------------------------------------------------------------
void layernorm_forward(const float* x, const float* gamma, const float* beta, float eps, float* y, float* mean,
                       float* rstd, int64_t R, int64_t D, cudaStream_t s);
// dx for every row; partial [chunks][2][D] of Σ dy·x̂ and Σ dy over chunks of 64 rows; then
// dgamma/dbeta += Σ over chunks in order.
void layernorm_backward(const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd,
                        float* dx, float* partial, float* dgamma, float* dbeta, int64_t R, int64_t D, cudaStream_t s);
int64_t layernorm_chunks(int64_t R);

// ---- attention.cu ---------------------------------------------------------------------------------
// qkv [B, T, 3, H, hd] <-> q, k, v [B, H, T, hd] each.
void attention_split(const float* qkv, float* q, float* k, float* v, int64_t B, int64_t T, int64_t H, int64_t hd,
                     cudaStream_t s);
// dqkv [B, T, 3, H, hd] from dq, dk, dv [B, H, T, hd].
void attention_merge_grads(const float* dq, const float* dk, const float* dv, float* dqkv, int64_t B, int64_t T,
                           int64_t H, int64_t hd, cudaStream_t s);
// y [B, T, H, hd] from o [B, H, T, hd], and back (dy -> do).
void attention_heads_to_rows(const float* o, float* y, int64_t B, int64_t T, int64_t H, int64_t hd, cudaStream_t s);
void attention_rows_to_heads(const float* y, float* o, int64_t B, int64_t T, int64_t H, int64_t hd, cudaStream_t s);
// In place over S [rows = B·H·T, T] (already scaled): the causal softmax of each row t (columns
// s ≤ t; others become 0); lse[row] = log Σ e^S.
void causal_softmax_forward(float* S, float* lse, int64_t BH, int64_t T, cudaStream_t s);
// In place over dP: dS = P ∘ (dP - Σ_s P·dP) per row.
void causal_softmax_backward(const float* P, float* dP, int64_t BH, int64_t T, cudaStream_t s);

// ---- pool.cu ------------------------------------------------------------------------------------
void maxpool2d_forward(const float* x, float* y, int32_t* argmax, int64_t planes, int64_t H,
                       int64_t W, int64_t Ho, int64_t Wo, int64_t k, int64_t stride, cudaStream_t s);
// dx must be zeroed first; dx[plane, argmax] += dy.
void maxpool2d_backward(const float* dy, const int32_t* argmax, float* dx, int64_t planes,
                        int64_t HW, int64_t HoWo, cudaStream_t s);
void global_avgpool_forward(const float* x, float* y, int64_t planes, int64_t P, cudaStream_t s);
void global_avgpool_backward(const float* dy, float* dx, int64_t planes, int64_t P, cudaStream_t s);

// ---- batchnorm.cu ------------------------------------------------------------------------------
// partial: [C][splits][2] doubles; coef: [2C] floats (scale a, shift b: y = a x + b).
void bn_stats_partial(const float* x, int64_t N, int64_t C, int64_t P, int64_t splits,
                      double* partial, cudaStream_t s);
void bn_stats_finalize(const double* partial, const float* x, int64_t N, int64_t C, int64_t P,
                       int64_t splits, const float* gamma, const float* beta, float* running_mean,
                       float* running_var, double momentum, double eps, float* save_mean,
                       float* save_invstd, float* coef, cudaStream_t s);
void bn_eval_coef(const float* gamma, const float* beta, const float* running_mean,
                  const float* running_var, double eps, int64_t C, float* coef, cudaStream_t s);
void bn_apply(const float* x, const float* coef, float* y, int64_t N, int64_t C, int64_t P,
              cudaStream_t s);
// partial: [C][splits][2] doubles (Σ dy, Σ dy·(x - mean)); coef: [3C] doubles.
void bn_backward_partial(const float* x, const float* dy, const float* save_mean, int64_t N,
                         int64_t C, int64_t P, int64_t splits, double* partial, cudaStream_t s);
void bn_backward_finalize(const double* partial, int64_t C, int64_t splits, int64_t M,
                          const float* gamma, const float* save_invstd, float* dgamma, float* dbeta,
                          double* coef, cudaStream_t s);
void bn_backward_dx(const float* x, const float* dy, const float* save_mean,
                    const float* save_invstd, const double* coef, float* dx, int64_t N, int64_t C,
                    int64_t P, cudaStream_t s);

// ---- dropout.cu ----------------------------------------------------------------------------------
void dropout_forward(const float* x, float* y, uint8_t* mask, int64_t n, uint64_t seed,
                     uint64_t threshold, float scale, cudaStream_t s);
void dropout_backward(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale,
                      cudaStream_t s);

// ---- optim.cu: multi-tensor updates ------------------------------------------------------------
struct SGDArgs {
  float lr, momentum, dampening_keep /* 1 - dampening */, weight_decay;
  bool nesterov, first_step, has_momentum;
};
void sgd_multi(const std::vector<float*>& p, const std::vector<const float*>& g,
               const std::vector<float*>& buf, const std::vector<int64_t>& n, const SGDArgs& a,
               cudaStream_t s);
struct AdamWArgs {
  float beta1, beta2, eps, decay, step_size, rbc2;
};
void adamw_multi(const std::vector<float*>& p, const std::vector<const float*>& g,
                 const std::vector<float*>& m, const std::vector<float*>& v,
                 const std::vector<int64_t>& n, const AdamWArgs& a, cudaStream_t s);
// g *= scale; *found_inf = 1 when any result is not finite (found_inf zeroed by the caller).
void scale_check_multi(const std::vector<float*>& g, const std::vector<int64_t>& n, float scale,
                       int32_t* found_inf, cudaStream_t s);
// partial[j] = Σ x² over the j-th (tensor, chunk) block, in plan order; returns the number of
// partials (the caller sizes `partial` with multi_tensor_blocks()).
int64_t multi_tensor_blocks(const std::vector<int64_t>& n);
void sumsq_multi(const std::vector<const float*>& x, const std::vector<int64_t>& n,
                 double* partial, cudaStream_t s);

}  // namespace edp::cuda::kern
