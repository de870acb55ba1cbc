// Causal self-attention through cuDNN's fused flash-attention kernels (the cuDNN frontend's graph
// API: one SDPA node forward, one SDPA-backward node), for the bfloat16 path: with
// ops::matmul_bf16() on, EDP_FUSED_ATTENTION=1 (off by default until the path has run on a GPU), a
// build that found the frontend's headers and a shape cuDNN supports, attention.cpp calls these instead of its cuBLAS products and
// softmax kernels. The same op contract: lse holds the natural log-sum-exp of each row of
// softmax(q·kᵀ/√hd) (cuDNN's "Stats"), so either path's backward accepts either path's forward.
// q, k and v are read in place from one bfloat16 copy of qkv (strides, no regrouping); the backward
// is cuDNN's deterministic algorithm (the same bits from run to run, as the rest of edp).
#pragma once
#include <cstdint>

#include "common.h"

namespace edp::cuda::detail {

struct AttentionDims {
  int64_t B, T, D, H, hd;
};

// True when the fused path is taken for these dimensions on `device` under the current settings;
// builds (once per shape and device) and checks cuDNN's graphs. A shape cuDNN refuses is logged
// once with cuDNN's reason and left to the cuBLAS path.
bool fused_attention_usable(const AttentionDims& d, int device);

// y [B, T, D] and lse [B, H, T] from qkv [B, T, 3·D]; false (nothing written) when not usable.
bool fused_attention_forward(const Ctx& c, const Tensor& qkv, const AttentionDims& d, Tensor& y, Tensor& lse);
// dqkv [B, T, 3·D] from the forward's qkv, y and lse and the output's gradient dy; false (nothing
// written) when not usable.
bool fused_attention_backward(const Ctx& c, const Tensor& qkv, const Tensor& y, const Tensor& dy, const Tensor& lse,
                              const AttentionDims& d, Tensor& dqkv);

}  // namespace edp::cuda::detail
