// CommThread: a FIFO of communication tasks served by one thread. Every rank submits its tasks
// in the same order, so running them in order keeps the collective sequences matched.
#include "edp/comm/comm_thread.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

namespace edp::comm {

struct CommThread::State {
  std::unique_ptr<Communicator> comm;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::packaged_task<void()>> queue;
  bool stopping = false;
  std::string first_failure;  // set after a task threw; later tasks fail without running
  std::thread thread;

  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping and drained
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();  // exceptions land in the task's future
    }
  }
};

namespace {
class FutureRequest final : public RequestImpl {
 public:
  explicit FutureRequest(std::future<void> f) : f_(std::move(f)) {}
  bool test() override {
    if (f_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    f_.get();
    return true;
  }
  void wait() override { f_.get(); }

 private:
  std::future<void> f_;
};
}  // namespace

CommThread::CommThread(std::unique_ptr<Communicator> comm) : state_(std::make_shared<State>()) {
  EDP_CHECK(comm != nullptr, "CommThread needs a communicator (e.g. comm::world().dup())");
  state_->comm = std::move(comm);
  // The thread holds its own reference so a detached thread never touches freed state.
  state_->thread = std::thread([s = state_] { s->loop(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  if (std::uncaught_exceptions() > 0)
    state_->thread.detach();
  else
    state_->thread.join();
}

Communicator& CommThread::communicator() { return *state_->comm; }

Request CommThread::submit(std::function<void(Communicator&)> fn) {
  State* s = state_.get();
  std::packaged_task<void()> task([s, fn = std::move(fn)] {
    std::string failed;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      failed = s->first_failure;
    }
    if (!failed.empty())
      throw Error("CommThread: skipped because an earlier communication task failed (" + failed +
                  ")");
    try {
      fn(*s->comm);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->first_failure.empty()) s->first_failure = e.what();
      throw;
    }
  });
  std::future<void> f = task.get_future();
  {
    std::lock_guard<std::mutex> lock(s->mu);
    EDP_CHECK(!s->stopping, "CommThread::submit after the thread was stopped");
    s->queue.push_back(std::move(task));
  }
  s->cv.notify_one();
  return Request(std::make_unique<FutureRequest>(std::move(f)));
}

Request CommThread::allreduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
  return submit([=](Communicator& c) { c.allreduce(buf, buf, count, dtype, op); });
}

void CommThread::synchronize() { submit([](Communicator&) {}).wait(); }

}  // namespace edp::comm
