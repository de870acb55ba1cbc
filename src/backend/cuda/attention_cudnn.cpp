// Causal self-attention through cuDNN's fused flash-attention kernels (attention_cudnn.h says when
// and with what contract). One graph per (device, B, T, H, hd, pass), built on first use through
// the cuDNN frontend (heuristics mode A), its workspace size kept; a graph cuDNN cannot build or
// does not support is remembered as such, with cuDNN's reason, and that shape stays on the cuBLAS
// path. Tensors, all bfloat16 except the float32 statistics:
//   Q, K, V  [B, H, T, hd] read in place from a bfloat16 copy of qkv [B, T, 3·D] (strides T·3D, hd,
//            3D, 1; K and V start D and 2·D values in)
//   O, dO    [B, H, T, hd] laid out as [B, T, D] rows (strides T·D, hd, D, 1): y and dy directly
//   Stats    [B, H, T, 1] float32, the natural log-sum-exp of each scaled row: lse itself
//   dQ,dK,dV written in place into one bfloat16 [B, T, 3·D] buffer, converted once into dqkv
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "attention_cudnn.h"

#include "edp/backend/ops.h"
#include "edp/core/knobs.h"

#if EDP_HAVE_CUDNN_FRONTEND
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "cudnn_check.h"
#include "edp/core/log.h"
#include "kernels/kernels.h"

#include <dlfcn.h>

// The frontend reaches cuDNN (and NVRTC, which only its experimental Blackwell engines use) through
// dlopen/dlsym: linking NVRTC would keep ~29 MB resident in every process. cudnn_dlhandle, the
// frontend's handle to cuDNN, is defined below and set to the cuDNN libedp links.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace edp::cuda::detail {

#if EDP_HAVE_CUDNN_FRONTEND
namespace {
namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;

enum Uid : fe::graph::Tensor_attributes::uid_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;  // null: not supported (why says so)
  int64_t workspace = 0;
  std::string why;
};

// (B, T, H, hd, backward)
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool>;

struct FusedState {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::map<Key, Built> graphs;
};

FusedState& fused_state(int device) {
  return per_device_state<FusedState>(device, [](FusedState& s) {
    CUDNN_CHECK(cudnnCreate(&s.handle));
    if (!cudnn_frontend::cudnn_dlhandle) {  // the cuDNN this library is linked with, already loaded
      Dl_info info{};
      if (dladdr(reinterpret_cast<void*>(&cudnnGetVersion), &info) && info.dli_fname)
        cudnn_frontend::cudnn_dlhandle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
      EDP_CHECK(cudnn_frontend::cudnn_dlhandle, "attention: cannot find the loaded cuDNN library for cudnn-frontend");
    }
  });
}

// [B, H, T, hd] over rows of `row` values: head h at column h·hd of row (b, t).
fe::graph::Tensor_attributes heads_of_rows(const char* name, Uid uid, const AttentionDims& d, int64_t row) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({d.B, d.H, d.T, d.hd})
      .set_stride({d.T * row, d.hd, row, 1});
}

void set_heads_of_rows(const TensorAttr& t, Uid uid, const AttentionDims& d, int64_t row) {
  t->set_output(true).set_uid(uid).set_dim({d.B, d.H, d.T, d.hd}).set_stride({d.T * row, d.hd, row, 1});
}

fe::graph::Tensor_attributes stats_tensor(const AttentionDims& d) {
  return fe::graph::Tensor_attributes()
      .set_name("Stats")
      .set_uid(kStats)
      .set_dim({d.B, d.H, d.T, 1})
      .set_stride({d.H * d.T, d.T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

Built build(cudnnHandle_t handle, const AttentionDims& d, bool backward) {
  Built b;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t r3 = 3 * d.D;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.hd)));
  auto Q = g->tensor(heads_of_rows("Q", kQ, d, r3)), K = g->tensor(heads_of_rows("K", kK, d, r3)),
       V = g->tensor(heads_of_rows("V", kV, d, r3));
  if (!backward) {
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("edp_attention")
                    .set_generate_stats(true)
                    .set_attn_scale(scale)
                    .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                    .set_diagonal_band_right_bound(0);
    auto [O, S] = g->sdpa(Q, K, V, opts);
    set_heads_of_rows(O, kO, d, d.D);
    S->set_output(true).set_uid(kStats).set_dim({d.B, d.H, d.T, 1}).set_stride({d.H * d.T, d.T, 1, 1})
        .set_data_type(fe::DataType_t::FLOAT);
  } else {
    auto O = g->tensor(heads_of_rows("O", kO, d, d.D)), dO = g->tensor(heads_of_rows("dO", kDO, d, d.D));
    auto S = g->tensor(stats_tensor(d));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("edp_attention_backward")
                    .set_attn_scale(scale)
                    .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                    .set_diagonal_band_right_bound(0)
                    .set_deterministic_algorithm(true);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, S, opts);
    set_heads_of_rows(dQ, kDQ, d, r3);
    set_heads_of_rows(dK, kDK, d, r3);
    set_heads_of_rows(dV, kDV, d, r3);
  }
  fe::error_t e = g->build(handle, {fe::HeurMode_t::A});
  if (e.is_good()) e = g->get_workspace_size(b.workspace);
  if (!e.is_good()) {
    b.why = e.get_message();
    return b;
  }
  b.graph = std::move(g);
  return b;
}

bool wanted(const AttentionDims& d) {
  // Flash attention reads 16-byte vectors of a head: hd a multiple of 8 (which makes K's and V's
  // starts 16-byte aligned too); cuDNN's kernels take heads up to 256 values.
  return ops::matmul_bf16() && knobs::get_bool("EDP_FUSED_ATTENTION") && d.B * d.H > 0 && d.T > 0 &&
         d.hd % 8 == 0 && d.hd <= 256;
}

