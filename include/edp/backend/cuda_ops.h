// The CUDA implementation of the op set of edp/backend/ops.h (same signatures, same math and
// gradient contract: src/backend/cuda/<name>.cpp implements src/backend/cpu/<name>.cpp, its
// oracle), plus a few GPU-only fused ops. edp::ops dispatches here when the first
// tensor argument lives on a CUDA device; calling these directly is for tests and benchmarks.
//
// All tensors of one call must be float32 (labels int32, masks uint8), contiguous, and on the
// same CUDA device; anything else throws edp::ShapeError / edp::Error naming the operand.
// Work is enqueued on the device's current stream (runtime.h); ops that return a host value
// (losses, sums, counts) synchronise with that stream.
//
// Precision: elementwise ops, pooling, BatchNorm, losses and reductions are float32 like the CPU
// backend (reductions accumulate in double, combined in a fixed order: deterministic).
// Linear and Conv2d use TF32 tensor cores unless EDP_TF32=0 (runtime.h).
#pragma once
#include <cstdint>
#include <vector>

#include "edp/backend/ops.h"
#include "edp/core/tensor.h"

namespace edp::cuda {

// ---- the op set (see edp/backend/ops.h for the math) ---------------------------------------------
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b);
Tensor linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                       bool want_dx);
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, ops::Conv2dGeometry g);
Tensor conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw, Tensor* db,
                       ops::Conv2dGeometry g, bool want_dx);
Tensor maxpool2d_forward(const Tensor& x, int64_t k, int64_t stride, Tensor& argmax);
Tensor maxpool2d_backward(const Tensor& dy, const Tensor& argmax, const Shape& x_shape);
Tensor global_avgpool_forward(const Tensor& x);
Tensor global_avgpool_backward(const Tensor& dy, const Shape& x_shape);
Tensor relu_forward(const Tensor& x);
Tensor relu_backward(const Tensor& y, const Tensor& dy);
Tensor gelu_forward(const Tensor& x);
Tensor gelu_backward(const Tensor& x, const Tensor& dy);
Tensor sigmoid_forward(const Tensor& x);
Tensor sigmoid_backward(const Tensor& x, const Tensor& dy);
Tensor tanh_forward(const Tensor& x);
Tensor tanh_backward(const Tensor& x, const Tensor& dy);
Tensor silu_forward(const Tensor& x);
Tensor silu_backward(const Tensor& x, const Tensor& dy);
Tensor sub(const Tensor& a, const Tensor& b);
void mul_(Tensor& a, const Tensor& b);
Tensor point_loss_forward(ops::PointLoss kind, const Tensor& pred, const Tensor& target, double delta);
Tensor point_loss_backward(ops::PointLoss kind, const Tensor& pred, const Tensor& target, double delta,
                           double scale);
Tensor dropout_forward(const Tensor& x, double p, uint64_t seed, Tensor& mask);
Tensor dropout_backward(const Tensor& dy, const Tensor& mask, double p);
void axpy_(Tensor& y, double alpha, const Tensor& x);
void scale_(Tensor& x, double alpha);
Tensor batchnorm2d_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, Tensor& save_mean, Tensor& save_invstd);
Tensor batchnorm2d_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                const Tensor& running_mean, const Tensor& running_var, double eps);
Tensor batchnorm2d_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                            const Tensor& save_mean, const Tensor& save_invstd, Tensor& dgamma,
                            Tensor& dbeta);
double softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs);
Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale);
int64_t count_correct(const Tensor& logits, const Tensor& labels);
double sum(const Tensor& x);
double sum_squares(const Tensor& x);
double softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                     int32_t ignore_index, int64_t* counted);
Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale,
                                      int32_t ignore_index);
