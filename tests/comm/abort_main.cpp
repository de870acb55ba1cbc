// A program that fails on purpose, for the failure-path tests (tests/comm/CMakeLists.txt runs it
// under mpirun and expects a non-zero exit and a message naming the failed rank, within a
// timeout: a hang is the bug being tested for).
//   abort_main throw   rank 1 throws in the middle of an allreduce loop (the others are blocked
//                      in the allreduce); run_main must take the whole job down.
//   abort_main thread  rank 1's exception escapes a std::thread: the terminate handler must.
//   abort_main stop    rank 1 stops itself (SIGSTOP) at step 5: the stall inspector of the others
//                      must report it as not answering and end the job with exit code 76.
//   abort_main spin    rank 1 computes forever at step 5 without entering the allreduce: the
//                      report says it is not in a collective (its watchdog still answers).
//   abort_main collective  every rank throws the same edp::CollectiveError at step 5: reported
//                      once, by rank 0 ("all N ranks failed").
//   abort_main collective-stuck  the same, but rank 0 computes forever instead: after their
//                      grace period the other ranks report it themselves and end the job.
//   abort_main ok      all ranks finish normally (exit 0).
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "edp/comm/communicator.h"
#include "edp/comm/stall.h"
#include "edp/core/error.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  return edp::comm::run_main(argc, argv, [&](edp::comm::Communicator& world) {
    std::vector<float> grad(1 << 16, 1.0f);
    for (int step = 0; step < 50; ++step) {
      edp::comm::set_stall_step(step);
      if (step == 5 && world.rank() == 1 % world.size() && mode == "stop") std::raise(SIGSTOP);
      if (step == 5 && world.rank() == 1 % world.size() && mode == "spin") {
        volatile double x = 0;
        for (;;) x = x + 1;
      }
      if (step == 5 && (mode == "collective" || mode == "collective-stuck")) {
        if (mode == "collective-stuck" && world.rank() == 0) {
          volatile double x = 0;
          for (;;) x = x + 1;
        }
        throw edp::CollectiveError("the ranks agreed to stop at step 5 (deliberate)", world.rank(), world.size());
      }
      edp::comm::StallLabel label("test loop");
      if (step == 5 && world.rank() == 1 % world.size()) {
        if (mode == "throw") throw std::runtime_error("loss is NaN at step 5 (deliberate)");
        if (mode == "thread") {
          std::thread t([] { throw std::runtime_error("data worker died (deliberate)"); });
          t.join();
        }
      }
      world.allreduce(grad.data(), grad.data(), static_cast<int64_t>(grad.size()), edp::DType::F32,
                      edp::comm::ReduceOp::Avg);
    }
    if (world.rank() == 0) std::printf("abort_main: finished 50 steps on %d ranks\n", world.size());
    return 0;
  });
}
