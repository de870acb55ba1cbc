// Optimizer updates on the CPU (float32, float64): the oracle of backend/cuda/optim.cpp and
// kernels/optim.cu. PyTorch's rules (include/edp/optim/optimizer.h), per element:
//
//   SGD     d = g + wd·p;  b = first ? d : μ·b + (1 - dampening)·d;  d = nesterov ? d + μ·b : b;
//           p -= lr·d                                          (b only when μ > 0)
//   AdamW   p *= decay;  m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²;
//           p -= step_size · m / (√v · rbc2 + ε)
//           (decay = 1 - lr·wd, step_size = lr/(1-β1^t), rbc2 = 1/√(1-β2^t), from the optimizer)
//
// Gradient contract: an update has no backward; it reads the gradients and writes the
// parameters and the optimizer state (momentum buffers, moments) in place. The hyper-parameters
// are rounded to the tensor's dtype once, then every element is updated independently, so
// results do not depend on the thread count.
#include <cmath>
#include <string>
#include <vector>

#include "common.h"
#include "edp/backend/ops.h"
#include "edp/config.h"
#if EDP_HAVE_CUDA
#include "edp/backend/cuda_ops.h"
#endif

namespace edp::ops {
using namespace cpu;

void sgd_step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads,
              const std::vector<Tensor*>& momentum_bufs, const SGDStep& h) {
  if (params.empty()) return;
#if EDP_HAVE_CUDA
  if (params.front() && on_cuda(*params.front())) {
    cuda::SGDHyper c;
    c.lr = static_cast<float>(h.lr);
    c.momentum = static_cast<float>(h.momentum);
    c.dampening = static_cast<float>(h.dampening);
    c.weight_decay = static_cast<float>(h.weight_decay);
    c.nesterov = h.nesterov;
    c.first_step = h.first_step;
    cuda::sgd_step(params, grads, momentum_bufs, c);
    return;
  }
#endif
  const bool has_momentum = h.momentum > 0;
  EDP_CHECK(grads.size() == params.size() &&
                (!has_momentum || momentum_bufs.size() == params.size()),
            "SGD.step: ", params.size(), " parameters but ", grads.size(), " gradients and ",
            momentum_bufs.size(), " momentum buffers");
  const bool first = h.first_step;
  for (size_t k = 0; k < params.size(); ++k) {
    EDP_CHECK(params[k] != nullptr, "SGD.step: parameter ", k, " is null");
    Tensor& P = *params[k];
    require_cpu(P, "SGD.step", ("parameter " + std::to_string(k)).c_str());
    dispatch_float(P.dtype(), "SGD.step", [&](auto tag) {
      using T = decltype(tag);
      T* p = P.data<T>();
      const T* g = grads[k]->data<T>();
      T* b = has_momentum ? momentum_bufs[k]->data<T>() : nullptr;
      const T lr = static_cast<T>(h.lr), wd = static_cast<T>(h.weight_decay),
              mu = static_cast<T>(h.momentum), damp = static_cast<T>(1 - h.dampening);
      const int64_t n = P.numel();
      // One loop per variant so that each vectorises (no branches inside).
      if (!b) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      } else if (first) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          const T d = g[i] + wd * p[i];
          b[i] = d;
          p[i] -= lr * (h.nesterov ? d + mu * d : d);
        }
      } else if (h.nesterov) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          const T d = g[i] + wd * p[i];
          const T nb = mu * b[i] + damp * d;
          b[i] = nb;
          p[i] -= lr * (d + mu * nb);
        }
      } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) {
          const T d = g[i] + wd * p[i];
          const T nb = mu * b[i] + damp * d;
          b[i] = nb;
          p[i] -= lr * nb;
        }
      }
    });
  }
}

void adamw_step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads,
                const std::vector<Tensor*>& m_, const std::vector<Tensor*>& v_,
                const AdamWStep& h) {
  if (params.empty()) return;
#if EDP_HAVE_CUDA
  if (params.front() && on_cuda(*params.front())) {
    cuda::AdamWHyper c;
    c.beta1 = static_cast<float>(h.beta1);
    c.beta2 = static_cast<float>(h.beta2);
    c.eps = static_cast<float>(h.eps);
    c.decay = static_cast<float>(h.decay);
    c.step_size = static_cast<float>(h.step_size);
    c.rbc2 = static_cast<float>(h.rbc2);
    cuda::adamw_step(params, grads, m_, v_, c);
    return;
  }
#endif
  EDP_CHECK(grads.size() == params.size() && m_.size() == params.size() &&
                v_.size() == params.size(),
            "AdamW.step: ", params.size(), " parameters but ", grads.size(), " gradients and ",
            m_.size(), "/", v_.size(), " moments");
  for (size_t k = 0; k < params.size(); ++k) {
    EDP_CHECK(params[k] != nullptr, "AdamW.step: parameter ", k, " is null");
    Tensor& P = *params[k];
    require_cpu(P, "AdamW.step", ("parameter " + std::to_string(k)).c_str());
    dispatch_float(P.dtype(), "AdamW.step", [&](auto tag) {
      using T = decltype(tag);
      T* p = P.data<T>();
      const T* g = grads[k]->data<T>();
      T *m = m_[k]->data<T>(), *v = v_[k]->data<T>();
      const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
      const T decay = static_cast<T>(h.decay);
      const T step = static_cast<T>(h.step_size), rbc2 = static_cast<T>(h.rbc2);
      const T eps = static_cast<T>(h.eps);
      const int64_t n = P.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        p[i] *= decay;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= step * m[i] / (std::sqrt(v[i]) * rbc2 + eps);
      }
    });
  }
}

}  // namespace edp::ops
