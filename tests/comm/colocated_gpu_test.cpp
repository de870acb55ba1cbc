// The colocated allreduce on a real GPU, K = 1, 2, 4 ranks on one device (run under mpirun -np K;
// every rank uses CUDA device 0), in exact arithmetic: integer-valued inputs, results compared
// bit for bit. Skips with the reason on a machine without CUDA (build or device).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "edp/comm/colocated.h"
#include "edp/comm/communicator.h"
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include <cuda_runtime.h>
#endif

using namespace edp::comm;
using edp::DType;

namespace {

std::string no_gpu_reason() {
#if !EDP_HAVE_CUDA
  return "this build of edp has no CUDA";
#else
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
  }
  return n == 0 ? "no CUDA device" : "";
#endif
}

#if EDP_HAVE_CUDA
template <typename T>
T value(int rank, int64_t i) {
  return static_cast<T>(((rank + 1) * 3 + i * 7) % 23) - static_cast<T>(9);
}

template <typename T>
void check_allreduce(Communicator& c, int64_t n, ReduceOp op, bool in_place) {
  const int W = c.size(), r = c.rank();
  std::vector<T> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[i] = value<T>(r, i) * static_cast<T>(op == ReduceOp::Avg ? W : 1);
  T *send = nullptr, *recv = nullptr;
  ASSERT_EQ(cudaMalloc(&send, std::max<int64_t>(1, n) * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, std::max<int64_t>(1, n) * sizeof(T)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(send, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  c.allreduce(send, in_place ? send : recv, n, edp::dtype_of<T>::value, op);
  std::vector<T> got(static_cast<size_t>(n));
  ASSERT_EQ(cudaMemcpy(got.data(), in_place ? send : recv, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  int wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    T want = value<T>(0, i) * static_cast<T>(op == ReduceOp::Avg ? W : 1);
    for (int q = 1; q < W; ++q) {
      const T v = value<T>(q, i) * static_cast<T>(op == ReduceOp::Avg ? W : 1);
      want = op == ReduceOp::Max ? std::max(want, v) : op == ReduceOp::Min ? std::min(want, v) : want + v;
    }
    if (op == ReduceOp::Avg) want = want / static_cast<T>(W);
    if (got[i] != want && wrong++ < 5) ADD_FAILURE() << "element " << i << ": got " << got[i] << " want " << want;
  }
  EXPECT_EQ(wrong, 0) << n << " elements, op " << reduce_op_name(op) << (in_place ? " in place" : "");
  cudaFree(send);
  cudaFree(recv);
}
#endif

}  // namespace

TEST(ColocatedGpu, ExactAllreduceKRanksOnOneGpu) {
  const std::string why = no_gpu_reason();
  if (!why.empty()) GTEST_SKIP() << why;
#if EDP_HAVE_CUDA
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  // Small staging buffers: the sizes below cross several chunk boundaries.
  setenv("EDP_COLOCATED_CHUNK_BYTES", "4096", 1);
  auto c = make_colocated_communicator(world());
  EXPECT_EQ(c->backend(), "colocated");
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1023}, int64_t{1025}, int64_t{100003}})
    for (bool in_place : {false, true}) {
      check_allreduce<float>(*c, n, ReduceOp::Sum, in_place);
      check_allreduce<float>(*c, n, ReduceOp::Avg, in_place);
      check_allreduce<double>(*c, n, ReduceOp::Sum, in_place);
      check_allreduce<int32_t>(*c, n, ReduceOp::Max, in_place);
      check_allreduce<int64_t>(*c, n, ReduceOp::Min, in_place);
    }
  // Host buffers take the MPI path through the same communicator.
  EXPECT_EQ(c->allreduce_value(c->rank() + 1), c->size() * (c->size() + 1) / 2);
  // A second communicator (re-formation) exchanges its own handles.
  auto d = c->dup();
  check_allreduce<float>(*d, 5000, ReduceOp::Sum, false);
#endif
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = 0;
  {
    Environment env(&argc, &argv);
    rc = RUN_ALL_TESTS();
    world().barrier();
  }
  return rc;
}
