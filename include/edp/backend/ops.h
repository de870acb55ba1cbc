// The op set every layer (and optimizer) is built from. Each op checks shapes (errors name both
// shapes), then dispatches on device and dtype. One name per op family, the same everywhere:
//   src/backend/cpu/<name>.cpp    the CPU implementation (Eigen + OpenMP, float32 and float64),
//                                 its math and gradient contract in the file's opening comment;
//                                 the oracle for the CUDA one
//   src/backend/cuda/<name>.cpp   the CUDA implementation (edp/backend/cuda_ops.h)
//   kernels/<name>.cu             its kernels (linear and conv2d use cuBLASLt / cuDNN instead)
//   tests/backend/<name>_test.cpp its tests: the gradients by finite differences (and, for the
//                                 transformer ops, the CPU oracle against the definition) in every
//                                 build; the CUDA implementation against the CPU one on a GPU
//   bench/ops                     each op timed alone, forward and backward (edp_bench_ops)
// with <name> one of linear, conv2d, pool, activation, dropout, reduce, batchnorm,
// softmax_xent, optim, embedding, layernorm, attention, elementwise, loss.
//
// Conventions: activations are NCHW; weights of Linear are [out, in], of Conv2d
// [out, in, k, k]. Functions named *_backward return the input gradient (a fresh tensor, or an
// undefined one when want_dx is false) and ACCUMULATE into parameter gradients (dw += ...).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "edp/core/tensor.h"

namespace edp::ops {

// ---- linear ---------------------------------------------------------------------------------
// y[N, out] = x[N, in] · w[out, in]^T + b[out]   (b may be undefined)
// With `saved` and bfloat16 products on (CPU), the forward keeps its bfloat16 roundings of x and w
// there, and a backward given the same `saved` uses them instead of rounding x and w again.
struct LinearSaved {
  Tensor x, w;  // bfloat16 [N, in], [out, in]; undefined when not kept
};
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, LinearSaved* saved = nullptr);
// dx = dy · w;  dw += dy^T · x;  db += Σ_n dy
Tensor linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                       bool want_dx, const LinearSaved* saved = nullptr);

// Matrix products in bfloat16 (mixed precision, PyTorch's autocast rule): when on, linear and
// attention round their float32 operands to bfloat16 and accumulate the products in float32;
// everything else (and every tensor kept between ops: parameters, gradients, activations) stays
// float32. On the CPU it needs oneDNN and a CPU with AVX512-BF16 (or AMX): elsewhere the CPU
// products stay float32, and set_matmul_bf16(true) returns false so that the caller can say so.
// On CUDA: cuBLASLt / cuBLAS with bfloat16 operands (sm_80 and newer). Process-wide; the default
// is off (EDP_BF16). matmul_bf16() is the request.
bool set_matmul_bf16(bool on);
bool matmul_bf16();
// Whether this build and CPU can run the CPU's bfloat16 products, and why not.
bool cpu_bf16_available(std::string* why = nullptr);
// The instruction set oneDNN's CPU kernels run at ("avx2", "avx512_core", "avx512_core_amx", ...;
// EDP_CPU_ISA), or "none" in a build without oneDNN.
const char* cpu_isa_name();

// ---- conv2d: convolution (square kernel, zero padding, implicit GEMM per sample) ------------
struct Conv2dGeometry {
  int64_t stride = 1;
  int64_t pad = 0;
  // Fused ReLU: y = max(conv(x) + b, 0). The backward then needs the output y (relu_out) and
  // applies the mask while it gathers dy, saving the separate ReLU passes over the activation.
  bool relu = false;
};
// y[N, Co, Ho, Wo] with Ho = (H + 2 pad - k) / stride + 1. With `col` the forward keeps its
// im2col matrices there (an opaque buffer) and a backward given the same `col` reuses them
// instead of recomputing: memory for time, what a training layer wants.
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Conv2dGeometry g,
                      Tensor* col = nullptr);
Tensor conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                       Conv2dGeometry g, bool want_dx, const Tensor* col = nullptr,
                       const Tensor* relu_out = nullptr);
// The CPU convolution's implementation (src/backend/cpu/conv2d.cpp): oneDNN's direct
// convolutions for float32 where this build has oneDNN (EDP_DNNL), else im2col + Eigen GEMMs,
// which are also the reference the oneDNN path is tested against. `automatic` follows the
// EDP_CPU_CONV knob (default: oneDNN when built in). set_cpu_conv overrides it for the process
// (tests, benchmarks); asking for dnnl in a build without it throws.
enum class CpuConv { automatic, dnnl, eigen };
void set_cpu_conv(CpuConv c);
bool cpu_conv_has_dnnl();
// What a float32 convolution runs on now: "dnnl" or "eigen" (for logs and benchmark JSON).
const char* cpu_conv_name();

