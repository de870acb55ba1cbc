// The "self" backend: a world of exactly one rank with no MPI underneath. Builds without MPI
// use it as their world, so single-process training runs the same code as a distributed one.
// Every collective over one rank is a copy (or nothing); Avg divides by 1.
#include <cstring>

#include "backend.h"

namespace edp::comm::detail {
namespace {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string backend() const override { return "self"; }
  ThreadLevel thread_level() const override { return ThreadLevel::Multiple; }

  void allreduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp) override {
    copy(send, recv, count, dtype);
  }
  void broadcast(void*, int64_t, DType, int root) override { check_root(root); }
  void allgather(const void* send, void* recv, int64_t count, DType dtype) override {
    copy(send, recv, count, dtype);
  }
  void barrier() override {}

  Request iallreduce(const void* send, void* recv, int64_t count, DType dtype,
                     ReduceOp op) override {
    allreduce(send, recv, count, dtype, op);
    return Request();
  }
  Request ibroadcast(void* buf, int64_t count, DType dtype, int root) override {
    broadcast(buf, count, dtype, root);
    return Request();
  }
  Request iallgather(const void* send, void* recv, int64_t count, DType dtype) override {
    allgather(send, recv, count, dtype);
    return Request();
  }
  Request ibarrier() override { return Request(); }

  std::unique_ptr<Communicator> split(int color, int) const override {
    if (color < 0) return nullptr;
    return std::make_unique<SelfCommunicator>();
  }
  std::unique_ptr<Communicator> dup() const override { return std::make_unique<SelfCommunicator>(); }

 private:
  static void copy(const void* send, void* recv, int64_t count, DType dtype) {
    EDP_CHECK(count >= 0, "comm: negative element count ", count);
    if (send != recv && count > 0)
      std::memmove(recv, send, static_cast<size_t>(count) * dtype_size(dtype));
  }
  static void check_root(int root) {
    EDP_CHECK(root == 0, "comm::broadcast: root ", root, " is not a rank of a world of 1");
  }
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

}  // namespace edp::comm::detail
