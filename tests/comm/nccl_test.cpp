// The NCCL communicator under mpirun, in exact arithmetic (small integers: every sum, average,
// max and min has one right answer, compared bit for bit). With at most one rank per GPU:
// allreduce (all ops, device and host buffers, in and out of place, blocking and not),
// broadcast, allgather (in and out of place), split and dup. With more ranks than GPUs (np 2 on
// a one-GPU machine): every rank gets the same error naming the shared GPU and pointing to
// edprun --ranks-per-gpu, instead of NCCL's "Duplicate GPU detected".
#include <gtest/gtest.h>

#include <vector>

#include "edp/comm/nccl.h"
#include "edp/cuda/runtime.h"

namespace {
using namespace edp;
using edp::comm::Communicator;
using edp::comm::ReduceOp;

Communicator& W() { return edp::comm::world(); }

bool one_rank_per_gpu() {
  // Ranks of a host share its GPUs; launched on one host here.
  return W().local_size() <= cuda::device_count();
}

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << cuda::unavailable_reason();
  }
};

std::vector<float> host_values(int64_t n, int rank) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((i % 13) + rank * 2);
  return v;
}

Tensor device_values(int64_t n, int rank) {
  const std::vector<float> v = host_values(n, rank);
  return Tensor::from_vector<float>({n}, v).to(Device::cuda(cuda::current_device()));
}

TEST_F(Nccl, SharedGpuIsRefusedWithTheRanksPerGpuHint) {
  if (one_rank_per_gpu()) GTEST_SKIP() << "one rank per GPU here: the duplicate path needs more ranks than GPUs";
  try {
    auto c = comm::make_nccl_communicator(W());
    FAIL() << "two ranks on one GPU accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("edprun --ranks-per-gpu"), std::string::npos) << m;
    EXPECT_NE(m.find("ranks 0 and 1"), std::string::npos) << m;
  }
  W().barrier();  // every rank threw (no rank is left waiting inside NCCL)
}

TEST_F(Nccl, CollectivesAreExact) {
  if (!one_rank_per_gpu()) GTEST_SKIP() << "more ranks than GPUs on this host";
  auto c = comm::make_nccl_communicator(W());
  ASSERT_EQ(c->size(), W().size());
  ASSERT_EQ(c->rank(), W().rank());
  EXPECT_EQ(c->backend(), "nccl");
  const int R = c->size(), me = c->rank();
  for (int64_t n : {int64_t{1}, int64_t{1021}, int64_t{1} << 20}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    // Sum / Avg / Max / Min, out of place on device buffers.
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      Tensor in = device_values(n, me), out = Tensor::zeros({n}, DType::F32, in.device());
      c->allreduce(in.raw(), out.raw(), n, DType::F32, op);
      const Tensor got = out.to(Device::cpu());
      for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 97)) {
        const double base = static_cast<double>(i % 13);
        double want = 0;
        switch (op) {
          case ReduceOp::Sum: want = R * base + 2.0 * R * (R - 1) / 2; break;
          case ReduceOp::Avg: want = (R * base + 2.0 * R * (R - 1) / 2) / R; break;
          case ReduceOp::Max: want = base + 2.0 * (R - 1); break;
          case ReduceOp::Min: want = base; break;
        }
        ASSERT_EQ(got.item(i), static_cast<float>(want)) << comm::reduce_op_name(op) << " at " << i;
      }
    }
    // In place, non-blocking, integers.
    std::vector<int32_t> iv(static_cast<size_t>(n), me + 1);
    Tensor it = Tensor::from_vector<int32_t>({n}, iv).to(Device::cuda(cuda::current_device()));
    comm::Request r = c->iallreduce(it.raw(), it.raw(), n, DType::I32, ReduceOp::Sum);
    r.wait();
    const Tensor ig = it.to(Device::cpu());
    ASSERT_EQ(ig.item(0), R * (R + 1) / 2);
    ASSERT_EQ(ig.item(n - 1), R * (R + 1) / 2);
    // Host buffers are staged through the device.
    std::vector<double> h(static_cast<size_t>(n), 1.5 * (me + 1));
    c->allreduce(h.data(), h.data(), n, DType::F64, ReduceOp::Sum);
    ASSERT_EQ(h.back(), 1.5 * R * (R + 1) / 2);
  }
  // Broadcast from the last rank.
  Tensor b = device_values(777, me);
  c->broadcast(b.raw(), 777, DType::F32, R - 1);
  const Tensor bg = b.to(Device::cpu());
  EXPECT_EQ(bg.item(5), static_cast<float>(5 + 2 * (R - 1)));
  // Allgather, out of place and in place.
  const int64_t n = 333;
  Tensor send = device_values(n, me);
  Tensor all = Tensor::zeros({R * n}, DType::F32, send.device());
  c->allgather(send.raw(), all.raw(), n, DType::F32);
  Tensor inplace = Tensor::zeros({R * n}, DType::F32, send.device());
  inplace.narrow(me * n, n).copy_from(send);
  c->allgather(inplace.narrow(me * n, n).raw(), inplace.raw(), n, DType::F32);
  const Tensor ag = all.to(Device::cpu()), ai = inplace.to(Device::cpu());
  for (int r = 0; r < R; ++r)
    for (int64_t i : {int64_t{0}, n - 1}) {
      ASSERT_EQ(ag.item(r * n + i), static_cast<float>((i % 13) + 2 * r)) << "rank block " << r;
      ASSERT_EQ(ai.item(r * n + i), static_cast<float>((i % 13) + 2 * r)) << "in place, rank block " << r;
    }
  // Split into even/odd ranks and dup.
  auto half = c->split(me % 2, me);
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->size(), (R + 1 - me % 2) / 2);
  const int64_t s = half->allreduce_value<int64_t>(1);
  EXPECT_EQ(s, half->size());
  auto copy = c->dup();
  EXPECT_EQ(copy->allreduce_value<int64_t>(me), static_cast<int64_t>(R) * (R - 1) / 2);
  c->barrier();
}

}  // namespace