// The graph for (d, pass) on the call's device, built on first use; null when unsupported. The
// caller holds st.mu.
const Built& graph_for(FusedState& st, const AttentionDims& d, bool backward) {
  const Key key{d.B, d.T, d.H, d.hd, backward};
  auto it = st.graphs.find(key);
  if (it != st.graphs.end()) return it->second;
  Built b;
  try {
    b = build(st.handle, d, backward);
  } catch (const std::exception& e) {  // the frontend reports most failures as error_t, some by throwing
    b = Built{nullptr, 0, e.what()};
  }
  if (!b.graph)
    log::info("attention: cuDNN's fused ", backward ? "backward" : "forward", " for B ", d.B, ", T ", d.T, ", ", d.H,
              " heads of ", d.hd, " is not available (", b.why, "); this shape runs on cuBLAS products");
  return st.graphs.emplace(key, std::move(b)).first->second;
}

void execute(FusedState& st, const Ctx& c, const Built& b, std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*>& pack,
             const char* op) {
  Tensor ws = scratch(c, std::max<int64_t>(b.workspace, 1), DType::U8);
  CUDNN_CHECK(cudnnSetStream(st.handle, c.stream));
  fe::error_t e = b.graph->execute(st.handle, pack, ws.raw());  // get_message() is not const
  EDP_CHECK(e.is_good(), op, ": cuDNN's fused attention failed: ", e.get_message(),
            " (without EDP_FUSED_ATTENTION=1 attention runs on cuBLAS products)");
}

char* at(const Tensor& t, int64_t values) { return static_cast<char*>(t.raw()) + values * 2; }  // bfloat16

}  // namespace

bool fused_attention_usable(const AttentionDims& d, int device) {
  if (!wanted(d)) return false;
  FusedState& st = fused_state(device);
  std::lock_guard<std::mutex> lock(st.mu);
  return graph_for(st, d, false).graph && graph_for(st, d, true).graph;
}

bool fused_attention_forward(const Ctx& c, const Tensor& qkv, const AttentionDims& d, Tensor& y, Tensor& lse) {
  if (!wanted(d)) return false;
  FusedState& st = fused_state(c.device);
  std::lock_guard<std::mutex> lock(st.mu);
  const Built& b = graph_for(st, d, false);
  if (!b.graph) return false;
  const int64_t rows = d.B * d.T;
  Tensor qkvb = scratch(c, rows * 3 * d.D, DType::BF16), ob = scratch(c, rows * d.D, DType::BF16);
  kern::to_bf16(cf32(qkv), qkvb.raw(), rows * 3 * d.D, c.stream);
  Tensor stats({d.B, d.H, d.T}, DType::F32, c.dev());
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack{
      {kQ, at(qkvb, 0)}, {kK, at(qkvb, d.D)}, {kV, at(qkvb, 2 * d.D)}, {kO, ob.raw()}, {kStats, stats.raw()}};
  execute(st, c, b, pack, "attention_forward");
  y = Tensor({d.B, d.T, d.D}, DType::F32, c.dev());
  kern::from_bf16(ob.raw(), f32(y), rows * d.D, c.stream);
  lse = stats;
  return true;
}

bool fused_attention_backward(const Ctx& c, const Tensor& qkv, const Tensor& y, const Tensor& dy, const Tensor& lse,
                              const AttentionDims& d, Tensor& dqkv) {
  if (!wanted(d)) return false;
  FusedState& st = fused_state(c.device);
  std::lock_guard<std::mutex> lock(st.mu);
  const Built& b = graph_for(st, d, true);
  if (!b.graph) return false;
  const int64_t rows = d.B * d.T;
  Tensor qkvb = scratch(c, rows * 3 * d.D, DType::BF16), ob = scratch(c, rows * d.D, DType::BF16),
         dob = scratch(c, rows * d.D, DType::BF16), dqkvb = scratch(c, rows * 3 * d.D, DType::BF16);
  kern::to_bf16(cf32(qkv), qkvb.raw(), rows * 3 * d.D, c.stream);
  kern::to_bf16(cf32(y), ob.raw(), rows * d.D, c.stream);
  kern::to_bf16(cf32(dy), dob.raw(), rows * d.D, c.stream);
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack{
      {kQ, at(qkvb, 0)},    {kK, at(qkvb, d.D)},  {kV, at(qkvb, 2 * d.D)},   {kO, ob.raw()},
      {kDO, dob.raw()},     {kStats, lse.raw()},  {kDQ, at(dqkvb, 0)},       {kDK, at(dqkvb, d.D)},
      {kDV, at(dqkvb, 2 * d.D)}};
  execute(st, c, b, pack, "attention_backward");
  dqkv = Tensor({d.B, d.T, 3 * d.D}, DType::F32, c.dev());
  kern::from_bf16(dqkvb.raw(), f32(dqkv), rows * 3 * d.D, c.stream);
  return true;
}

#else  // a build without cudnn-frontend's headers (or without cuDNN): the cuBLAS path only

bool fused_attention_usable(const AttentionDims&, int) { return false; }
bool fused_attention_forward(const Ctx&, const Tensor&, const AttentionDims&, Tensor&, Tensor&) { return false; }
bool fused_attention_backward(const Ctx&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const AttentionDims&, Tensor&) {
  return false;
}

#endif  // EDP_HAVE_CUDNN_FRONTEND

}  // namespace edp::cuda::detail
#endif  // EDP_HAVE_CUDA
