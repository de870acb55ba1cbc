// Helpers shared by the communicators that take GPU buffers (src/comm/nccl_communicator.cpp,
// src/comm/colocated_communicator.cu): whether a pointer is device memory, and, where the NCCL
// header exists, edp's dtypes and reduce ops in NCCL's terms. Internal.
#pragma once
#include <cuda_runtime.h>

#include "edp/comm/communicator.h"
#include "edp/core/error.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define EDP_DEVICE_BUFFERS_NCCL 1
#endif

namespace edp::comm::detail {

// True for device (or managed) memory; host and unknown pointers are false (the CUDA error a
// host pointer may leave behind is cleared).
inline bool is_device_pointer(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

#ifdef EDP_DEVICE_BUFFERS_NCCL
inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
    case DType::BF16: return ncclBfloat16;
  }
  throw Error("nccl: unsupported dtype");
}

// Avg is reduced as Sum; the callers divide by the number of ranks (NCCL's ncclAvg would divide
// by the number of NCCL ranks, which is the number of GPUs in the colocated communicator).
inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  throw Error("nccl: unsupported reduce op");
}
#endif

}  // namespace edp::comm::detail
