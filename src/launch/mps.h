// Lifecycle of the NVIDIA MPS control daemons edprun starts: one per used GPU, each with a
// job-private pipe and log directory (so two jobs, or a user's own daemon, never meet), started
// with `nvidia-cuda-mps-control -d` and stopped with `quit` on its control pipe. stop_all() is
// what every exit path of edprun calls (success, failure, signal, a rank crash); it never throws
// and removes the directories it created.
#pragma once
#include <string>
#include <vector>

#include "launch/launch_plan.h"

namespace edp::launch {

class MpsController {
 public:
  // control: the nvidia-cuda-mps-control executable (absolute or on PATH).
  explicit MpsController(std::string control = "nvidia-cuda-mps-control", bool verbose = false);
  ~MpsController();
  MpsController(const MpsController&) = delete;
  MpsController& operator=(const MpsController&) = delete;

  // Starts the daemon for one GPU and waits (up to ready_timeout_s) until its control pipe
  // exists. Throws edp::Error with the reason (exit status, the tail of its control.log).
  void start(const MpsDaemonPlan& d, double ready_timeout_s = 10.0);
  // Sends `quit` to every daemon started here, waits for each to close its pipe, removes the
  // pipe and log directories. Returns false (after printing why) if something could not be
  // cleaned up. Idempotent.
  bool stop_all();
  // Takes over a daemon started by another process (edprun --mps-host stop on a remote host).
  void adopt(const MpsDaemonPlan& d) { started_.push_back(d); }
  // Forgets the daemons started here without stopping them (they outlive this process).
  void release() { started_.clear(); }
  size_t running() const { return started_.size(); }

 private:
  std::string control_;
  bool verbose_;
  std::vector<MpsDaemonPlan> started_;
};

// rm -rf for a directory edprun created in `parent` (files::remove_tree: checked by resolved path
// and owner, no symbolic link followed). Returns false on failure, with a warning naming why.
bool remove_tree(const std::string& path, const std::string& parent);

}  // namespace edp::launch
