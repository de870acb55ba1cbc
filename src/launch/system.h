// What edprun needs from the operating system: GPU discovery (NVML loaded at run time with
// dlopen, or nvidia-smi), the cores this process may use, PATH look-up, and running a child
// process with its output captured. Kept apart from plan.h so that the planner stays pure.
#pragma once
#include "edp/core/process.h"
#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "launch/launch_plan.h"

namespace edp::launch {

// nvidia-smi --query-gpu=index,uuid,name,memory.total,compute_cap,compute_mode
//            --format=csv,noheader,nounits  (compute_cap may be missing: older drivers)
std::vector<GpuInfo> parse_nvidia_smi_csv(const std::string& text, bool has_compute_cap = true);
// The MIG instances in `nvidia-smi -L`'s listing, in its order (index 0, 1, ... across GPUs):
//   GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
//     MIG 1g.10gb     Device  0: (UUID: MIG-...)
// GPUs without instances (MIG off) contribute none. Throws on a MIG line it cannot read.
std::vector<GpuInfo> parse_nvidia_smi_list_mig(const std::string& text);

struct Discovery {
  std::vector<GpuInfo> gpus;
  std::string source;  // "NVML", "nvidia-smi", or why there are none ("no NVML, no nvidia-smi")
};
// method: "auto" (NVML, then nvidia-smi), "nvml", "nvidia-smi", "none". Never throws for a
// missing tool (that is CPU mode); throws if a tool that exists gives output it cannot read.
Discovery discover_gpus(const std::string& method);

// Physical cores (distinct core/package pairs) among the CPUs this process may run on.
int physical_cores();
using edp::host_name;  // edp/core/process.h
// Absolute path of `name` found on PATH (or name itself if it contains '/'), "" if absent.
std::string find_in_path(const std::string& name);
std::string self_exe_path();

struct RunResult {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
};
// Runs argv (PATH look-up) with extra environment entries and stdin text; waits for it.
// fork + execvp with an empty signal mask in the child; `in_child` runs in the child just
// before exec (redirections, environment). A failed exec prints "<who>: cannot run ..." and
// exits 127. Returns the child's pid.
pid_t fork_exec(const std::vector<std::string>& argv, const char* who,
                const std::function<void()>& in_child = {});

RunResult run_capture(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& env = {},
                      const std::string& stdin_text = "");

}  // namespace edp::launch
