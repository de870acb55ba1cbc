// The "self" backend (a world of one rank without MPI): what builds without MPI run on. Its
// collectives are copies; the checks that must fail do. In a build without MPI this also covers
// Environment, world() and run_main.
#include <gtest/gtest.h>

#include <vector>

#include "comm/backend.h"  // internal: the self backend's factory
#include "edp/comm/communicator.h"
#include "edp/config.h"

using edp::DType;
using edp::comm::ReduceOp;

TEST(SelfCommunicator, CollectivesOverOneRank) {
  auto c = edp::comm::detail::make_self_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->backend(), "self");
  std::vector<double> a{1.5, -2, 3}, b(3, 0);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    c->allreduce(a.data(), b.data(), 3, DType::F64, op);
    EXPECT_EQ(b, a);
  }
  c->allreduce(a.data(), a.data(), 3, DType::F64, ReduceOp::Avg);
  EXPECT_EQ(a, (std::vector<double>{1.5, -2, 3}));
  std::vector<int32_t> g(2, 0), s{4, 5};
  auto r = c->iallgather(s.data(), g.data(), 2, DType::I32);
  EXPECT_TRUE(r.test());
  EXPECT_EQ(g, s);
  c->broadcast(s.data(), 2, DType::I32, 0);
  EXPECT_THROW(c->broadcast(s.data(), 2, DType::I32, 1), edp::Error);
  EXPECT_EQ(c->split(edp::comm::Communicator::kNoColor, 0), nullptr);
  EXPECT_EQ(c->split(3, 0)->size(), 1);
  EXPECT_EQ(c->allreduce_value(int64_t{7}, ReduceOp::Max), 7);
}

TEST(SelfCommunicator, AvgDividesInTheBuffersType) {
  std::vector<int32_t> i{7, -7, 9};
  edp::comm::detail::divide_inplace(i.data(), 3, DType::I32, 2);
  EXPECT_EQ(i, (std::vector<int32_t>{3, -3, 4})) << "integers truncate toward zero";
  std::vector<float> f{1, 3};
  edp::comm::detail::divide_inplace(f.data(), 2, DType::F32, 4);
  EXPECT_EQ(f, (std::vector<float>{0.25f, 0.75f}));
}

#if !EDP_HAVE_MPI
TEST(SelfCommunicator, EnvironmentAndRunMainWithoutMpi) {
  EXPECT_FALSE(edp::comm::initialized());
  EXPECT_THROW(edp::comm::world(), edp::Error);
  char arg0[] = "test";
  char* argv[] = {arg0, nullptr};
  const int rc = edp::comm::run_main(1, argv, [](edp::comm::Communicator& w) {
    return w.size() == 1 && w.backend() == "self" ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(edp::comm::initialized());
}
#endif
