// main() for the tests that run under mpirun: one edp::comm::Environment for the process,
// GoogleTest's full printer on rank 0 only (other ranks print just their failures, prefixed
// with the rank), and an exit code that is the worst over all ranks so mpirun reports a failure
// on any rank.
#include <gtest/gtest.h>

#include <cstdio>

#include "edp/comm/communicator.h"

namespace {
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  edp::comm::Environment env(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  auto& world = env.world();
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world.rank()));
  }
  const int rc = RUN_ALL_TESTS();
  return world.allreduce_value(rc, edp::comm::ReduceOp::Max);
}
