// Internal: the process-wide table of collectives in flight (stall.h's public side explains the
// stall inspector). Backends register each collective from its start to its completion; the MPI
// watchdog (mpi_stall_inspector.cpp) reads the oldest.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "edp/core/dtype.h"

namespace edp::comm::detail {

using Clock = std::chrono::steady_clock;

struct InFlight {
  const char* op = "";       // "allreduce", "broadcast", ...
  const char* backend = "";  // "mpi", "nccl"
  int64_t count = 0;
  DType dtype = DType::F32;
  std::string label;  // the issuing thread's StallLabel
  int64_t step = -1;  // set_stall_step's value when it started
  Clock::time_point since;
  std::string describe() const;  // "allreduce of 1024 f32 (ddp bucket 1/3, step 57) on mpi"
};

// Registers a collective from construction until done() or destruction (cheap: a mutex and a
// small map insert).
class OpTicket {
 public:
  OpTicket() = default;
  OpTicket(const char* op, const char* backend, int64_t count, DType dtype);
  OpTicket(OpTicket&& o) noexcept : id_(o.id_) { o.id_ = 0; }
  OpTicket& operator=(OpTicket&& o) noexcept;
  OpTicket(const OpTicket&) = delete;
  OpTicket& operator=(const OpTicket&) = delete;
  ~OpTicket() { done(); }
  void done();

 private:
  uint64_t id_ = 0;
};

// A collective that completes on a device (NCCL): in the table from now until the watchdog's
// poll_device_ops() sees poll() return true. abort() cancels its communicator (ncclCommAbort)
// when the job is ended for a stall. `owner` (the communicator) groups them for
// forget_device_ops, which its destructor calls. poll and abort run on the watchdog thread.
void watch_device_op(const void* owner, const char* op, const char* backend, int64_t count, DType dtype,
                     std::function<bool()> poll, std::function<void()> abort);
void forget_device_ops(const void* owner);
void poll_device_ops();
// Calls abort() once per owner with device collectives still in flight.
void abort_device_ops();

// The oldest collective in flight in this process, if any.
std::optional<InFlight> oldest_in_flight();
// When the last collective of this process completed (the epoch of Clock if none has).
Clock::time_point last_completion();
// Where this process is, in one line: its oldest collective in flight and for how long, or
// "computing" with the step and the time since its last collective finished.
std::string position_now();

}  // namespace edp::comm::detail
