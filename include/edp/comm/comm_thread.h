// CommThread: one thread that runs communication tasks in submission order with blocking
// collectives, so that gradient allreduces overlap with the caller's computation (the DDP's
// backward) without relying on MPI's progress for non-blocking collectives.
//
// Give it its own communicator (world().dup()): its collectives then never interleave with
// collectives the main thread issues on the original. Under MPI_THREAD_SERIALIZED the main
// thread must make no MPI call while tasks are queued (wait() on their Requests first);
// under MPI_THREAD_MULTIPLE it may.
//
// If a task throws, its Request rethrows from wait()/test(), and every later task fails at once
// without touching the network: the ranks' collective sequences have diverged and running them
// could hang. The usual reaction is to let the exception end the job (run_main).
#pragma once
#include <functional>
#include <memory>

#include "edp/comm/communicator.h"

namespace edp::comm {

class CommThread {
 public:
  explicit CommThread(std::unique_ptr<Communicator> comm);
  // Runs the queued tasks to the end and joins. While an exception unwinds the stack it detaches
  // instead (a task may be blocked on peers that will never come; the job is about to abort).
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  Communicator& communicator();

  // Queues fn(communicator()) and returns at once; the Request completes when fn has returned.
  Request submit(std::function<void(Communicator&)> fn);
  // allreduce(buf, buf, ...) on the thread. buf must stay alive until the Request completes.
  Request allreduce(void* buf, int64_t count, DType dtype, ReduceOp op = ReduceOp::Sum);
  // Waits until every task submitted so far has finished (rethrows the first failure).
  void synchronize();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace edp::comm
