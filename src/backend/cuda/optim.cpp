// Fused multi-tensor optimizer updates and gradient utilities on the GPU — the CUDA side of the
// optimizer ops of backend/cpu/optim.cpp (the oracle: same math) plus gradient scaling and the
// multi-tensor Σ x²: operand checks, then kernels/optim.cu.
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "kernels/kernels.h"
#include "edp/backend/cuda_ops.h"
#include "common.h"

namespace edp::cuda {
using namespace detail;

namespace {
// The device shared by every tensor of the lists (all float32, same shapes pairwise).
int list_device(const std::vector<Tensor*>& params, const char* op) {
  EDP_CHECK(!params.empty() && params[0], op, ": empty parameter list");
  return op_device(*params[0], op, "parameter 0");
}

void check_pair(const Tensor& p, const Tensor& other, int d, const char* op, const char* what, size_t i) {
  const std::string name = std::string(what) + " " + std::to_string(i);
  require(other, d, DType::F32, op, name.c_str());
  EDP_CHECK_SHAPE(other.shape() == p.shape(), op, ": ", name, " ", other.shape().str(),
                  " does not match its parameter ", p.shape().str());
}
}  // namespace

void sgd_step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads,
              const std::vector<Tensor*>& bufs, const SGDHyper& h) {
  const char* op = "SGD.step (cuda)";
  if (params.empty()) return;
  const int d = list_device(params, op);
  const bool momentum = h.momentum > 0;
  EDP_CHECK(grads.size() == params.size() && (!momentum || bufs.size() == params.size()), op,
            ": ", params.size(), " parameters but ", grads.size(), " gradients and ", bufs.size(),
            " momentum buffers");
  std::vector<float*> p, b;
  std::vector<const float*> g;
  std::vector<int64_t> n;
  for (size_t i = 0; i < params.size(); ++i) {
    require(*params[i], d, DType::F32, op, ("parameter " + std::to_string(i)).c_str());
    check_pair(*params[i], *grads[i], d, op, "gradient", i);
    p.push_back(f32(*params[i]));
    g.push_back(cf32(*grads[i]));
    if (momentum) {
      check_pair(*params[i], *bufs[i], d, op, "momentum buffer", i);
      b.push_back(f32(*bufs[i]));
    }
    n.push_back(params[i]->numel());
  }
  Ctx c(d);
  kern::SGDArgs a{h.lr, h.momentum, 1.0f - h.dampening, h.weight_decay, h.nesterov, h.first_step, momentum};
  kern::sgd_multi(p, g, b, n, a, c.stream);
}

void adamw_step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads,
                const std::vector<Tensor*>& m, const std::vector<Tensor*>& v, const AdamWHyper& h) {
  const char* op = "AdamW.step (cuda)";
  if (params.empty()) return;
  const int d = list_device(params, op);
  EDP_CHECK(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(),
            op, ": lists of different lengths");
  std::vector<float*> pp, mm, vv;
  std::vector<const float*> gg;
  std::vector<int64_t> n;
  for (size_t i = 0; i < params.size(); ++i) {
    require(*params[i], d, DType::F32, op, ("parameter " + std::to_string(i)).c_str());
    check_pair(*params[i], *grads[i], d, op, "gradient", i);
    check_pair(*params[i], *m[i], d, op, "first moment", i);
    check_pair(*params[i], *v[i], d, op, "second moment", i);
    pp.push_back(f32(*params[i]));
    gg.push_back(cf32(*grads[i]));
    mm.push_back(f32(*m[i]));
    vv.push_back(f32(*v[i]));
    n.push_back(params[i]->numel());
  }
  Ctx c(d);
  kern::AdamWArgs a{h.beta1, h.beta2, h.eps, h.decay, h.step_size, h.rbc2};
  kern::adamw_multi(pp, gg, mm, vv, n, a, c.stream);
}

bool scale_and_check_finite(const std::vector<Tensor*>& grads, float scale) {
  const char* op = "scale_and_check_finite";
  if (grads.empty()) return false;
  const int d = list_device(grads, op);
  std::vector<float*> g;
  std::vector<int64_t> n;
  for (size_t i = 0; i < grads.size(); ++i) {
    require(*grads[i], d, DType::F32, op, ("gradient " + std::to_string(i)).c_str());
    g.push_back(f32(*grads[i]));
    n.push_back(grads[i]->numel());
  }
  Ctx c(d);
  Tensor flag = scratch(c, 1, DType::I32);
  CUDA_CHECK(cudaMemsetAsync(flag.raw(), 0, sizeof(int32_t), c.stream));
  kern::scale_check_multi(g, n, scale, ptr<int32_t>(flag), c.stream);
  int32_t h = 0;
  CUDA_CHECK(cudaMemcpyAsync(&h, flag.raw(), sizeof h, cudaMemcpyDeviceToHost, c.stream));
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return h != 0;
}

double sum_squares_multi(const std::vector<const Tensor*>& tensors) {
  const char* op = "sum_squares_multi";
  if (tensors.empty()) return 0.0;
  EDP_CHECK(tensors[0], op, ": null tensor");
  const int d = op_device(*tensors[0], op, "tensor 0");
  std::vector<const float*> x;
  std::vector<int64_t> n;
  for (size_t i = 0; i < tensors.size(); ++i) {
    require(*tensors[i], d, DType::F32, op, ("tensor " + std::to_string(i)).c_str());
    x.push_back(cf32(*tensors[i]));
    n.push_back(tensors[i]->numel());
  }
  const int64_t blocks = kern::multi_tensor_blocks(n);
  if (blocks == 0) return 0.0;
  Ctx c(d);
  Tensor partial = scratch(c, blocks + 1, DType::F64);
  kern::sumsq_multi(x, n, ptr<double>(partial), c.stream);
  // The partials are combined by the same fixed-order kernel as ops::sum.
  EDP_CHECK(blocks < INT32_MAX, op, ": too many blocks");
  kern::sum_finalize(ptr<double>(partial), static_cast<int>(blocks), ptr<double>(partial) + blocks, c.stream);
  double out = 0;
  CUDA_CHECK(cudaMemcpyAsync(&out, ptr<double>(partial) + blocks, sizeof out, cudaMemcpyDeviceToHost, c.stream));
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
  return out;
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
