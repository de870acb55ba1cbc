// Error checking for CUDA runtime and cuBLAS calls: every call's status is checked and a failure
// throws edp::Error naming file:line, the failing call and CUDA's own description. Private to
// the CUDA backend (it includes CUDA headers). cuDNN and NCCL have their own macros next to
// their only users (backend/cuda/conv2d.cpp, nccl_communicator.cpp).
#pragma once
#include <cublas_api.h>
#include <cuda_runtime.h>

namespace edp::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line);
// After a kernel launch: reports launch errors (bad configuration, missing kernel image for
// this GPU); with EDP_CUDA_SYNC=1 also synchronises and reports errors of the kernel itself,
// which otherwise surface at some later call.
void check_launch(const char* kernel, const char* file, int line);
// The device's multiprocessor count (cached per device).
int sm_count(int device);
int sm_count_current();

// Makes `device` current for the guard's lifetime (free when it already is).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    const cudaError_t e = cudaGetDevice(&prev_);
    if (e != cudaSuccess) throw_cuda_error(e, "cudaGetDevice", __FILE__, __LINE__);
    if (prev_ != device) {
      const cudaError_t e2 = cudaSetDevice(device);
      if (e2 != cudaSuccess) throw_cuda_error(e2, "cudaSetDevice", __FILE__, __LINE__);
    }
  }
  ~DeviceGuard() {
    if (prev_ != device_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0, device_ = 0;
};

}  // namespace edp::cuda::detail

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    const cudaError_t edp_cuda_err_ = (call);                                            \
    if (edp_cuda_err_ != cudaSuccess)                                                    \
      ::edp::cuda::detail::throw_cuda_error(edp_cuda_err_, #call, __FILE__, __LINE__);   \
  } while (0)

#define CUBLAS_CHECK(call)                                                               \
  do {                                                                                   \
    const cublasStatus_t edp_cublas_st_ = (call);                                        \
    if (edp_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::edp::cuda::detail::throw_cublas_error(edp_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUDA_CHECK_LAUNCH(kernel) ::edp::cuda::detail::check_launch(kernel, __FILE__, __LINE__)
