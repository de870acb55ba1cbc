// What conv2d.cpp (the Eigen im2col + GEMM implementation and the dispatch) shares with
// conv2d_dnnl.cpp (oneDNN's direct convolutions): the shape of one call, and the oneDNN entry
// points. Private to src/backend/cpu/.
#pragma once
#include <cstdint>

#include "edp/config.h"
#include "edp/core/tensor.h"

namespace edp::ops::cpu {

// A convolution's sizes: N samples of C x H x W, O output channels, k x k kernel, Ho x Wo out.
struct ConvDims {
  int64_t N, C, H, W, O, k, Ho, Wo, stride, pad;
  int64_t K() const { return C * k * k; }
  int64_t P() const { return Ho * Wo; }
};

#if EDP_HAVE_DNNL
namespace dnnl_conv {

// Whether oneDNN takes this shape and dtype (the reasons are in conv2d_dnnl.cpp).
bool supports(const ConvDims& d, DType t);

// y = conv(x, w) + b (b may be null), ReLU fused when `relu`. With `keep`, the input in the
// forward's blocked layout is kept there (an int32 tensor) for the backward's weight gradient.
void forward(const ConvDims& d, const float* x, const float* w, const float* b, float* y, bool relu,
             Tensor* keep);

// dw += dW, db += dB (db may be null), dx = dX when dx is not null; dy is the gradient at the
// output, masked by relu_out > 0 when the ReLU was fused; `kept` is what forward kept (or undefined).
void backward(const ConvDims& d, const float* x, const float* w, const float* dy, const float* relu_out,
              float* dw, float* db, float* dx, bool relu, const Tensor& kept);

}  // namespace dnnl_conv
#endif

}  // namespace edp::ops::cpu