// The embedding's token gradient copies the ids to the host (one synchronisation) to group the
// positions of each token; the sums run on the GPU, one block per present token, in position order.
Tensor embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe);
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dwte, Tensor& dwpe);
Tensor layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                         Tensor& mean, Tensor& rstd);
Tensor layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                          const Tensor& mean, const Tensor& rstd, Tensor& dgamma, Tensor& dbeta);
// Attention: q, k, v are gathered into [B·H, T, hd] blocks, the scores and products are cuBLAS
// strided-batched GEMMs (the [B·H, T, T] scores are materialised on the GPU), the causal masked
// softmax and its backward are kernels/attention.cu. With ops::matmul_bf16() and
// EDP_FUSED_ATTENTION=1, where the build has cudnn-frontend and cuDNN supports the shape (head size
// a multiple of 8, at most 256), cuDNN's fused flash attention runs instead (bfloat16 q, k, v read
// in place, bfloat16 output, float32 statistics, deterministic backward).
Tensor attention_forward(const Tensor& qkv, int64_t heads, Tensor& lse);
Tensor attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& dy, const Tensor& lse,
                          int64_t heads);
// True when attention_forward/backward on this input would run cuDNN's fused kernels under the
// current settings (builds and checks cuDNN's graphs for the shape on first call).
bool fused_attention(const Tensor& qkv, int64_t heads);

// ---- GPU-only fused ops -----------------------------------------------------------------------
enum class Activation { Identity = 0, ReLU = 1, GELU = 2 };
// y = act(x + b), b[C] broadcast over channel axis 1 of x ([N, C] or [N, C, H, W]); b may be
// undefined. One pass over memory instead of two.
Tensor bias_act_forward(const Tensor& x, const Tensor& b, Activation act);
// With z = x + b the pre-activation (ReLU may pass its output instead: y > 0 ⇔ z > 0):
//   dz = dy · act'(z);  db += Σ_{all but axis 1} dz   (db may be null). Returns dz.
Tensor bias_act_backward(const Tensor& z_or_y, const Tensor& dy, Tensor* db, Activation act);

// Softmax cross-entropy without a host synchronisation: returns a device float64 tensor [3]
// holding (mean loss, first row with an invalid label or -1, class count). read_loss() copies it to the
// host (synchronising) and throws if a label was invalid. The training benchmark uses this to
// read the loss once per step, after the optimizer step, as PyTorch's loop does.
Tensor softmax_cross_entropy_forward_async(const Tensor& logits, const Tensor& labels,
                                           Tensor& probs);
double read_loss(const Tensor& loss_and_flag, const Tensor& labels);

// ---- optim: fused multi-tensor optimizer updates ------------------------------------------------
// The CUDA side of ops::sgd_step / ops::adamw_step (src/backend/cuda/optim.cpp; math and oracle:
// src/backend/cpu/optim.cpp), the hyper-parameters already rounded to float32.
// params[i], grads[i], state tensors: float32, same shape, all on one device. One kernel launch
// per up to 24 tensors / 320 chunks of 64 Ki elements.
struct SGDHyper {
  float lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer := d on the first step
};
void sgd_step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads,
              const std::vector<Tensor*>& momentum_bufs /* empty when momentum == 0 */,
              const SGDHyper& h);
struct AdamWHyper {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float decay = 1;      // 1 - lr·weight_decay
  float step_size = 0;  // lr / (1 - β1^t)
  float rbc2 = 1;       // 1 / √(1 - β2^t)
};
void adamw_step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads,
                const std::vector<Tensor*>& m, const std::vector<Tensor*>& v, const AdamWHyper& h);
// Gradient scaling (loss scaling / averaging): g *= scale for every tensor; returns true when
// any element (after scaling) is not finite. Synchronises once to read the flag.
bool scale_and_check_finite(const std::vector<Tensor*>& grads, float scale);
// Σ over all tensors of Σ x², accumulated in double in a fixed order (for gradient clipping).
double sum_squares_multi(const std::vector<const Tensor*>& tensors);

}  // namespace edp::cuda
