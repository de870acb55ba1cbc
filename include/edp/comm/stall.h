// The stall inspector's public side: labels and the timeout.
//
// Every collective edp's communicators run is registered while it is in flight. When one has
// waited longer than the communication timeout (EDP_COMM_TIMEOUT seconds, default 300; 0 turns
// the inspector off), a watchdog thread asks every other rank where it is, over a private
// duplicate of the world communicator, and prints one report: which ranks are in which
// collective (its label and the training step) and which did not answer within a grace period
// (stopped, hung outside MPI, or on a host that is gone). Then it ends the job with
// kStallExitCode (76), which edprun treats like a crash. A rank that answers does so from its
// watchdog thread, so a rank busy computing still reports where it is.
//
// Labels say what a collective is for, in the words of the caller ("ddp bucket 2/5"); the
// step says where training is. Both cost a thread-local store and an atomic store.
#pragma once
#include <cstdint>
#include <string>

namespace edp::comm {

// Labels the collectives this thread issues while the object lives (they nest: the innermost
// wins).
class StallLabel {
 public:
  explicit StallLabel(std::string label);
  ~StallLabel();
  StallLabel(const StallLabel&) = delete;
  StallLabel& operator=(const StallLabel&) = delete;

 private:
  std::string previous_;
};
// The label of this thread's collectives now ("" when none).
const std::string& stall_label();

// The training loop's optimizer step, shown in reports (-1: not training).
void set_stall_step(int64_t step);
int64_t stall_step();

// The communication timeout in seconds: set_comm_timeout's value if it was called, else
// EDP_COMM_TIMEOUT. <= 0 waits forever. May be changed at any time (a flag of the program).
double comm_timeout();
void set_comm_timeout(double seconds);

}  // namespace edp::comm
