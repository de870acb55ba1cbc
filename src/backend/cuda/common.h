// Private helpers of the CUDA op wrappers (src/backend/cuda/<name>.cpp): operand checks with messages a
// user can act on, typed pointers, the device/stream context of a call, scratch tensors.
#pragma once
#include <mutex>
#include <string>

#include "cuda/check.h"
#include "edp/core/error.h"
#include "edp/core/tensor.h"
#include "edp/cuda/runtime.h"

namespace edp::cuda::detail {

// The device of an op's leading operand, which must be a defined float32 CUDA tensor.
inline int op_device(const Tensor& t, const char* op, const char* name) {
  EDP_CHECK(t.defined(), op, ": ", name, " is undefined");
  EDP_CHECK(t.device().is_cuda(), op, ": ", name, " is on ", t.device().str(),
            " but the CUDA implementation was called");
  EDP_CHECK_SHAPE(t.dtype() == DType::F32, op, ": ", name, " is ", t.str(),
                  "; the CUDA backend computes in float32 (convert with Tensor::to(DType::F32) "
                  "before moving to the GPU)");
  return t.device().index;
}

// Any other operand: defined, on the same CUDA device, of the given dtype.
inline void require(const Tensor& t, int device, DType dtype, const char* op, const char* name) {
  EDP_CHECK(t.defined(), op, ": ", name, " is undefined");
  if (!t.device().is_cuda() || t.device().index != device)
    throw Error(std::string(op) + ": " + name + " is on " + t.device().str() +
                " but the other operands are on cuda:" + std::to_string(device) +
                " (ops never copy between devices: move the module with Module::to(Device) and "
                "the batch with Tensor::to(Device) or cuda::AsyncUploader)");
  EDP_CHECK_SHAPE(t.dtype() == dtype, op, ": ", name, " is ", t.str(), ", expected ",
                  dtype_name(dtype));
}

inline float* f32(const Tensor& t) { return static_cast<float*>(t.raw()); }
inline const float* cf32(const Tensor& t) { return static_cast<const float*>(t.raw()); }

// Device made current for the call and the stream its work goes to.
struct Ctx {
  explicit Ctx(int d) : device(d), guard(d), stream(static_cast<cudaStream_t>(current_stream(d))) {}
  int device;
  DeviceGuard guard;
  cudaStream_t stream;
  Device dev() const { return Device::cuda(device); }
};

// A scratch tensor of `n` elements on the call's device (from the caching allocator, freed in
// stream order when it goes out of scope).
inline Tensor scratch(const Ctx& c, int64_t n, DType t) { return Tensor({n}, t, c.dev()); }

// One lazily created library state per device (cuBLASLt or cuDNN handle, plan cache,
// workspaces): created by `create` on first use, never destroyed (as runtime.cpp's allocators,
// it may be needed by tensors freed during static destruction).
template <typename State, typename Create>
State& per_device_state(int device, Create&& create) {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static State* states[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  EDP_CHECK(device >= 0 && device < kMaxDevices, "cuda:", device, " out of range");
  if (!states[device]) {
    auto* s = new State;
    create(*s);
    states[device] = s;
  }
  return *states[device];
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw());
}

}  // namespace edp::cuda::detail
