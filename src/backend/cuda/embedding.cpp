// Token + position embedding on the GPU — the op of backend/cpu/embedding.cpp (the oracle: same
// math, same gradient contract) — through kernels/embedding.cu. The token gradient groups the
// positions of each token id with a counting sort on the host (the ids are copied there: one
// synchronisation per backward), so that the GPU sums each present token's row in position
// order, without atomics: deterministic, and O(B·T·D) whatever the vocabulary size.
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include <vector>

#include "kernels/kernels.h"
#include "edp/backend/cuda_ops.h"
#include "common.h"

namespace edp::cuda {
using namespace detail;

namespace {
void check_tables(const Tensor& ids, const Tensor& wte, const Tensor& wpe, int d, const char* op) {
  require(ids, d, DType::I32, op, "ids");
  require(wpe, d, DType::F32, op, "position table");
  EDP_CHECK_SHAPE(ids.ndim() == 2 && wte.ndim() == 2 && wpe.ndim() == 2 && wte.dim(1) == wpe.dim(1) &&
                      ids.dim(1) <= wpe.dim(0),
                  op, ": ids ", ids.shape().str(), ", token table ", wte.shape().str(), " and position table ",
                  wpe.shape().str(), " must be [B, T], [V, D] and [Tmax >= T, D]");
}

std::vector<int32_t> host_ids(const Tensor& ids, int64_t V, cudaStream_t s, const char* op) {
  std::vector<int32_t> h(static_cast<size_t>(ids.numel()));
  if (!h.empty()) {
    CUDA_CHECK(cudaMemcpyAsync(h.data(), ids.raw(), h.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  const int64_t T = ids.dim(1);
  for (size_t i = 0; i < h.size(); ++i)
    EDP_CHECK_SHAPE(h[i] >= 0 && h[i] < V, op, ": token id ", h[i], " at [", static_cast<int64_t>(i) / T, ", ",
                    static_cast<int64_t>(i) % T, "] is outside the vocabulary [0, ", V, ")");
  return h;
}

template <typename T>
Tensor upload(const std::vector<T>& v, const Ctx& c) {
  Tensor t({static_cast<int64_t>(std::max<size_t>(v.size(), 1))}, dtype_of<T>::value, c.dev());
  if (!v.empty())
    CUDA_CHECK(cudaMemcpyAsync(t.raw(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, c.stream));
  return t;
}
}  // namespace

Tensor embedding_forward(const Tensor& ids, const Tensor& wte, const Tensor& wpe) {
  const char* op = "embedding_forward";
  const int d = op_device(wte, op, "token table");
  check_tables(ids, wte, wpe, d, op);
  const int64_t B = ids.dim(0), T = ids.dim(1), D = wte.dim(1);
  Ctx c(d);
  host_ids(ids, wte.dim(0), c.stream, op);  // out-of-range ids are an error, as on the CPU
  Tensor y({B, T, D}, DType::F32, c.dev());
  kern::embedding_forward(ptr<int32_t>(ids), cf32(wte), cf32(wpe), f32(y), B * T, T, D, c.stream);
  return y;
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dwte, Tensor& dwpe) {
  const char* op = "embedding_backward";
  const int d = op_device(dwte, op, "token table gradient");
  check_tables(ids, dwte, dwpe, d, op);
  require(dy, d, DType::F32, op, "grad_output");
  const int64_t B = ids.dim(0), T = ids.dim(1), D = dwte.dim(1), V = dwte.dim(0), N = B * T;
  EDP_CHECK_SHAPE(dy.ndim() == 3 && dy.dim(0) == B && dy.dim(1) == T && dy.dim(2) == D, op, ": grad_output ",
                  dy.shape().str(), " does not match [", B, ", ", T, ", ", D, "]");
  Ctx c(d);
  const std::vector<int32_t> h = host_ids(ids, V, c.stream, op);
  std::vector<int64_t> count(static_cast<size_t>(V), 0), order(static_cast<size_t>(N)), start;
  std::vector<int32_t> tokens;
  for (int32_t v : h) ++count[static_cast<size_t>(v)];
  std::vector<int64_t> at(static_cast<size_t>(V), 0);
  int64_t pos = 0;
  for (int64_t v = 0; v < V; ++v) {
    at[static_cast<size_t>(v)] = pos;
    if (count[static_cast<size_t>(v)]) {
      tokens.push_back(static_cast<int32_t>(v));
      start.push_back(pos);
    }
    pos += count[static_cast<size_t>(v)];
  }
  start.push_back(pos);
  for (int64_t i = 0; i < N; ++i) order[static_cast<size_t>(at[static_cast<size_t>(h[static_cast<size_t>(i)])]++)] = i;
  const Tensor d_order = upload(order, c), d_start = upload(start, c), d_tokens = upload(tokens, c);
  kern::embedding_backward(cf32(dy), ptr<int64_t>(d_order), ptr<int64_t>(d_start), ptr<int32_t>(d_tokens),
                           static_cast<int64_t>(tokens.size()), f32(dwte), f32(dwpe), B, T, D, c.stream);
  // The host vectors above must outlive the asynchronous uploads.
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
}

}  // namespace edp::cuda
#endif  // EDP_HAVE_CUDA