// ---- pool -----------------------------------------------------------------------------------
// Max over k×k windows with the given stride (no padding); argmax (int32, per output element,
// the flat index within the input plane) is kept for backward.
Tensor maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, Tensor& argmax);
Tensor maxpool2d_backward(const Tensor& dy, const Tensor& argmax, const Shape& x_shape);
// Mean over H×W: [N, C, H, W] → [N, C]
Tensor global_avgpool_forward(const Tensor& x);
Tensor global_avgpool_backward(const Tensor& dy, const Shape& x_shape);

// ---- activation -----------------------------------------------------------------------------
Tensor relu_forward(const Tensor& x);
Tensor relu_backward(const Tensor& y, const Tensor& dy);  // uses the output: dy where y > 0
// GELU(x) = x Φ(x) (exact, erf form); dGELU = Φ(x) + x φ(x)
Tensor gelu_forward(const Tensor& x);
Tensor gelu_backward(const Tensor& x, const Tensor& dy);

// ---- elementwise: smooth activations and arithmetic for layer authors ----------------------
// Every op here is elementwise over tensors of one shape and dtype (float32 or float64 on the
// CPU, OpenMP threads over elements; float32 on CUDA): results do not depend on the thread count.
//   sigmoid  y = 1/(1 + e^-x)     dx = dy · σ(x)(1 - σ(x))
//   tanh     y = tanh x           dx = dy · (1 - tanh² x)
//   silu     y = x σ(x)           dx = dy · σ(x)(1 + x(1 - σ(x)))
// The backward functions take the forward's INPUT x.
Tensor sigmoid_forward(const Tensor& x);
Tensor sigmoid_backward(const Tensor& x, const Tensor& dy);
Tensor tanh_forward(const Tensor& x);
Tensor tanh_backward(const Tensor& x, const Tensor& dy);
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& x, const Tensor& dy);
// a - b, a ⊙ b (fresh tensors), a ⊙= b (in place). add / add_ / axpy_ / scale_: reduce below.
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
void mul_(Tensor& a, const Tensor& b);

// ---- loss: pointwise losses of predictions against targets (regression, multi-label) --------
// pred and target hold the same number of elements in the same order (pred [N, 1] against
// target [N] is fine), same dtype. With d = p - t:
//   mse         ℓ = d²                                  ∂ℓ/∂p = 2d
//   l1          ℓ = |d|                                 ∂ℓ/∂p = sign(d)   (0 at d = 0)
//   huber(δ)    ℓ = ½d² for |d| ≤ δ, δ(|d| - ½δ) beyond  ∂ℓ/∂p = clamp(d, -δ, δ)
//   bce_logits  ℓ = max(p, 0) - p t + log(1 + e^-|p|)   ∂ℓ/∂p = σ(p) - t   (p a logit, t in [0, 1])
enum class PointLoss { mse, l1, huber, bce_logits };
const char* point_loss_name(PointLoss kind);
// The loss of every element (pred's shape); the mean loss is sum(...) / numel.
Tensor point_loss_forward(PointLoss kind, const Tensor& pred, const Tensor& target, double delta = 1.0);
// dpred = scale · ∂ℓ/∂p (scale = 1/numel for the mean loss), pred's shape.
Tensor point_loss_backward(PointLoss kind, const Tensor& pred, const Tensor& target, double delta, double scale);

// ---- dropout --------------------------------------------------------------------------------
// Inverted dropout: y = x · mask / (1 - p), mask ~ Bernoulli(1 - p) from (seed, counter).
Tensor dropout_forward(const Tensor& x, double p, uint64_t seed, Tensor& mask);
Tensor dropout_backward(const Tensor& dy, const Tensor& mask, double p);

// ---- reduce: BLAS-1 updates and reductions --------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
void add_(Tensor& a, const Tensor& b);               // a += b
void axpy_(Tensor& y, double alpha, const Tensor& x);  // y += alpha x
void scale_(Tensor& x, double alpha);                  // x *= alpha
// Deterministic for a given thread count: fixed chunking, partials combined in order, in double.
double sum(const Tensor& x);
double sum_squares(const Tensor& x);

