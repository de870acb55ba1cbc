// The seam between the core and a device backend: the CUDA backend registers these at load
// time; a CPU-only build leaves them empty and device tensors fail with a clear message.
#pragma once
#include <cstddef>
#include <cstdint>

#include "edp/core/dtype.h"

namespace edp {

struct DeviceHooks {
  void* (*alloc)(size_t bytes, int device) = nullptr;
  void (*free)(void* p, size_t bytes, int device) = nullptr;
  void (*copy)(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) = nullptr;
  void (*fill)(void* p, DType t, int64_t n, double value, int device) = nullptr;
};

void register_device_hooks(const DeviceHooks& hooks);
const DeviceHooks& device_hooks();

}  // namespace edp