// ---- batchnorm ------------------------------------------------------------------------------
// Training mode: batch statistics over (N, H, W) per channel; running stats updated as
// running = (1 - momentum) running + momentum batch (variance unbiased). save_mean/save_invstd
// [C] are kept for backward.
Tensor batchnorm2d_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, Tensor& save_mean, Tensor& save_invstd);
Tensor batchnorm2d_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& running_mean, const Tensor& running_var, double eps);
Tensor batchnorm2d_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                            const Tensor& save_mean, const Tensor& save_invstd, Tensor& dgamma,
                            Tensor& dbeta);

// ---- softmax_xent: loss ---------------------------------------------------------------------
// Mean over the batch of -log softmax(logits)[label]; probs [N, C] kept for backward.
double softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs);
// dlogits = (probs - onehot(labels)) · scale   (scale = 1/N for the mean loss)
Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale);
// Rows whose argmax equals the label.
int64_t count_correct(const Tensor& logits, const Tensor& labels);
// Sequence form: rows whose label equals ignore_index count for nothing (no loss, zero gradient)
// and the mean is over the other rows; *counted (optional) receives their number. Any other label
// outside [0, C) is an error. The backward's scale is then 1/counted for the mean loss.
double softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                     int32_t ignore_index, int64_t* counted);
Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale,
                                      int32_t ignore_index);

// ---- embedding: token + position embedding --------------------------------------------------
// y[b, t, :] = wte[ids[b, t], :] + wpe[t, :]   (ids int32 [B, T], wte [V, D], wpe [Tmax, D],
// T <= Tmax; an id outside [0, V) is an error naming it and its position).
Tensor embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe);
// dwte[v] += Σ_{(b,t): ids = v} dy[b, t];  dwpe[t] += Σ_b dy[b, t]. Only the rows of the tokens
// present are touched (the cost is O(B·T·D), not O(V·D)); each row's sum is taken in position
// order, so the result does not depend on the thread count.
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dwte, Tensor& dwpe);

// ---- layernorm: over the last dimension -----------------------------------------------------
// y = (x - μ) · rstd · γ + β per row of D (x [..., D]); mean and rstd [rows] kept for backward.
Tensor layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                         Tensor& mean, Tensor& rstd);
// dx = rstd · (g - mean(g) - x̂ · mean(g · x̂)) with g = dy · γ;  dγ += Σ_rows dy · x̂;  dβ += Σ_rows dy
Tensor layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                          const Tensor& mean, const Tensor& rstd, Tensor& dgamma, Tensor& dbeta);

// ---- attention: causal multi-head self-attention (the core, between two Linears) ------------
// qkv [B, T, 3·D] holds q, k, v side by side, each D = H·hd with head h at columns [h·hd, (h+1)·hd).
// y[b, t, h] = Σ_{s ≤ t} softmax_s(q_t · k_s / √hd) v_s, y [B, T, D] (heads side by side).
// lse [B, H, T] (the log-sum-exp of each softmax row) is kept for backward, which recomputes the
// probabilities from it instead of storing the [T, T] matrices.
Tensor attention_forward(const Tensor& qkv, int64_t heads, Tensor& lse);
// Returns dqkv [B, T, 3·D] (no parameters).
Tensor attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& dy,
                          const Tensor& lse, int64_t heads);

// ---- optim: optimizer updates (PyTorch's rules, edp/optim/optimizer.h) ----------------------
// One step over a parameter list: params[i] is updated in place from grads[i] and its state
// tensors (same shape and dtype, all on one device; on CUDA float32 only, fused multi-tensor
// launches). The hyper-parameters are host doubles; each backend rounds them to its dtype.
//   SGD:   d = g + wd·p;  b = first ? d : μ·b + (1-dampening)·d;  d = nesterov ? d + μ·b : b;
//          p -= lr·d   (b: momentum_bufs, used only when μ > 0, may be empty otherwise)
struct SGDStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer := d on the first step
};
void sgd_step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads,
              const std::vector<Tensor*>& momentum_bufs, const SGDStep& h);
//   AdamW: p *= decay;  m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²;  p -= step_size·m / (√v·rbc2 + ε)
struct AdamWStep {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double decay = 1;      // 1 - lr·weight_decay
  double step_size = 0;  // lr / (1 - β1^t)
  double rbc2 = 1;       // 1 / √(1 - β2^t)
};
void adamw_step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads,
                const std::vector<Tensor*>& m, const std::vector<Tensor*>& v, const AdamWStep& h);

}  // namespace edp::ops
